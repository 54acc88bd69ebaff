"""Benchmark: the CPU one honest upload costs the submission service, this checkout against another, paired.

Run:  .venv/bin/python tests/benchmarks/serve_upload_cpu.py --against /path/to/other/checkout [--rounds 10]

(A checkout of an earlier commit: `git worktree add /tmp/before <commit>`.) Two real `autograd-course serve`
processes, one running this checkout's `course` package and one the other's (PYTHONPATH), each with its warm pool,
are started side by side; then, round after round, each gets `--per` uploads of the sample class's correct
notebook one at a time, the order of the two alternating from round to round. For each round it prints the CPU an
upload cost each server with everything it started (its own, its workers' and the students' processes, by
/proc's count), and the ratio this/other. The machine's speed drifts (a VM's by 20-100% from minute to minute), and
both servers see the same drift round by round: read the median ratio and how many rounds agree, never a figure
from different times.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.benchmarks.serve_load import _cpu, warm_up
from tests.support.helpers import ROOT, submitted_notebook
from tests.support.service import Server, course_for_service, notebook_bytes


def _restore(pythonpath: str | None) -> None:
    if pythonpath is None:
        os.environ.pop("PYTHONPATH", None)
    else:
        os.environ["PYTHONPATH"] = pythonpath


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--against", type=Path, required=True, help="the other checkout (its course/ is used)")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--per", type=int, default=20, help="uploads a server gets in a round")
    args = parser.parse_args()
    other = args.against.resolve()
    if not (other / "course" / "__init__.py").is_file():
        parser.error(f"{other} holds no course/ package")
    folder = Path(tempfile.mkdtemp(prefix="autograd-upload-cpu-"))
    # `python -m course` puts its working folder first on sys.path, before PYTHONPATH: started from a checkout, both
    # servers would run that checkout's course/. From a folder that holds none, each runs the one it is given.
    os.chdir(folder)
    servers: dict[str, Server] = {}
    before = os.environ.get("PYTHONPATH")
    try:
        for name, checkout in (("this", ROOT), ("other", other)):
            os.environ["PYTHONPATH"] = str(checkout)  # the server process imports this checkout's course/
            servers[name] = Server(course_for_service(folder / name), jobs=2)
            servers[name].issue_tokens(["student"])
            servers[name].start()
        _restore(before)
        notebook = notebook_bytes(submitted_notebook())
        for server in servers.values():
            warm_up(server, "student", notebook)
        cost: dict[str, list[float]] = {"this": [], "other": []}
        for number in range(args.rounds):
            for name in ("this", "other") if number % 2 == 0 else ("other", "this"):
                server = servers[name]
                assert server.process is not None
                used = sum(_cpu(server.process.pid))
                for _ in range(args.per):
                    reply = server.submit("student", notebook)
                    assert reply.status == 200, reply.text
                cost[name].append(1000 * (sum(_cpu(server.process.pid)) - used) / args.per)
    finally:
        _restore(before)
        for server in servers.values():
            server.stop()
        shutil.rmtree(folder, ignore_errors=True)
    ratios = [mine / theirs for mine, theirs in zip(cost["this"], cost["other"], strict=True)]
    for name, label in (("this", f"this checkout ({ROOT})"), ("other", f"the other ({other})")):
        print(
            f"{label}: CPU an upload by round (ms) {', '.join(f'{value:.1f}' for value in cost[name])}; "
            f"median {statistics.median(cost[name]):.1f}"
        )
    print(
        f"this/other by round: {', '.join(f'{value:.2f}' for value in ratios)}; median "
        f"{statistics.median(ratios):.3f}; this cheaper in {sum(value < 1 for value in ratios)} of {len(ratios)}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

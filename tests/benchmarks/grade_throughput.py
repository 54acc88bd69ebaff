"""Benchmark: autograd-course's warm, parallel, sandboxed grader against `nbgrader autograde`.

Run:  .venv/bin/python tests/benchmarks/grade_throughput.py [--sizes 100,400] [--mixed 400] [--nbgrader-sample 20]
      [--no-cli] [--rounds 3 --round-sample 8]

Everything is measured in this one run, on this machine, so the figures are ratios against baselines
taken under the same conditions (never timed assertions in unit tests). It grades honest classes (correct,
partly wrong, misconception, raising and blank notebooks) of each size, then one mixed class of the same
kind plus two notebooks that wait out the per-cell limit (one sleeping, one spinning), and prints for each
the wall time and its ratio to nbgrader autograde's rate on a sample of the same class (in process, and as
`autograd-course grade` run from the command line: interpreter start, imports and self-test included), the
marginal cost of one more submission and the fixed start-up (from the honest sizes), p50/p95 latency, the
grader's peak RSS, and run_autograder's time for one submission against `python -c "import torch"`.
With --rounds, the command line's ratio is then taken again in rounds, nbgrader on the same small sample just
before each run of the command: this machine's speed drifts by tens of per cent within one run, so a ratio whose
two sides were measured minutes apart can swing either way (96x and 150x for the same command time).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from course.core.deferred_imports import defer_start_up_imports

# What a command's process does first (cli.main), before anything imports nbformat or nbgrader: the in-process
# figures are then a command's.
defer_start_up_imports()

from course.authoring.release import release  # noqa: E402
from course.core.config import load_config  # noqa: E402
from course.term import nbgrader_bridge  # noqa: E402
from course.term.batch import grade_batch  # noqa: E402
from tests.support.helpers import (  # noqa: E402
    ALL_VALUES,
    CORRECT_CODE,
    ROOT,
    add_cell,
    copy_course,
    submitted_notebook,
    write,
    wrong_literal,
)

MISCONCEPTIONS = [
    {"accumulated_grads": "[6, 6, 6]"},
    {"net_dL_dw": "6"},
    {"w2_dL_da": "1.0", "w2_dL_dw": "2.0"},
    {"cubic_grad": "48"},
    {"retain_y_grad": "None"},
    {"closed_dL_dw": "2"},
    {"slope_at_minus_2": "4"},
]


TIME_LIMITED = {"sleeps": "import time\ntime.sleep(3600)", "spins": "while True:\n    pass"}


def make_mix(n: int, seed: int = 7, *, time_limits: bool = True) -> dict[str, tuple[str, dict]]:
    """student -> (kind, notebook): a realistic class. With time_limits, exactly two submissions wait out the
    per-cell limit, one sleeping and one spinning; without, the class is honest."""
    rng = random.Random(seed)
    names = sorted(ALL_VALUES)
    mix = {}
    for i in range(n):
        student = f"s{i:04d}"
        roll = rng.random()
        if time_limits and i in (n // 3, 2 * n // 3):
            how = "sleeps" if i == n // 3 else "spins"
            kind, notebook = f"time-limit ({how})", add_cell(submitted_notebook(), TIME_LIMITED[how])
        elif roll < 0.40:
            kind, notebook = "correct", submitted_notebook()
        elif roll < 0.65:
            wrong = {name: repr(wrong_literal(ALL_VALUES[name])) for name in rng.sample(names, rng.randint(1, 6))}
            kind, notebook = "partly-wrong", submitted_notebook({**CORRECT_CODE, **wrong})
        elif roll < 0.85:
            kind, notebook = "misconceptions", submitted_notebook({**CORRECT_CODE, **rng.choice(MISCONCEPTIONS)})
        elif roll < 0.92:
            kind, notebook = "raises", add_cell(submitted_notebook(), "1 / 0", at=5)
        else:
            kind, notebook = "blank", json.loads((ROOT / "release" / "autograd" / "autograd.ipynb").read_text())
        mix[student] = (kind, notebook)
    return mix


def make_course(base: Path, mix: dict[str, tuple[str, dict]]) -> Path:
    """A course as an instructor has it when grading: released (so the gradebook knows the assignment,
    as nbgrader autograde also requires) and with the class's submissions in submitted/."""
    root = base / "course"
    copy_course(root)
    release(load_config(root), verify=False)
    for student, (_, notebook) in mix.items():
        write(notebook, root / "submitted" / student / "autograd" / "autograd.ipynb")
    return root


def run_ours(root: Path, limits_seconds: float, jobs: int | None):
    config = load_config(root)
    config = replace(config, limits=replace(config.limits, cell_seconds=limits_seconds))
    started = time.monotonic()
    # record_gradebook: measured as an instructor grades a term, gradebook and autograded/ included
    summary = grade_batch(config, [], root / "out", jobs=jobs, record_gradebook=True)
    return time.monotonic() - started, summary


def run_cli(root: Path, jobs: int | None) -> tuple[float, str]:
    """`autograd-course grade` as an instructor runs it: a new process, interpreter start, imports, the self-test
    and the gradebook included. Returns (seconds, the summary's self-test line)."""
    cli = str(Path(sys.executable).parent / "autograd-course")
    command = [
        cli,
        "--course",
        str(root),
        "grade",
        "--out",
        str(root / "out-cli"),
        "--gradebook",
        "--quiet",
        *(["--jobs", str(jobs)] if jobs is not None else []),
    ]
    started = time.monotonic()
    completed = subprocess.run(command, check=True, capture_output=True, text=True)
    seconds = time.monotonic() - started
    selftest = next((line for line in completed.stdout.splitlines() if line.startswith("self-test:")), "")
    return seconds, selftest


def run_nbgrader(root: Path, students: list[str]) -> tuple[float, dict[str, float]]:
    db = f"sqlite:///{root / 'nbgrader.db'}"
    nbgrader_bridge.generate_assignment(root, db, "autograd")
    started = time.monotonic()
    for student in students:
        nbgrader_bridge.autograde(root, db, "autograd", student)
    elapsed = time.monotonic() - started
    totals = {s: sum(nbgrader_bridge.grade_cell_scores(db, "autograd", s).values()) for s in students}
    return elapsed, totals


def median_seconds(command: list[str], env: dict[str, str], runs: int = 3) -> float:
    times = []
    for _ in range(runs):
        started = time.monotonic()
        subprocess.run(command, env=env, check=True, capture_output=True)
        times.append(time.monotonic() - started)
    return statistics.median(times)


def run_autograder_ratio(base: Path) -> tuple[float, float]:
    root = base / "gradescope"
    shutil.copytree(ROOT / "source", root / "source" / "source")
    write(submitted_notebook(), root / "submission" / "autograd.ipynb")
    env = {**os.environ, "AUTOGRADER_ROOT": str(root)}
    torch_alone = median_seconds([sys.executable, "-c", "import torch"], env)
    cli = str(Path(sys.executable).parent / "autograd-course")
    ours = median_seconds([cli, "autograder", "run", "--root", str(root)], env)
    return torch_alone, ours


def paired_rounds(base: Path, size: int, rounds: int, sample_size: int, jobs: int | None) -> list[float]:
    """`autograd-course grade` on `size` honest notebooks, each run right after nbgrader autograde on the same
    `sample_size` of them: one ratio per round, each against the nbgrader rate of its own round."""
    mix = make_mix(size, seed=size, time_limits=False)
    sample = sorted(random.Random(2).sample(sorted(mix), sample_size))
    ratios = []
    for number in range(1, rounds + 1):
        folder = base / f"round{number}"
        nb_root = make_course(folder / "nbgrader", {student: mix[student] for student in sample})
        nb_seconds, _ = run_nbgrader(nb_root, sample)
        root = make_course(folder / "cli", mix)
        cli_seconds, selftest = run_cli(root, jobs)
        shutil.rmtree(folder)
        ratios.append(size / cli_seconds / (sample_size / nb_seconds))
        print(
            f"round {number}: nbgrader {nb_seconds / sample_size:.2f} s a submission, then `autograd-course grade` "
            f"on {size} in {cli_seconds:.1f} s: {ratios[-1]:.0f}x nbgrader; {selftest}",
            flush=True,
        )
    listed = ", ".join(f"{r:.0f}x" for r in ratios)
    print(
        f"command line against nbgrader, {rounds} paired rounds: {listed} "
        f"(lowest {min(ratios):.0f}x, median {statistics.median(ratios):.0f}x)"
    )
    return ratios


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,400", help="honest class sizes (the first two give the marginal cost)")
    parser.add_argument(
        "--mixed", type=int, default=400, help="size of the class with two time-limited notebooks (0: none)"
    )
    parser.add_argument("--nbgrader-sample", type=int, default=20)
    parser.add_argument("--cell-seconds", type=float, default=10, help="the per-cell limit (course default 10)")
    parser.add_argument("--jobs", type=int, default=None, help="grading workers (default: one per core)")
    parser.add_argument("--no-autograder", action="store_true", help="skip the run_autograder measurement")
    parser.add_argument(
        "--cli",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also time `autograd-course grade` as a new process on each honest size",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=0,
        help="then this many rounds on the largest honest size, each nbgrader autograde on the same "
        "sample and `autograd-course grade` back to back: the command's ratio per round against "
        "the nbgrader rate measured beside it (this machine's speed drifts within one run)",
    )
    parser.add_argument("--round-sample", type=int, default=8, help="nbgrader's sample in each round")
    args = parser.parse_args()

    print(
        f"machine: {os.cpu_count()} cores, Python {sys.version.split()[0]}, load average "
        f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}"
    )
    disagreements: dict[str, tuple[float, float]] = {}
    with tempfile.TemporaryDirectory(prefix="autograd-bench-") as scratch:
        base = Path(scratch)
        # nbgrader's kernels talk over unix sockets in Jupyter's runtime folder: a private one, so that other
        # graders on the machine cannot race this run for the same socket names
        os.environ["JUPYTER_RUNTIME_DIR"] = str(base / "jupyter-runtime")
        sizes = [int(x) for x in args.sizes.split(",") if x]
        nb_rate = 0.0
        if args.nbgrader_sample:
            mix = make_mix(max(args.nbgrader_sample * 2, 40), time_limits=False)
            root = make_course(base / "sample", mix)
            _, summary = run_ours(root, args.cell_seconds, args.jobs)
            sample = sorted(random.Random(1).sample(sorted(mix), args.nbgrader_sample))
            nb_seconds, nb_totals = run_nbgrader(root, sample)
            nb_rate = len(sample) / nb_seconds
            ours_totals = {g.student_id: g.feedback.score for g in summary.graded}
            disagreements = {s: (ours_totals[s], nb_totals[s]) for s in sample if ours_totals[s] != nb_totals[s]}
            print(
                f"nbgrader autograde: {len(sample)} in {nb_seconds:.1f} s = {nb_rate:.3f} submissions/s "
                f"({nb_seconds / len(sample):.2f} s each)"
            )
            print(
                f"scores agree with nbgrader on {len(sample) - len(disagreements)}/{len(sample)} shared "
                "submissions" + (f"; differ: {disagreements}" if disagreements else "")
            )
            shutil.rmtree(base / "sample")

        def ratio(n: int, seconds: float) -> str:
            return f"{n / seconds / nb_rate:.0f}x nbgrader" if nb_rate else "no nbgrader sample"

        walls = []
        for size in sizes:
            root = make_course(base / f"honest{size}", make_mix(size, seed=size, time_limits=False))
            seconds, summary = run_ours(root, args.cell_seconds, args.jobs)
            latencies = [g.seconds for g in summary.graded]
            walls.append((size, seconds))
            print(
                f"honest N={size}: {seconds:.1f} s, {1000 * seconds / size:.1f} ms per submission, "
                f"{ratio(size, seconds)}; latency p50 {percentile(latencies, 0.5):.3f} s, "
                f"p95 {percentile(latencies, 0.95):.3f} s; {summary.lines()[0]}"
            )
            shutil.rmtree(base / f"honest{size}")
            if args.cli:
                root = make_course(base / f"cli{size}", make_mix(size, seed=size, time_limits=False))
                cli_seconds, selftest = run_cli(root, args.jobs)
                print(
                    f"honest N={size} from the command line (`autograd-course grade`: interpreter start, "
                    f"imports, self-test and gradebook included): {cli_seconds:.1f} s, {ratio(size, cli_seconds)}; "
                    f"{selftest}"
                )
                shutil.rmtree(base / f"cli{size}")
        if len(walls) >= 2:
            steps = [(a[0], b[0], (b[1] - a[1]) / (b[0] - a[0])) for a, b in itertools.pairwise(walls)]
            marginal = steps[0][2]
            print(
                "marginal cost per submission: "
                + ", ".join(f"N={small}->{large}: {1000 * cost:.1f} ms" for small, large, cost in steps)
                + f" (linear when these agree); fixed start-up {walls[0][1] - walls[0][0] * marginal:.1f} s"
            )
        if args.mixed:
            mix = make_mix(args.mixed, seed=args.mixed)
            root = make_course(base / "mixed", mix)
            seconds, summary = run_ours(root, args.cell_seconds, args.jobs)
            kinds = {k: sum(1 for kind, _ in mix.values() if kind == k) for k in sorted({k for k, _ in mix.values()})}
            print(f"mixed N={args.mixed} {kinds}: {seconds:.1f} s, {ratio(args.mixed, seconds)}; {summary.lines()[0]}")
            honest = dict(walls).get(args.mixed)
            if honest:
                print(
                    f"the two time-limited notebooks cost {seconds - honest:.1f} s of wall time "
                    f"(limit {args.cell_seconds:g} s per cell)"
                )
            shutil.rmtree(base / "mixed")
        if args.rounds and sizes:
            paired_rounds(base, max(sizes), args.rounds, args.round_sample, args.jobs)
        peak_self = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        peak_children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        print(
            f"peak RSS: grader {peak_self:.0f} MiB (target <= 1536 MiB at N=2000); largest worker/kernel "
            f"{peak_children:.0f} MiB"
        )

        if not args.no_autograder:
            torch_alone, one = run_autograder_ratio(base)
            print(
                f"run_autograder, one submission: {one:.2f} s vs `python -c 'import torch'` {torch_alone:.2f} s "
                f"= {one / torch_alone:.2f}x   (target <= 1.2x)"
            )
    return 1 if disagreements else 0


if __name__ == "__main__":
    sys.exit(main())

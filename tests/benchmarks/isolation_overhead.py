"""Benchmark: what the warm pool's per-student isolation costs per submission.

Run:  .venv/bin/python tests/benchmarks/isolation_overhead.py [--runs 200]

One warm worker runs the same small student cell (a torch backward and a few answers) `--runs` times and
prints the median and p95 wall time per run, as seen by the grader (fork, namespaces, seccomp filter, the
run, the clean-up of the uid). Compare two checkouts by running this script in each, alternately, on the
same machine: the ratio of the medians is the overhead (timings here are noisy; never assert them in tests).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from course.core.config import Limits
from course.pipeline.submission import Cell
from course.sandbox import WarmPool

CELL = (
    "import torch\nx = torch.tensor(4.0, requires_grad=True)\ny = x ** 3 - 2 * x\ny.backward()\n"
    "cubic_grad = 46\nnet_dL_dw = 12\nseen = x.grad.item()"
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    args = parser.parse_args()
    with WarmPool(1, Limits()) as pool:
        pool.run([Cell(0, "warm-up", CELL)], ("cubic_grad",), {})
        seconds = []
        for _ in range(args.runs):
            started = time.perf_counter()
            result = pool.run([Cell(0, "cell", CELL)], ("cubic_grad", "net_dL_dw", "seen"), {})
            seconds.append(time.perf_counter() - started)
            assert result.answers["seen"].value == 46, result
    seconds.sort()
    print(
        f"level {pool.level}: {args.runs} runs, median {statistics.median(seconds) * 1000:.1f} ms, "
        f"p95 {seconds[int(0.95 * len(seconds))] * 1000:.1f} ms per submission"
    )


if __name__ == "__main__":
    main()

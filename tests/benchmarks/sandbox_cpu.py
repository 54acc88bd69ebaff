"""Benchmark: the CPU one student costs in a warm worker's sandbox, by the kernel's count.

Run:  .venv/bin/python tests/benchmarks/sandbox_cpu.py [--runs 40]

One warm worker grades the sample class's correct notebook `--runs` times through `grade_submission` (the
grader's whole path for one student, without the batch's feedback and gradebook writes) and prints, per
student: the CPU seconds of the worker's children (each student's sandbox and everything it reaped: the
kernel adds them to the worker's `cutime`/`cstime` in /proc/<worker>/stat when the worker waits for them),
their minor page faults (`cminflt`: mostly copy-on-write of the worker's memory), and the grading process's
own CPU. Compare two checkouts by running this script in each, alternately, on the same machine: CPU counts
move less with the machine's load than wall time, but report ratios of runs taken back to back, never
figures from different times. (The kernel's clock ticks are 10 ms: over 40 runs a figure moves in steps of
0.25 ms.)
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from course.authoring.release import release
from course.core.config import load_config
from course.pipeline.assignment import load_course_assignment
from course.pipeline.discovery import SubmissionRef
from course.pipeline.grading import grade_submission
from course.sandbox import WarmPool
from tests.support.helpers import copy_course, submitted_notebook, write


def descendants(pid: int) -> list[int]:
    found = []
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            children = Path(f"/proc/{pid}/task/{task}/children").read_text().split()
        except OSError:
            continue
        for child in map(int, children):
            found += [child, *descendants(child)]
    return found


def children_usage(pid: int) -> tuple[int, float]:
    """(minor faults, CPU seconds) of the children `pid` has waited for, from /proc/<pid>/stat."""
    text = Path(f"/proc/{pid}/stat").read_text()
    fields = text[text.rindex(")") + 2 :].split()  # from the third field, state, on
    ticks = os.sysconf("SC_CLK_TCK")
    return int(fields[8]), (int(fields[13]) + int(fields[14])) / ticks  # cminflt; cutime + cstime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=40)
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="autograd-sandbox-cpu-"))
    try:
        root = copy_course(base / "course")
        config = load_config(root)
        release(config, verify=False)
        notebook = write(submitted_notebook(), root / "submitted" / "s1" / "autograd" / "autograd.ipynb")
        assignment = load_course_assignment(config)
        ref = SubmissionRef("s1", notebook)
        with WarmPool(1, config.limits, isolation=config.sandbox, base_uid=config.sandbox_uid) as pool:
            for _ in range(3):  # the worker starts, and its first children warm what they share
                graded = grade_submission(ref, assignment, config, run=pool.run)
            score = graded.feedback.score
            bwrap = pool._workers[0].process.pid
            worker = next(
                pid
                for pid in [bwrap, *descendants(bwrap)]
                if b"--serve" in Path(f"/proc/{pid}/cmdline").read_bytes()
                and Path(f"/proc/{pid}/comm").read_text().startswith("python")
            )
            faults, cpu = children_usage(worker)
            own, started = time.process_time(), time.monotonic()
            for _ in range(args.runs):
                graded = grade_submission(ref, assignment, config, run=pool.run)
                assert graded.feedback.score == score, graded.feedback
            own, wall = time.process_time() - own, time.monotonic() - started
            faults_after, cpu_after = children_usage(worker)
        per = 1000 / args.runs
        print(
            f"level {pool.level}, {args.runs} runs of a notebook scoring {score:g}, per student: sandbox CPU "
            f"{(cpu_after - cpu) * per:.2f} ms, {(faults_after - faults) / args.runs:.0f} page faults; grading "
            f"process CPU {own * per:.2f} ms; wall {wall * per:.1f} ms"
        )
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()

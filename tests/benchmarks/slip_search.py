"""Benchmark: what the slip search (course/pipeline/slip_search.py) costs on a class, so that its cost is visible.

Run:  .venv/bin/python tests/benchmarks/slip_search.py [--students 400] [--group 7] [--random 20] [--variants 40]

For each assignment (autograd, training, backprop), a class of --students: for every slip planted in that
assignment by tests/support/slips.py (values worked out by hand), --group students give the slip's value, --random
students each give a random wrong value of their own, everyone else torch's. The wrong values are grouped per answer
within the tolerance (as the item analysis groups them) and the search is asked once per group: printed per
assignment are the groups, explain calls, tables built, mutations run, seconds and milliseconds per call, cold (an
empty cache) and warm (the same calls again), how many planted groups were named with their kind, and how many
random values were attributed to a slip (must be 0).

With --variants N: N students with numbers of their own (the assignment's derive), each planting every slip at
their own numbers (the value the slip's mutation gives there: this part measures cost, not correctness) and each
explained at their own numbers: the worst case under variants, one table per student and question.

Timings here are this machine's, under whatever load it has: ratios against grading the same class are taken by
the grading benchmark (tests/benchmarks/grade_throughput.py); never assert them in tests.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from course.forms import matches
from course.pipeline.assignment import load_assignment
from course.pipeline.slip_search import SlipSearch, explainer
from tests.support.helpers import ROOT
from tests.support.slips import CASES

TOLERANCE = 1e-6


def grouped(answers: list[tuple[str, str, object]]) -> list[tuple[str, str, object, int]]:
    """(question, answer, value, count) for each group of equal values (within the tolerance) of each answer."""
    groups: dict[tuple[str, str], list[list]] = defaultdict(list)
    for question, answer, value in answers:
        for group in groups[question, answer]:
            if matches(value, group[0], TOLERANCE):
                group[1] += 1
                break
        else:
            groups[question, answer].append([value, 1])
    return [(q, a, value, count) for (q, a), found in groups.items() for value, count in found]


def a_class(name: str, search: SlipSearch, students: int, group: int, randoms: int, rng: random.Random):
    """The wrong answers of a class (question, answer, value) and which planted kind each value should get."""
    numbers = dict(search.assignment.default_params)
    planted = [(q, a, v, kind) for assignment, q, a, v, kind in CASES if assignment == name]
    wrong: list[tuple[str, str, object]] = []
    for question, answer, value, _ in planted:
        wrong += [(question, answer, value)] * group
    answers = sorted({(q, a) for q, a, _, _ in planted})
    for _ in range(randoms):
        question, answer = rng.choice(answers)
        reference = search.source(question, answer, numbers).reference[answer]  # type: ignore[union-attr]
        noise = round(rng.uniform(-50, 50), 3) + 0.0001
        wrong.append((question, answer, [noise] * len(reference) if isinstance(reference, list) else noise))
    assert len(planted) * group + randoms <= students, "the class is too small for what is planted"
    return wrong, planted


def timed_pass(search: SlipSearch, groups, numbers) -> tuple[float, list]:
    started = time.perf_counter()
    found = [search.find(question, answer, numbers, value) for question, answer, value, _ in groups]
    return time.perf_counter() - started, found


def shared_numbers(name: str, args: argparse.Namespace) -> None:
    course = load_assignment(ROOT / "source" / name / f"{name}.ipynb", name)
    numbers = dict(course.default_params)
    warming = explainer(course, tolerance=TOLERANCE)  # torch imported and its kernels warm, untimed
    for _, question, answer, *_ in (case for case in CASES if case[0] == name):
        warming.source(question, answer, numbers)
    search = explainer(course, tolerance=TOLERANCE)  # a cold cache for the timed pass
    wrong, planted = a_class(name, warming, args.students, args.group, args.random, random.Random(0))
    groups = grouped(wrong)
    cold, found = timed_pass(search, groups, numbers)
    cold_stats = search.stats.__dict__.copy()
    warm, _ = timed_pass(search, groups, numbers)
    named = sum(
        1
        for (q, a, value, count), slip in zip(groups, found, strict=True)
        for pq, pa, pv, kind in planted
        if (q, a) == (pq, pa)
        and matches(value, pv, TOLERANCE)
        and count >= args.group
        and slip
        and slip.slip.kind == kind
    )
    planted_values = [(pq, pa, pv) for pq, pa, pv, _ in planted]
    attributed = sum(
        1
        for (q, a, value, _), slip in zip(groups, found, strict=True)
        if slip and not any((q, a) == (pq, pa) and matches(value, pv, TOLERANCE) for pq, pa, pv in planted_values)
    )
    calls = len(groups)
    print(
        f"{name:9} {args.students} students, {len(wrong)} wrong answers in {calls} groups: "
        f"cold {cold:.3f} s ({1000 * cold / calls:.1f} ms/call, {cold_stats['tables']} tables, "
        f"{cold_stats['mutations_run']} mutations), warm {warm:.4f} s ({1000 * warm / calls:.2f} ms/call); "
        f"planted named {named}/{len(planted)}, random attributed {attributed}"
    )


def variants(name: str, args: argparse.Namespace) -> None:
    course = load_assignment(ROOT / "source" / name / f"{name}.ipynb", name)
    if course.content.derive is None:
        print(f"{name:9} derives no numbers: nothing to measure under variants")
        return
    planter = explainer(course, tolerance=TOLERANCE)
    default = dict(course.default_params)
    mutations = []
    for assignment, question, answer, value, _ in CASES:
        if assignment == name:
            found = planter.find(question, answer, default, value)
            if found is not None:
                mutations.append((question, answer, found.mutation))
    work = []
    rng = random.Random(1)
    for _ in range(args.variants):
        numbers = dict(course.content.derive(rng))
        for question, answer, mutation in mutations:
            source = planter.source(question, answer, numbers)
            value = None if source is None else planter.result(source, mutation).get(answer)
            if value is not None and not matches(value, source.reference[answer], TOLERANCE):  # type: ignore[union-attr]
                work.append((question, answer, numbers, value))
    search = explainer(course, tolerance=TOLERANCE)
    started = time.perf_counter()
    explained = sum(search(q, a, numbers, value) is not None for q, a, numbers, value in work)
    spent = time.perf_counter() - started
    print(
        f"{name:9} variants: {args.variants} students, {len(work)} planted values at their own numbers: "
        f"{spent:.2f} s ({1000 * spent / max(len(work), 1):.1f} ms/call, {search.stats.tables} tables, "
        f"{search.stats.mutations_run} mutations), explained {explained}/{len(work)}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--students", type=int, default=400)
    parser.add_argument("--group", type=int, default=7, help="students planting each slip")
    parser.add_argument("--random", type=int, default=20, help="students with a random wrong value each")
    parser.add_argument("--variants", type=int, default=0, help="students with numbers of their own")
    args = parser.parse_args()
    for name in ("autograd", "training", "backprop"):
        shared_numbers(name, args)
        if args.variants:
            variants(name, args)


if __name__ == "__main__":
    main()

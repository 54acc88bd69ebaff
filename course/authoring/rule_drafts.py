"""From slip to rule (issue 43): the slips the class's wrong values share, drafted as misconception rules for the
exercises module, for the author to read and accept, so that next term's students get the note.

`draft_rules` reads the class's graded feedback (every feedback.json under a results folder, each validated as it
is read: course/term/summary.py), makes the item analysis with the slip search wired in, exactly as `grade` does,
and drafts one `Rule` per slip that at least `least` students share (under variants, each student's value is a
group of their own: a slip's students are counted together over its groups). Nothing of a student's is run: the
drafts are the search's own relations to torch's values (course/pipeline/slip_rules.py). `accept` appends them to
the exercises module, then loads the assignment again; a module that would no longer load is put back as it was.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from course.core.config import CourseConfig
from course.core.errors import CourseError
from course.core.files import atomic_write_text
from course.pipeline.assignment import Assignment, load_course_assignment
from course.pipeline.slip_rules import draft_rule
from course.pipeline.slips import Slip
from course.term.item_analysis import ItemAnalysis, WrongValue, analyse_items, item_settings, slip_search_for
from course.term.summary import read_class_feedback

LEAST = 3  # students sharing a slip before a rule is worth drafting (issue 43: "a found slip that recurs")
MOST = 20  # drafts in one run: the most common slips first

RULE_ID = re.compile(r"^    Rule\(\n        '([^']+)',", re.MULTILINE)


@dataclass(frozen=True)
class RuleDraft:
    """A rule drafted for one slip: the answer, the slip, how many students and who, and the rule's source."""

    question: str
    answer: str
    slip: Slip
    students: tuple[str, ...]
    source: str


def _recurring(analysis: ItemAnalysis, least: int) -> list[tuple[str, str, Slip, WrongValue, tuple[str, ...]]]:
    """(question, answer, slip, one of its groups, every student it explains) for each slip of `least` or more
    students that no author's rule names, most students first."""
    found: dict[tuple[str, str, str, str], tuple[str, str, Slip, WrongValue, list[str]]] = {}
    for item in analysis.answers:
        for wrong in item.wrong_values:
            if wrong.slip is None or wrong.rule or wrong.numbers is None:
                continue
            key = (item.question, item.answer, wrong.slip.kind, wrong.slip.where)
            entry = found.setdefault(key, (item.question, item.answer, wrong.slip, wrong, []))
            entry[4].extend(wrong.students)
    ranked = sorted(found.values(), key=lambda entry: (-len(entry[4]), entry[1], entry[2].kind))
    return [(q, a, slip, wrong, tuple(sorted(who))) for q, a, slip, wrong, who in ranked if len(who) >= least]


def draft_rules(
    config: CourseConfig, assignment_name: str | None, results: Path, *, least: int = LEAST, most: int = MOST
) -> tuple[Assignment, list[RuleDraft]]:
    """The assignment and the rules drafted from its class's feedback under `results` (the folder `grade` wrote,
    its feedback/<student>/<assignment>/feedback.json). Raises CourseError when there is no feedback there."""
    assignment = load_course_assignment(config, assignment_name)
    feedback, _ = read_class_feedback(results, assignment.name)
    if not feedback:
        raise CourseError(
            f"{results}: no graded feedback of {assignment.name} (feedback/<student>/{assignment.name}/feedback.json): "
            f"grade the class first (autograd-course grade ... --assignment {assignment.name} --out {results})"
        )
    analysis = analyse_items(feedback, assignment.name, item_settings(config, assignment))
    search = slip_search_for(assignment, config.tolerance)
    drafts: list[RuleDraft] = []
    taken: list[str] = []
    for question, answer, slip, wrong, students in _recurring(analysis, least)[:most]:
        source = draft_rule(
            search,
            question,
            answer,
            wrong.numbers or {},
            wrong.value,
            students=len(students),
            taken=taken,
            extends=bool(assignment.content.rules) or bool(drafts),
        )
        if source is None:
            continue
        taken += RULE_ID.findall(source)
        drafts.append(RuleDraft(question, answer, slip, students, source))
    return assignment, drafts


@contextlib.contextmanager
def _folder_locked(folder: Path) -> Iterator[None]:
    """An exclusive flock on the module's folder itself, held for the block: no lock file left in source/."""
    handle = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield
    finally:
        os.close(handle)  # the lock goes with the descriptor


def accept(config: CourseConfig, assignment: Assignment, drafts: list[RuleDraft]) -> Path:
    """Append the drafts to the assignment's exercises module (the file a link points to, if it is one); load it
    again, and put it back as it was if it no longer loads (the CourseError says why): its text and mode, or no
    file where there was none. One at a time: two runs never append over each other's."""
    module = config.exercises_module(assignment.name).resolve()
    added = "\n\n".join(draft.source.rstrip("\n") for draft in drafts)
    with _folder_locked(module.parent):
        existed = module.exists()
        before = module.read_text(encoding="utf-8") if existed else ""
        mode = module.stat().st_mode & 0o777 if existed else 0o644
        atomic_write_text(module, before.rstrip("\n") + "\n\n\n" + added + "\n", mode=mode)
        try:
            load_course_assignment(config, assignment.name)
        except CourseError as error:
            if existed:
                atomic_write_text(module, before, mode=mode)
            else:
                module.unlink(missing_ok=True)
            raise CourseError(f"{module}: the drafted rules do not load, so the module is as it was: {error}") from None
    return module

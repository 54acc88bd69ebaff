"""Item analysis of a class: per answer, how many got it right, how well it separates the class, the blanks and
the common wrong values, each with who gave it and, where one is found, the slip that explains it (issue 43).

This module holds the plain-data result (`ItemAnalysis`, `AnswerItem`, `WrongValue`), the `Explainer` a slip
search plugs in (course/pipeline/slips.py) and the analysis itself (`analyse_items`), over the typed feedback of
a class (course/pipeline/feedback_model.py). Its files and its JSON are course/term/item_exports.py's. Only the
instructor's outputs carry student ids and values: a student's own pages never show another student's.

A student's value is read back from the feedback as the text it was shown as (`AnswerFeedback.your_value`,
`course.core.answers.describe` of the plain value the sandbox sent): that text is input, parsed only as a plain
finite number or a list of them (or True, False, None), never evaluated; any other text is a group of its own.
"""

from __future__ import annotations

import json
import logging
import math
import re
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from course.core.answers import MISSING, VALUE, PlainValue, describe
from course.core.config import CourseConfig
from course.core.status import RAN
from course.forms import is_number, matches
from course.pipeline.assignment import Assignment
from course.pipeline.feedback_model import Feedback
from course.pipeline.numbers_label import submitted_numbers
from course.pipeline.slip_search import SlipSearch, explainer
from course.pipeline.slips import Slip

log = logging.getLogger(__name__)

MAX_EXPLAINED = 50  # wrong-value groups handed to the slip search in one analysis, most common first
MIN_EXPLAINED = 2  # students who must share a wrong value before the search looks for its slip (without variants:
# with them, values are shared only among the same numbers, so each student's value is searched, and the outputs
# count the students per slip found: item_exports.py)
MAX_ANSWERS = 500  # answers analysed (an assignment has tens): a feedback file naming more is not one we wrote
EXPLAIN_SECONDS = 60.0  # the whole search's time in one analysis (each call is bounded by the explainer itself)
MAX_SHOWN_TEXT = 4000  # a shown value longer than this is not parsed (describe() of our longest list is shorter)
MAX_LIST_ITEMS = 1000  # course.core.answers.MAX_LIST: no answer list grading accepts is longer

Numbers = Mapping[str, Any]


class Explainer(Protocol):
    """Finds the slip that turns torch's value of `answer` (in `question`, at these numbers) into `value`, or None
    (unexplained). Bounded in time and count by whoever builds it."""

    def __call__(self, question: str, answer: str, numbers: Mapping[str, Any], value: PlainValue) -> Slip | None: ...


@dataclass(frozen=True)
class WrongValue:
    """A wrong value one or more students gave (values equal within the grading tolerance grouped): `value` the
    group's most common value as parsed (a number, a list of numbers, True/False/None), or, when the shown text
    is no such value, that text; `shown` the text the feedback showed it as; how many, who (sorted student ids)
    and the slip found for it (an author's misconception rule, when one named it, comes first as `rule`).
    `numbers`: the numbers every student of the group had (the same wrong value means different things for
    different numbers, so groups never mix students of different numbers); None when they were not asked for or
    could not be had (then each such student's values are a group apart)."""

    value: PlainValue
    count: int
    students: tuple[str, ...]
    slip: Slip | None = None
    rule: str = ""
    shown: str = ""
    numbers: Numbers | None = None
    parsed: bool = True  # False: `shown` is no plain value; the group is this very text


@dataclass(frozen=True)
class AnswerItem:
    """One answer across the class: share right (of all students), discrimination (point-biserial of right/wrong
    against the rest of the score; None when it is undefined, e.g. everyone right), blanks, the wrong values by
    count, most common first, and `other_wrong`: the wrong answers that have no value to group (of the wrong form,
    a function answer, unreadable)."""

    question: str
    answer: str
    students: int
    right: int
    blanks: int
    share_right: float
    discrimination: float | None
    wrong_values: tuple[WrongValue, ...]
    other_wrong: int = 0


@dataclass(frozen=True)
class ItemAnalysis:
    """The item analysis of one assignment's class (the students counted: graded or timed out)."""

    assignment: str
    students: int
    answers: tuple[AnswerItem, ...]
    tolerance: float = 1e-6
    variants: bool = False  # the students had different numbers (the outputs then show each group's)
    explained: int = 0  # groups the slip search was asked about
    unexplained_left: int = 0  # groups it would have been asked about, past its bounds


@dataclass(frozen=True)
class ItemSettings:
    """What the analysis needs beside the feedback: the grading tolerance, each student's numbers (None: the class
    shares its numbers; see `item_settings`) and the slip search (None: none)."""

    tolerance: float = 1e-6
    numbers: Callable[[str], Numbers] | None = None
    explain: Explainer | None = None


def item_settings(
    config: CourseConfig,
    assignment: Assignment,
    explain: Explainer | None = None,
    *,
    numbers: Callable[[str], Numbers] | None = None,
) -> ItemSettings:
    """The analysis's settings for a course's assignment: the course's tolerance, each student's numbers as the
    grader drew them and the slip search `explain`. The numbers: `numbers` when given (the service's: those of
    each counted attempt), else those `grade` grades each student's submission in the course root with
    (`numbers_label.submitted_numbers`: their own with variants, or those of the service's attempt recorded there,
    else the numbers cell's). Every writer of the item analysis (recording.py, term_record.py, the service) asks
    here, so a slip search is wired in this one place."""
    return ItemSettings(
        config.tolerance,
        numbers or (lambda student: submitted_numbers(config, assignment, student)),
        explain or slip_search_for(assignment, config.tolerance),
    )


# The slip search of each assignment, kept: its tables (torch's values, per question and numbers, with and without
# each mutation) are the search's cost, and the service analyses the same class again at every dashboard reload.
# Keyed by the Assignment object itself (a reloaded assignment gets a new search), at most MAX_SEARCHES kept.
MAX_SEARCHES = 8
_searches: OrderedDict[tuple[int, float], tuple[Assignment, SlipSearch]] = OrderedDict()
_searches_lock = threading.Lock()


def slip_search_for(assignment: Assignment, tolerance: float) -> SlipSearch:
    """The slip search (course/pipeline/slip_search.py) for this assignment at this tolerance, made once."""
    key = (id(assignment), tolerance)
    with _searches_lock:
        kept = _searches.get(key)
        if kept is not None and kept[0] is assignment:
            _searches.move_to_end(key)
            return kept[1]
        search = explainer(assignment, tolerance=tolerance)
        _searches[key] = (assignment, search)
        while len(_searches) > MAX_SEARCHES:
            _searches.popitem(last=False)
        return search


# ----------------------------------------------------------------------------- reading a shown value as input

_NUMBER_TEXT = re.compile(r"-?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
_WORDS: dict[str, PlainValue] = {"True": True, "False": False, "None": None}


def _number(text: str) -> int | float | None:
    """A finite number written as describe() writes one, else None (nan, inf, anything else)."""
    if not _NUMBER_TEXT.fullmatch(text):
        return None
    if text.lstrip("-").isdigit():
        return int(text) if len(text) <= 20 else None
    value = float(text)
    return value if math.isfinite(value) else None


def read_shown(text: str) -> tuple[bool, PlainValue]:
    """(True, the plain value) that `text`, a value as the feedback shows it, writes: a finite number, a list of
    them, True, False or None; else (False, None). Parsed, never evaluated; bounded before it is looked at."""
    if len(text) > MAX_SHOWN_TEXT:
        return False, None
    if text in _WORDS:
        return True, _WORDS[text]
    number = _number(text)
    if number is not None:
        return True, number
    if text.startswith("[") and text.endswith("]"):
        inner = text[1:-1]
        items = inner.split(", ") if inner else []
        if len(items) > MAX_LIST_ITEMS:
            return False, None
        numbers = [_number(item) for item in items]
        if all(n is not None for n in numbers):
            return True, numbers
    return False, None


# ----------------------------------------------------------------------------- the statistics


def point_biserial(pairs: Sequence[tuple[bool, float]]) -> float | None:
    """The correlation of right (1) / wrong (0) with a score (the rest of it): (M1 - M0) / s * sqrt(p q), s the
    population standard deviation. None when it is undefined: fewer than two students, all right or all wrong,
    or everyone's rest of the score the same."""
    n = len(pairs)
    right = [score for ok, score in pairs if ok]
    wrong = [score for ok, score in pairs if not ok]
    if n < 2 or not right or not wrong:
        return None
    mean = sum(score for _, score in pairs) / n
    spread = math.sqrt(sum((score - mean) ** 2 for _, score in pairs) / n)
    if spread <= 1e-9 * max(1.0, abs(mean)):  # float noise of equal scores
        return None
    p = len(right) / n
    r = (sum(right) / len(right) - sum(wrong) / len(wrong)) / spread * math.sqrt(p * (1 - p))
    return round(max(-1.0, min(1.0, r)), 6)


# ----------------------------------------------------------------------------- grouping wrong values


@dataclass
class _Given:
    student: str
    shown: str
    parsed: bool
    value: PlainValue
    rules: tuple[str, ...]


@dataclass
class _Group:
    anchor: PlainValue
    given: list[_Given] = field(default_factory=list)


def _group(given: list[_Given], tolerance: float) -> list[list[_Given]]:
    """Wrong values equal within `tolerance` (course.forms.matches) together; each unparsed text on its own.
    Numbers are sorted and cut where one is beyond the tolerance of its group's first (so the grouping does not
    depend on the students' order); other values join the first group whose first value they match."""
    texts: dict[str, list[_Given]] = {}
    numbers: list[_Given] = []
    others: list[_Group] = []
    for one in sorted(given, key=lambda g: (g.shown, g.student)):
        if not one.parsed:
            texts.setdefault(one.shown, []).append(one)
        elif is_number(one.value):
            numbers.append(one)
        else:
            home = next((g for g in others if matches(one.value, g.anchor, tolerance)), None)
            if home is None:
                others.append(home := _Group(one.value))
            home.given.append(one)
    groups: list[list[_Given]] = []
    anchor: float | None = None
    for one in sorted(numbers, key=lambda g: (g.value, g.student)):
        if anchor is None or not matches(one.value, anchor, tolerance):
            groups.append([])
            anchor = one.value  # type: ignore[assignment]
        groups[-1].append(one)
    return [*groups, *(g.given for g in others), *texts.values()]


def _wrong_value(given: list[_Given], numbers: Numbers | None) -> WrongValue:
    shown_count = Counter(one.shown for one in given)
    shown = min(shown_count, key=lambda text: (-shown_count[text], text))
    first = next(one for one in given if one.shown == shown)
    rules = Counter(rule for one in given for rule in one.rules)
    rule = min(rules, key=lambda r: (-rules[r], r)) if rules else ""
    return WrongValue(
        value=first.value if first.parsed else shown,
        count=len(given),
        students=tuple(sorted(one.student for one in given)),
        rule=rule,
        shown=shown,
        numbers=numbers,
        parsed=first.parsed,
    )


def _numbers_key(numbers: Numbers | None) -> str:
    return "" if numbers is None else json.dumps(numbers, sort_keys=True, default=repr)


# ----------------------------------------------------------------------------- the analysis


@dataclass
class _Tally:
    question: str
    answer: str
    right: int = 0
    blanks: int = 0
    other_wrong: int = 0
    pairs: list[tuple[bool, float]] = field(default_factory=list)
    given: dict[str, list[_Given]] = field(default_factory=dict)  # by the numbers' key


def analyse_items(
    feedback: Iterable[Feedback],
    assignment_name: str,
    settings: ItemSettings | None = None,
    *,
    max_explained: int = MAX_EXPLAINED,
    explain_seconds: float = EXPLAIN_SECONDS,
) -> ItemAnalysis:
    """The item analysis of a class's feedback (one per student; a second of the same student is left out). Only
    the students counted (graded or timed out) are analysed, as in the class summary's statistics.

    Per answer (in the order the class's feedback names them): the students, how many are right, the blanks
    (missing, or absent from a student's feedback), the point-biserial discrimination against the rest of the
    score (the score before any late penalty, less this answer's points), and the wrong values grouped within
    `settings.tolerance`, among students with the same numbers (`settings.numbers`; all the same when None).
    With `settings.explain`, each group of MIN_EXPLAINED or more students (any group, with variants: see
    MIN_EXPLAINED) that no misconception rule names is
    handed to it with its numbers, most common groups first, at most `max_explained` of them and for at most
    `explain_seconds` in all; an explainer that fails leaves its group unexplained (logged), never the analysis."""
    settings = settings or ItemSettings()
    seen: set[str] = set()
    counted: list[Feedback] = []
    for one in sorted(feedback, key=lambda f: f.student_id):
        if one.status in RAN and one.student_id not in seen:
            seen.add(one.student_id)
            counted.append(one)
    tallies: dict[tuple[str, str], _Tally] = {}
    for one in counted:
        for question in one.questions:
            for value in question.values:
                if len(tallies) < MAX_ANSWERS or (question.id, value.name) in tallies:
                    tallies.setdefault((question.id, value.name), _Tally(question.id, value.name))
    numbers_of = _NumbersReader(settings.numbers)
    for one in counted:
        numbers_of.key(one.student_id)  # everyone's, so that `variants` says whether the class's numbers differ
        _count_student(one, tallies, numbers_of)
    varied = len(set(numbers_of.known.values())) > 1
    answers = [_answer_item(tally, len(counted), settings.tolerance, numbers_of) for tally in tallies.values()]
    explained, left = 0, 0
    if settings.explain is not None:
        least = 1 if varied else MIN_EXPLAINED
        answers, explained, left = _explain(answers, settings.explain, least, max_explained, explain_seconds)
    return ItemAnalysis(assignment_name, len(counted), tuple(answers), settings.tolerance, varied, explained, left)


class _NumbersReader:
    """Each student's numbers, once (None when they cannot be had: the student's wrong values then stay apart,
    in a group of unknown numbers, never mixed with anyone's)."""

    def __init__(self, numbers: Callable[[str], Numbers] | None) -> None:
        self.numbers = numbers
        self.known: dict[str, str] = {}  # student -> their numbers' key
        self.by_key: dict[str, Numbers | None] = {}

    def key(self, student: str) -> str:
        if self.numbers is None:
            return ""
        if student not in self.known:
            try:
                numbers: Numbers | None = dict(self.numbers(student))
            except Exception:  # the course secret gone since grading, say: that student's values stay apart
                log.exception("item analysis: the numbers of %s could not be had", student)
                numbers = None
            key = "?" + student if numbers is None else _numbers_key(numbers)
            self.known[student] = key
            self.by_key.setdefault(key, numbers)
        return self.known[student]

    def numbers_for(self, key: str) -> Numbers | None:
        return self.by_key.get(key)


def _count_student(one: Feedback, tallies: dict[tuple[str, str], _Tally], numbers_of: _NumbersReader) -> None:
    by_answer = {(q.id, v.name): (q, v) for q in one.questions for v in q.values}
    total = float(one.before_penalty)
    for key, tally in tallies.items():
        found = by_answer.get(key)
        if found is None:  # a question the grader could not score for them, say: nothing of theirs is there
            tally.blanks += 1
            tally.pairs.append((False, total))
            continue
        question, value = found
        tally.pairs.append((value.correct, total - float(value.earned)))
        if value.correct:
            tally.right += 1
        elif value.status == MISSING:
            tally.blanks += 1
        elif value.status == VALUE and value.your_value is not None:
            parsed, plain = read_shown(value.your_value)
            rules = tuple(sorted({note.id for note in question.misconceptions if note.value == value.name}))
            given = _Given(one.student_id, value.your_value, parsed, plain, rules)
            tally.given.setdefault(numbers_of.key(one.student_id), []).append(given)
        else:
            tally.other_wrong += 1


def _answer_item(tally: _Tally, students: int, tolerance: float, numbers_of: _NumbersReader) -> AnswerItem:
    wrong: list[WrongValue] = []
    for key, given in sorted(tally.given.items()):
        numbers = numbers_of.numbers_for(key)
        wrong += [_wrong_value(group, numbers) for group in _group(given, tolerance)]
    wrong.sort(key=lambda w: (-w.count, w.shown, w.students))
    return AnswerItem(
        question=tally.question,
        answer=tally.answer,
        students=students,
        right=tally.right,
        blanks=tally.blanks,
        share_right=round(tally.right / students, 6) if students else 0.0,
        discrimination=point_biserial(tally.pairs),
        wrong_values=tuple(wrong),
        other_wrong=tally.other_wrong,
    )


GUESSES = (0, 1, -1)  # what a student writes without working anything out: a slip that gives one is not certain


def _maybe_a_guess(slip: Slip, value: PlainValue) -> Slip:
    """A slip whose value is 0, 1 or -1 (or a list of them) says so: a dropped local derivative gives 1 as readily
    as a guess does, so the class's report does not name it as certain."""
    values = value if isinstance(value, list) else [value]
    if not values or not all(is_number(v) and not isinstance(v, bool) and v in GUESSES for v in values):
        return slip
    return replace(slip, sentence=f"{slip.sentence} (or a guess: {describe(value)} is what many write without working)")


def _explain(
    answers: list[AnswerItem], explain: Explainer, least: int, most: int, seconds: float
) -> tuple[list[AnswerItem], int, int]:
    """The answers with the slips found for their common unnamed wrong values: most common groups first, and among
    groups as common, each answer's in turn (its most common first), so that under variants, where every group is
    one student's, the budget is shared by every answer rather than spent on the first."""
    candidates = []
    for a, item in enumerate(answers):
        mine = [
            (w, wrong)
            for w, wrong in enumerate(item.wrong_values)
            if wrong.count >= least and not wrong.rule and wrong.parsed and wrong.numbers is not None
        ]
        mine.sort(key=lambda entry: -entry[1].count)
        candidates += [(-wrong.count, rank, a, w) for rank, (w, wrong) in enumerate(mine)]
    wanted = sorted(candidates)
    found: dict[tuple[int, int], Slip] = {}
    deadline = time.monotonic() + seconds
    asked = 0
    for _, _, a, w in wanted:
        if asked >= most or time.monotonic() >= deadline:
            break
        item, wrong = answers[a], answers[a].wrong_values[w]
        asked += 1
        try:
            slip = explain(item.question, item.answer, wrong.numbers or {}, wrong.value)
        except Exception:  # a search of ours that broke: that group stays unexplained, the analysis stands
            log.exception("item analysis: the slip search failed on %s's %s", item.question, item.answer)
            continue
        if slip is not None:
            found[(a, w)] = _maybe_a_guess(slip, wrong.value)
    if found:
        answers = [
            _with_slips(item, {w: slip for (a2, w), slip in found.items() if a2 == a}) for a, item in enumerate(answers)
        ]
    return answers, asked, len(wanted) - asked


def _with_slips(item: AnswerItem, slips: Mapping[int, Slip]) -> AnswerItem:
    if not slips:
        return item
    return replace(
        item,
        wrong_values=tuple(replace(w, slip=slips[i]) if i in slips else w for i, w in enumerate(item.wrong_values)),
    )

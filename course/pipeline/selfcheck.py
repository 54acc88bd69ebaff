"""The student's self-check: run the notebook in the sandbox, then the public form checks.

Reports, per question, which answers are answered, missing, of the wrong form, or there but not of the form
the question's public check declares ("h not a number (it is None)"), and whether the public checks pass.
It needs nothing but the notebook and the installed package: the questions come from the notebook's own
locked cells (`released_assignment`), the settings from the course YAML when there is one and the defaults
otherwise. It has no answer key or hidden test to run or reveal.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from course import forms, sandbox
from course.core.answers import FUNCTION, MISSING, STILL_RELEASED, VALUE, WRONG_FORM, Answer, PlainValue, describe
from course.core.cell_metadata import nbgrader_cell
from course.core.config import DEFAULT_SANDBOX_UID, AssignmentPaths, AssignmentSettings, CourseConfig, Limits
from course.core.errors import CourseError, SandboxStartError
from course.core.text import safe_text
from course.pipeline.assignment import NUMBERS_CELL, Assignment, cell_text, is_text, released_assignment
from course.pipeline.handwork import parse_cells
from course.pipeline.submission import Cell, Submission, read_notebook_json, read_submission

FORM_CHECK_OFFSET = 1_000_000  # cell indexes of the public checks, past any real cell
# Where the check calls a function answer: only to see that it is one that returns (it never says whether a value
# is right), so one fixed point, and never one of the grader's (course/pipeline/probes.py), which a course with a secret
# keeps from students and which the check, run on a student's machine, could not know anyway.
SELF_CHECK_POINT = 1.5


def _what(value: PlainValue) -> str:
    """What a plain answer is, in a few words (a student's text cut short, on one line)."""
    if type(value) is str:
        return f"a string: {safe_text(repr(value), 40, one_line=True)}"
    if type(value) is list:
        return f"a list of {len(value)}"
    return describe(value)


def form_gap(value: PlainValue, form: str) -> str:
    """What keeps a plain answer from the form its public check declares, as the check's line says it
    ("not a number (it is None)"); "" when it has the form, or when the form is none the check knows."""
    shape = forms.form(form)
    gap = forms.gap(value, shape) if shape else None
    return f"not {shape.words} ({gap.said(_what)})" if shape and gap else ""


@dataclass(frozen=True)
class QuestionCheck:
    title: str
    answers: dict[str, Answer]
    public_check_error: str | None
    forms: dict[str, str] = field(default_factory=dict)  # answer -> the form its public check declares

    def gap(self, name: str) -> str:
        """What keeps this answer from its form ("" when it has it or is no plain value)."""
        answer = self.answers[name]
        return form_gap(answer.value, self.forms.get(name, "")) if answer.status == VALUE else ""

    @property
    def ready(self) -> bool:
        answered = all(a.status in (VALUE, FUNCTION) and not self.gap(n) for n, a in self.answers.items())
        return answered and self.public_check_error is None


UNANSWERED_SHOWN = 8  # unanswered answers named in the summary line; the rest are counted


@dataclass(frozen=True)
class CheckReport:
    questions: tuple[QuestionCheck, ...]
    ended_early: str | None
    cell_errors: tuple[tuple[str, str], ...]
    isolation: str = ""  # how the notebook was run, said on the last line
    syntax_errors: tuple[str, ...] = ()  # said first: they explain the missing answers below them
    # Whose numbers the notebook shows, as its numbers cell says (read without the course's secret): the id a
    # personalised release marked it with, or the default numbers of the course's release (known only where the
    # check has that release to compare with), or no id and nothing to compare with (unmarked_numbers).
    personalised_for: str | None = None
    default_numbers: bool = False
    unmarked_numbers: bool = False
    variants: bool | None = None  # whether the course gives each student numbers (None: unknown, no course files)
    fetched: str = "autograd/autograd.ipynb"  # where nbgrader's fetch puts this notebook: <assignment>/<notebook>

    @property
    def unanswered(self) -> list[str]:
        """The answers still missing (`...` as released, deleted, never set), in the notebook's order."""
        return [name for q in self.questions for name, answer in q.answers.items() if answer.status == MISSING]

    @property
    def untouched(self) -> bool:
        """Nothing answered at all: every answer still `...` as released (the notebook as it was handed out)."""
        answers = [answer for q in self.questions for answer in q.answers.values()]
        return bool(answers) and all(a.status == MISSING and a.detail in STILL_RELEASED for a in answers)

    @property
    def not_own_numbers(self) -> bool:
        """The course gives each student their own numbers, and this notebook shows the default ones."""
        return self.variants is True and self.default_numbers

    @property
    def ready(self) -> bool:
        return (
            not self.syntax_errors
            and self.ended_early is None
            and not self.not_own_numbers
            and all(q.ready for q in self.questions)
        )

    def _numbers_line(self) -> str:
        if self.personalised_for is not None:
            return (
                f"numbers: personalised for {safe_text(repr(self.personalised_for), 110, one_line=True)}: if that "
                "is not your id, this is not your notebook (the grader uses the numbers of the id it grades you "
                "as)"
            )
        if self.unmarked_numbers and not self.default_numbers and self.variants is not False:
            return (
                "numbers: this notebook's numbers cell carries no student's id (the default numbers, the same in "
                "everyone's copy, carry none; a copy of your own whose id was lost carries none either), and "
                "without the course's release the check cannot tell which they are: if your course gives each "
                "student their own numbers, make sure these are the numbers of the notebook released for you "
                "before you answer"
            )
        if not self.default_numbers:
            return ""
        if self.variants is True:
            return (
                "numbers: the default ones, the same in everyone's copy, not yours: this course grades every "
                "notebook with its student's own numbers, so answers worked out from these will not match; get "
                "the notebook released for you (your instructor says where) and answer in it"
            )
        if self.variants is False:
            return "numbers: the course's, the same in everyone's notebook"
        return (
            "numbers: the default ones, the same in everyone's copy (no student's id on them); if your course "
            "gives each student their own numbers, this is not your notebook: get yours before you answer"
        )

    def lines(self) -> list[str]:
        lines = [
            f"syntax error in {where}: nothing in that cell ran, so its answers are missing; fix it first"
            for where in self.syntax_errors
        ]
        if self.untouched:
            lines.append(
                "This is the notebook as released: nothing in it is answered yet. If you worked in another "
                f"copy, check and submit that one: nbgrader's fetch puts it in {self.fetched} in the folder "
                f"you fetched in, and `nbgrader submit` sends that folder."
            )
        if self._numbers_line():
            lines.append(self._numbers_line())
        for question in self.questions:
            mark = "ok  " if question.ready else "todo"
            states = []
            for name, answer in question.answers.items():
                if question.gap(name):
                    states.append(f"{name} {question.gap(name)}")
                elif answer.status in (VALUE, FUNCTION):
                    states.append(f"{name} answered")
                elif answer.status == MISSING:
                    states.append(f"{name} missing ({answer.detail})")
                elif answer.status == WRONG_FORM:
                    states.append(f"{name} wrong form ({answer.detail})")
                else:
                    states.append(f"{name} unreadable")
            lines.append(f"[{mark}] {question.title}: " + ", ".join(states))
            if question.public_check_error:
                said = {
                    name for name, answer in question.answers.items() if answer.status == MISSING or question.gap(name)
                }
                lines += public_check_lines(question.public_check_error, said)
        for label, error in self.cell_errors:
            lines.append(f"error in {label}: {error}")
        if self.ended_early:
            lines.append(f"the notebook did not run to the end: {self.ended_early}")
        missing = self.unanswered
        if missing and not self.untouched:
            named = ", ".join(missing[:UNANSWERED_SHOWN]) + (
                f" and {len(missing) - UNANSWERED_SHOWN} more" if len(missing) > UNANSWERED_SHOWN else ""
            )
            total = sum(len(q.answers) for q in self.questions)
            lines.append(
                f"unanswered: {len(missing)} of {total} answers ({named}); submitted as they are, they earn no points"
            )
        lines.append(
            "Ready to submit: every answer has the right form."
            if self.ready
            else "Not ready yet: fix the items marked todo (this check never says whether a value is right)."
        )
        if self.isolation:
            lines.append(f"sandbox: {self.isolation}")
        return lines


FORM_ERROR = "FormError: "  # how the sandbox reports a failed check_form: its problems, one a line


def public_check_lines(error: str, said: set[str]) -> list[str]:
    """A failed public check as report lines: each problem check_form found (but those of the answers `said`
    to be missing already), or the error as it came."""
    if not error.startswith(FORM_ERROR):
        return [f"       public check: {safe_text(error, 500, one_line=True)}"]
    problems = [line for line in error.removeprefix(FORM_ERROR).splitlines() if line.strip()]
    return [
        f"       form: {safe_text(line, 300, one_line=True)}"
        for line in problems
        if re.split(r"[\s(]", line, maxsplit=1)[0] not in said
    ]


def _fetched_as(path: Path, settings: AssignmentSettings | None) -> str:
    """Where nbgrader's fetch puts this assignment's notebook (<assignment>/<notebook>), as far as the check knows:
    from the course's settings, else from a notebook checked where fetch put it, else an example."""
    if settings:
        return f"{settings.name}/{settings.notebook}"
    if path.resolve().parent.name == path.stem:
        return f"{path.stem}/{path.name}"
    return "<assignment>/<notebook> (e.g. autograd/autograd.ipynb)"


def check_notebook(path: Path, config: CourseConfig | None = None, assignment_name: str | None = None) -> CheckReport:
    """Check a student's notebook; `config` is the course's when the check runs in a course folder (None:
    the default settings; the notebook alone says what its questions are)."""
    limits = config.limits if config else Limits()
    if config and assignment_name is None:  # the assignment whose notebook this is named like, else the first
        named = [a.name for a in config.assignments if a.notebook == path.name]
        assignment_name = named[0] if named else None
    # The check's context, once: the course's settings of the assignment (none outside a course folder); the
    # assignment itself is read from the student's notebook, which holds no answer key or hidden tests.
    settings = config.assignment(assignment_name) if config else None
    name = settings.name if settings else (assignment_name or path.stem)
    notebook = read_notebook_json(path, limits.notebook_mb * 1024 * 1024)
    assignment = released_assignment(notebook, path, name)
    # The assignment is read from the notebook itself, so its own numbers cell says nothing of what the default
    # numbers are: only the course's release does (None: no release to compare with).
    release_numbers = (
        _release_numbers(AssignmentPaths(config.root, settings).release_notebook, limits)
        if config and settings
        else None
    )
    # The form checks do not depend on whose numbers these are: a personalised notebook's own numbers
    # cell runs after the course's and sets the student's.
    submission = read_submission(
        path,
        "self-check",
        assignment,
        params=assignment.default_params,
        max_bytes=limits.notebook_mb * 1024 * 1024,
        max_cells=limits.max_cells,
        release_numbers="\0" if release_numbers is None else release_numbers,
    )
    run = _run_checks(submission, assignment, limits, config)
    questions = _question_checks(assignment, run)
    cell_errors = tuple((c.label, c.error) for c in run.cells if c.error and c.index < FORM_CHECK_OFFSET)
    return CheckReport(
        tuple(questions),
        run.ended_early,
        cell_errors,
        f"{run.isolation}: {sandbox.ISOLATION_SUMMARY[run.isolation]}",
        parse_cells(submission.cells).syntax_errors,
        submission.personalised_for,
        submission.default_numbers,
        submission.unmarked_numbers and release_numbers is None,
        config.variants if config else None,
        _fetched_as(path, settings),
    )


def _run_checks(
    submission: Submission, assignment: Assignment, limits: Limits, config: CourseConfig | None
) -> sandbox.RunResult:
    """The notebook's cells, then each question's public check, run in one sandbox."""
    checks = [
        Cell(FORM_CHECK_OFFSET + i, f"public check of {q.title}", q.form_source or q.test_source)
        for i, q in enumerate(assignment.questions)
    ]
    names = assignment.answer_names + assignment.function_names
    try:
        return sandbox.run_cells(
            [*submission.cells, *checks],
            names,
            {name: [SELF_CHECK_POINT] for name in assignment.function_names},
            limits,
            isolation=config.sandbox if config else "auto",
            uid=config.sandbox_uid if config else DEFAULT_SANDBOX_UID,
        )
    except SandboxStartError as failed:  # never a verdict on the notebook: none of it ran
        raise SandboxStartError(
            f"the check could not start its sandbox, so none of your notebook ran and nothing "
            f"was checked (a problem of this machine's set-up, not of your notebook; tell your "
            f"instructor if it happens again): {failed}"
        ) from None


def _question_checks(assignment: Assignment, run: sandbox.RunResult) -> list[QuestionCheck]:
    """Each question's answers and the outcome of its public check, in the assignment's order."""
    outcome = {cell.index: cell for cell in run.cells}
    questions = []
    for i, question in enumerate(assignment.questions):
        ran = outcome.get(FORM_CHECK_OFFSET + i)
        error = "did not run" if ran is None else ran.error
        answers = {name: run.answers[name] for name in question.answer_names + question.function_names}
        questions.append(QuestionCheck(question.title, answers, error, dict(question.forms)))
    return questions


def _release_numbers(release_notebook: Path, limits: Limits) -> str | None:
    """The numbers cell of the course's release (release/<assignment>/<notebook>, the default numbers everyone is
    given), or None when there is no readable release to compare with."""
    try:
        release = read_notebook_json(release_notebook, limits.notebook_mb * 1024 * 1024)
    except (CourseError, OSError):
        return None
    cells = release.get("cells")
    for cell in cells if type(cells) is list else []:
        if type(cell) is dict and nbgrader_cell(cell).grade_id == NUMBERS_CELL:
            return cell_text(cell) if is_text(cell.get("source", "")) else None
    return None

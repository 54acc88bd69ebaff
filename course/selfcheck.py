"""The student's self-check: run the notebook in the sandbox, then the public form checks.

Reports, per question, which answers are answered, missing or of the wrong form, and whether the public
checks pass. It never runs or reveals a hidden test.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from course import sandbox
from course.answers import FUNCTION, MISSING, VALUE, WRONG_FORM, Answer
from course.assignment import load_course_assignment
from course.config import CourseConfig
from course.handwork import parse_cells
from course.judge import choose_probe_points
from course.submission import Cell, read_submission

FORM_CHECK_OFFSET = 1_000_000  # cell indexes of the public checks, past any real cell


@dataclass(frozen=True)
class QuestionCheck:
    title: str
    answers: dict[str, Answer]
    public_check_error: str | None

    @property
    def ready(self) -> bool:
        answered = all(a.status in (VALUE, FUNCTION) for a in self.answers.values())
        return answered and self.public_check_error is None


@dataclass(frozen=True)
class CheckReport:
    questions: tuple[QuestionCheck, ...]
    ended_early: str | None
    cell_errors: tuple[tuple[str, str], ...]
    isolation: str = ""  # how the notebook was run, said on the last line
    syntax_errors: tuple[str, ...] = ()  # said first: they explain the missing answers below them

    @property
    def ready(self) -> bool:
        return not self.syntax_errors and self.ended_early is None and all(q.ready for q in self.questions)

    def lines(self) -> list[str]:
        lines = [f"syntax error in {where}: nothing in that cell ran, so its answers are missing; fix it first"
                 for where in self.syntax_errors]
        for question in self.questions:
            mark = "ok  " if question.ready else "todo"
            states = []
            for name, answer in question.answers.items():
                if answer.status in (VALUE, FUNCTION):
                    states.append(f"{name} answered")
                elif answer.status == MISSING:
                    states.append(f"{name} missing ({answer.detail})")
                elif answer.status == WRONG_FORM:
                    states.append(f"{name} wrong form ({answer.detail})")
                else:
                    states.append(f"{name} unreadable")
            lines.append(f"[{mark}] {question.title}: " + ", ".join(states))
            if question.public_check_error:
                lines.append(f"       public check: {question.public_check_error}")
        for label, error in self.cell_errors:
            lines.append(f"error in {label}: {error}")
        if self.ended_early:
            lines.append(f"the notebook did not run to the end: {self.ended_early}")
        lines.append("Ready to submit: every answer has the right form." if self.ready else
                     "Not ready yet: fix the items marked todo (this check never says whether a value is right).")
        if self.isolation:
            lines.append(f"sandbox: {self.isolation}")
        return lines


def check_notebook(config: CourseConfig, path: Path, assignment_name: str | None = None) -> CheckReport:
    settings = config.assignment(assignment_name)
    assignment = load_course_assignment(config, settings.name)
    # The form checks do not depend on whose numbers these are: a personalised notebook's own numbers
    # cell runs after the course's and sets the student's.
    submission = read_submission(path, "self-check", assignment, params=assignment.default_params,
                                 max_bytes=config.limits.notebook_mb * 1024 * 1024, max_cells=config.limits.max_cells)
    checks = [
        Cell(FORM_CHECK_OFFSET + i, f"public check of {q.title}", q.form_source)
        for i, q in enumerate(assignment.questions)
    ]
    names = assignment.answer_names + assignment.function_names
    run = sandbox.run_cells([*submission.cells, *checks], names,
                            choose_probe_points(assignment.function_names, 1), config.limits,
                            isolation=config.sandbox, uid=config.sandbox_uid)
    outcome = {cell.index: cell for cell in run.cells}
    questions = []
    for i, question in enumerate(assignment.questions):
        ran = outcome.get(FORM_CHECK_OFFSET + i)
        error = "did not run" if ran is None else ran.error
        answers = {name: run.answers[name] for name in question.answer_names + question.function_names}
        questions.append(QuestionCheck(question.title, answers, error))
    cell_errors = tuple((c.label, c.error) for c in run.cells if c.error and c.index < FORM_CHECK_OFFSET)
    return CheckReport(tuple(questions), run.ended_early, cell_errors,
                       f"{run.isolation}: {sandbox.ISOLATION_SUMMARY[run.isolation]}",
                       parse_cells(submission.cells).syntax_errors)

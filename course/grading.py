"""The grading pipeline for one submission and for a batch:

notebook -> submission (read) -> sandbox (run student code) -> plain answers -> judge (trusted)
-> feedback / gradebook / grades CSV. No stage reaches back into an earlier one.
"""

from __future__ import annotations

import contextlib
import sys
import time
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from datetime import datetime
from functools import partial
from pathlib import Path

from course import handwork, integrity, nbgrader_layout, sandbox
from course.answers import MISSING, Answer
from course.assignment import Assignment, load_assignment
from course.config import AssignmentSettings, CourseConfig, Limits
from course.errors import CourseError, SubmissionError
from course.feedback import build_feedback
from course.files import atomic_write_json, atomic_write_text
from course.gradebook import GradeRow, grades_csv_path, read_grades_csv, write_grades_csv
from course.judge import QuestionResult, choose_probe_points, judge
from course.nbgrader_bridge import GradebookWriter, assignment_due
from course.render import render_html
from course.roster import Student, gradebook_students
from course.submission import Submission, read_submission, student_id_problem
from course.summary import class_summary, read_class_feedback, render_summary_html
from course.term import (
    MISSING_WORK,
    NoGradebook,
    feedback_page,
    gradebook_note,
    mark_missing,
    read_integrity,
    record_for_nbgrader,
    records_in_gradebook,
    with_late_policy,
    write_integrity,
)
from course.text import safe_text

GRADED, TIMED_OUT, FAILED, ERROR = "graded", "timed_out", "failed", "autograder_error"


@dataclass(frozen=True)
class SubmissionRef:
    student_id: str
    path: Path
    problem: str = ""


@dataclass(frozen=True)
class Graded:
    student_id: str
    status: str
    questions: tuple[QuestionResult, ...]
    feedback: dict
    seconds: float
    internal_error: str = ""
    sandbox: str = ""  # the isolation level the notebook ran under ("" when it did not run)
    late_penalty: float = 0.0
    submitted: datetime | None = None
    integrity: tuple[str, ...] = ()  # for the instructor's class summary only, never the feedback


@dataclass
class BatchSummary:
    graded: list[Graded] = field(default_factory=list)
    refused: list[SubmissionRef] = field(default_factory=list)
    out_dir: Path = Path()
    csv_path: Path = Path()
    isolation: str = ""
    gradebook_note: str = ""
    missing: list[str] = field(default_factory=list)
    not_on_roster: list[str] = field(default_factory=list)

    def count(self, status: str) -> int:
        return sum(1 for g in self.graded if g.status == status)

    def lines(self) -> list[str]:
        total = len(self.graded)
        lines = [f"{total} submission{'s' if total != 1 else ''}: {self.count(GRADED)} graded, "
                 f"{self.count(FAILED)} failed, {self.count(TIMED_OUT)} timed out, "
                 f"{self.count(ERROR)} autograder errors"]
        for ref in self.refused:
            lines.append(f"not graded: {safe_text(str(ref.path), 300, one_line=True)}: {ref.problem}")
        if self.missing:
            lines.append(f"{len(self.missing)} missing (on the roster, nothing submitted): {', '.join(self.missing)}")
        if self.not_on_roster:
            lines.append(f"graded but not on the roster: {', '.join(self.not_on_roster)}")
        slowest = sorted(self.graded, key=lambda g: g.seconds, reverse=True)[:3]
        if slowest:
            lines.append("slowest: " + ", ".join(f"{g.student_id} {g.seconds:.1f} s" for g in slowest))
        lines.append(f"grades: {self.csv_path}; class summary: {self.out_dir / 'class-summary.html'}; "
                     f"feedback: {self.out_dir / 'feedback'}/<student>/")
        if self.gradebook_note:
            lines.append(f"gradebook: {self.gradebook_note}")
        if self.isolation:
            lines.append(f"sandbox: {self.isolation}")
        return lines


# ----------------------------------------------------------------------------- finding submissions


def _ref(student_id: str, path: Path, problem: str = "") -> SubmissionRef:
    return SubmissionRef(student_id, path, problem or student_id_problem(student_id))


def discover(paths: list[Path], assignment: str, notebook: str) -> list[SubmissionRef]:
    """Submissions named by PATHs: nbgrader's submitted/<student>/<assignment>/<notebook> layout, a folder
    of <student>.ipynb files, or single notebooks. One canonical id check here: a ref whose id cannot be
    used, or that repeats an id already found, carries a `problem` and is refused, never renamed."""
    refs: list[SubmissionRef] = []
    for path in paths:
        if path.is_dir():
            for child in sorted(path.iterdir()):
                if child.is_dir() and (child / assignment).is_dir():
                    refs.append(_ref(child.name, child / assignment / notebook))
                elif child.is_dir() and child.name == assignment and (child / notebook).exists():
                    refs.append(_ref(path.name, child / notebook))
                elif child.is_file() and child.suffix == ".ipynb":
                    refs.append(_ref(child.stem, child))
        elif path.exists():
            parts = path.resolve().parts
            if len(parts) >= 3 and parts[-2] == assignment:
                refs.append(_ref(parts[-3], path))
            else:
                refs.append(_ref(path.stem, path))
        else:
            refs.append(SubmissionRef(path.stem or str(path), path, f"{path}: no such file or folder"))
    seen: dict[str, Path] = {}
    unique = []
    for ref in refs:
        if ref.problem:
            unique.append(ref)
        elif ref.student_id in seen:
            unique.append(SubmissionRef(ref.student_id, ref.path,
                                        f"student id {ref.student_id!r} was already graded from "
                                        f"{seen[ref.student_id]}; this copy was not graded"))
        else:
            seen[ref.student_id] = ref.path
            unique.append(ref)
    return unique


def check_paths_exist(paths: list[Path]) -> None:
    """A PATH that does not exist is a typo, not a student: stop before anything is graded or written."""
    missing = [path for path in paths if not path.exists() and not path.is_symlink()]
    if missing:
        raise CourseError(
            f"{missing[0]}: no such file or folder; nothing was graded or written. Check the path "
            "(with no PATH, grade reads submitted/<student>/<assignment>/ at the course root)."
        )


# ----------------------------------------------------------------------------- one submission


def _zero(assignment: Assignment, answers_reason: str, config: CourseConfig) -> tuple[QuestionResult, ...]:
    names = assignment.answer_names + assignment.function_names
    answers = {name: Answer(MISSING, detail=answers_reason) for name in names}
    return judge(assignment, answers, tolerance=config.tolerance)


# What a limit looks like in an error the notebook reported, and how the feedback names it. The error
# text comes from the student's process, so this is only a hint shown beside that error, in the section of
# the notebook's own errors: never a statement in the grader's voice.
LIMIT_SIGNS = (
    (("MemoryError", "can't allocate memory", "Cannot allocate memory"),
     "This looks like the memory limit ({memory_mb} MB)."),
    (("Resource temporarily unavailable", "BlockingIOError"),
     "This looks like the limit on processes and threads ({processes})."),
    (("File too large",), "This looks like the limit on the size of a file ({file_size_mb} MB)."),
    (("No space left on device",), "This looks like the limit on scratch space ({tmp_mb} MB)."),
    (("Too many open files",), "This looks like the limit on open files ({open_files})."),
)


def limit_hint(error: str, limits: Limits) -> str:
    """The hint for one reported error ("" when it names no limit)."""
    return " ".join(template.format(**vars(limits)) for signs, template in LIMIT_SIGNS
                    if any(sign in error for sign in signs))


def cell_errors_of(run: sandbox.RunResult, limits: Limits) -> list[dict[str, str]]:
    """The errors the notebook reported, each labelled with its cell and, where it fits, a limit hint."""
    errors = []
    for cell in run.cells:
        if cell.error:
            entry = {"cell": cell.label, "error": cell.error}
            hint = limit_hint(cell.error, limits)
            if hint:
                entry["hint"] = hint
            errors.append(entry)
    return errors


def limit_messages(run: sandbox.RunResult, config: CourseConfig) -> list[str]:
    """The limits the grader saw hit itself (time limits are told by `ended_early`)."""
    messages = []
    if run.limit_hit == "output_kb":
        messages.append(f"Your notebook printed more than {config.limits.output_kb} KB; the rest was discarded.")
    if run.limit_hit == "cpu_seconds":
        messages.append(f"The notebook used more CPU time than allowed ({config.limits.submission_seconds:g} s "
                        "in all), so the system stopped it.")
    return messages


def _status_of(run: sandbox.RunResult) -> str:
    return TIMED_OUT if run.limit_hit in ("cell_seconds", "submission_seconds") else GRADED


def grade_submission(ref: SubmissionRef, assignment: Assignment, config: CourseConfig,
                     probe_points: dict[str, list[float]] | None = None, *, run: sandbox.Runner | None = None,
                     reveal_torch_values: bool | None = None) -> Graded:
    """Grade one notebook. Never raises: every failure becomes a status, a reason and score 0.
    reveal_torch_values: whether the feedback shows torch's values (default: the course's setting for
    local grading)."""
    started = time.monotonic()
    messages: list[str] = []
    cell_errors: list[dict[str, str]] = []
    internal_error = ""
    level = ""
    findings: tuple[str, ...] = ()
    try:
        if ref.problem:
            raise SubmissionError(ref.problem)
        params = config.params_for(ref.student_id, assignment.default_params)
        submission = _read(ref, assignment, config, params)
        parsed = handwork.parse_cells(submission.cells)  # once, bounded: for hand work and the integrity report
        findings = integrity.review(submission, ref.student_id, parsed)
        if config.variants and submission.personalised_for not in (None, ref.student_id):
            # The claimed id is the notebook's text: quoted, short and only ever a student id.
            claimed = submission.personalised_for if not student_id_problem(submission.personalised_for) else "?"
            messages.append(
                f"This notebook was personalised for {claimed!r} but is graded as "
                f"{ref.student_id!r}, so it was graded with {ref.student_id!r}'s numbers: answers worked out from "
                "another student's numbers will not match. If this is your own work, submit the notebook released "
                "for you."
            )
        points = probe_points if probe_points is not None else choose_probe_points(
            assignment.function_names, config.function_probes)
        run_cells = run or partial(sandbox.run_cells, isolation=config.sandbox, uid=config.sandbox_uid)
        run = run_cells(list(submission.cells), assignment.answer_names + assignment.function_names, points,
                        config.limits)
        level = run.isolation
        answers = dict(run.answers)
        for cell_id in submission.deleted_answer_cells:
            question = assignment.question_by_answer_cell(cell_id)
            for name in question.answer_names + question.function_names:
                answers[name] = Answer(MISSING, detail="its answer cell was deleted")
        hand_work = handwork.computed_answers(parsed, assignment.answer_names + assignment.function_names)
        deduction = config.hand_work_deduction if config.hand_work == "deduct" else 0.0
        questions = judge(assignment, answers, tolerance=config.tolerance, computed=hand_work.computed,
                          deduction=deduction, params=params)
        status = _status_of(run)
        if run.ended_early:
            messages.append(f"Your notebook did not run to the end: {run.ended_early}. "
                            "Answers set before that point were graded.")
        messages += limit_messages(run, config)
        if not hand_work.complete:
            messages.append("The notebook holds more code than the hand-work check reads, so only its first part "
                            "was checked for answers computed with torch.")
        cell_errors = cell_errors_of(run, config.limits)
    except SubmissionError as problem:
        status, questions = FAILED, _zero(assignment, "the notebook could not be read", config)
        messages.append(f"Your submission could not be graded: {problem}")
    except Exception:
        status, questions = ERROR, _zero(assignment, "autograder error", config)
        internal_error = traceback.format_exc()
        messages.append("The autograder hit an error of its own while grading this notebook (not your fault). "
                        "Your instructor can see the details; you do not need to resubmit.")
    if reveal_torch_values is None:
        reveal_torch_values = config.reveals_torch_values(gradescope=False)
    feedback = build_feedback(ref.student_id, assignment.name, questions, status=status, messages=messages,
                              cell_errors=cell_errors, reveal_torch_values=reveal_torch_values)
    return Graded(ref.student_id, status, questions, feedback, time.monotonic() - started, internal_error,
                  sandbox=level, integrity=findings)


def _read(ref: SubmissionRef, assignment: Assignment, config: CourseConfig, params: dict) -> Submission:
    return read_submission(ref.path, ref.student_id, assignment, params=params,
                           max_bytes=config.limits.notebook_mb * 1024 * 1024, max_cells=config.limits.max_cells)


# ----------------------------------------------------------------------------- a batch


def write_feedback(out_dir: Path, assignment: str, graded: Graded, *, page: str = "feedback.html",
                   submitted: Path | None = None) -> Path:
    """feedback/<student>/<assignment>/: feedback.json and the page, in nbgrader's feedback layout: named
    like the notebook (page) and beside nbgrader's timestamp.txt and submission_secret.txt from the
    submission, `nbgrader release_feedback` hands the page to the student through the exchange."""
    folder = out_dir / "feedback" / graded.student_id / assignment
    atomic_write_json(folder / "feedback.json", graded.feedback)
    atomic_write_text(folder / page, render_html(graded.feedback))
    if submitted is not None:
        nbgrader_layout.copy_submission_files(submitted, folder)
    return folder


CSV_FLUSH_SECONDS = 1.0


def grade_batch(config: CourseConfig, paths: list[Path], out_dir: Path, *, assignment_name: str | None = None,
                jobs: int | None = None, report: Callable[[Graded, int, int], None] | None = None,
                record_gradebook: bool | None = None, roster: list[Student] | None = None) -> BatchSummary:
    """Grade every submission under PATHs; write feedback, grades-<assignment>.csv and nbgrader's gradebook.

    jobs: warm sandboxed workers grading in parallel (default: one per core); 0 starts a fresh
    sandboxed interpreter for every submission instead.
    record_gradebook: record the scores in the course's nbgrader gradebook (default: only when out_dir is
    the course root, so one-off grading into another folder leaves the course's records alone).
    roster: who should have submitted (default, for a course-root run: the students of the gradebook);
    each one without a submission gets a row with status `missing`.
    """
    check_paths_exist(paths)
    record = records_in_gradebook(config, out_dir, record_gradebook)
    if roster is None and record:
        roster = gradebook_students(config.gradebook_url, config.root / "gradebook.db")
    settings = config.assignment(assignment_name)
    due = settings.due or assignment_due(config.gradebook_url, config.root / "gradebook.db", settings.name)
    assignment = load_assignment(config.source_notebook(settings.name), settings.name)
    refs = discover(paths or [config.root / "submitted"], settings.name, settings.notebook)
    if not refs:
        raise CourseError(
            f"no submissions found in {', '.join(map(str, paths or [config.root / 'submitted']))}: expected "
            f"submitted/<student>/{settings.name}/{settings.notebook}, a folder of <student>.ipynb, or notebooks"
        )
    jobs = sandbox.default_jobs() if jobs is None else jobs
    if config.variants:
        # A missing course secret stops the batch before anything is graded.
        config.params_for("probe", assignment.default_params)
    question_ids = tuple(q.id for q in assignment.questions)
    level, note = sandbox.choose_isolation(config.sandbox, config.sandbox_uid, config.limits.tmp_mb)
    summary = BatchSummary(out_dir=out_dir, csv_path=grades_csv_path(out_dir, settings.name),
                           isolation=note or sandbox.ISOLATION_SUMMARY[level],
                           gradebook_note=gradebook_note(config, record))
    rows: list[GradeRow] = []
    last_flush = time.monotonic()
    summary.refused = [ref for ref in refs if ref.problem]
    refs = [ref for ref in refs if not ref.problem]
    with ExitStack() as stack:
        run: sandbox.Runner | None = None
        if jobs > 0 and refs:
            pool = stack.enter_context(sandbox.WarmPool(min(jobs, len(refs)), config.limits, isolation=config.sandbox,
                                                base_uid=config.sandbox_uid))
            run = pool.run
        # Opening the gradebook (and, the first time, recording the assignment in it) takes seconds:
        # it happens beside the grading, and results wait for it only when they are recorded.
        opener = stack.enter_context(ThreadPoolExecutor(1))
        if record:
            opening = opener.submit(GradebookWriter, config.root, config.gradebook_url, settings.name,
                                    config.source_notebook(settings.name), settings.due)
        else:
            opening = opener.submit(NoGradebook)
        stack.callback(lambda: opening.result().close())
        executor = stack.enter_context(ThreadPoolExecutor(max(1, jobs)))
        futures = [executor.submit(grade_submission, ref, assignment, config, run=run) for ref in refs]
        paths_by_id = {ref.student_id: ref.path for ref in refs}
        for future in as_completed(futures):
            graded = future.result()  # grade_submission never raises
            graded = with_late_policy(graded, paths_by_id.get(graded.student_id), due, settings, config)
            graded = record_graded(graded, out_dir, config, settings, opening.result() if record else None,
                                   paths_by_id.get(graded.student_id))
            if graded.internal_error:
                print(f"autograder error for {graded.student_id}:\n{safe_text(graded.internal_error, 20_000)}",
                      file=sys.stderr)
            rows.append(GradeRow(graded.student_id, {q.id: q.earned for q in graded.questions},
                                 graded.feedback["score"], graded.feedback["max_score"], graded.status,
                                 graded.late_penalty))
            summary.graded.append(graded)
            if time.monotonic() - last_flush > CSV_FLUSH_SECONDS:
                _flush(summary.csv_path, question_ids, rows, opening.result())
                last_flush = time.monotonic()
            if report:
                report(graded, len(summary.graded), len(refs))
        _flush(summary.csv_path, question_ids, rows, opening.result())
        if roster:
            summary.missing, summary.not_on_roster = mark_missing(
                summary.csv_path, question_ids, assignment.max_score, roster,
                [g.student_id for g in summary.graded], opening.result())
    write_integrity(out_dir, settings.name, summary.graded)
    write_class_summary(out_dir, settings.name, summary.csv_path)
    return summary


def record_graded(graded: Graded, out_dir: Path, config: CourseConfig, settings: AssignmentSettings,
                  gradebook: GradebookWriter | None, submitted: Path | None) -> Graded:
    """Write one student's feedback (and, with a gradebook, nbgrader's records). A failure here stays this
    student's: they become an autograder error (score 0, a message, the details in the log), and the batch
    goes on."""
    try:
        write_feedback(out_dir, settings.name, graded, page=feedback_page(settings), submitted=submitted)
        if gradebook is not None and submitted is not None:
            record_for_nbgrader(config, settings, gradebook, graded, submitted)
        return graded
    except Exception:
        failed = replace(graded, status=ERROR, questions=tuple(replace(q, earned=0.0) for q in graded.questions),
                         internal_error=f"{graded.internal_error}\nwhile recording the results:\n"
                                        f"{traceback.format_exc()}")
        failed = replace(failed, feedback={
            **graded.feedback, "status": ERROR, "score": 0, "questions": [], "cell_errors": [],
            "messages": ["The autograder could not record the results of this notebook (a problem on our side, "
                         "not in your notebook). Your instructor can see the details; you do not need to resubmit."],
        })
        with contextlib.suppress(Exception):
            write_feedback(out_dir, settings.name, failed, page=feedback_page(settings))
        return failed


def write_class_summary(out_dir: Path, assignment: str, csv_path: Path | None = None) -> None:
    """class-summary.html (and .json) next to the grades CSV, over every student graded into out_dir; the
    students whose CSV row says `missing` are listed as having submitted nothing."""
    rows = read_grades_csv(csv_path) if csv_path else {}
    missing = sorted(sid for sid, row in rows.items() if row.get("status") == MISSING_WORK)
    feedback = read_class_feedback(out_dir, assignment)
    summary = class_summary(feedback, missing=missing)
    seen = read_integrity(out_dir, assignment)
    for student, findings in integrity.borrowed_numbers(feedback).items():  # across students: the whole class
        seen[student] = [*seen.get(student, []), *findings]
    summary["integrity"] = dict(sorted(seen.items()))
    atomic_write_json(out_dir / "class-summary.json", summary)
    atomic_write_text(out_dir / "class-summary.html", render_summary_html(summary, assignment))


def _flush(csv_path: Path, question_ids: tuple[str, ...], rows: list[GradeRow], gradebook: GradebookWriter) -> None:
    """The grades CSV and the gradebook catch up with what is graded so far (both replace, never append)."""
    if rows:
        write_grades_csv(csv_path, question_ids, rows)
        rows.clear()
    gradebook.commit()

"""The grading pipeline for one submission and for a batch:

notebook -> submission (read) -> sandbox (run student code) -> plain answers -> judge (trusted)
-> feedback / gradebook / grades CSV. No stage reaches back into an earlier one.
"""

from __future__ import annotations

import re
import sys
import time
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from pathlib import Path

from course import handwork, integrity, nbgrader_layout, sandbox
from course.answers import MISSING, Answer
from course.assignment import Assignment, load_assignment
from course.config import CourseConfig
from course.errors import CourseError, SubmissionError
from course.feedback import build_feedback, render_html
from course.files import atomic_write_json, atomic_write_text
from course.gradebook import GradeRow, grades_csv_path, read_grades_csv, write_grades_csv
from course.judge import QuestionResult, choose_probe_points, judge
from course.nbgrader_bridge import GradebookWriter, assignment_due
from course.pool import WarmPool, default_jobs
from course.roster import Student, gradebook_students
from course.submission import STUDENT_ID, Submission, read_submission
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

UNSAFE_CHARACTERS = re.compile(r"[^A-Za-z0-9._@+#-]")

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
    late_penalty: float = 0.0
    submitted: datetime | None = None
    integrity: tuple[str, ...] = ()  # for the instructor's class summary only, never the feedback


@dataclass
class BatchSummary:
    graded: list[Graded] = field(default_factory=list)
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
    if not problem and not STUDENT_ID.match(student_id):
        problem = (f"the student id {student_id!r} cannot be used as a folder name "
                   "(letters, digits and . _ @ + - only)")
    return SubmissionRef(student_id, path, problem)


def discover(paths: list[Path], assignment: str, notebook: str) -> list[SubmissionRef]:
    """Submissions named by PATHs: nbgrader's submitted/<student>/<assignment>/<notebook> layout, a folder
    of <student>.ipynb files, or single notebooks. A student id seen twice is graded once."""
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
        if ref.student_id in seen:
            unique.append(SubmissionRef(f"{ref.student_id}#duplicate{len(unique)}", ref.path,
                                        f"student id {ref.student_id!r} was already graded from "
                                        f"{seen[ref.student_id]}; this copy ({ref.path}) was not graded"))
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


# What a limit looks like from inside the sandbox, and how the feedback names it.
LIMIT_SIGNS = (
    (("MemoryError", "can't allocate memory", "Cannot allocate memory"), 
     "A cell ran out of memory (limit {memory_mb} MB)."),
    (("Resource temporarily unavailable", "BlockingIOError"), 
     "A cell tried to start more processes or threads than allowed (limit {processes})."),
    (("File too large",), "A cell wrote a file larger than allowed (limit {file_size_mb} MB)."),
    (("No space left on device",), "A cell filled its scratch space (limit {tmp_mb} MB)."),
    (("Too many open files",), "A cell opened more files than allowed (limit {open_files})."),
)


def limit_messages(run: sandbox.RunResult, config: CourseConfig) -> list[str]:
    """One sentence for every resource limit the run ran into (time and output are reported elsewhere)."""
    errors = " ".join(c.error or "" for c in run.cells) + " " + (run.ended_early or "")
    messages = [
        template.format(**vars(config.limits))
        for signs, template in LIMIT_SIGNS
        if any(sign in errors for sign in signs)
    ]
    if "SIGXCPU" in errors:
        messages.append(f"The notebook used more CPU time than allowed ({config.limits.submission_seconds:g} s).")
    return messages


def _status_of(run: sandbox.RunResult) -> str:
    return TIMED_OUT if run.limit_hit in ("cell_seconds", "submission_seconds") else GRADED


Runner = Callable[..., sandbox.RunResult]


def grade_submission(ref: SubmissionRef, assignment: Assignment, config: CourseConfig,
                     probe_points: dict[str, list[float]] | None = None, *, run: Runner | None = None) -> Graded:
    """Grade one notebook. Never raises: every failure becomes a status, a reason and score 0."""
    started = time.monotonic()
    messages: list[str] = []
    cell_errors: list[dict[str, str]] = []
    internal_error = ""
    findings: tuple[str, ...] = ()
    try:
        if ref.problem:
            raise SubmissionError(ref.problem)
        params = config.params_for(ref.student_id, assignment.default_params)
        submission = _read(ref, assignment, config, params)
        findings = integrity.review(submission, ref.student_id)
        if submission.personalised_for not in (None, ref.student_id):
            messages.append(
                f"This notebook was personalised for {submission.personalised_for!r} but is graded as "
                f"{ref.student_id!r}, so it was graded with {ref.student_id!r}'s numbers: answers worked out from "
                "another student's numbers will not match. If this is your own work, submit the notebook released "
                "for you."
            )
        points = probe_points if probe_points is not None else choose_probe_points(
            assignment.function_names, config.function_probes)
        run_cells = run or partial(sandbox.run_cells, isolation=config.sandbox, uid=config.sandbox_uid)
        run = run_cells(list(submission.cells), assignment.answer_names + assignment.function_names, points,
                        config.limits)
        answers = dict(run.answers)
        for cell_id in submission.deleted_answer_cells:
            question = assignment.question_by_answer_cell(cell_id)
            for name in question.answer_names + question.function_names:
                answers[name] = Answer(MISSING, detail="its answer cell was deleted")
        computed = handwork.computed_answers(submission.cells, assignment.answer_names + assignment.function_names)
        deduction = config.hand_work_deduction if config.hand_work == "deduct" else 0.0
        questions = judge(assignment, answers, tolerance=config.tolerance, computed=computed, deduction=deduction,
                          params=params)
        status = _status_of(run)
        if run.ended_early:
            messages.append(f"Your notebook did not run to the end: {run.ended_early}. "
                            "Answers set before that point were graded.")
        if run.limit_hit == "output_kb":
            messages.append(f"Your notebook printed more than {config.limits.output_kb} KB; the rest was discarded.")
        cell_errors = [{"cell": c.label, "error": c.error} for c in run.cells if c.error]
        messages += limit_messages(run, config)
    except SubmissionError as problem:
        status, questions = FAILED, _zero(assignment, "the notebook could not be read", config)
        messages.append(f"Your submission could not be graded: {problem}")
    except Exception:
        status, questions = ERROR, _zero(assignment, "autograder error", config)
        internal_error = traceback.format_exc()
        messages.append("The autograder hit an error of its own while grading this notebook (not your fault). "
                        "Your instructor can see the details; you do not need to resubmit.")
    feedback = build_feedback(ref.student_id, assignment.name, questions, status=status, messages=messages,
                              cell_errors=cell_errors)
    return Graded(ref.student_id, status, questions, feedback, time.monotonic() - started, internal_error,
                  integrity=findings)


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
    jobs = default_jobs() if jobs is None else jobs
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
    with ExitStack() as stack:
        run: Runner | None = None
        if jobs > 0:
            pool = stack.enter_context(WarmPool(min(jobs, len(refs)), config.limits, isolation=config.sandbox,
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
            gradebook = opening.result()
            if graded.internal_error:
                print(f"autograder error for {graded.student_id}:\n{graded.internal_error}", file=sys.stderr)
            usable_id = bool(STUDENT_ID.match(graded.student_id))
            if usable_id:  # never build a path from an id that could climb out of the feedback folder
                write_feedback(out_dir, settings.name, graded, page=feedback_page(settings),
                               submitted=paths_by_id.get(graded.student_id))
                if record:
                    record_for_nbgrader(config, settings, gradebook, graded, paths_by_id[graded.student_id])
            rows.append(GradeRow(
                graded.student_id if usable_id else UNSAFE_CHARACTERS.sub("_", graded.student_id),
                {q.id: q.earned for q in graded.questions}, graded.feedback["score"], graded.feedback["max_score"],
                graded.status, graded.late_penalty,
            ))
            summary.graded.append(graded)
            if time.monotonic() - last_flush > CSV_FLUSH_SECONDS:
                _flush(summary.csv_path, question_ids, rows, gradebook)
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

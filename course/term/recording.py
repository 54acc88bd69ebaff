"""Recording a class's results, in one place for every way a class is graded: each student's feedback and
nbgrader's records (autograded/, the gradebook), the grades CSV (flushed as results arrive), the roster's missing
students, the integrity report and the class summary.

`batch` hands it the results as its pool grades them, `shards` (merge) the results the shards left, and
`term_record` has the class summary made again once the service's attempts are entered into the term: the same
writes each way. What goes in is plain data (`Graded` results, the `Records` opened for the assignment, a
`BatchSummary` filled as they are written); when the records are opened, and beside what, is the caller's choice:
this module runs no sandbox and no threads.
"""

from __future__ import annotations

import contextlib
import logging
import time
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from course.core.files import PUBLIC, SyncedWrites, atomic_write_json, atomic_write_text, compact_json, private_folders
from course.core.status import Status
from course.core.text import plural, safe_text
from course.pipeline import integrity
from course.pipeline.discovery import SubmissionRef
from course.pipeline.render import render_html
from course.pipeline.run_context import RunContext
from course.term import nbgrader_layout
from course.term.gradebook import GradeRow, grades_csv_path, read_grades_csv, write_grades_csv
from course.term.gradebook_writer import GradebookWriter
from course.term.item_analysis import ItemSettings, analyse_items
from course.term.item_exports import write_item_analysis
from course.term.nbgrader_bridge import assignment_due
from course.term.nbgrader_term import (
    NoGradebook,
    feedback_page,
    gradebook_note,
    mark_missing,
    read_integrity,
    record_for_nbgrader,
    write_integrity,
)
from course.term.roster import Student, gradebook_students
from course.term.summary import class_summary, read_class_feedback
from course.term.summary_page import render_summary_html

if TYPE_CHECKING:  # types only: recording grades nobody, and the service (term_record) imports it without the sandbox
    from course.pipeline.grading import Graded
    from course.pipeline.selftest import SelfTest

log = logging.getLogger(__name__)

FAILED_SHOWN = 20  # students named, with their reason, in the terminal's summary; the rest are counted


@dataclass
class BatchSummary:
    """What a run of one assignment graded, refused and recorded; `lines` is what the terminal shows of it."""

    assignment: str = ""
    graded: list[Graded] = field(default_factory=list)
    refused: list[SubmissionRef] = field(default_factory=list)
    out_dir: Path = Path()
    csv_path: Path = Path()
    isolation: str = ""
    gradebook_note: str = ""
    missing: list[str] = field(default_factory=list)
    not_on_roster: list[str] = field(default_factory=list)
    selftest: SelfTest | None = None

    def count(self, status: str) -> int:
        return sum(1 for g in self.graded if g.status == status)

    def _not_graded_lines(self) -> list[str]:
        """Who failed or timed out, and why (the first line of their feedback's reason)."""
        unlucky = sorted(
            (g for g in self.graded if g.status in (Status.FAILED, Status.TIMED_OUT)), key=lambda g: g.student_id
        )
        lines = []
        for graded in unlucky[:FAILED_SHOWN]:
            messages = graded.feedback.messages or ("see their feedback",)
            why = safe_text(str(messages[0]), 200, one_line=True)
            lines.append(f"{graded.status.replace('_', ' ')}: {graded.student_id}: {why}")
        if len(unlucky) > FAILED_SHOWN:
            lines.append(f"... and {len(unlucky) - FAILED_SHOWN} more failed or timed out (see their feedback)")
        return lines

    def lines(self) -> list[str]:
        total = len(self.graded)
        lines = [
            f"{plural(total, 'submission')}: {self.count(Status.GRADED)} graded, "
            f"{self.count(Status.FAILED)} failed, {self.count(Status.TIMED_OUT)} timed out, "
            f"{plural(self.count(Status.AUTOGRADER_ERROR), 'autograder error')}"
        ]
        for ref in self.refused:
            lines.append(f"not graded: {safe_text(str(ref.path), 300, one_line=True)}: {ref.problem}")
        lines += self._not_graded_lines()
        ours = [g.student_id for g in self.graded if g.status == Status.AUTOGRADER_ERROR]
        if ours:
            lines.append(
                f"autograder errors (ours, not the students': no score recorded; the cause is above, and "
                f"grading them again is safe): {', '.join(ours)}"
            )
        if self.missing:
            lines.append(f"{len(self.missing)} missing (on the roster, nothing submitted): {', '.join(self.missing)}")
        if self.not_on_roster:
            lines.append(f"graded but not on the roster: {', '.join(self.not_on_roster)}")
        slowest = sorted(self.graded, key=lambda g: g.seconds, reverse=True)[:3]
        if slowest:
            lines.append("slowest: " + ", ".join(f"{g.student_id} {g.seconds:.1f} s" for g in slowest))
        lines.append(
            f"grades: {self.csv_path}; class summary: {class_summary_path(self.out_dir, self.assignment)}; "
            f"feedback: {self.out_dir / 'feedback'}/<student>/{self.assignment}/"
        )
        if self.gradebook_note:
            lines.append(f"gradebook: {self.gradebook_note}")
        if self.isolation:
            lines.append(f"sandbox: {self.isolation}")
        if self.selftest:
            lines.append(self.selftest.line())
        return lines


def write_feedback(
    out_dir: Path,
    assignment_name: str,
    graded: Graded,
    *,
    page: str = "feedback.html",
    submitted: Path | None = None,
    writes: SyncedWrites | None = None,
) -> Path:
    """feedback/<student>/<assignment>/: feedback.json and the page, in nbgrader's feedback layout: named
    like the notebook (page) and beside nbgrader's timestamp.txt and submission_secret.txt from the
    submission, `nbgrader release_feedback` hands the page to the student through the exchange.
    writes: the batch's synced writes (the files land at its next commit); else each is synced now."""
    folder = private_folders(out_dir, "feedback", graded.student_id, assignment_name)
    write = writes.write_text if writes is not None else atomic_write_text
    write(folder / "feedback.json", compact_json(graded.feedback.to_json()))
    # The page alone is readable by others, inside folders that are not: release_feedback copies it into the
    # exchange with its mode, where the student's own user reads it.
    write(folder / page, render_html(graded.feedback), mode=PUBLIC)
    nbgrader_layout.write_feedback_files(submitted, folder)
    return folder


CSV_FLUSH_SECONDS = 1.0


def record_results(
    context: RunContext,
    summary: BatchSummary,
    results: Iterable[Graded],
    records: Callable[[], Records],
    paths_by_id: dict[str, Path],
    *,
    report: Callable[[Graded, int], None] | None = None,
) -> None:
    """Write the results as they come into summary.out_dir: each student's feedback and nbgrader's records, the
    grades CSV and the gradebook (flushed every CSV_FLUSH_SECONDS), then the roster's missing students. The
    batch's results as they are graded, or the shards' results when they are merged (shards.py): the same
    writes either way. records: the gradebook, due date and roster, asked for when first needed (a batch
    opens them beside the grading)."""
    assignment = context.assignment
    question_ids = tuple(q.id for q in assignment.questions)
    writes = SyncedWrites()
    try:
        flush = _Flush(context, summary, question_ids, writes)
        last_flush = time.monotonic()
        for graded in results:
            gradebook = records().gradebook
            graded = record_graded(
                context,
                graded,
                summary.out_dir,
                gradebook if isinstance(gradebook, GradebookWriter) else None,
                paths_by_id.get(graded.student_id),
                writes=writes,
            )
            if graded.internal_error:
                _print_internal_error(graded)
            flush.add(graded)
            if time.monotonic() - last_flush > CSV_FLUSH_SECONDS:
                flush(gradebook)
                last_flush = time.monotonic()
            if report:
                report(graded, len(summary.graded))
        flush(records().gradebook)
        roster = records().roster
        if roster:
            summary.missing, summary.not_on_roster = mark_missing(
                summary.csv_path,
                question_ids,
                assignment.max_score,
                roster,
                [g.student_id for g in summary.graded],
                records().gradebook,
            )
    finally:
        writes.discard()  # what an interrupted batch had not committed never lands half-way


@dataclass(frozen=True)
class Records:
    """What a run reads from and writes to the course's records beside the grading (`open_records`)."""

    gradebook: GradebookWriter | NoGradebook
    due: datetime | None
    roster: list[Student] | None


def open_records(context: RunContext, record: bool, roster: list[Student] | None) -> Records:
    """The roster (default, for a course-root run: the gradebook's students), the due date (the YAML's, else
    the gradebook's) and, when the run records (`record`), the open gradebook. Opening it (and, the first time,
    recording the assignment in it) takes seconds: a batch runs this beside the grading, once its self-test has
    passed (batch.py); merge, after every shard's record has been checked."""
    config, settings = context.config, context.settings
    gradebook_path = config.root / "gradebook.db"
    if roster is None and record:
        roster = gradebook_students(config.gradebook_url, gradebook_path)
    due = context.due or assignment_due(config.gradebook_url, gradebook_path, settings.name)
    if not record:
        return Records(NoGradebook(), due, roster)
    return Records(
        GradebookWriter(
            config.root,
            config.gradebook_url,
            settings.name,
            context.paths.source_notebook,
            settings.due,
        ),
        due,
        roster,
    )


def start_summary(context: RunContext, out_dir: Path, record: bool) -> BatchSummary:
    """An empty summary of one assignment's run into out_dir, `record` saying whether it goes into the gradebook."""
    return BatchSummary(
        assignment=context.name,
        out_dir=out_dir,
        csv_path=grades_csv_path(out_dir, context.name),
        gradebook_note=gradebook_note(context.config, record),
    )


def write_reports(context: RunContext, summary: BatchSummary, items: ItemSettings | None = None) -> None:
    """Once the results are recorded: the instructor's integrity report, then the class summary over them (with
    the item analysis, `items` its settings: `item_analysis.item_settings`)."""
    write_integrity(summary.out_dir, context.name, summary.graded)
    write_class_summary(
        summary.out_dir, context.name, summary.csv_path, page=feedback_page(context.settings), items=items
    )


def record_graded(
    context: RunContext,
    graded: Graded,
    out_dir: Path,
    gradebook: GradebookWriter | None,
    submitted: Path | None,
    writes: SyncedWrites | None = None,
) -> Graded:
    """Write one student's feedback (and, with a gradebook, nbgrader's records). A failure here stays this
    student's: they become an autograder error (score 0, a message, the details in the log), and the batch
    goes on."""
    page = feedback_page(context.settings)
    try:
        write_feedback(out_dir, context.name, graded, page=page, submitted=submitted, writes=writes)
        # An autograder error is no grade: the gradebook keeps what it had (nothing, or the last real grading).
        if gradebook is not None and submitted is not None and graded.status != Status.AUTOGRADER_ERROR:
            record_for_nbgrader(context, gradebook, graded, submitted, writes)
        return graded
    except Exception:
        return unrecorded(context, graded, out_dir, traceback.format_exc(), writes)


def unrecorded(
    context: RunContext, graded: Graded, out_dir: Path, why: str, writes: SyncedWrites | None = None
) -> Graded:
    """A student whose results could not be recorded: an autograder error, with feedback that says so."""
    failed = replace(
        graded,
        status=Status.AUTOGRADER_ERROR,
        questions=tuple(replace(q, earned=0.0) for q in graded.questions),
        internal_error=f"{graded.internal_error}\nwhile recording the results:\n{why}",
    )
    failed = replace(
        failed,
        feedback=replace(
            graded.feedback,
            status=Status.AUTOGRADER_ERROR,
            score=0,
            questions=(),
            cell_errors=(),
            messages=(
                "The autograder could not record the results of this notebook (a problem on our side, "
                "not in your notebook). Your instructor can see the details; you do not need to resubmit.",
            ),
        ),
    )
    with contextlib.suppress(Exception):
        write_feedback(out_dir, context.name, failed, page=feedback_page(context.settings), writes=writes)
    return failed


def class_summary_path(out_dir: Path, assignment_name: str, suffix: str = ".html") -> Path:
    """The instructor's page of one assignment: class-summary-<assignment>.html (and .json)."""
    return out_dir / f"class-summary-{assignment_name}{suffix}"


def write_class_summary(
    out_dir: Path,
    assignment_name: str,
    csv_path: Path | None = None,
    *,
    page: str = "",
    items: ItemSettings | None = None,
) -> None:
    """class-summary-<assignment>.html (and .json) next to the grades CSV, over every student graded into
    out_dir; the students whose CSV row says `missing` are listed as having submitted nothing; page: the
    feedback page's name, which the summary links for every student. Beside them, the item analysis of the same
    feedback (item-analysis-<assignment>.json and .csv; `items`: its settings, the course's tolerance and each
    student's numbers), which the summary's page shows too."""
    rows = read_grades_csv(csv_path) if csv_path else {}
    missing = sorted(sid for sid, row in rows.items() if row.get("status") == Status.MISSING)
    feedback, unreadable = read_class_feedback(out_dir, assignment_name)
    summary = class_summary(feedback, missing=missing, unreadable=unreadable, page=page)
    seen = read_integrity(out_dir, assignment_name)
    for student, findings in integrity.borrowed_numbers(feedback).items():  # across students: the whole class
        seen[student] = [*seen.get(student, []), *findings]
    summary["integrity"] = dict(sorted(seen.items()))
    analysis = analyse_items(feedback, assignment_name, items)
    summary["item_analysis"] = write_item_analysis(out_dir, analysis)
    atomic_write_json(class_summary_path(out_dir, assignment_name, ".json"), summary)
    atomic_write_text(
        class_summary_path(out_dir, assignment_name), render_summary_html(summary, assignment_name, analysis=analysis)
    )


def _print_internal_error(graded: Graded) -> None:
    log.error(f"autograder error for {graded.student_id}:\n{safe_text(graded.internal_error, 20_000)}")


class _Flush:
    """The results graded since the last flush; calling it makes the grades CSV, the files and the gradebook
    catch up with them (all replace, never append). The files go first, the gradebook last, so that a batch
    killed in between has the gradebook behind the files, never ahead of them; a student the gradebook then
    refuses becomes an autograder error, and their row and feedback are written again to say so."""

    def __init__(
        self, context: RunContext, summary: BatchSummary, question_ids: tuple[str, ...], writes: SyncedWrites
    ) -> None:
        self.context, self.summary, self.question_ids, self.writes = context, summary, question_ids, writes
        self.recent: dict[str, int] = {}  # student -> index in summary.graded, since the last flush

    def add(self, graded: Graded) -> None:
        self.recent[graded.student_id] = len(self.summary.graded)
        self.summary.graded.append(graded)

    def _files(self, students: list[str]) -> None:
        rows = [_row(self.summary.graded[self.recent[student]]) for student in students]
        if rows:
            write_grades_csv(self.summary.csv_path, self.question_ids, rows, writes=self.writes)
        self.writes.commit()

    def __call__(self, gradebook: GradebookWriter | NoGradebook) -> None:
        self._files(list(self.recent))
        refused = gradebook.commit()
        for student, why in refused.items():
            index = self.recent[student]
            failed = unrecorded(
                self.context,
                self.summary.graded[index],
                self.summary.out_dir,
                f"the gradebook refused the scores: {why}",
                self.writes,
            )
            self.summary.graded[index] = failed
            _print_internal_error(failed)
        if refused:
            self._files(list(refused))
        self.recent.clear()


def _row(graded: Graded) -> GradeRow:
    return GradeRow(
        graded.student_id,
        {q.id: q.earned for q in graded.questions},
        graded.feedback.score,
        graded.feedback.max_score,
        graded.status,
        graded.late_penalty,
    )

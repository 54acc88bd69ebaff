"""Scores -> nbgrader's gradebook (so `nbgrader export` and formgrader agree) and our grades CSV.

Our CSV is `grades-<assignment>.csv`: `nbgrader export` writes `grades.csv` into the same course root,
and one must never overwrite the other."""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from course.core.files import SyncedWrites, atomic_write_text
from course.core.text import csv_text

CSV_FIXED_COLUMNS = ("student_id",)
CSV_TAIL_COLUMNS = ("raw_score", "late_penalty", "score", "max_score", "status")


def grades_csv_path(out_dir: Path, assignment_name: str) -> Path:
    """Where a batch's CSV goes: one per assignment (its columns are that assignment's questions)."""
    return out_dir / f"grades-{assignment_name}.csv"


@dataclass(frozen=True)
class GradeRow:
    student_id: str
    question_scores: dict[str, float]
    score: float
    max_score: float
    status: str
    late_penalty: float = 0.0  # score is what is left after it


def read_grades_csv(path: Path) -> dict[str, dict[str, str]]:
    """{student_id: row} of an existing grades.csv (empty when there is none)."""
    if not path.exists():
        return {}
    with path.open(encoding="utf-8", newline="") as stream:
        return {row["student_id"]: row for row in csv.DictReader(stream)}


def write_grades_csv(
    path: Path, question_ids: tuple[str, ...], rows: list[GradeRow], writes: SyncedWrites | None = None
) -> None:
    """Merge rows into grades.csv by student id (other students' rows stay) and replace it atomically (at the
    next commit of `writes`, when given)."""
    columns = [*CSV_FIXED_COLUMNS, *question_ids, *CSV_TAIL_COLUMNS]
    merged = read_grades_csv(path)
    for row in rows:
        merged[row.student_id] = csv_row(row, question_ids)
    (writes.write_text if writes is not None else atomic_write_text)(path, _table(columns, merged))


def csv_row(row: GradeRow, question_ids: tuple[str, ...]) -> dict[str, str]:
    """A row as grades.csv holds it (and `read_grades_csv` gives it back)."""
    return {
        "student_id": row.student_id,
        **{qid: f"{row.question_scores.get(qid, 0):g}" for qid in question_ids},
        "raw_score": f"{row.score + row.late_penalty:g}",
        "late_penalty": f"{row.late_penalty:g}",
        "score": f"{row.score:g}",
        "max_score": f"{row.max_score:g}",
        "status": row.status,
    }


def replace_grades_rows(path: Path, question_ids: tuple[str, ...], rows: dict[str, dict[str, str] | None]) -> None:
    """Put rows back as they were read by `read_grades_csv` (None: the student had no row, and has none)."""
    columns = [*CSV_FIXED_COLUMNS, *question_ids, *CSV_TAIL_COLUMNS]
    merged = read_grades_csv(path)
    for student_id, row in rows.items():
        if row is None:
            merged.pop(student_id, None)
        else:
            merged[student_id] = row
    atomic_write_text(path, _table(columns, merged))


def _table(columns: list[str], rows: dict[str, dict[str, str]]) -> str:
    """The grades CSV's text: a header, then one row per student in id order (through `csv_text`, as every CSV)."""
    return csv_text([columns, *([rows[student].get(column) or "" for column in columns] for student in sorted(rows))])


COURSE_TOTALS = "course-totals.csv"


def write_course_totals(out_dir: Path, assignments: tuple[str, ...]) -> Path | None:
    """course-totals.csv: per student, the score of each assignment graded into out_dir (read from its
    grades-<assignment>.csv; blank where the student has none), their total and the total possible. None
    when no assignment has been graded here yet."""
    graded = {name: read_grades_csv(grades_csv_path(out_dir, name)) for name in assignments}
    graded = {name: rows for name, rows in graded.items() if rows}
    if not graded:
        return None
    maxima = {name: max(float(row["max_score"]) for row in rows.values()) for name, rows in graded.items()}
    students = sorted({student for rows in graded.values() for student in rows})
    table = [["student_id", *graded, "total", "max_total"]]
    for student in students:
        scores = [graded[name].get(student, {}).get("score", "") for name in graded]
        total = sum(float(score) for score in scores if score)
        table.append([student, *scores, f"{total:g}", f"{sum(maxima.values()):g}"])
    path = out_dir / COURSE_TOTALS
    atomic_write_text(path, csv_text(table))
    return path

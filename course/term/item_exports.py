"""The item analysis's outputs (course/term/item_analysis.py): its JSON (one stable, schema-like shape, described
in docs/grading.md, "Item analysis"), its CSV, and both files written atomically beside grades-<assignment>.csv
(item-analysis-<assignment>.json and .csv). The class summary's page and the service's instructor API show the
same JSON. They name students and show their values: the instructor's only.

Every output is bounded whatever the class: at most MAX_GROUPS_SHOWN wrong values an answer and MAX_STUDENTS_SHOWN
students a value (each cut says how many it left out). A student's value is text they control: it is bounded
(MAX_VALUE_TEXT) here, escaped by the page that shows it and made spreadsheet-safe by `csv_text`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from course.core.files import atomic_write_json, atomic_write_text
from course.core.text import csv_text, safe_text
from course.forms import is_number
from course.pipeline.slips import SLIP_KINDS, Slip
from course.term.item_analysis import AnswerItem, ItemAnalysis, WrongValue

SCHEMA = "autograd-course/item-analysis"
VERSION = 1
MAX_GROUPS_SHOWN = 20  # wrong values listed an answer, most common first
MAX_STUDENTS_SHOWN = 50  # students named a wrong value
MAX_VALUE_TEXT = 200  # characters of a shown value (the student's text)

CSV_COLUMNS = (
    "question",
    "answer",
    "row",
    "students",
    "right",
    "blanks",
    "other_wrong",
    "share_right",
    "discrimination",
    "wrong_value",
    "count",
    "who",
    "rule",
    "slip",
    "slip_where",
    "slip_sentence",
    "numbers",
)


def item_analysis_path(out_dir: Path, assignment_name: str, suffix: str) -> Path:
    """item-analysis-<assignment>.json or .csv, beside grades-<assignment>.csv."""
    return out_dir / f"item-analysis-{assignment_name}{suffix}"


def _plain(value: Any) -> Any:
    """A value the JSON may hold as it is: a finite number, a list of them, True/False/None; else None (its text is
    in `shown`)."""
    if value is None or type(value) is bool or is_number(value):
        return value
    if type(value) is list and all(is_number(item) for item in value):
        return value
    return None


def _numbers_json(numbers: Mapping[str, Any]) -> dict[str, Any]:
    """A student's numbers as JSON holds them (the assignment's derive() makes them: numbers, or lists of them)."""
    return {
        str(key): value if _plain(value) is not None or value is None else repr(value) for key, value in numbers.items()
    }


def _wrong_json(wrong: WrongValue, numbers: bool) -> dict[str, Any]:
    slip = wrong.slip
    return {
        "value": _plain(wrong.value) if wrong.parsed else None,
        "shown": safe_text(wrong.shown, MAX_VALUE_TEXT, one_line=True),
        "count": wrong.count,
        "students": list(wrong.students[:MAX_STUDENTS_SHOWN]),
        "students_left_out": max(0, len(wrong.students) - MAX_STUDENTS_SHOWN),
        "numbers": _numbers_json(wrong.numbers) if numbers and wrong.numbers is not None else None,
        "rule": wrong.rule or None,
        "slip": None if slip is None else _slip_json(slip),
    }


def _slip_json(slip: Slip) -> dict[str, Any]:
    return {
        "kind": slip.kind,
        "words": SLIP_KINDS.get(slip.kind, slip.kind),
        "where": slip.where,
        "sentence": slip.sentence,
    }


def _slips_json(item: AnswerItem) -> list[dict[str, Any]]:
    """The slips found for an answer's wrong values, each with every student whose value it explains (with variants
    each student's value is a group of its own: here they are counted together), most students first."""
    by_slip: dict[tuple[str, str], tuple[Slip, list[str]]] = {}
    for wrong in item.wrong_values:
        if wrong.slip is not None:
            by_slip.setdefault((wrong.slip.kind, wrong.slip.where), (wrong.slip, []))[1].extend(wrong.students)
    ranked = sorted(by_slip.values(), key=lambda entry: (-len(entry[1]), entry[0].kind, entry[0].where))
    return [
        {
            **_slip_json(slip),
            "count": len(students),
            "students": sorted(students)[:MAX_STUDENTS_SHOWN],
            "students_left_out": max(0, len(students) - MAX_STUDENTS_SHOWN),
        }
        for slip, students in ranked[:MAX_GROUPS_SHOWN]
    ]


def _answer_json(item: AnswerItem, numbers: bool) -> dict[str, Any]:
    return {
        "question": item.question,
        "answer": item.answer,
        "students": item.students,
        "right": item.right,
        "blanks": item.blanks,
        "other_wrong": item.other_wrong,
        "wrong": item.students - item.right - item.blanks,
        "share_right": item.share_right,
        "discrimination": item.discrimination,
        "wrong_values": [_wrong_json(w, numbers) for w in item.wrong_values[:MAX_GROUPS_SHOWN]],
        "wrong_values_left_out": max(0, len(item.wrong_values) - MAX_GROUPS_SHOWN),
        "slips": _slips_json(item),
    }


def analysis_json(analysis: ItemAnalysis) -> dict[str, Any]:
    """The analysis as plain data in its one shape (docs/grading.md, "Item analysis")."""
    return {
        "schema": SCHEMA,
        "version": VERSION,
        "assignment": analysis.assignment,
        "students": analysis.students,
        "tolerance": analysis.tolerance,
        "variants": analysis.variants,
        "slips_searched": analysis.explained,
        "slips_not_searched": analysis.unexplained_left,
        "answers": [_answer_json(item, analysis.variants) for item in analysis.answers],
    }


def _number(value: float | None) -> str:
    return "" if value is None else f"{value:.4g}"


def _numbers_text(numbers: dict[str, Any] | None) -> str:
    return "" if not numbers else "; ".join(f"{key}={value!r}" for key, value in numbers.items())


def analysis_csv(data: dict[str, Any]) -> str:
    """The CSV of `analysis_json`'s data: per answer one `answer` row (its statistics), then one `wrong` row per
    wrong value listed and one `slip` row per slip found (its students, over all its wrong values); every cell
    through `csv_text` (spreadsheet-safe)."""
    rows: list[list[str]] = [list(CSV_COLUMNS)]
    for item in data["answers"]:
        head = [item["question"], item["answer"]]
        rows.append(
            [
                *head,
                "answer",
                str(item["students"]),
                str(item["right"]),
                str(item["blanks"]),
                str(item["other_wrong"]),
                _number(item["share_right"]),
                _number(item["discrimination"]),
                *[""] * 8,
            ]
        )
        for wrong in item["wrong_values"]:
            slip = wrong["slip"] or {}
            who = _who(wrong)
            rows.append(
                [
                    *head,
                    "wrong",
                    *[""] * 6,
                    wrong["shown"],
                    str(wrong["count"]),
                    who,
                    wrong["rule"] or "",
                    slip.get("kind", ""),
                    slip.get("where", ""),
                    slip.get("sentence", ""),
                    _numbers_text(wrong["numbers"]),
                ]
            )
        for slip in item["slips"]:
            rows.append(
                [
                    *head,
                    "slip",
                    *[""] * 7,
                    str(slip["count"]),
                    _who(slip),
                    "",
                    slip["kind"],
                    slip["where"],
                    slip["sentence"],
                    "",
                ]
            )
    return csv_text(rows)


def _who(entry: dict[str, Any]) -> str:
    who = ", ".join(entry["students"])
    return f"{who}, and {entry['students_left_out']} more" if entry["students_left_out"] else who


def write_item_analysis(out_dir: Path, analysis: ItemAnalysis) -> dict[str, Any]:
    """item-analysis-<assignment>.json and .csv into out_dir, each atomically; returns the JSON's data."""
    data = analysis_json(analysis)
    atomic_write_json(item_analysis_path(out_dir, analysis.assignment, ".json"), data)
    atomic_write_text(item_analysis_path(out_dir, analysis.assignment, ".csv"), analysis_csv(data))
    return data

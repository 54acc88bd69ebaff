"""The item analysis reads every student's feedback file back as input (course/term/item_analysis.py): a value's
text is parsed only as plain numbers, never evaluated; a student's text lands escaped in the instructor's page and
spreadsheet-safe in the CSV; and however many or long the values, the files stay bounded.

On the starting commit (3e77494) there is no item analysis at all, so these fail there for want of the files; the
guarantees are those of the new files and page section."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

from course.term.item_exports import MAX_GROUPS_SHOWN, MAX_STUDENTS_SHOWN, MAX_VALUE_TEXT
from course.term.recording import write_class_summary


def _write(out_dir: Path, student: str, shown: str) -> None:
    value = {
        "name": "slope_at_3",
        "your_value": shown,
        "torch_value": "6",
        "status": "value",
        "correct": False,
        "points": 1,
        "earned": 0,
        "explanation": "",
    }
    feedback = {
        "student_id": student,
        "assignment": "autograd",
        "status": "graded",
        "score": 0,
        "max_score": 1,
        "messages": [],
        "cell_errors": [],
        "questions": [
            {"id": "slopes", "title": "Slopes", "points": 1, "earned": 0, "values": [value], "misconceptions": []}
        ],
    }
    folder = out_dir / "feedback" / student / "autograd"
    folder.mkdir(parents=True)
    (folder / "feedback.json").write_text(json.dumps(feedback), encoding="utf-8")


def test_hostile_values_are_data_bounded_and_inert(tmp_path):
    out = tmp_path / "out"
    pwned = tmp_path / "pwned"
    code = f"__import__('pathlib').Path({str(pwned)!r}).touch()"
    _write(out, "mallory", code)
    _write(out, "trudy", code)
    for who in ("=HYPERLINK(1)", "@SUM(1)"):  # two each, so that they are listed before the 300 single values
        _write(out, who, '=HYPERLINK("http://evil","click")')
    for who in ("oscar", "olivia"):
        _write(out, who, "'<script>alert(1)</script>'")
    _write(out, "peggy", "[" + ", ".join(["1e308"] * 5000) + "]")  # past the list bound: its own text group
    for n in range(300):  # many distinct wrong values, one shared by 300 students
        _write(out, f"s{n:03d}", f"{n + 100}")
        _write(out, f"t{n:03d}", "-7")
    write_class_summary(out, "autograd")

    assert not pwned.exists()  # parsed, never evaluated
    data = json.loads((out / "item-analysis-autograd.json").read_text(encoding="utf-8"))
    item = data["answers"][0]
    assert item["students"] == 607
    assert len(item["wrong_values"]) == MAX_GROUPS_SHOWN
    assert item["wrong_values_left_out"] == 1 + 300 + 4 - MAX_GROUPS_SHOWN  # -7, 300 numbers, 4 texts
    top = item["wrong_values"][0]
    assert (top["value"], top["count"], len(top["students"])) == (-7, 300, MAX_STUDENTS_SHOWN)
    assert top["students_left_out"] == 300 - MAX_STUDENTS_SHOWN
    texts = {w["shown"]: w for w in item["wrong_values"] if w["value"] is None}
    assert texts[code]["count"] == 2  # the same text, grouped as text
    assert all(len(w["shown"]) <= MAX_VALUE_TEXT for w in item["wrong_values"])
    assert (out / "item-analysis-autograd.json").stat().st_size < 100_000

    rows = list(csv.DictReader(io.StringIO((out / "item-analysis-autograd.csv").read_text(encoding="utf-8"))))
    assert all(not cell.lstrip(' "').startswith(("=", "+", "@")) for row in rows for cell in row.values())
    assert any(row["wrong_value"].startswith("'=HYPERLINK") for row in rows)
    assert any(row["who"] == "'=HYPERLINK(1), '@SUM(1)" for row in rows)

    page = (out / "class-summary-autograd.html").read_text(encoding="utf-8")
    assert "id=item-analysis>" in page
    assert "<script>alert(1)" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page

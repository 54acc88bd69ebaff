"""Nothing lost or corrupted: the grader is SIGKILLed mid-batch, files stay whole, a re-run completes it."""

from __future__ import annotations

import csv
import json
import shutil
import signal
import subprocess
import sys
import time

import pytest

from course.core.config import load_config
from course.term import nbgrader_bridge
from tests.support.helpers import ROOT, copy_course

pytestmark = pytest.mark.slow

SAMPLES = ROOT / "tests" / "samples" / "submitted"


def feedback_files(out):
    return {p.relative_to(out): p.read_text() for p in sorted(out.glob("feedback/*/autograd/[!.]*"))}


def comparable(text: str, suffix: str):
    if suffix != ".json":
        return None  # the page embeds nothing run-specific beyond what the JSON holds
    data = json.loads(text)  # a half-written file would not parse
    for question in data["questions"]:
        for value in question["values"]:
            if value.pop("probes", None) is not None:
                # a function answer's detail names the points probed, drawn afresh by each run
                value.pop("detail", None)
    return data


def grade_cli(root, out, *extra):
    return [
        sys.executable,
        "-m",
        "course",
        "--course",
        str(root),
        "grade",
        "--out",
        str(out),
        "--quiet",
        "--gradebook",
        *extra,
    ]


def test_sigkill_mid_batch_then_rerun(tmp_path):
    root = tmp_path / "course"
    copy_course(root)
    shutil.copytree(SAMPLES, root / "submitted")
    out = root / "out"
    subprocess.run(grade_cli(root, out), check=True, capture_output=True)
    old = feedback_files(out)
    old_csv = (out / "grades-autograd.csv").read_text()

    # bob resubmits alice's notebook; grading starts again and is killed half-way
    shutil.copy(SAMPLES / "alice" / "autograd" / "autograd.ipynb", root / "submitted" / "bob" / "autograd")
    bob_json = out / "feedback" / "bob" / "autograd" / "feedback.json"
    bob_before = bob_json.read_text()
    process = subprocess.Popen(grade_cli(root, out), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and bob_json.read_text() == bob_before:
        time.sleep(0.05)  # kill right after bob, the second of six students, is re-graded
    process.send_signal(signal.SIGKILL)
    process.wait()

    middle = feedback_files(out)
    assert set(middle) == set(old)
    with (out / "grades-autograd.csv").open(newline="") as stream:
        rows = {row["student_id"]: row for row in csv.DictReader(stream)}
    assert set(rows) == {"alice", "bob", "carol", "dave", "erin", "frank"}

    subprocess.run(grade_cli(root, out), check=True, capture_output=True)
    new = feedback_files(out)
    for name, text in middle.items():
        state = comparable(text, name.suffix)
        if name.suffix == ".json":
            assert state in (comparable(old[name], ".json"), comparable(new[name], ".json")), name
        elif name.suffix == ".txt":  # timestamp.txt and submission_secret.txt for nbgrader's release_feedback
            assert text in (old[name], new[name]), name
        else:
            assert text.endswith("</html>")
    final = {row["student_id"]: row for row in csv.DictReader((out / "grades-autograd.csv").open(newline=""))}
    before = {row["student_id"]: row for row in csv.DictReader(old_csv.splitlines())}
    assert final["bob"]["score"] == "57"
    assert {k: v for k, v in final.items() if k != "bob"} == {k: v for k, v in before.items() if k != "bob"}
    db = load_config(root).gradebook_url
    for student, row in final.items():
        assert sum(nbgrader_bridge.grade_cell_scores(db, "autograd", student).values()) == float(row["score"])
    for leftover in out.rglob("*.tmp"):  # a killed write may leave its hidden temp file; never a result file
        assert leftover.name.startswith(".")

"""The class summary counts every student it can read and says which feedback it could not."""

from __future__ import annotations

import json

from course.summary import class_summary, read_class_feedback, render_summary_html


def test_an_unreadable_feedback_file_is_said_not_skipped(tmp_path):
    good = {"student_id": "alice", "assignment": "autograd", "status": "graded", "score": 3, "max_score": 3,
            "messages": [], "cell_errors": [], "questions": [
                {"id": "q", "title": "Q", "points": 3, "earned": 3, "values": [], "misconceptions": []}]}
    for student, text in (("alice", json.dumps(good)), ("bob", '{"half a file')):
        path = tmp_path / "feedback" / student / "autograd" / "feedback.json"
        path.parent.mkdir(parents=True)
        path.write_text(text)
    feedback, unreadable = read_class_feedback(tmp_path, "autograd")
    assert [f["student_id"] for f in feedback] == ["alice"]
    assert unreadable == ["bob"]
    summary = class_summary(feedback, unreadable=unreadable)
    assert summary["students"] == 1
    assert summary["unreadable"] == ["bob"]
    assert "could not be read and is not counted here: bob" in render_summary_html(summary, "autograd")

"""Every feedback folder has the timestamp.txt and submission_secret.txt that `nbgrader release_feedback` opens
beside each page (it stops the whole class at the first folder without them). The run of the real command over a
class with a hand-dropped submission and a student's emptied secret: test_term_nbgrader_commands.py."""

from __future__ import annotations

import os
import re
from datetime import datetime

from nbgrader.utils import parse_utc

from course.term.nbgrader_layout import SECRET, TIMESTAMP, write_feedback_files

STAMP = "2026-11-20 09:00:00.000000 UTC"


def submission(folder, **files):
    folder.mkdir(parents=True)
    notebook = folder / "autograd.ipynb"
    notebook.write_text("{}")
    os.utime(notebook, (1_790_000_000, 1_790_000_000))
    for name, text in files.items():
        (folder / name).write_text(text)
    return notebook


def test_a_collected_submissions_own_files_are_copied(tmp_path):
    notebook = submission(tmp_path / "submitted", **{TIMESTAMP: STAMP, SECRET: "f00d" * 32})
    feedback = tmp_path / "feedback"
    write_feedback_files(notebook, feedback)
    assert (feedback / TIMESTAMP).read_text() == STAMP
    assert (feedback / SECRET).read_text() == "f00d" * 32


def test_a_hand_dropped_submission_gets_its_files_time_and_a_secret_of_its_own_kept_on_regrading(tmp_path):
    notebook = submission(tmp_path / "submitted")
    feedback = tmp_path / "feedback"
    write_feedback_files(notebook, feedback)
    stamp, secret = (feedback / TIMESTAMP).read_text(), (feedback / SECRET).read_text()
    assert stamp == "2026-09-21 14:13:20.000000 UTC"  # the notebook file's modification time, as UTC
    assert parse_utc(stamp) == datetime(2026, 9, 21, 14, 13, 20)
    assert re.fullmatch(r"[0-9a-f]{128}", secret)  # as random as `nbgrader submit`'s
    assert (feedback / SECRET).stat().st_mode & 0o077 == 0
    write_feedback_files(notebook, feedback)  # graded again: the page goes to the same place in the exchange
    assert ((feedback / TIMESTAMP).read_text(), (feedback / SECRET).read_text()) == (stamp, secret)
    other = tmp_path / "other"
    write_feedback_files(submission(tmp_path / "submitted-2"), other)
    assert (other / SECRET).read_text() != secret


def test_files_nbgrader_could_not_use_are_replaced(tmp_path):
    # an empty secret fails release_feedback's hash, a timestamp it cannot parse fails generate_feedback
    notebook = submission(tmp_path / "submitted", **{TIMESTAMP: "yesterday-ish", SECRET: ""})
    feedback = tmp_path / "feedback"
    write_feedback_files(notebook, feedback)
    assert (feedback / TIMESTAMP).read_text() == "2026-09-21 14:13:20.000000 UTC"
    assert len((feedback / SECRET).read_text()) == 128
    huge = submission(tmp_path / "huge", **{TIMESTAMP: STAMP + " " * 5000, SECRET: "a" * 5000})
    write_feedback_files(huge, tmp_path / "feedback-2")
    assert (tmp_path / "feedback-2" / TIMESTAMP).read_text() == "2026-09-21 14:13:20.000000 UTC"
    assert len((tmp_path / "feedback-2" / SECRET).read_text()) == 128
    linked = submission(tmp_path / "linked")
    (linked.parent / SECRET).symlink_to(tmp_path / "feedback" / SECRET)  # never followed
    write_feedback_files(linked, tmp_path / "feedback-3")
    assert (tmp_path / "feedback-3" / SECRET).read_text() != (tmp_path / "feedback" / SECRET).read_text()


def test_feedback_rewritten_without_its_submission_keeps_the_folders_files(tmp_path):
    notebook = submission(tmp_path / "submitted", **{TIMESTAMP: STAMP, SECRET: "f00d" * 32})
    feedback = tmp_path / "feedback"
    write_feedback_files(notebook, feedback)
    write_feedback_files(None, feedback)  # (an autograder error found while recording rewrites the feedback)
    assert ((feedback / TIMESTAMP).read_text(), (feedback / SECRET).read_text()) == (STAMP, "f00d" * 32)
    fresh = tmp_path / "fresh"
    write_feedback_files(None, fresh)
    assert parse_utc((fresh / TIMESTAMP).read_text()) is not None
    assert len((fresh / SECRET).read_text()) == 128

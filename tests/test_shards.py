"""A class graded in three shards and merged equals the class graded in one run: every file the run writes in the
course (grades CSV, feedback folders, class summary, integrity report, nbgrader's autograded/ folders) and
nbgrader's gradebook, once times are normalised."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from course.cli import main
from course.core.errors import CourseError
from course.pipeline.discovery import SubmissionRef
from course.term.shards import SHARD_FORMAT, Shard, _shards, parse_shard, shard_of
from tests.support.helpers import ROOT, copy_course

SAMPLES = ROOT / "tests" / "samples" / "submitted"
ROSTER = "student_id\nalice\nbob\ncarol\ndave\nerin\nfrank\ngina\n"  # gina submits nothing
SHARDS = 3


def test_shards_are_deterministic_disjoint_and_cover_the_class():
    refs = [SubmissionRef(f"s{n}", Path(f"/x/s{n}")) for n in (5, 1, 4, 2, 3, 0, 6)]
    slices = [shard_of(refs, Shard(k, 3)) for k in (1, 2, 3)]
    assert [[ref.student_id for ref in one] for one in slices] == [["s0", "s3", "s6"], ["s1", "s4"], ["s2", "s5"]]
    assert slices == [shard_of(list(reversed(refs)), Shard(k, 3)) for k in (1, 2, 3)]
    assert parse_shard("2/3") == Shard(2, 3)
    for bad in ("0/3", "4/3", "3", "a/b", "1/0"):
        with pytest.raises(CourseError, match=r"--shard .*: expected K/N with 1 <= K <= N"):
            parse_shard(bad)


def _course(root: Path) -> Path:
    copy_course(root)
    shutil.copytree(SAMPLES, root / "submitted")
    (root / "roster.csv").write_text(ROSTER, encoding="utf-8")
    return root


RUN_SPECIFIC = {"seconds", "probes"}  # how long a run took; the points a function answer is called at, drawn per run


def _without_run_specifics(value: object) -> object:
    if isinstance(value, dict):
        return {key: _without_run_specifics(item) for key, item in value.items() if key not in RUN_SPECIFIC}
    if isinstance(value, list):
        return [_without_run_specifics(item) for item in value]
    return value


def _normalised(path: Path, root: Path) -> bytes:
    text = path.read_text(encoding="utf-8").replace(str(root), "<course>")
    if path.suffix in (".json", ".ipynb"):
        return json.dumps(_without_run_specifics(json.loads(text)), sort_keys=True).encode()
    return text.encode()


def _written(root: Path) -> dict[str, bytes]:
    """Every file a grading run wrote in the course, by path, normalised."""
    kept = ("grades-", "class-summary-", "integrity-", "course-totals", "feedback/", "autograded/")
    return {
        str(path.relative_to(root)): _normalised(path, root)
        for path in sorted(root.rglob("*"))
        if path.is_file() and str(path.relative_to(root)).startswith(kept)
    }


def _gradebook(root: Path) -> dict[str, object]:
    from nbgrader.api import Gradebook, MissingEntry

    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gradebook:
        students = sorted(student.id for student in gradebook.students)
        result: dict[str, object] = {"students": students}
        for student in students:
            try:
                submission = gradebook.find_submission("autograd", student)
            except MissingEntry:  # nothing submitted
                result[student] = None
                continue
            notebook = submission.notebooks[0]
            result[student] = {
                "timestamp": str(submission.timestamp),
                "score": submission.score,
                "late_penalty": submission.late_submission_penalty,
                "cells": sorted((grade.name, grade.auto_score) for grade in notebook.grades),
            }
    return result


@pytest.mark.slow
def test_three_shards_merged_equal_one_run_file_by_file_and_in_the_gradebook(tmp_path, capsys):
    whole, sharded = _course(tmp_path / "whole"), _course(tmp_path / "sharded")
    assert main(["--course", str(whole), "grade", "--roster", str(whole / "roster.csv"), "--jobs", "1", "--quiet"]) == 0
    outs = [tmp_path / f"shard-{k}" for k in range(1, SHARDS + 1)]
    for k, out in enumerate(outs, start=1):
        assert (
            main(
                [
                    "--course",
                    str(sharded),
                    "grade",
                    "--shard",
                    f"{k}/{SHARDS}",
                    "--out",
                    str(out),
                    "--jobs",
                    "1",
                    "--quiet",
                ]
            )
            == 0
        )
        assert json.loads((out / "shard-autograd.json").read_text())["shard"] == k
    assert not (sharded / "gradebook.db").exists()  # the shards leave the course's records alone
    capsys.readouterr()
    assert main(["--course", str(sharded), "merge", *map(str, outs[:2])]) == 1
    assert f"shard 3/{SHARDS} missing" in capsys.readouterr().err
    assert main(["--course", str(sharded), "merge", *map(str, outs), "--roster", str(sharded / "roster.csv")]) == 0
    assert "1 missing (on the roster, nothing submitted): gina" in capsys.readouterr().out

    ours, theirs = _written(sharded), _written(whole)
    assert sorted(ours) == sorted(theirs)
    assert len(theirs) > 20  # grades, summary, feedback and autograded/ of six students
    for name, content in theirs.items():
        if name.endswith("/submission_secret.txt"):  # made afresh for a submission that came without one (nbgrader's
            assert len(ours[name]) == len(content) == 128, name  # exchange file names hang on it): random, each run
            continue
        assert ours[name] == content, name
    assert _gradebook(sharded) == _gradebook(whole)


def test_a_shard_grades_into_a_folder_of_its_own_and_merge_needs_shards(course_root, tmp_path, capsys):
    assert main(["--course", str(course_root), "grade", "--shard", "1/2"]) == 1
    assert "--shard grades into a folder of its own, for `autograd-course merge`: give --out" in capsys.readouterr().err
    assert main(["--course", str(course_root), "grade", "--shard", "3/2", "--out", str(tmp_path / "out")]) == 1
    assert "--shard '3/2': expected K/N with 1 <= K <= N" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert main(["--course", str(course_root), "merge", str(tmp_path / "empty")]) == 1
    assert "empty: no shard-<assignment>.json here" in capsys.readouterr().err


def _shard_record(folder: Path, index: int, whole_class: str, students: list[str]) -> Path:
    folder.mkdir(parents=True)
    (folder / "shard-autograd.json").write_text(
        json.dumps(
            {
                "format": SHARD_FORMAT,
                "assignment": "autograd",
                "shard": index,
                "of": 2,
                "class": whole_class,
                "sources": ["submitted"],
                "graded": [],
                "refused": [{"student_id": s, "path": f"/x/{s}.ipynb", "problem": "not a notebook"} for s in students],
            }
        )
    )
    return folder


def test_merge_refuses_shards_cut_from_different_classes_or_holding_a_student_twice(tmp_path):
    """Shards that started on either side of a collect slice different classes: merge says so rather than
    recording a student in no shard as missing, or one in two shards twice."""
    one = _shard_record(tmp_path / "a", 1, "c1", ["ana"])
    other = _shard_record(tmp_path / "b", 2, "c2", ["ben"])
    with pytest.raises(CourseError, match="the shards saw different submissions"):
        _shards([one, other])
    again = _shard_record(tmp_path / "c", 2, "c1", ["ana"])
    with pytest.raises(CourseError, match="ana is in shard 1 and in shard 2"):
        _shards([one, again])
    assert [
        data["shard"] for _, data in _shards([one, _shard_record(tmp_path / "d", 2, "c1", ["ben"])])["autograd"]
    ] == [1, 2]

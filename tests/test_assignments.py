"""A course of several assignments: the engine knows no exercise, each assignment's content lives beside its
notebook, and a minimal assignment written at test time (no numbers, no chain tables, no misconceptions, no
exercises module) goes through release, grading and the Gradescope entry point."""

from __future__ import annotations

import csv
import json
import re
import shutil
import zipfile
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from course.core.config import load_config
from course.core.errors import ConfigError, CourseError, SourceNotebookError
from course.pipeline.assignment import load_assignment, load_course_assignment
from course.pipeline.content import ChainStep, load_content
from course.pipeline.variants import numbers_for
from tests.support.helpers import ROOT, SOURCE_NOTEBOOK, copy_course, fill

ENGINE = ROOT / "course"


def _meta(
    grade_id: str, *, solution: bool = False, grade: bool = False, locked: bool = True, points: int | None = None
) -> dict:
    meta = {"grade": grade, "grade_id": grade_id, "locked": locked, "schema_version": 3, "solution": solution}
    if points is not None:
        meta["points"] = points
    return {"nbgrader": meta}


def _code(source: str, meta: dict) -> dict:
    return {"cell_type": "code", "execution_count": None, "metadata": meta, "outputs": [], "source": source}


def _markdown(source: str, meta: dict | None = None) -> dict:
    return {"cell_type": "markdown", "metadata": meta or {}, "source": source}


def minimal_notebook() -> dict:
    """One question, two points, no `numbers` cell; the setup cell is the course's own (whatever the house
    convention for it is), so the fixture follows it. Its locked cells end in a newline, as a notebook written
    by a script does (nbgrader keeps it; the autograd notebook's cells have none)."""
    autograd = json.loads(SOURCE_NOTEBOOK.read_text())
    setup = next(c for c in autograd["cells"] if c["metadata"].get("nbgrader", {}).get("grade_id") == "setup")
    cells = [
        _markdown("# A minimal assignment\n\nOne slope, by hand.", _meta("intro")),
        _code("".join(setup["source"]).rstrip("\n") + "\n", _meta("setup")),
        _markdown("## The slope of `2x`\n\nWhat is d(2x)/dx?"),
        _code(
            "double_slope = ...\n### BEGIN SOLUTION\ndouble_slope = 2\n### END SOLUTION",
            _meta("answer_double", solution=True, locked=False),
        ),
        _code('check_form(double_slope="number")\n', _meta("form_double")),
        _code(
            'check_form(double_slope="number", quiet=True)\n'
            "### BEGIN HIDDEN TESTS\n"
            "x = torch.tensor(3.0, requires_grad=True)\n(2 * x).backward()\n"
            "marks = Marks()\n"
            'marks.value("double_slope", double_slope, x.grad, "The slope of c·x is the constant c.", 2)\n'
            "marks.total()\n### END HIDDEN TESTS\n",
            _meta("test_double", grade=True, points=2),
        ),
    ]
    for number, cell in enumerate(cells):
        cell["id"] = f"minimal-{number}"
    return {
        "cells": cells,
        "metadata": autograd["metadata"],
        "nbformat": 4,
        "nbformat_minor": 5,
    }


def add_minimal_assignment(root: Path) -> None:
    folder = root / "source" / "minimal"
    folder.mkdir(parents=True)
    (folder / "minimal.ipynb").write_text(json.dumps(minimal_notebook(), indent=1))
    config_path = root / "source" / "course.yaml"
    data = yaml.safe_load(config_path.read_text())
    data["assignments"].append({"name": "minimal", "notebook": "minimal.ipynb"})
    config_path.write_text(yaml.safe_dump(data, sort_keys=False))


# ----------------------------------------------------------------------------- the engine knows no exercise


def test_the_engine_names_no_answer_and_no_number_of_the_first_assignment(assignment):
    names = set(assignment.answer_names + assignment.function_names) | set(assignment.default_params)
    assert {"net_dL_dw", "cubic_grad", "w2"} <= names  # the list is real: the grep below can find something
    found = []
    for path in sorted(ENGINE.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        found += [f"{path.relative_to(ROOT)}: {name}" for name in names if re.search(rf"\b{re.escape(name)}\b", text)]
    assert found == []
    for path in sorted(ENGINE.rglob("*.py")):  # nor the chain tables' nodes or the article's answer, 46
        text = path.read_text(encoding="utf-8")
        assert "ReLU(h)" not in text, path
        assert "x³" not in text, path
        assert not re.search(r"\b46\b", text), path


def test_the_first_assignments_content_comes_from_its_exercises_module(assignment):
    content = assignment.content
    assert content.path == ROOT / "source" / "autograd" / "exercises.py"
    assert set(content.chains) == {"tiny_net", "w2_net"}
    assert {rule.id for rule in content.rules} >= {"forgot_times_x", "second_backward_overwrites"}
    assert content.derive is not None
    assert content.constraint_violations(assignment.default_params) == []


# ----------------------------------------------------------------------------- the exercises module, checked


def test_no_exercises_module_is_no_content(tmp_path):
    content = load_content(tmp_path / "exercises.py")
    assert content.chains == {}
    assert content.rules == ()
    assert content.derive is None
    assert content.groups_for({"b": 1, "a": 2}) == [["b"], ["a"]]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("raise RuntimeError('oops')", "fails to load: RuntimeError: oops"),
        ("CHAINS = {'q': ['not a step']}", "CHAINS must map question ids to lists of ChainStep"),
        ("MISCONCEPTIONS = ['not a rule']", "MISCONCEPTIONS must be a list of Rule"),
        ("NUMBER_GROUPS = [['x', 3]]", "NUMBER_GROUPS must be a list of lists of names"),
        ("derive = 3", "derive must be a function"),
    ],
)
def test_a_broken_exercises_module_names_its_file_and_fault(tmp_path, text, message):
    path = tmp_path / "exercises.py"
    path.write_text(text)
    with pytest.raises(SourceNotebookError, match=re.escape(message)) as caught:
        load_content(path)
    assert str(path) in str(caught.value)


def test_the_number_groups_lay_out_the_numbers_cell(tmp_path):
    path = tmp_path / "exercises.py"
    path.write_text(
        "from course.pipeline.content import ChainStep\nNUMBER_GROUPS = [['w', 'b'], ['gone']]\n"
        "CHAINS = {'q': [ChainStep('n', 'local', None, 'g', None)]}\n"
    )
    content = load_content(path)
    assert content.groups_for({"x": 1, "b": 2, "w": 3}) == [["w", "b"], ["x"]]
    assert content.chains == {"q": (ChainStep("n", "local", None, "g", None),)}


def test_variants_need_a_derive_and_derive_must_keep_its_own_constraints(course_root, monkeypatch):
    monkeypatch.setenv("AUTOGRAD_COURSE_SECRET", "a secret for the tests")
    config = replace(load_config(course_root), variants=True)
    exercises = course_root / "source" / "autograd" / "exercises.py"
    text = exercises.read_text()
    exercises.write_text(text.replace("def derive(", "def _unused_derive("))
    with pytest.raises(
        ConfigError, match=r"exercises\.py: variants: true, but assignment 'autograd' has numbers .* defines no derive"
    ):
        load_course_assignment(config, "autograd")  # refused at load, not at every submission's grading
    assignment = load_course_assignment(replace(config, variants=False), "autograd")
    with pytest.raises(ConfigError, match="defines no derive"):  # and numbers_for keeps its own guard
        numbers_for(config, assignment.content, "alice", assignment.default_params)
    exercises.write_text(text + "\n\ndef derive(rng):\n    return {'net_x': 0}\n")
    assignment = load_course_assignment(config, "autograd")
    with pytest.raises(ConfigError, match="derive\\(\\) must return the numbers cell's names"):
        numbers_for(config, assignment.content, "alice", assignment.default_params)
    exercises.write_text(text + "\n\n_real = derive\n\n\ndef derive(rng):\n    return {**_real(rng), 'net_x': 0}\n")
    assignment = load_course_assignment(config, "autograd")
    with pytest.raises(ConfigError, match="derive\\(\\) gave numbers its own constraints refuse: a zero input"):
        numbers_for(config, assignment.content, "alice", assignment.default_params)


def test_default_numbers_that_break_the_constraints_stop_at_loading(tmp_path):
    folder = tmp_path / "autograd"
    shutil.copytree(ROOT / "source" / "autograd", folder)
    notebook = json.loads((folder / "autograd.ipynb").read_text())
    numbers = next(c for c in notebook["cells"] if c["metadata"].get("nbgrader", {}).get("grade_id") == "numbers")
    numbers["source"] = "".join(numbers["source"]).replace('"net_b": -1', '"net_b": -9')
    (folder / "autograd.ipynb").write_text(json.dumps(notebook))
    with pytest.raises(SourceNotebookError, match="the numbers cell's P does not fit the exercises"):
        load_assignment(folder / "autograd.ipynb", "autograd")


def test_a_course_with_two_assignments_needs_the_assignment_for_loose_notebooks(course_root, tmp_path):
    from course.term.warm_start import assignments_in

    add_minimal_assignment(course_root)
    config = load_config(course_root)
    loose = tmp_path / "loose"
    loose.mkdir()
    (loose / "alice.ipynb").write_text("{}")
    with pytest.raises(CourseError, match=r"several assignments .* grade it with --assignment NAME"):
        assignments_in(config, [loose], None)
    assert [a.name for a in assignments_in(config, [loose], "minimal")] == ["minimal"]
    (course_root / "submitted" / "alice" / "minimal").mkdir(parents=True)
    (course_root / "submitted" / "alice" / "minimal" / "minimal.ipynb").write_text("{}")
    assert [a.name for a in assignments_in(config, [], None)] == ["minimal"]


def test_duplicate_assignment_names_are_refused(course_root):
    config_path = course_root / "source" / "course.yaml"
    data = yaml.safe_load(config_path.read_text())
    data["assignments"].append(dict(data["assignments"][0]))
    config_path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match="the assignment name 'autograd' is used twice"):
        load_config(course_root)


# ----------------------------------------------------------------------------- a minimal assignment, end to end


@pytest.mark.slow
def test_a_minimal_assignment_releases_grades_and_runs_on_gradescope(tmp_path):
    from course.authoring.release import release
    from course.platforms.bundle import build_bundle
    from course.platforms.gradescope import run_autograder
    from course.term.batch import grade_course

    root = copy_course(tmp_path / "course")
    add_minimal_assignment(root)
    config = load_config(root)
    report = release(config, "minimal")  # with the proof: solutions 2/2, the untouched release 0/2
    assert (report.solution_score, report.untouched_score, report.max_score) == (2, 0, 2)
    released = json.loads(config.release_notebook("minimal").read_text())
    assert "BEGIN SOLUTION" not in json.dumps(released)
    assert "HIDDEN" not in json.dumps(released)
    assert not (root / "release" / "minimal" / "exercises.py").exists()

    for student, answer in (("alice", "2"), ("bob", "3"), ("carol", None)):
        folder = root / "submitted" / student / "minimal"
        folder.mkdir(parents=True)
        notebook = fill(released, {"double_slope": answer}) if answer else released
        (folder / "minimal.ipynb").write_text(json.dumps(notebook))
    summaries = grade_course(config, [], root / "graded", record_gradebook=False, jobs=1)
    assert [s.assignment for s in summaries] == ["minimal"]  # autograd has no submissions here
    with (root / "graded" / "grades-minimal.csv").open() as stream:
        rows = {row["student_id"]: row for row in csv.DictReader(stream)}
    assert {s: (rows[s]["double"], rows[s]["score"], rows[s]["status"]) for s in rows} == {
        "alice": ("2", "2", "graded"),
        "bob": ("0", "0", "graded"),
        "carol": ("0", "0", "graded"),
    }
    feedback = json.loads((root / "graded" / "feedback" / "bob" / "minimal" / "feedback.json").read_text())
    value = feedback["questions"][0]["values"][0]
    assert (value["name"], value["your_value"], value["torch_value"]) == ("double_slope", "3", "2")
    assert "chain_table" not in feedback["questions"][0]
    assert feedback["questions"][0]["misconceptions"] == []
    assert (root / "graded" / "class-summary-minimal.html").exists()
    untouched = json.loads((root / "graded" / "feedback" / "carol" / "minimal" / "feedback.json").read_text())
    assert untouched["cell_errors"] == []  # the locked cells, newline and all, are the grader's own
    assert not (root / "graded" / "integrity-minimal.json").exists()  # nobody is said to have edited them
    with (root / "graded" / "course-totals.csv").open() as stream:
        totals = list(csv.reader(stream))
    assert totals[0] == ["student_id", "minimal", "total", "max_total"]
    assert ["alice", "2", "2", "2"] in totals

    for part in ("pyproject.toml", "README.md", "LICENSE", "course", "autograder"):  # the zip packs the package
        (shutil.copytree if (ROOT / part).is_dir() else shutil.copy)(ROOT / part, root / part)
    zip_path = build_bundle(config, tmp_path / "dist", "minimal")
    assert zip_path.name == "autograd-course-minimal-gradescope.zip"
    gradescope = tmp_path / "autograder"
    with zipfile.ZipFile(zip_path) as archive:
        archive.extractall(gradescope / "source")
    assert [
        a["name"] for a in yaml.safe_load((gradescope / "source" / "source" / "course.yaml").read_text())["assignments"]
    ] == ["minimal"]
    (gradescope / "submission").mkdir()
    shutil.copy(root / "submitted" / "alice" / "minimal" / "minimal.ipynb", gradescope / "submission")
    results = run_autograder(gradescope)
    assert results["score"] == 2
    assert next(test["name"] for test in results["tests"]).startswith("The slope of")

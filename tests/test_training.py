"""The second assignment, `training`: a hand solver against torch on the article's numbers and on variants,
the constraints of its exercises module, its misconception rules, its release and its grading end to end."""

from __future__ import annotations

import csv
import json
import random
from dataclasses import replace
from fractions import Fraction

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from course.authoring.release import find_leaks, release
from course.core.answers import VALUE, WRONG_FORM, Answer
from course.core.config import load_config
from course.pipeline import variants
from course.pipeline.assignment import load_course_assignment
from course.pipeline.judge import judge, matches
from course.pipeline.misconceptions import diagnose
from tests.support.helpers import ROOT, TRAINING_RELEASE, TRAINING_SOURCE, TRAINING_VALUES, fill, load, write

TRAINING = load_course_assignment(load_config(ROOT), "training")
CONTENT = TRAINING.content  # source/training/exercises.py
DEFAULTS = TRAINING.default_params  # the source notebook's numbers cell
SECRET = b"a course secret for the training tests"
LEAKY_SLOPE = 0.01
student_ids = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789._-", min_size=1, max_size=24)


def relu(h):
    return h if h > 0 else 0


def train(p: dict, zero_grad: bool) -> tuple[list, list, list]:
    """Three SGD steps by hand: the loss of each step, then w and b after its update."""
    x, w, b, t, lr = p["net_x"], p["net_w"], p["net_b"], p["net_target"], p["lr"]
    w_grad = b_grad = 0
    losses, ws, bs = [], [], []
    for _ in range(3):
        if zero_grad:
            w_grad = b_grad = 0
        h = w * x + b
        losses.append((relu(h) - t) ** 2)
        dl_dh = 2 * (h - t) if h > 0 else 0
        w_grad, b_grad = w_grad + dl_dh * x, b_grad + dl_dh
        w, b = w - lr * w_grad, b - lr * b_grad
        ws.append(w)
        bs.append(b)
    return losses, ws, bs


def batch_grads(p: dict, x: float, t: float) -> tuple[float, float]:
    h = p["net_w"] * x + p["net_b"]
    dl_dh = 2 * (h - t) if h > 0 else 0
    return dl_dh * x, dl_dh


def solve(p: dict) -> dict:
    """Every answer of the assignment worked out from the formulas with plain arithmetic (no torch)."""
    gx, d = p["graph_x"], p["detach_x"]
    h = p["net_w"] * p["closed_x"] + p["net_b"]
    a = LEAKY_SLOPE * h if h < 0 else h
    dl_da = 2 * (a - p["net_target"])
    dl_dh = dl_da * (LEAKY_SLOPE if h < 0 else 1)
    sgd, piled = train(p, zero_grad=True), train(p, zero_grad=False)
    a_w, a_b = batch_grads(p, p["net_x"], p["net_target"])
    b_w, b_b = batch_grads(p, p["batch_x"], p["batch_target"])
    return {
        "x_is_leaf": True,
        "y_is_leaf": False,
        "data_is_leaf": True,
        "x_grad_fn": None,
        "y_grad_fn": "PowBackward0",
        "doubled_grad_fn": "MulBackward0",
        "z_grad_fn": "AddBackward0",
        "square_saved": gx,
        "double_saved": 2,
        "double_keeps_input": False,
        "square_local_slope": 2 * gx,
        "kept_after_backward": False,
        "leaky_h": h,
        "leaky_a": a,
        "leaky_loss": (a - p["net_target"]) ** 2,
        "leaky_dL_da": dl_da,
        "leaky_dL_dh": dl_dh,
        "leaky_dL_dw": dl_dh * p["closed_x"],
        "leaky_dL_db": dl_dh,
        "detach_value": d * d,
        "detach_grad": d,
        "full_grad": 2 * d,
        "cube_detach_grad": 2 * d * d,
        "sgd_losses": sgd[0],
        "sgd_w": sgd[1],
        "sgd_b": sgd[2],
        "nozero_losses": piled[0],
        "nozero_w": piled[1],
        "nozero_b": piled[2],
        "batch_a_w_grad": a_w,
        "batch_b_w_grad": b_w,
        "accumulated_w_grad": a_w + b_w,
        "accumulated_b_grad": a_b + b_b,
        "summed_w_grad": a_w + b_w,
        "summed_b_grad": a_b + b_b,
        "averaged_w_grad": (a_w + b_w) / 2,
        "averaged_b_grad": (a_b + b_b) / 2,
    }


def derive(student_id: str) -> dict:
    return variants.derive(CONTENT, SECRET, student_id)


def judged(values: dict, params: dict):
    answers = {name: Answer(VALUE, value) for name, value in values.items()}
    return judge(TRAINING, answers, tolerance=1e-6, params=params)


def torch_values(params: dict) -> dict:
    """torch's reference for every answer, as the judge computes it from the hidden tests."""
    return {v.name: v.expected for q in judged(TRAINING_VALUES, params) for v in q.values}


def disagreements(found: dict, wanted: dict, tolerance: float) -> list[str]:
    """The names whose values differ (numbers beyond `tolerance`; booleans, None and names exactly)."""
    assert set(found) == set(wanted)
    return [name for name in wanted if not matches(found[name], wanted[name], tolerance)]


def test_the_hand_solver_gives_the_contract_on_the_articles_numbers():
    assert disagreements(solve(DEFAULTS), TRAINING_VALUES, 1e-12) == []
    assert CONTENT.constraint_violations(DEFAULTS) == []


def test_torch_agrees_with_the_hand_solver_on_the_articles_numbers():
    reference = torch_values(DEFAULTS)
    assert disagreements(reference, solve(DEFAULTS), 1e-12) == []
    assert [reference[k] for k in ("x_grad_fn", "y_grad_fn")] == [None, "PowBackward0"]


@settings(max_examples=150, deadline=None)
@given(student_ids)
def test_every_variant_keeps_the_exercises_what_they_are(student_id):
    params = derive(student_id)
    assert CONTENT.constraint_violations(params) == []
    assert derive(student_id) == params  # the grader recomputes the same numbers
    solved = solve(params)
    assert solved["leaky_h"] < 0  # a plain ReLU would be shut ...
    assert solved["leaky_dL_dw"] != 0  # ... and LeakyReLU is not
    losses = solved["sgd_losses"]
    assert losses[0] > losses[1] > losses[2] > 0  # zero_grad(): the loss falls at every step
    assert solved["nozero_losses"][2] > solved["nozero_losses"][1]  # without it: the strange loss curve
    assert solved["accumulated_w_grad"] not in (0, solved["batch_a_w_grad"], 2 * solved["batch_a_w_grad"])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(student_ids)
def test_torch_agrees_with_the_hand_solver_on_any_variant(student_id):
    params = derive(student_id)
    solved, reference = solve(params), torch_values(params)
    # the training loop is exact in float32: torch's values are the hand values bit for bit
    for name in ("sgd_losses", "sgd_w", "sgd_b", "nozero_losses", "nozero_w", "nozero_b"):
        assert reference[name] == solved[name], name
    assert disagreements(reference, solved, 1e-9) == []
    assert sum(q.earned for q in judged(solved, params)) == TRAINING.max_score


def test_the_variants_vary_every_exercise():
    drawn = [derive(f"student{n}") for n in range(60)]
    for key in DEFAULTS:
        assert len({p[key] for p in drawn}) > 1, f"{key} is the same for everyone"
    assert len({tuple(solve(p)["nozero_w"]) for p in drawn}) > 10


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"net_b": -7}, "ReLU is shut at the start"),
        ({"closed_x": 1}, "does not shut a plain ReLU"),
        ({"net_target": 0}, "zero target"),
        ({"lr": 0.25}, "does not fall at every step"),
        (
            {
                "net_x": 0.5,
                "net_w": 0.5,
                "net_b": 0.5,
                "net_target": 0.5,
                "closed_x": -3,
                "batch_x": 4,
                "batch_target": 1,
            },
            "no strange loss curve",
        ),
        ({"batch_x": -1}, "second mini-batch shuts the ReLU"),
        ({"batch_target": 2, "batch_x": 1}, "second mini-batch's gradient is zero"),
        ({"batch_x": 2, "batch_target": 2}, "same gradient"),
        ({"detach_x": 1.25}, "not a small integer or half"),
        ({"lr": 0.1}, "lr = 0.1 is not one of"),
        (
            {
                "net_x": 1.5,
                "net_w": 0.5,
                "net_b": -0.5,
                "net_target": 6,
                "closed_x": -3,
                "batch_x": 4,
                "batch_target": 1,
            },
            "not exact in float32",
        ),
        (
            {
                "net_x": 1.5,
                "net_w": 2,
                "net_b": -2,
                "net_target": 6,
                "lr": 0.25,
                "closed_x": -3,
                "batch_x": 4,
                "batch_target": 1,
            },
            "accumulated gradient is zero",
        ),
        ({"graph_x": "3"}, "not a small integer or half"),
    ],
)
def test_each_constraint_can_fail(change, problem):
    numbers = {**DEFAULTS, **change}
    problems = CONTENT.constraint_violations(numbers)
    assert any(problem in p for p in problems), problems


def test_missing_numbers_are_named_not_a_traceback():
    numbers = dict(DEFAULTS)
    del numbers["lr"]
    assert CONTENT.constraint_violations(numbers) == ["missing number 'lr'"]


def test_derive_needs_few_draws():
    rng = random.Random(7)
    assert all(CONTENT.constraint_violations(CONTENT.derive(rng)) == [] for _ in range(200))


def test_the_notebook_numbers_cell_is_laid_out_in_the_modules_groups():
    assert TRAINING.locked_sources["numbers"] == variants.numbers_source(DEFAULTS, CONTENT)


def test_the_training_loop_fraction_model_matches_the_hand_solver():
    from importlib import import_module

    module = import_module(CONTENT.derive.__module__)
    for params in (DEFAULTS, derive("alice"), derive("bob")):
        exact = module.training_run(params, zero_grad=False)
        assert [Fraction(v) for v in solve(params)["nozero_w"]] == exact["w"]


# ----------------------------------------------------------------------------- misconceptions

SLIPS = {
    "data_is_leaf": (False, "data_is_not_a_leaf"),
    "x_grad_fn": ("AccumulateGrad", "leaf_grad_fn_accumulate"),
    "y_grad_fn": ("Pow", "operation_name_y_grad_fn"),
    "doubled_grad_fn": ("MulBackward", "operation_name_doubled_grad_fn"),
    "square_saved": (9, "saved_the_output"),
    "leaky_dL_dh": (-4.08, "leaky_slope_forgotten"),
    "leaky_dL_db": (0, "leaky_treated_as_relu"),
    "leaky_dL_dw": (-0.0408, "leaky_times_x_missing"),
    "detach_grad": (6, "detach_ignored"),
    "cube_detach_grad": (27, "detach_ignored_cube"),
    "nozero_w": ([1.5, 1.875, 1.78125], "zero_grad_is_boilerplate"),
    "nozero_b": ([-1.75, -1.5625, -1.609375], "zero_grad_is_boilerplate_b"),
    "sgd_w": ([1.5, 0.375, -0.75], "zero_grad_ignored"),
    "accumulated_w_grad": (-4, "accumulation_overwrites"),
    "averaged_w_grad": (8, "average_not_halved"),
}


def diagnoses_of(values: dict, params: dict = DEFAULTS) -> set[str]:
    found = diagnose(judged(values, params), CONTENT.rules)
    return {d.id for ds in found.values() for d in ds}


@pytest.mark.parametrize("name", list(SLIPS))
def test_each_misconception_is_recognised(name):
    slip, rule = SLIPS[name]
    assert rule in diagnoses_of({**TRAINING_VALUES, name: slip})


def test_the_summed_gradient_rule_needs_a_right_accumulation():
    assert "accumulated_differs_from_summed" in diagnoses_of({**TRAINING_VALUES, "summed_w_grad": 12})
    assert "accumulated_differs_from_summed" not in diagnoses_of(
        {**TRAINING_VALUES, "summed_w_grad": 12, "accumulated_w_grad": 12}
    )


def test_right_answers_show_no_misconception_on_any_variant():
    for params in [DEFAULTS] + [derive(f"student{n}") for n in range(15)]:
        assert diagnoses_of(solve(params), params) == set()


def test_every_rule_names_an_answer_of_the_assignment():
    names = set(TRAINING.answer_names)
    assert {rule.value for rule in CONTENT.rules} <= names
    assert all(rule.message and rule.idea for rule in CONTENT.rules)
    for steps in CONTENT.chains.values():
        assert {s.gradient for s in steps} | {s.forward for s in steps if s.forward} <= names


def test_a_class_name_matches_only_exactly():
    slipped = {**TRAINING_VALUES, "z_grad_fn": "addbackward0", "x_grad_fn": "None"}
    leaves = next(q for q in judged(slipped, DEFAULTS) if q.id == "leaves")
    verdicts = {v.name: v.correct for v in leaves.values}
    assert verdicts == {**{name: True for name in verdicts}, "z_grad_fn": False, "x_grad_fn": False}


# ----------------------------------------------------------------------------- release and grading


def test_the_release_leaks_nothing_and_leaves_the_exercises_module_out():
    assert find_leaks(TRAINING_SOURCE, TRAINING_RELEASE) == []
    text = TRAINING_RELEASE.read_text()
    for secret in ("BEGIN SOLUTION", "BEGIN HIDDEN TESTS", "marks.value(", "sgd_w = [1.5", '"PowBackward0"'):
        assert secret not in text
    assert sorted(p.name for p in TRAINING_RELEASE.parent.iterdir()) == ["training.ipynb"]


def test_the_committed_release_is_in_sync_with_source(course_config):
    report = release(course_config, "training", verify=False)
    assert json.loads(report.release_notebook.read_text()) == json.loads(TRAINING_RELEASE.read_text()), (
        "release/training is out of date: run `autograd-course release` and commit release/"
    )


@pytest.mark.slow
def test_in_a_kernel_the_torch_cells_say_match_or_not_yet_never_the_answer():
    import nbformat
    from nbclient import NotebookClient

    slipped = {**TRAINING_VALUES, "leaky_dL_dh": -4.08, "y_is_leaf": True}
    node = nbformat.reads(json.dumps(_student_notebook(slipped)), as_version=4)
    NotebookClient(node, timeout=120, kernel_name="python3").execute()
    said = [
        "".join(o.get("text", "") for o in cell.outputs)
        for cell in node.cells
        if cell.cell_type == "code" and not cell.metadata.get("nbgrader") and "check_with_torch(" in cell.source
    ]
    assert len(said) == 4
    assert said[0].splitlines()[1] == "✗ y_is_leaf not yet: torch disagrees."
    assert said[0].splitlines()[-1] == "6 of 7 match torch. Find the slip on paper, then run this cell again."
    assert said[1].splitlines()[-1] == said[3].splitlines()[-1].replace("4 of 4", "5 of 5") == "5 of 5 match torch."
    assert "✗ leaky_dL_dh not yet: yours is lower than torch's." in said[2].splitlines()
    assert "-0.0408" not in said[2]  # torch's value for the slipped answer is nowhere
    assert all(line[:2] in ("✓ ", "✗ ") for text in said for line in text.splitlines()[:-1])


@pytest.mark.slow
def test_the_training_release_is_proven_with_nbgrader_autograde(course_config):
    report = release(course_config, "training")
    assert (report.solution_score, report.untouched_score, report.max_score) == (58, 0, 58)


def _student_notebook(values: dict, notebook: dict | None = None) -> dict:
    return fill(notebook or load(TRAINING_RELEASE), {name: repr(value) for name, value in values.items()})


@pytest.mark.slow
def test_grading_training_end_to_end(course_config, tmp_path):
    from course.term.batch import grade_batch

    slipped = {**TRAINING_VALUES, "leaky_dL_dh": -4.08, "nozero_w": TRAINING_VALUES["sgd_w"]}
    folder = tmp_path / "submissions"
    write(_student_notebook(TRAINING_VALUES), folder / "tina.ipynb")
    write(_student_notebook(slipped), folder / "sam.ipynb")
    write(load(TRAINING_RELEASE), folder / "uma.ipynb")
    out = tmp_path / "graded"
    grade_batch(course_config, [folder], out, assignment_name="training", jobs=1)
    rows = list(csv.reader((out / "grades-training.csv").read_text().splitlines()))
    scores = {row[0]: row[-3] for row in rows[1:]}
    assert scores == {"tina": "58", "sam": str(58 - 2 - 3), "uma": "0"}
    feedback = json.loads((out / "feedback" / "sam" / "training" / "feedback.json").read_text())
    questions = {q["id"]: q for q in feedback["questions"]}
    leaky = questions["leaky_relu"]
    assert [row["correct"] for row in leaky["chain_table"]["rows"]] == [True, False, True, True]
    assert leaky["chain_table"]["rows"][1]["torch_local_derivative"] == "0.01"
    assert [m["id"] for m in leaky["misconceptions"]] == ["leaky_slope_forgotten"]
    assert [m["id"] for m in questions["training_loop"]["misconceptions"]] == ["zero_grad_is_boilerplate"]
    assert (out / "feedback" / "sam" / "training" / "training.html").is_file()


@pytest.mark.slow
def test_a_personalised_training_notebook_grades_with_its_students_numbers(course_root, monkeypatch, tmp_path):
    from course.pipeline.discovery import SubmissionRef
    from course.pipeline.grading import grade_submission

    monkeypatch.setenv("AUTOGRAD_COURSE_SECRET", SECRET.decode())
    config = replace(load_config(course_root), variants=True)
    release(config, "training", verify=False, students=["alice"])
    notebook = load(config.personalised_notebook("alice", "training"))
    alice = derive("alice")
    assert f"lr = {variants.show(alice['lr'])}" in json.dumps(notebook, ensure_ascii=False)
    submitted = write(_student_notebook(solve(alice), notebook), tmp_path / "alice.ipynb")
    assignment = load_course_assignment(config, "training")
    graded = grade_submission(SubmissionRef("alice", submitted), assignment, config)
    assert graded.feedback.score == 58
    as_bob = grade_submission(SubmissionRef("bob", submitted), assignment, config)
    assert as_bob.feedback.score < 58


def test_a_grad_fn_object_instead_of_its_name_is_a_wrong_form_that_says_what_was_wanted():
    answers = {name: Answer(VALUE, value) for name, value in TRAINING_VALUES.items()}
    answers["y_grad_fn"] = Answer(WRONG_FORM, detail="PowBackward0")  # `y_grad_fn = y.grad_fn`: not plain data
    leaves = next(q for q in judge(TRAINING, answers, tolerance=1e-6, params=DEFAULTS) if q.id == "leaves")
    result = next(v for v in leaves.values if v.name == "y_grad_fn")
    assert result.earned == 0
    assert result.detail == (
        "wrong form: a value of type PowBackward0, where a class name in quotes (a string) or None was expected"
    )


def test_the_engine_names_no_answer_and_no_number_of_the_training_assignment():
    import re

    names = set(TRAINING.answer_names) | set(DEFAULTS)
    assert {"sgd_w", "leaky_dL_dh", "lr"} <= names  # the list is real: the grep below can find something
    found = []
    for path in sorted((ROOT / "course").rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        found += [f"{path.name}: {name}" for name in names if re.search(rf"\b{re.escape(name)}\b", text)]
        found += [f"{path.name}: {word}" for word in ("LeakyReLU", "Backward0") if word in text]
    assert found == []


@pytest.mark.slow
def test_the_training_zip_grades_on_gradescope_with_its_chain_table_and_notes(tmp_path):
    import shutil
    import zipfile

    import yaml

    from course.platforms.bundle import build_bundle
    from course.platforms.gradescope import run_autograder
    from tests.support.helpers import copy_course

    root = copy_course(tmp_path / "course")
    for part in ("pyproject.toml", "README.md", "LICENSE", "course", "autograder"):  # the zip packs the package
        (shutil.copytree if (ROOT / part).is_dir() else shutil.copy)(ROOT / part, root / part)
    zip_path = build_bundle(load_config(root), tmp_path / "dist", "training")
    gradescope = tmp_path / "autograder"
    with zipfile.ZipFile(zip_path) as archive:
        archive.extractall(gradescope / "source")
    course_yaml = yaml.safe_load((gradescope / "source" / "source" / "course.yaml").read_text())
    assert [a["name"] for a in course_yaml["assignments"]] == ["training"]
    assert (gradescope / "source" / "source" / "training" / "exercises.py").is_file()
    slipped = {**TRAINING_VALUES, "leaky_dL_dh": -4.08}
    write(_student_notebook(slipped), gradescope / "submission" / "training.ipynb")
    results = run_autograder(gradescope)
    assert results["score"] == 56
    leaky = next(test for test in results["tests"] if "LeakyReLU" in test["name"])
    output = leaky["output"].replace("\\", "")  # Markdown-escaped
    assert "| **→ a = LeakyReLU(h)** | -0.04 | ∂a/∂h = 1 if h &gt; 0, else 0.01 | -4.08 | ✗ |" in output  # chain table
    # the misconception note, verdicts only: its idea, not the diagnosis that says how the answer is off
    assert "**An idea to revisit:** LeakyReLU never shuts" in output
    assert "as if its slope were 1" not in output
    assert "torch" not in output.split("**Chain table")[0].splitlines()[0]  # verdicts only (feedback_reveals: auto)

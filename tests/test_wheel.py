"""What students install: the built wheel holds no answer key and no hidden test, and, installed in a fresh
venv, its `autograd-course check` works on the released notebook alone, in an empty folder."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from course.pipeline.assignment import (
    HIDDEN_BEGIN,
    HIDDEN_END,
    SOLUTION_BEGIN,
    SOLUTION_END,
    nbgrader_meta,
    region_lines,
)
from course.platforms.bundle import build_wheel
from tests.support.helpers import RELEASE_NOTEBOOK, ROOT, SOURCE_NOTEBOOK, load, write

pytestmark = pytest.mark.slow

# A marker at the end of a line (a real line end, or one escaped inside a JSON notebook) opens a region. The
# marker's bare name may appear: the grader's constants name it (and the README did), and they hold no answer.
REGION_OPENS = re.compile(r"BEGIN (SOLUTION|HIDDEN TESTS)[ \t]*(\r|\n|\\n|\\r)")


def source_cells() -> list[dict]:
    return [cell for cell in load(SOURCE_NOTEBOOK)["cells"] if cell["cell_type"] == "code"]


def text_of(cell: dict) -> str:
    return "".join(cell["source"])


def secret_lines() -> list[str]:
    """Every line of the answer key, and every hidden test line that says something of its own (a hint or
    an exercise's numbers, in quotes: `with warnings.catch_warnings():` or `marks.total()` are any code's)."""
    lines = []
    for cell in source_cells():
        lines += [line.strip() for line in region_lines(text_of(cell), SOLUTION_BEGIN, SOLUTION_END)]
        lines += [
            line.strip()
            for line in region_lines(text_of(cell), HIDDEN_BEGIN, HIDDEN_END)
            if len(line.strip()) >= 25 and '"' in line
        ]
    return sorted({line for line in lines if line})


def strings_in(data: object) -> list[str]:
    if isinstance(data, str):
        return [data]
    if isinstance(data, dict):
        return [text for value in data.values() for text in strings_in(value)]
    if isinstance(data, list):
        return [text for value in data for text in strings_in(value)]
    return []


def leaks(name: str, text: str, secrets: list[str]) -> list[str]:
    """What of the answer key or hidden tests `text` holds, as it is and, for JSON (a notebook), unescaped."""
    views = [text]
    try:
        views.append("".join(strings_in(json.loads(text))))
    except ValueError:
        pass
    found = {f"{name}: opens a region ({match.group(0)!r})" for view in views for match in REGION_OPENS.finditer(view)}
    return sorted(found) + [f"{name}: {line!r}" for line in secrets if any(line in view for view in views)]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    return build_wheel(ROOT, tmp_path_factory.mktemp("wheel"))


def test_the_search_finds_a_leak_where_there_is_one():
    secrets = secret_lines()
    assert "slope_at_3 = 6" in secrets
    assert "return 3 * x ** 2 - 2" in secrets
    assert any(line.startswith('marks.value("net_dL_dw"') for line in secrets)
    found = leaks("source", SOURCE_NOTEBOOK.read_text(encoding="utf-8"), secrets)
    assert any("opens a region" in leak for leak in found)
    assert [leak for leak in found if "opens a region" not in leak] == [f"source: {line!r}" for line in secrets]


def test_the_wheel_holds_no_answer_key_and_no_hidden_test(wheel):
    secrets = secret_lines()
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        assert "course/notebook.py" in names  # the module the students' notebooks import is shipped
        assert "course/forms.py" in names  # and the one it imports
        found = []
        for name in names:
            found += leaks(name, archive.read(name).decode("utf-8", "replace"), secrets)
    assert found == []
    assert not [name for name in names if name.endswith(".ipynb") or name.startswith(("source/", "release/"))]


def test_the_wheel_holds_the_service_database_revisions(wheel, tmp_path):
    """The service's migrations are read by path (alembic's ScriptDirectory): every revision file is in the wheel,
    and the package unpacked from it alone finds the head."""
    versions = ROOT / "course" / "platforms" / "service" / "migrations" / "versions"
    revisions = sorted(path.name for path in versions.glob("*.py"))
    assert "0001_first_schema.py" in revisions
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        assert {f"course/platforms/service/migrations/versions/{name}" for name in revisions} <= names
        archive.extractall(tmp_path / "unpacked")
    found = subprocess.run(
        [
            sys.executable,
            "-c",
            "from course.platforms.service import migrations; print(migrations.head(), migrations.__file__)",
        ],
        env={**os.environ, "PYTHONPATH": str(tmp_path / "unpacked")},
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
    ).stdout.split()
    assert found[0] == max(name[:4] for name in revisions if name[0].isdigit())
    assert found[1].startswith(str(tmp_path / "unpacked"))


def test_the_wheel_holds_the_feedback_schema(wheel, tmp_path):
    """course/schemas/feedback.schema.json is package data: the package unpacked from the wheel alone reads it."""
    with zipfile.ZipFile(wheel) as archive:
        assert "course/schemas/feedback.schema.json" in archive.namelist()
        archive.extractall(tmp_path / "unpacked")
    found = subprocess.run(
        [
            sys.executable,
            "-c",
            "import json; "
            "from course.pipeline.feedback_model import schema_text; import course; "
            "print(json.loads(schema_text())['title'], course.__file__)",
        ],
        env={**os.environ, "PYTHONPATH": str(tmp_path / "unpacked")},
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
    ).stdout.split()
    assert found[0] == "feedback.json"
    assert found[1].startswith(str(tmp_path / "unpacked"))


def answered_release(change=None) -> dict:
    """The released notebook with every answer cell replaced by the source's solution region (a student who
    got everything right), optionally changed per answer cell by `change(grade_id, text)`."""
    solutions = {
        nbgrader_meta(cell)["grade_id"]: "\n".join(region_lines(text_of(cell), SOLUTION_BEGIN, SOLUTION_END))
        for cell in source_cells()
        if nbgrader_meta(cell).get("solution")
    }
    notebook = load(RELEASE_NOTEBOOK)
    for cell in notebook["cells"]:
        grade_id = nbgrader_meta(cell).get("grade_id")
        if grade_id in solutions:
            text = solutions[grade_id] + "\n"
            cell["source"] = change(grade_id, text) if change else text
    return notebook


# Every requirement the installed wheel declares (its extras aside), met by what its Python imports.
DEPENDENCIES_MET = """
from importlib.metadata import requires, version
from packaging.requirements import Requirement
unmet = [str(r) for r in map(Requirement, requires("autograd-course"))
         if not r.marker and not r.specifier.contains(version(r.name), prereleases=True)]
assert requires("autograd-course") and not unmet, f"unmet: {unmet}"
"""


@pytest.fixture(scope="module")
def student_venv(tmp_path_factory, wheel) -> Path:
    """A fresh venv holding the wheel, installed by pip as `pip install autograd-course` would install it.

    Its dependencies (the same pins) are the test environment's, put on the venv's path by a .pth file,
    rather than installed a second time (a minute and a half of unpacking torch and Jupyter). Only the
    directory is added: the test environment's own .pth files, among them its editable checkout of the
    package, are not run, so `course` can only come from the wheel (the first test checks it). Installing
    the wheel's dependencies from nothing is done elsewhere: tests/test_student_install.py installs the wheel alone
    into a new venv, and the Gradescope bundle test runs the real setup.sh."""
    venv = tmp_path_factory.mktemp("student") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    dependencies = next(
        path for path in map(Path, sys.path) if path.name == "site-packages" and (path / "torch").is_dir()
    )
    (next((venv / "lib").glob("python3.*")) / "site-packages" / "test-dependencies.pth").write_text(
        f"{dependencies}\n", encoding="utf-8"
    )
    env = {key: value for key, value in os.environ.items() if key not in ("VIRTUAL_ENV", "PYTHONPATH")}
    done = subprocess.run(
        [str(venv / "bin" / "pip"), "install", "--quiet", "--no-deps", str(wheel)],
        env=env,
        timeout=1200,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    # The wheel's declared dependencies are the ones it is given: a pin the wheel names wrong fails here.
    checked = subprocess.run(
        [str(venv / "bin" / "python"), "-c", DEPENDENCIES_MET],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    return venv


def check_alone(venv: Path, folder: Path, notebook: dict) -> subprocess.CompletedProcess:
    """Only the notebook in an empty folder, checked there by the venv's own autograd-course."""
    folder.mkdir()
    write(notebook, folder / "autograd.ipynb")
    assert [p.name for p in folder.iterdir()] == ["autograd.ipynb"]
    env = {key: value for key, value in os.environ.items() if key not in ("VIRTUAL_ENV", "PYTHONPATH")}
    return subprocess.run(
        [str(venv / "bin" / "autograd-course"), "check", "autograd.ipynb"],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def test_the_installed_package_is_the_wheel_and_ships_no_source(student_venv, tmp_path):
    where = subprocess.run(
        [str(student_venv / "bin" / "python"), "-c", "import course; print(course.__file__)"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert where.startswith(str(student_venv))
    assert not any(student_venv.rglob("autograd.ipynb"))


def test_installed_check_on_a_complete_notebook_is_ready(student_venv, tmp_path):
    done = check_alone(student_venv, tmp_path / "student", answered_release())
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert sum(line.startswith("[ok  ] ") for line in lines) == 11
    assert "Ready to submit: every answer has the right form." in lines
    assert lines[-1].startswith("sandbox: ")


def test_installed_check_names_the_missing_and_the_wrong_form_value(student_venv, tmp_path):
    def change(grade_id: str, text: str) -> str:
        if grade_id == "answer_tiny_net":
            return text.replace("net_h = 5\n", "")
        if grade_id == "answer_graph_walk":
            return text.replace("dz_dx = 12", 'dz_dx = "12"')
        return text

    done = check_alone(student_venv, tmp_path / "student", answered_release(change))
    assert done.returncode == 1, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    todo = [line for line in lines if line.startswith("[todo]")]
    assert [line.split(":")[0] for line in todo] == [
        "[todo] 2. Walking a computation graph",
        "[todo] 3. A whole (tiny) network by hand",
    ]
    assert "net_h missing (not defined)" in todo[1]
    assert "dz_dx not a number (it is a string: '12')" in todo[0]
    assert sum(line.startswith("[ok  ] ") for line in lines) == 9
    assert "Not ready yet" in done.stdout

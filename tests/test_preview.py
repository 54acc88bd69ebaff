"""`autograd-course preview` (course/authoring/preview.py): what a student sees, written offline before anything is
released. One preview of the `backprop` assignment, run once for the module through the command line in a private
copy of the course (with a real nbgrader gradebook in it), is read by every slow test; the refusals are fast (they
stop before nbgrader, the sandbox or any file)."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import re
from pathlib import Path

import pytest

from course.authoring.kit import load_exercises
from course.cli import main
from course.core.config import load_config
from course.pipeline.assignment import load_course_assignment
from course.term import nbgrader_bridge
from tests.support.helpers import ROOT, copy_course, course_assignments

ASSIGNMENT = "backprop"
WRONG = "gate_df_dx"
MODES = ("torch_values", "verdicts")
KINDS = ("solution", "untouched", "wrong")


def _points(answer: str) -> float:
    exercises = load_exercises(ROOT / "source" / ASSIGNMENT / "exercises.py")
    return next(ask.points for exercise in exercises for ask in exercise.answers if ask.name == answer)


def _snapshot(root: Path) -> dict[str, str]:
    """Every file of the course but the preview's folder: its path and a digest of its bytes."""
    return {
        path.relative_to(root).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(root.rglob("*"))
        if path.is_file() and "preview" not in path.relative_to(root).parts
    }


def _text(page: Path) -> str:
    """A page's words: tags and styles removed, entities read, space made single."""
    import html

    text = re.sub(r"(?s)<style>.*?</style>", " ", page.read_text(encoding="utf-8"))
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", text)).split())


def _run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def previewed(tmp_path_factory):
    """The course copied, its gradebook made by nbgrader (as `release` records the cells), then one preview at the
    default place: (course root, the preview folder, exit status, what it printed, the course's files before)."""
    root = copy_course(tmp_path_factory.mktemp("preview") / "course")
    config = load_config(root)
    nbgrader_bridge.record_assignment(root, config.gradebook_url, ASSIGNMENT)
    before = _snapshot(root)
    assert "gradebook.db" in before  # (the check below can see a change to it)
    code, printed, said = _run(["--course", str(root), "preview", "--assignment", ASSIGNMENT, "--wrong", f"{WRONG}=4"])
    return root, root / "preview" / ASSIGNMENT, code, printed + said, before


@pytest.mark.slow
def test_the_preview_writes_every_page_and_names_each(previewed):
    root, folder, code, printed, _ = previewed
    assert code == 0, printed
    pages = [folder / "feedback" / f"{kind}-{mode}.html" for kind in KINDS for mode in MODES]
    notebooks = [folder / "notebooks" / f"{kind}.ipynb" for kind in KINDS]
    student = [folder / "student" / f"{ASSIGNMENT}.ipynb", folder / "student" / f"{ASSIGNMENT}.html"]
    for path in [folder / "index.html", *pages, *notebooks, *student]:
        assert path.is_file(), path
        assert path.stat().st_size > 0
    for path in [*pages, *student]:
        assert str(path) in printed, path
    assert folder.stat().st_mode & 0o777 == 0o700  # the answer key's notebook and pages are the instructor's
    assert all(path.stat().st_mode & 0o777 == 0o600 for path in [*pages, *notebooks])
    # ...and so is everything else a preview writes, the folders it makes included, whatever the umask (issue 50)
    for path in (root / "preview", *(root / "preview").rglob("*")):
        assert path.stat().st_mode & 0o777 == (0o700 if path.is_dir() else 0o600), path
    # the student's notebook is the real release: the cells of the committed release/, made from source/ now
    released = json.loads((root / "release" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb").read_text(encoding="utf-8"))
    shown = json.loads(student[0].read_text(encoding="utf-8"))
    assert ["".join(cell["source"]) for cell in shown["cells"]] == [
        "".join(cell["source"]) for cell in released["cells"]
    ]
    page = _text(student[1])
    assert "x = −2, y = 5 and z = −4" in page
    assert "gate_df_dx = ..." in page
    assert "BEGIN SOLUTION" not in page
    assert "HIDDEN" not in page
    assert "-4.0" not in page
    assert "<script" not in student[1].read_text(encoding="utf-8")  # offline: no script, no network
    index = (folder / "index.html").read_text(encoding="utf-8")
    assert all(f'href="feedback/{page.name}"' in index for page in pages)


@pytest.mark.slow
def test_the_answer_key_earns_full_marks_the_release_none_and_the_wrong_answer_loses_its_points(previewed):
    _, folder, _, printed, _ = previewed
    lost = _points(WRONG)
    assert lost == 2
    assert "the answer key: 27/27" in printed
    assert "the untouched release: 0/27" in printed
    assert f"a wrong answer ({WRONG} = 4): {27 - lost:g}/27; lost: {WRONG} -{lost:g}" in printed
    for mode in MODES:  # the page says the same score in both modes
        for kind, score in zip(KINDS, (27, 0, 27 - lost), strict=True):
            assert f"{score:g} / 27" in _text(folder / "feedback" / f"{kind}-{mode}.html")
        wrong_page = _text(folder / "feedback" / f"wrong-{mode}.html")
        # the named answer's row: the author's value, a cross and none of its points
        assert re.search(rf"{WRONG} 4 (-4 )?✗ 0/{lost:g}", wrong_page), wrong_page[:2000]
        assert len(re.findall(r"✗ 0/", wrong_page)) == 1  # no other answer lost anything


@pytest.mark.slow
def test_verdicts_pages_show_no_torch_value(previewed):
    _, folder, _, _, _ = previewed
    # torch's values of the answer key that no untouched notebook holds: the neuron's slope, micrograd's g and dg/da
    torch_values = ("0.19661193324148188", "24.70408163265306", "138.83381924198252")
    shown = _text(folder / "feedback" / "untouched-torch_values.html")
    assert all(value in shown for value in torch_values), shown[:2000]  # (so their absence below means something)
    for kind in KINDS:
        page = folder / "feedback" / f"{kind}-verdicts.html"
        assert "<th>torch</th>" not in page.read_text(encoding="utf-8")
        if kind == "untouched":
            assert not any(value in _text(page) for value in torch_values)
    assert "<th>torch</th>" in (folder / "feedback" / "wrong-torch_values.html").read_text(encoding="utf-8")


@pytest.mark.slow
def test_the_preview_leaves_the_course_as_it_was(previewed):
    """release/, the gradebook, source/ and every other file of the course: the same bytes, and none added."""
    root, _, _, _, before = previewed
    assert _snapshot(root) == before


@pytest.mark.slow
def test_a_folder_no_preview_wrote_is_refused_and_kept(previewed, tmp_path):
    root, _, _, _, _ = previewed
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep me")
    code, _, said = _run(["--course", str(root), "preview", "--assignment", ASSIGNMENT, "--out", str(foreign)])
    assert code == 1
    assert "holds files that no preview wrote" in said
    assert (foreign / "notes.txt").read_text() == "keep me"


@pytest.mark.parametrize(
    ("wrong", "said"),
    [
        ("gate_dfdx=4", "has no answer 'gate_dfdx' (did you mean gate_df_dx?); its answers, by exercise: gate: gate_q"),
        ("gate_df_dx=four", "'four' is not a number; write it as Python writes one: gate_df_dx=-4"),
        ("gate_df_dx", "write ANSWER=VALUE"),
        ("neuron_df_dx=[1, 2, 3]", "is a list of 2 numbers, and '[1, 2, 3]' is not a list of 2 numbers"),
        ("gate_f=None", "'None' is not a number"),
    ],
)
def test_a_bad_wrong_answer_is_refused_with_a_sentence_before_anything_runs(tmp_path, wrong, said):
    out = tmp_path / "preview"
    code, printed, err = _run(
        ["--course", str(ROOT), "preview", "--assignment", ASSIGNMENT, "--wrong", wrong, "--out", str(out)]
    )
    assert code == 1
    assert printed == ""
    assert err.startswith("autograd-course preview: --wrong "), err
    assert said in err, err
    assert str(ROOT / "source" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb") in err  # the file
    assert err.count("\n") == 1  # one sentence, no traceback
    assert not out.exists()


@pytest.mark.parametrize(
    ("inside", "said"),
    [
        ("release", "lies in release/"),
        ("source/backprop", "lies in source/"),
        (".", "a preview is replaced whole at every run"),
    ],
)
def test_a_preview_never_goes_into_the_course_own_folders(tmp_path, inside, said):
    code, _, err = _run(["--course", str(ROOT), "preview", "--assignment", ASSIGNMENT, "--out", str(ROOT / inside)])
    assert code == 1
    assert said in err, err


def test_with_several_assignments_one_must_be_named(any_course):
    code, _, err = _run(["--course", str(any_course), "preview"])
    assert code == 1
    assert f"name one with --assignment ({', '.join(course_assignments(any_course))})" in err, err


def test_the_wrong_notebook_is_the_answer_key_with_each_named_value_appended_to_its_answer_cell():
    from course.authoring.preview import parse_wrong, wrong_notebook
    from course.pipeline.selftest import from_source

    assignment = load_course_assignment(load_config(ROOT), ASSIGNMENT)
    solution = from_source(assignment, solved=True)
    named = parse_wrong(assignment, ["gate_df_dx=4", "neuron_df_dx=[0.4, -0.6]"])
    wrong = wrong_notebook(solution, named)
    changed = {
        cell["metadata"]["nbgrader"]["grade_id"]: "".join(cell["source"])
        for before, cell in zip(solution["cells"], wrong["cells"], strict=True)
        if before != cell
    }
    assert sorted(changed) == ["answer_gate", "answer_neuron"]
    assert changed["answer_gate"].endswith("\ngate_df_dx = 4  # preview: wrong")
    assert changed["answer_neuron"].endswith("\nneuron_df_dx = [0.4, -0.6]  # preview: wrong")
    assert "gate_df_dx = -4.0\n" in changed["answer_gate"]  # the key's line is kept: the last assignment wins


def test_what_release_would_refuse_and_a_wrong_value_that_is_right_are_warnings():
    """The preview's exit status: 1 with a sentence for each, when the answer key loses points, the untouched release
    earns some, or a value named with --wrong earns its points."""
    from course.authoring.preview import _Graded, _warnings, parse_wrong

    assignment = load_course_assignment(load_config(ROOT), ASSIGNMENT)

    def graded(key: str, score: float, lost: tuple[tuple[str, float], ...] = ()) -> _Graded:
        pages = {mode: Path(f"{key}-{mode}.html") for mode in MODES}
        return _Graded(
            key, key, Path(f"{key}.ipynb"), pages, score, 27, "graded", lost, dict.fromkeys(MODES, score), None
        )  # type: ignore[arg-type]

    named = parse_wrong(assignment, ["gate_df_dx=4"])
    sound = [graded("solution", 27), graded("untouched", 0), graded("wrong", 25, (("gate_df_dx", 2),))]
    assert _warnings(assignment, sound, named) == []
    said = _warnings(
        assignment, [graded("solution", 26, (("mg_g", 1),)), graded("untouched", 1), graded("wrong", 27)], named
    )
    assert said[0].startswith("the answer key earns 26 of 27, so release would refuse it (lost: mg_g -1)")
    assert said[1].startswith("the untouched release earns 1")
    assert said[2].startswith("gate_df_dx: the value named with --wrong earns full points")

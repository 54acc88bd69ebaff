"""Per-student variants reach the right student and only them, and a notebook with numbers that are not the
student's own is named as such wherever it is looked at (issue 40, items 2 and 4).

- Through nbgrader's exchange: after `release --students`, a real `nbgrader release_assignment` and a real
  `fetch_assignment`, no student holds any classmate's numbers (the personalised copies are outside release/).
- A notebook with the default numbers, or personalised for someone else, is named in `check` (which has no
  course files and no secret), first in the feedback, and in the integrity report; it is graded with the
  student's own numbers (the fixed policy, docs/grading.md), the same score every time.
- The untouched release and a notebook with unanswered answers are named as such by `check` and the feedback.
"""

from __future__ import annotations

import copy
import json
import stat
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from course.authoring.release import personalise
from course.cli import main
from course.core.config import load_config
from course.pipeline.assignment import load_course_assignment
from course.pipeline.selfcheck import check_notebook
from course.pipeline.variants import derive
from tests.support.adversarial import fast_config, grade
from tests.support.helpers import (
    CORRECT_CODE,
    NBGRADER,
    RELEASE_NOTEBOOK,
    ROOT,
    copy_course,
    load,
    nbgrader,
    submitted_notebook,
    write,
)

SECRET = "a course secret for the whose-numbers tests"  # noqa: S105 - the tests' own
STUDENTS = ("alice", "bob", "carol")
AUTOGRAD = load_course_assignment(load_config(ROOT), "autograd")


def numbers_of(student: str) -> dict:
    return derive(AUTOGRAD.content, SECRET.encode(), student, set(AUTOGRAD.default_params))


def variants_config(monkeypatch):
    monkeypatch.setenv("AUTOGRAD_COURSE_SECRET", SECRET)
    return replace(fast_config(), variants=True)


def personalised_for(student: str) -> dict:
    """The release as `release --students` makes it for `student`: their numbers, their id on the numbers cell."""
    return personalise(load(RELEASE_NOTEBOOK), numbers_of(student), student, AUTOGRAD.content)


def numbers_cell(notebook: dict) -> dict:
    return next(c for c in notebook["cells"] if c["metadata"].get("nbgrader", {}).get("grade_id") == "numbers")


def whose_numbers(notebook: dict) -> set[str]:
    """The students whose own numbers a notebook shows (their id on its numbers cell, or their numbers in it)."""
    cell = numbers_cell(notebook)
    source = "".join(cell["source"])
    marked = cell["metadata"].get("autograd_course", {}).get("student_id")
    return {s for s in STUDENTS if s == marked or source == "".join(numbers_cell(personalised_for(s))["source"])}


def notebooks_in(folder: Path) -> dict[str, set[str]]:
    """Every file under `folder` -> whose numbers it shows (a file that is no notebook shows none)."""
    found = {}
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        try:
            found[path.relative_to(folder).as_posix()] = whose_numbers(json.loads(path.read_text()))
        except (ValueError, StopIteration, KeyError, AttributeError):
            found[path.relative_to(folder).as_posix()] = set()
    return found


def variants_course(tmp_path: Path) -> Path:
    """A copy of the course with variants on, its nbgrader_config.py and a roster of STUDENTS."""
    root = tmp_path / "course"
    copy_course(root)
    (root / "nbgrader_config.py").write_text((ROOT / "nbgrader_config.py").read_text())
    settings = yaml.safe_load((root / "source" / "course.yaml").read_text())
    (root / "source" / "course.yaml").write_text(yaml.safe_dump({**settings, "variants": True}))
    (root / "roster.csv").write_text("student_id\n" + "\n".join(STUDENTS) + "\n")
    return root


@pytest.mark.slow
def test_nbgrader_exchange_hands_no_student_a_classmates_numbers(tmp_path, monkeypatch, capsys):
    root, exchange = variants_course(tmp_path), tmp_path / "exchange"
    # What an earlier version left: copies inside the release nbgrader hands to everyone.
    write(personalised_for("carol"), root / "release" / "autograd" / "students" / "carol" / "autograd.ipynb")
    monkeypatch.setenv("AUTOGRAD_COURSE_SECRET", SECRET)
    assert (
        main(
            [
                "--course",
                str(root),
                "release",
                "--assignment",
                "autograd",
                "--no-verify",
                "--students",
                str(root / "roster.csv"),
            ]
        )
        == 0
    )
    exchange.mkdir()
    nbgrader(root, "release_assignment", "autograd", exchange=exchange)
    outbound = exchange / "autograd-course" / "outbound" / "autograd"
    assert notebooks_in(outbound) == {"autograd.ipynb": set()}  # the default notebook, nobody's own numbers
    for student in STUDENTS:
        home = tmp_path / "homes" / student
        home.mkdir(parents=True)
        nbgrader(home, "fetch_assignment", "autograd", f"--Exchange.cache={home / 'cache'}", exchange=exchange)
        assert notebooks_in(home / "autograd") == {"autograd.ipynb": set()}, student
    out = capsys.readouterr().out
    assert f"removed {root / 'release' / 'autograd' / 'students'}" in out
    assert not (root / "release" / "autograd" / "students").exists()
    config = load_config(root)
    for student in STUDENTS:  # each student's own copy, readable by all as the release is, outside release/
        mine = config.personalised_notebook(student, "autograd")
        assert stat.S_IMODE(mine.stat().st_mode) == 0o644
        assert whose_numbers(json.loads(mine.read_text())) == {student}  # the checks above can fail


@pytest.mark.slow
def test_upgrading_says_how_to_take_classmates_copies_out_of_the_exchange(tmp_path, monkeypatch, capsys):
    """A course that ran `nbgrader release_assignment` with an earlier version has every classmate's copy in the
    exchange's outbound folder, which nbgrader replaces only with --force: `release` says to run it, and it works."""
    root, exchange = variants_course(tmp_path), tmp_path / "exchange"
    for student in STUDENTS:  # what an earlier version wrote, and nbgrader then sent out
        write(personalised_for(student), root / "release" / "autograd" / "students" / student / "autograd.ipynb")
    exchange.mkdir()
    nbgrader(root, "release_assignment", "autograd", exchange=exchange)
    outbound = exchange / "autograd-course" / "outbound" / "autograd"
    assert set().union(*notebooks_in(outbound).values()) == set(STUDENTS)  # the leak, as it was
    monkeypatch.setenv("AUTOGRAD_COURSE_SECRET", SECRET)
    assert (
        main(
            [
                "--course",
                str(root),
                "release",
                "--assignment",
                "autograd",
                "--no-verify",
                "--students",
                str(root / "roster.csv"),
            ]
        )
        == 0
    )
    assert (
        "run `nbgrader release_assignment autograd --force` now to replace its outbound copy" in capsys.readouterr().out
    )
    # Without --force nbgrader keeps the outbound folder as it is (and says it exists); with it, it is replaced.
    command = [NBGRADER, "release_assignment", "autograd", "--course=autograd-course", f"--Exchange.root={exchange}"]
    refused = subprocess.run(command, cwd=root, capture_output=True, text=True, timeout=600, check=False)
    assert refused.returncode != 0
    assert "--force" in refused.stdout + refused.stderr
    assert set().union(*notebooks_in(outbound).values()) == set(STUDENTS)
    nbgrader(root, "release_assignment", "autograd", "--force", exchange=exchange)
    assert notebooks_in(outbound) == {"autograd.ipynb": set()}
    assert not (outbound / "students").exists()


UNMARKED_LINE = (
    "numbers: this notebook's numbers cell carries no student's id (the default numbers, the same in "
    "everyone's copy, carry none; a copy of your own whose id was lost carries none either), and without "
    "the course's release the check cannot tell which they are: if your course gives each student their "
    "own numbers, make sure these are the numbers of the notebook released for you before you answer"
)


def test_check_names_default_numbers_and_someone_elses(tmp_path, monkeypatch):
    """`check` has no secret: the numbers cell says whose numbers these are, and only the course's release says
    whether numbers without an id are the default ones."""
    monkeypatch.chdir(tmp_path)
    default = write(submitted_notebook(), tmp_path / "default" / "autograd.ipynb")
    lines = check_notebook(default).lines()  # no course files: no release to compare with
    assert UNMARKED_LINE in lines
    assert not any("the default ones" in line for line in lines)
    with_variants = check_notebook(default, replace(load_config(ROOT), variants=True))  # no secret needed
    assert not with_variants.ready  # every answer right for the default numbers, and still not ready
    assert any(
        line.startswith("numbers: the default ones, the same in everyone's copy, not yours")
        for line in with_variants.lines()
    )
    bobs = copy.deepcopy(submitted_notebook())
    numbers_cell(bobs)["metadata"]["autograd_course"] = {"student_id": "bob"}
    report = check_notebook(write(bobs, tmp_path / "bobs" / "autograd.ipynb"))
    assert any(
        line.startswith("numbers: personalised for 'bob': if that is not your id, this is not your notebook")
        for line in report.lines()
    )


def test_check_says_default_numbers_only_of_the_releases_own(tmp_path, monkeypatch):
    """A student's own copy whose numbers cell lost its id is not "the default numbers": in a course folder the
    check compares with the course's release (as grading does), and without one it says only what it sees."""
    monkeypatch.chdir(tmp_path)
    alices = personalised_for("alice")
    del numbers_cell(alices)["metadata"]["autograd_course"]
    path = write(alices, tmp_path / "autograd" / "autograd.ipynb")
    in_course = check_notebook(path, replace(load_config(ROOT), variants=True))  # release/autograd/ of the course
    assert numbers_cell(alices)["source"] != numbers_cell(load(RELEASE_NOTEBOOK))["source"]  # alice's, not default
    assert not in_course.default_numbers
    assert not in_course.not_own_numbers
    assert not any(line.startswith("numbers:") for line in in_course.lines())
    alone = check_notebook(path).lines()  # no course files
    assert UNMARKED_LINE in alone
    assert not any("the default ones" in line for line in alone)
    # A course folder without its release cannot compare either: the same plain sentence, not a verdict.
    bare = tmp_path / "bare"
    (bare / "source").mkdir(parents=True)
    (bare / "source" / "course.yaml").write_text((ROOT / "source" / "course.yaml").read_text())
    no_release = check_notebook(path, replace(load_config(bare), variants=True))
    assert UNMARKED_LINE in no_release.lines()
    assert not no_release.not_own_numbers


def test_check_names_the_untouched_release_and_unanswered_answers(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    untouched = write(load(RELEASE_NOTEBOOK), tmp_path / "autograd" / "autograd.ipynb")  # where fetch puts it
    lines = check_notebook(untouched).lines()
    assert lines[0] == (
        "This is the notebook as released: nothing in it is answered yet. If you worked in another "
        "copy, check and submit that one: nbgrader's fetch puts it in autograd/autograd.ipynb in the "
        "folder you fetched in, and `nbgrader submit` sends that folder."
    )
    partly = write(submitted_notebook({**CORRECT_CODE, "net_h": "..."}), tmp_path / "part.ipynb")
    lines = check_notebook(partly).lines()
    assert not any(line.startswith("This is the notebook as released") for line in lines)
    assert any(line.startswith("unanswered: 1 of ") and "(net_h)" in line for line in lines)


@pytest.mark.slow
def test_a_default_number_notebook_is_named_and_graded_with_the_students_own_numbers(tmp_path, monkeypatch):
    config = variants_config(monkeypatch)
    right_for_defaults = submitted_notebook()  # every answer right for the default numbers
    first, _ = grade(right_for_defaults, tmp_path, config, student="alice", assignment=AUTOGRAD)
    again, _ = grade(right_for_defaults, tmp_path / "again", config, student="alice", assignment=AUTOGRAD)
    messages = first.feedback.messages
    assert messages[0].startswith(
        "This notebook has the default numbers, the same in everyone's copy, not yours: "
        "every notebook of this course is graded with its student's own numbers, so it "
        "was graded with 'alice''s"
    )
    assert first.feedback.score == again.feedback.score < AUTOGRAD.max_score  # the policy: alice's numbers
    alice = numbers_of("alice")
    net_h = next(v for q in first.feedback.to_json()["questions"] for v in q["values"] if v["name"] == "net_h")
    assert net_h["torch_value"] == str(alice["net_w"] * alice["net_x"] + alice["net_b"])
    assert (
        "submitted a notebook with the default numbers, the release everyone was given, not one personalised "
        "for 'alice' (graded with 'alice''s own numbers)"
    ) in first.integrity
    # Alice's own notebook carries no such sentence (the check above can fail), nor does it with her id taken off:
    # its numbers are hers, not the default ones.
    unmarked = personalised_for("alice")
    del numbers_cell(unmarked)["metadata"]["autograd_course"]
    for notebook in (personalised_for("alice"), unmarked):
        own, _ = grade(notebook, tmp_path / "own", config, student="alice", assignment=AUTOGRAD)
        assert not any("numbers" in m for m in own.feedback.messages[:1])
        assert not own.integrity


@pytest.mark.slow
def test_someone_elses_notebook_is_named_first(tmp_path, monkeypatch):
    config = variants_config(monkeypatch)
    graded, _ = grade(personalised_for("bob"), tmp_path, config, student="alice", assignment=AUTOGRAD)
    assert graded.feedback.messages[0].startswith(
        "This notebook was personalised for 'bob' but is graded as 'alice', so it was graded with 'alice''s numbers"
    )
    assert graded.integrity[0] == "submitted a notebook personalised for 'bob' (graded with 'alice''s numbers)"


@pytest.mark.slow
def test_the_untouched_release_is_named_in_the_feedback(tmp_path):
    graded, _ = grade(load(RELEASE_NOTEBOOK), tmp_path, fast_config())
    assert graded.feedback.score == 0
    assert graded.feedback.messages[0].startswith(
        "Nothing in this notebook is answered: every answer is still as released. If you worked in another copy, "
        "submit that one: nbgrader's fetch puts it in autograd/autograd.ipynb in the folder you fetched in."
    )
    answered, _ = grade(submitted_notebook({**CORRECT_CODE, "net_h": "..."}), tmp_path / "one", fast_config())
    assert not any(m.startswith("Nothing in this notebook is answered") for m in answered.feedback.messages)


@pytest.mark.slow
def test_the_service_gives_each_student_their_own_and_names_an_untouched_default_notebook(tmp_path, monkeypatch):
    """The service's page: "Download your notebook" is the student's own (never a classmate's); after an upload of
    the untouched default notebook its attempt page says both things first."""
    import html

    from tests.support.service import Server, course_for_service, notebook_bytes, request

    monkeypatch.setenv("AUTOGRAD_COURSE_SECRET", SECRET)  # the server inherits it
    root = course_for_service(tmp_path / "course")
    settings = yaml.safe_load((root / "source" / "course.yaml").read_text())
    (root / "source" / "course.yaml").write_text(yaml.safe_dump({**settings, "variants": True}))
    assert main(["--course", str(root), "release", "--assignment", "autograd", "--no-verify"]) == 0  # the template
    server = Server(root)
    server.issue_tokens(["alice", "bob"])
    server.start()
    try:
        for student in ("alice", "bob"):
            own = request(f"{server.url}/s/{server.tokens[student]}/notebook")
            assert own.status == 200, own.text
            assert whose_numbers(json.loads(own.text)) == {student}
        reply = server.submit("alice", notebook_bytes(load(RELEASE_NOTEBOOK)))
        assert reply.status in (200, 201, 202), reply.text
        done = server.wait_graded("alice", reply.json["id"])
        page = request(server.url + done["feedback_url"], token=server.tokens["alice"]).text
    finally:
        server.stop()
    assert done["score"] == 0
    first = page.index(html.escape("This notebook has the default numbers, the same in everyone's copy, not yours"))
    assert first < page.index(html.escape("Nothing in this notebook is answered")) < page.index("<section")


def test_a_student_whose_id_reads_like_a_state_is_still_named():
    """Whose numbers is the notebook's id, never a word of ours: a student named `default` is a student."""
    from course.pipeline.selfcheck import CheckReport

    lines = CheckReport((), None, (), personalised_for="default", variants=True).lines()
    assert any(line.startswith("numbers: personalised for 'default'") for line in lines)
    assert CheckReport((), None, (), personalised_for="default", variants=True).ready

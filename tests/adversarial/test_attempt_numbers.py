"""The numbers an attempt was issued travel with it (issue 50, items 1 and 2), attacked.

A real term with `variants: true` and `service.fresh_numbers_per_attempt: true`: alice downloads the notebook of
her first attempt and gets it wrong, downloads the notebook of her second (numbers of its own) and answers it from
those numbers, one answer with the loss's factor 2 dropped; bob hands in one attempt with his own numbers. The dashboard
records both counted attempts into the term (nbgrader's gradebook, submitted/), and `grade --roster` then grades
the term again in the course root.

- The regrade gives alice the score the service recorded (at e2fd90b: graded with her first attempt's numbers,
  silently much less).
- The item analysis, the service's and the course root's, shows her counted attempt 2 with attempt 2's numbers,
  and so finds its slip (at e2fd90b: attempt 1's numbers, no slip).
- A label beside a submission that the recording did not write (edited, copied to another student, made by a
  student) is refused with a sentence naming the file: that student is an autograder error, never graded with
  numbers their attempt was not issued.
"""

from __future__ import annotations

import csv
import json
import logging
import shutil
from pathlib import Path

import pytest
import yaml

from course.cli import main
from tests.support.helpers import CONTRACT_FUNCTIONS, fill, solve, wrong_literal
from tests.support.recording_form import message, post_form, recording_page

pytestmark = pytest.mark.slow

# Fixed: the slip below is found at these numbers (a test secret, never a course's).
SECRET = "a course secret for the attempt-numbers tests"  # noqa: S105
LABEL = "autograd-numbers.json"


def _answered(notebook: dict, answers: dict) -> bytes:
    code = {name: repr(value) for name, value in answers.items()} | CONTRACT_FUNCTIONS["cubic"]
    return json.dumps(fill(notebook, code)).encode("utf-8")


def _rows(root: Path) -> dict[str, dict[str, str]]:
    with (root / "grades-autograd.csv").open(encoding="utf-8", newline="") as stream:
        return {row["student_id"]: row for row in csv.DictReader(stream)}


def _alices_net_dL_dw(analysis: dict) -> dict:
    """alice's wrong value of net_dL_dw in an item analysis's JSON."""
    answer = next(a for a in analysis["answers"] if a["answer"] == "net_dL_dw")
    return next(w for w in answer["wrong_values"] if w["students"] == ["alice"])


@pytest.fixture(scope="module")
def term(tmp_path_factory):
    from course.authoring.release import release
    from course.core.config import load_config
    from course.pipeline.assignment import load_course_assignment
    from course.platforms.service.policy import attempt_numbers
    from tests.support.service import Server, course_for_service, request

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("AUTOGRAD_COURSE_SECRET", SECRET)
        root = course_for_service(tmp_path_factory.mktemp("attempt-numbers") / "course", fresh_numbers_per_attempt=True)
        path = root / "source" / "course.yaml"
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        path.write_text(yaml.safe_dump({**data, "variants": True}, sort_keys=False), encoding="utf-8")
        config = load_config(root)
        release(config, verify=False)  # the template every personalised notebook starts from
        assignment = load_course_assignment(config, "autograd")
        content, defaults = assignment.content, assignment.default_params
        numbers = {
            (student, n): attempt_numbers(config, config.service, content, student, n, defaults)
            for student, n in (("alice", 1), ("alice", 2), ("bob", 1))
        }
        assert numbers["alice", 2] != numbers["alice", 1]
        server = Server(root, jobs=1)
        server.issue_tokens(["alice", "bob"])
        server.start()
        try:
            link = f"{server.url}/s/{server.tokens['alice']}/notebook"
            first = json.loads(request(link).body)
            wrong = {name: wrong_literal(value) for name, value in solve(numbers["alice", 1]).items()}
            assert server.submit("alice", _answered(first, wrong)).json["score"] < 10  # the cubic's function right
            second = json.loads(request(link).body)  # attempt 2's notebook: numbers of its own
            right = solve(numbers["alice", 2])
            # The loss's factor 2 dropped, worked out by hand: (h - t)·x, half the right value.
            slipped = {**right, "net_dL_dw": right["net_dL_dw"] / 2}
            reply = server.submit("alice", _answered(second, slipped))
            assert reply.status == 200, reply.text
            served = reply.json["score"]
            assert 50 <= served < 57, reply.text  # only the slipped answer lost
            bobs = json.loads(request(f"{server.url}/s/{server.tokens['bob']}/notebook").body)
            assert server.submit("bob", _answered(bobs, solve(numbers["bob", 1]))).json["score"] == 57
            analysis = request(f"{server.url}/i/{server.instructor}/api/item-analysis").json
            _, _, _, plan = recording_page(server)
            done = post_form(server, plan=plan)
            assert "Recorded 2 students (alice, bob)" in message(done), message(done)
        finally:
            server.stop()
        recorded = json.loads((root / "item-analysis-autograd.json").read_text(encoding="utf-8"))
        yield {"root": root, "numbers": numbers, "served": served, "service": analysis, "recorded": recorded}


def test_a_regrade_from_the_course_root_gives_the_score_the_service_recorded(term, monkeypatch):
    root = term["root"]
    assert float(_rows(root)["alice"]["score"]) == pytest.approx(term["served"])  # the recording's row
    monkeypatch.setenv("AUTOGRAD_COURSE_SECRET", SECRET)
    assert main(["--course", str(root), "grade", "--roster", str(root / "roster.csv"), "--jobs", "1", "--quiet"]) == 0
    rows = _rows(root)
    assert (rows["alice"]["status"], float(rows["alice"]["score"])) == ("graded", pytest.approx(term["served"]))
    assert float(rows["bob"]["score"]) == 57
    assert (root / "submitted" / "alice" / "autograd" / LABEL).is_file()  # recorded with her attempt
    assert not (root / "submitted" / "bob" / "autograd" / LABEL).exists()  # his own numbers: nothing to say
    regraded = json.loads((root / "item-analysis-autograd.json").read_text(encoding="utf-8"))
    assert _alices_net_dL_dw(regraded)["numbers"] == term["numbers"]["alice", 2]


@pytest.mark.parametrize("where", ["service", "recorded"])
def test_the_item_analysis_shows_a_counted_attempt_2_with_its_own_numbers_and_finds_its_slip(term, where):
    """The service's item analysis (the dashboard's JSON) and the course root's, written as the counted attempts
    were recorded into the term."""
    wrong = _alices_net_dL_dw(term[where])
    assert wrong["numbers"] == term["numbers"]["alice", 2]
    assert wrong["rule"] is None  # no author's rule names it: the slip search's to explain
    assert wrong["slip"] is not None, wrong
    assert wrong["slip"]["kind"] == "dropped_local"


@pytest.mark.parametrize(
    "tamper",
    ["another attempt", "copied to bob", "not ours"],
)
def test_a_label_the_recording_did_not_write_is_refused_with_a_reason(term, tmp_path, monkeypatch, caplog, tamper):
    root = tmp_path / "course"
    shutil.copytree(term["root"], root, symlinks=True)
    label = root / "submitted" / "alice" / "autograd" / LABEL
    who = "alice"
    if tamper == "another attempt":  # the attempt changed, its HMAC kept
        data = json.loads(label.read_text(encoding="utf-8"))
        label.write_text(json.dumps({**data, "attempt": 3}), encoding="utf-8")
    elif tamper == "copied to bob":  # alice's very label beside bob's notebook
        who = "bob"
        shutil.copy(label, root / "submitted" / "bob" / "autograd" / LABEL)
    else:  # what a student could put in their exchange submission
        label.write_text('{"attempt": 2}', encoding="utf-8")
    monkeypatch.setenv("AUTOGRAD_COURSE_SECRET", SECRET)
    with caplog.at_level(logging.ERROR):
        main(["--course", str(root), "grade", "--roster", str(root / "roster.csv"), "--jobs", "1", "--quiet"])
    rows = _rows(root)
    assert rows[who]["status"] == "autograder_error", rows[who]
    said = caplog.text
    assert f"submitted/{who}/autograd/{LABEL}" in said, said
    assert f"{who!r} was not graded, rather than graded with numbers that may not be the ones" in said, said
    other = "bob" if who == "alice" else "alice"
    assert rows[other]["status"] == "graded"  # one student's label never stops another's grade


def test_an_attempt_recorded_without_its_numbers_is_offered_again_and_then_regrades_alike(term, tmp_path, monkeypatch):
    """What a recording of e2fd90b left (the attempt in submitted/, no label): the preview offers the student again,
    saying why, and recording writes the label; the regrade then gives the service's score."""
    from course.core.config import load_config
    from course.pipeline.assignment import load_course_assignment
    from course.platforms.service.results import counted_attempts, student_records
    from course.platforms.service.store import Store
    from course.term import term_record

    root = tmp_path / "course"
    shutil.copytree(term["root"], root, symlinks=True)
    label = root / "submitted" / "alice" / "autograd" / LABEL
    label.unlink()
    monkeypatch.setenv("AUTOGRAD_COURSE_SECRET", SECRET)
    config = load_config(root)
    settings, assignment = config.assignment("autograd"), load_course_assignment(config, "autograd")
    store = Store(f"sqlite:///{root / 'service.db'}", "autograd")
    records = student_records(config.service, ["alice", "bob"], store.attempts_of())
    changes = term_record.plan(config, settings, counted_attempts(records, config.service))
    assert [(c.student_id, c.why) for c in changes] == [
        (
            "alice",
            "attempt 2 is recorded, but not the numbers it was issued "
            "(a recording of an earlier version left them out)",
        )
    ]
    cells = {q.id: q.test_cell_id for q in assignment.questions}
    with term_record.exclusive(config, "autograd"):
        term_record.record(
            config, settings, cells, assignment.max_score, changes, store.notebook_of, replace_term=False
        )
    assert label.is_file()
    assert term_record.plan(config, settings, counted_attempts(records, config.service)) == []
    assert main(["--course", str(root), "grade", "--roster", str(root / "roster.csv"), "--jobs", "1", "--quiet"]) == 0
    assert float(_rows(root)["alice"]["score"]) == pytest.approx(term["served"])

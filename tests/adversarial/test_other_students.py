"""Family 6: one hostile notebook must never hurt anyone else.

One test per class of attack, each in both grading modes (a cold sandbox per submission and the warm
pool's forked children): text that breaks whoever writes it, unbounded work in the grader, processes and
kernel objects that outlive a student, memory outside the memory limit, forged grader messages, Markdown
injection into Gradescope's results, and what feedback reveals.
"""

from __future__ import annotations

import csv
import json
import resource
import shutil
import time
from dataclasses import replace
from pathlib import Path

import pytest

from course.core.config import Limits
from course.pipeline.handwork import computed_answers, parse_cells
from course.pipeline.render import render_html
from course.pipeline.submission import Cell
from course.platforms.gradescope import to_results
from course.term.batch import grade_batch
from tests.support.adversarial import ISOLATION, fast_config, needs_bwrap, per_question, with_cell
from tests.support.helpers import ROOT, write

# alone under pytest-xdist (tests/conftest.py): its runs give way, and another worker's load would starve them
pytestmark = [pytest.mark.slow, pytest.mark.alone]

# Code that finds the answer channel from inside: every writable pipe other than stdout and stderr.
CHANNEL_FDS = (
    "import os, fcntl\n"
    "channels = [fd for fd in range(3, 64) if os.path.exists(f'/proc/self/fd/{fd}') and "
    "os.readlink(f'/proc/self/fd/{fd}').startswith('pipe:') and "
    "fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE == os.O_WRONLY]\n"
)


# ----------------------------------------------------------------------------- 1. text that breaks the writer

HOSTILE_TEXT = "\\ud800\\x1b[2J\\x1b]0;owned\\x07 \\u202e"  # a lone surrogate, terminal escapes, a bidi override

TEXT_ATTACKS = {
    "exception message": f"raise ValueError('{HOSTILE_TEXT}')",
    "type name of an answer": (
        f"class Weird(float): pass\nWeird.__qualname__ = '{HOSTILE_TEXT}'\nnet_dL_dw = Weird(12)"
    ),
    "error raised by a function answer": f"def cubic_derivative(x):\n    raise ValueError('{HOSTILE_TEXT}')",
    "string answer": f"cubic_grad = '{HOSTILE_TEXT}'",
}


@pytest.mark.parametrize("jobs", [0, 2], ids=["cold", "warm"])
def test_text_that_cannot_be_written_stays_one_students_problem(jobs, tmp_path, course_root):
    """Every text that crosses from the sandbox is valid Unicode, visible and bounded by the time it is written;
    the whole class is graded and every file is complete."""
    folder = tmp_path / "in"
    for index, code in enumerate(TEXT_ATTACKS.values()):
        write(with_cell(code), folder / f"hostile{index}.ipynb")
    shutil.copy(
        ROOT / "tests" / "samples" / "submitted" / "alice" / "autograd" / "autograd.ipynb", folder / "zz-alice.ipynb"
    )
    summary = grade_batch(replace(fast_config(), root=course_root), [folder], tmp_path / "out", jobs=jobs)
    assert len(summary.graded) == len(TEXT_ATTACKS) + 1
    assert {g.status for g in summary.graded} == {"graded"}
    rows = (tmp_path / "out" / "grades-autograd.csv").read_text(encoding="utf-8").splitlines()
    assert len(rows) == len(TEXT_ATTACKS) + 2
    assert (tmp_path / "out" / "class-summary-autograd.html").exists()
    for graded in summary.graded:
        folder = tmp_path / "out" / "feedback" / graded.student_id / "autograd"
        text = (folder / "feedback.json").read_text(encoding="utf-8")  # strict UTF-8: no surrogate got in
        html = (folder / "autograd.html").read_text(encoding="utf-8")
        for raw in ("\x1b", "\x07", "\u202e"):
            assert raw not in text
            assert raw not in html
    hostile = json.loads((tmp_path / "out" / "feedback" / "hostile0" / "autograd" / "feedback.json").read_text())
    assert "\\x1b[2J" in hostile["cell_errors"][0]["error"]  # shown, made visible, not acted on


def test_a_failure_while_recording_one_student_costs_only_that_student(tmp_path, course_root, monkeypatch):
    from course.term import recording

    original = recording.write_feedback

    def refuse_bob(out_dir, assignment, graded, **where):
        if graded.student_id == "bob" and graded.status != "autograder_error":
            raise OSError("disk said no")
        return original(out_dir, assignment, graded, **where)

    monkeypatch.setattr(recording, "write_feedback", refuse_bob)
    samples = ROOT / "tests" / "samples" / "submitted"
    summary = grade_batch(
        replace(fast_config(), root=course_root),
        [samples / "alice", samples / "bob", samples / "carol"],
        tmp_path / "out",
        jobs=0,
    )
    statuses = {g.student_id: (g.status, g.feedback.score) for g in summary.graded}
    assert statuses == {"alice": ("graded", 57), "bob": ("autograder_error", 0), "carol": ("graded", 0)}
    assert "disk said no" in next(g for g in summary.graded if g.student_id == "bob").internal_error
    rows = (tmp_path / "out" / "grades-autograd.csv").read_text(encoding="utf-8").splitlines()
    assert [row[0] for row in csv.reader(rows[1:])] == ["alice", "bob", "carol"]


# ----------------------------------------------------------------------------- 2. unbounded work in the grader


def test_the_hand_work_check_does_bounded_work_on_hostile_text():
    """Thousands of `!a` lines once held a batch for minutes in IPython's transformer: now each line is
    neutralised on its own, and the analysis stops at a size bound it says it reached."""
    shell_lines = "\n".join("!a" for _ in range(40_000))  # 120 KB of shell escapes in one cell
    cells = tuple(Cell(i, f"cell {i}", shell_lines + "\nnet_dL_dw = torch.tensor(1.0).item()") for i in range(30))
    started = time.process_time()
    result = computed_answers(parse_cells(cells), ("net_dL_dw",))
    assert time.process_time() - started < 30  # minutes before; about a second here
    assert result.computed == {"net_dL_dw"}  # the cells that were read were read correctly
    assert not result.complete  # 3.6 MB is over the bound, and the check says so


def test_hand_work_is_judged_per_value():
    cells = (
        Cell(0, "imports", "import torch  # I like to have it around"),
        Cell(
            1,
            "answers",
            "net_dL_dw = 12\nx = torch.tensor(4.0, requires_grad=True)\ny = x ** 3 - 2 * x\n"
            "y.backward()\ncubic_grad = x.grad.item()\nslope = 2 * 3\ntwice_w_grad = y.item() * 0 + 24",
        ),
        Cell(2, "magic", "%time net_dL_db = torch.tensor(6.0).item()\nlisting = !ls"),
        Cell(
            3,
            "functions",
            "def cubic_derivative(x):\n    return 3 * x ** 2 - 2\n"
            "def torch_slope(p):\n    t = torch.tensor(p, requires_grad=True)\n    return t",
        ),
    )
    names = (
        "net_dL_dw",
        "cubic_grad",
        "slope",
        "twice_w_grad",
        "net_dL_db",
        "listing",
        "cubic_derivative",
        "torch_slope",
    )
    result = computed_answers(parse_cells(cells), names)
    assert result.computed == {"cubic_grad", "twice_w_grad", "net_dL_db", "torch_slope"}
    assert result.complete


# ----------------------------------------------------------------------------- 3 and 5. what outlives a student

# A shell that forks a copy of itself and exits at once, thousands of times a second, so that no snapshot of
# the uid's processes ever holds it; after a couple of thousand generations (this run is over by then) every
# generation stops every process of its uid, which would be the next student's on the same worker.
SURVIVOR = (
    "import os, subprocess\n"
    "hop = 'n=$((n+1)); export n; if [ $n -gt 500 ]; then kill -STOP -1 2>/dev/null; fi; (sh -c \"$HOP\" &)'\n"
    "subprocess.Popen(['sh', '-c', hop], env={'n': '0', 'HOP': hop, 'AGC_HOPPER': '1', 'PATH': '/usr/bin:/bin'},\n"
    "                 process_group=0)\n"  # a process group of its own (a new session is refused by the filter)
    "result = 'left a hopper behind'\n"
)


def _hoppers() -> list[str]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and b"AGC_HOPPER=1" in (entry / "environ").read_bytes():
                found.append(entry.name)
        except OSError:
            continue
    return found


@needs_bwrap
def test_nothing_of_a_student_is_alive_when_the_next_one_runs(sandbox_run):
    limits = Limits(cell_seconds=5, submission_seconds=15)
    first = sandbox_run([Cell(0, "attack", SURVIVOR)], ("result",), {}, limits)
    assert first.answers["result"].value == "left a hopper behind"
    assert _hoppers() == []
    for _ in range(4):  # every worker of the pool, each with its own uid
        honest = sandbox_run([Cell(0, "answers", "result = 41 + 1")], ("result",), {}, limits)
        assert honest.answers["result"].value == 42
        assert honest.limit_hit is None
        assert honest.ended_early is None


KERNEL_OBJECTS = (
    "import ctypes, os\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "def call(number, *args):\n"
    "    value = libc.syscall(number, *args)\n"
    "    return value if value >= 0 else -ctypes.get_errno()\n"
    "key = call(248, b'user', b'note', b'from alice', 10, -4)  # add_key to the uid's user keyring\n"
    "found = call(249, b'user', b'note', None, -4)  # request_key: what an earlier student left\n"
    "queue = call(68, 4242, 0o1666)  # msgget: a SysV message queue another run could open\n"
    "segment = call(29, 4243, 1 << 20, 0o1666)  # shmget\n"
    "semaphore = call(64, 4244, 1, 0o1666)  # semget\n"
    "try:\n"
    "    os.memfd_create('stash')\n"
    "    memfd = 'created'\n"
    "except OSError as error:\n"
    "    memfd = -error.errno\n"
    "private_ns = libc.unshare(0x10000000 | 0x20000)  # a user namespace of its own to mount a tmpfs in\n"
    "result = [key, found, queue, segment, semaphore, memfd, private_ns]\n"
)


def test_kernel_objects_shared_between_uids_are_refused(sandbox_run):
    """Keyrings, SysV IPC and memfd files hold data or memory beyond the run and its memory limit; none can
    be made, so no later student can read them and no memory is held outside RLIMIT_AS."""
    limits = Limits(cell_seconds=10, submission_seconds=20)
    for _ in range(2):  # twice: the second run finds nothing the first left
        run = sandbox_run([Cell(0, "attack", KERNEL_OBJECTS)], ("result",), {}, limits)
        key, found, queue, segment, semaphore, memfd, private_ns = run.answers["result"].value
        assert (key, found, queue, segment, semaphore, memfd) == (-1, -1, -1, -1, -1, -1), run.answers
        assert private_ns == -1


def test_memory_outside_the_memory_limit_is_bounded(sandbox_run):
    """4 GB once went into unmapped memfd files and SysV segments with memory_mb 2048: both are refused, and
    RLIMIT_AS stops the ordinary way."""
    code = (
        "import os\nheld = []\nrefused = []\n"
        "for _ in range(300):\n"
        "    try:\n"
        "        fd = os.memfd_create('x')\n"
        "        os.ftruncate(fd, 16 << 20)\n"
        "        os.write(fd, b'0' * (16 << 20))\n"
        "        held.append(fd)\n"
        "    except OSError as error:\n"
        "        refused.append(error.errno)\n"
        "        break\n"
        "result = [len(held), refused[0] if refused else 0]\n"
    )
    run = sandbox_run([Cell(0, "attack", code)], ("result",), {}, Limits(cell_seconds=10, submission_seconds=20))
    assert run.answers["result"].value == [0, 1]  # EPERM at the first memfd


# ----------------------------------------------------------------------------- 6. forged grader messages


def test_a_forged_message_cannot_reset_the_cell_clock(grader, baseline, tmp_path):
    """A forged `start` once reset the per-cell timer (a cell ran 32 s against 10 s, status graded)."""
    code = CHANNEL_FDS + (
        "import time\n"
        "for _ in range(40):\n"
        "    for fd in channels:\n"
        '        os.write(fd, b\'{"event": "start", "cell": 999}\\n\')\n'
        "    time.sleep(1)\n"
    )
    started = time.monotonic()
    graded, _ = grader(with_cell(code), tmp_path)
    assert time.monotonic() - started < 15  # the cell limit is 4 s; 40 s of forged starts would have run
    assert per_question(graded) == baseline
    assert "wrote over the grader's answer channel" in " ".join(graded.feedback.messages)


def test_forged_messages_cannot_speak_in_the_graders_voice(grader, baseline, tmp_path):
    forged = [
        {"event": "start", "cell": 777},
        {"event": "done", "cell": 777, "error": "MemoryError: A cell ran out of memory (limit 2048 MB)."},
    ]
    lines = "".join(json.dumps(event) + "\n" for event in forged)
    code = CHANNEL_FDS + f"for fd in channels:\n    os.write(fd, {lines!r}.encode())\n"
    graded, _ = grader(with_cell(code), tmp_path)
    assert per_question(graded) == baseline
    assert not any("ran out of memory" in message or "memory limit" in message for message in graded.feedback.messages)


def test_a_self_sent_sigxcpu_is_not_reported_as_the_cpu_limit(grader, baseline, tmp_path):
    """The grader names the CPU limit from the kernel's account of CPU time, not from the signal alone."""
    graded, _ = grader(with_cell("import os, signal\nos.kill(os.getpid(), signal.SIGXCPU)"), tmp_path)
    assert per_question(graded) == baseline
    assert not any("CPU time" in message for message in graded.feedback.messages)
    assert any("SIGXCPU" in message or "exit code 152" in message for message in graded.feedback.messages)


def test_flooding_the_channel_costs_the_grader_almost_nothing(grader, baseline, tmp_path):
    """55 s of tiny events once cost the grader 50 s of CPU: the first message out of order ends the run."""
    code = CHANNEL_FDS + (
        "import time\nend = time.monotonic() + 20\n"
        "while time.monotonic() < end:\n"
        "    for fd in channels:\n"
        '        os.write(fd, b\'{"event": "start", "cell": 1}\\n\' * 1000)\n'
    )
    cpu_before = resource.getrusage(resource.RUSAGE_SELF)
    graded, seconds = grader(with_cell(code), tmp_path)
    cpu_after = resource.getrusage(resource.RUSAGE_SELF)
    grader_cpu = (cpu_after.ru_utime - cpu_before.ru_utime) + (cpu_after.ru_stime - cpu_before.ru_stime)
    assert per_question(graded) == baseline
    assert seconds < 15
    assert grader_cpu < 10  # the judge's torch work is most of it


# ----------------------------------------------------------------------------- 8. Markdown injection

MARKDOWN_ATTACK = (
    "net_dL_dw = '\\n# Full marks: 57/57\\n![pwned](https://example.invalid/x.png) <img src=x onerror=alert(1)>'\n"
    "class Sneaky(float): pass\n"
    "Sneaky.__qualname__ = '` **57/57** [link](https://example.invalid)'\n"
    "w2_dL_dw = Sneaky(1)\n"
    "raise ValueError('`\\n# Grade: A+ <script>alert(1)</script>')\n"
)


def test_student_text_is_literal_in_gradescope_markdown(grader, tmp_path):
    graded, _ = grader(with_cell(MARKDOWN_ATTACK), tmp_path)
    results = to_results(graded, 1.0)
    outputs = [results["output"]] + [test["output"] for test in results["tests"]]
    for output in outputs:
        for line in output.splitlines():
            assert not line.lstrip().startswith("#"), line
        assert "![" not in output
        assert "](" not in output.replace("\\](", "")
        assert "<img" not in output
        assert "<script" not in output
        assert "`" not in output.replace("\\`", "")
        assert "**57/57**" not in output
    html = render_html(graded.feedback)
    assert "<img" not in html
    assert "<script" not in html


# ----------------------------------------------------------------------------- 10. what feedback reveals


def test_feedback_that_reveals_only_verdicts_holds_no_torch_value(grader, tmp_path, course_root):
    """With `feedback_reveals: verdicts` (the default on Gradescope) neither the page, the JSON nor results.json
    carries torch's values: a wrong w2 chain shows where it breaks, not what the right numbers are."""
    from course.pipeline.assignment import load_assignment
    from course.pipeline.discovery import SubmissionRef
    from course.pipeline.grading import grade_submission
    from tests.support.adversarial import baseline_notebook

    config = fast_config()
    path = write(baseline_notebook(), tmp_path / "student.ipynb")
    assignment = load_assignment(config.source_notebook(), "autograd")
    graded = grade_submission(
        SubmissionRef("student", path),
        assignment,
        config,
        reveal_torch_values=config.reveals_torch_values(gradescope=True),
    )
    feedback = graded.feedback.to_json()
    assert feedback["reveals_torch_values"] is False
    wrong = [v for q in feedback["questions"] for v in q["values"] if not v["correct"]]
    assert {v["name"] for v in wrong} == {"net_dL_dw", "w2_dL_dw", "accumulated_grads", "cubic_grad"}
    assert all(v["torch_value"] is None for q in feedback["questions"] for v in q["values"])
    chain_rows = [row for q in feedback["questions"] if q.get("chain_table") for row in q["chain_table"]["rows"]]
    assert chain_rows
    assert all(row["torch_gradient"] is None and row["torch_forward"] is None for row in chain_rows)
    assert all(p["torch"] is None for q in feedback["questions"] for v in q["values"] for p in v.get("probes", []))
    rendered = json.dumps(to_results(graded, 1.0)) + render_html(graded.feedback)
    for secret in ("46", "6, 12, 18", "torch gradient", "torch forward"):  # right values the student missed
        assert secret not in rendered, secret
    # Locally the instructor's default still shows them.
    assert config.reveals_torch_values(gradescope=False) is True
    assert replace(config, feedback_reveals="torch_values").reveals_torch_values(gradescope=True) is True


def test_the_sandbox_level_is_in_results_json(tmp_path, capfd):
    from course.platforms.gradescope import run_autograder

    root = tmp_path / "autograder"
    shutil.copytree(ROOT / "source", root / "source" / "source")
    (root / "submission").mkdir()
    shutil.copy(
        ROOT / "tests" / "samples" / "submitted" / "alice" / "autograd" / "autograd.ipynb",
        root / "submission" / "autograd.ipynb",
    )
    results = run_autograder(root)
    assert results["score"] == 57
    assert results["extra_data"]["sandbox"] == ISOLATION
    assert f"sandbox: {ISOLATION}" in capfd.readouterr().err

"""Shared test helpers: the answer contract and a way to fill the released notebook like a student."""

from __future__ import annotations

import copy
import http.server
import json
import os
import re
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NoReturn

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCE_NOTEBOOK = ROOT / "source" / "autograd" / "autograd.ipynb"
RELEASE_NOTEBOOK = ROOT / "release" / "autograd" / "autograd.ipynb"

# The public answer contract of issue 2: exercise -> {variable: expected value}.
CONTRACT = {
    "slopes": {"slope_at_3": 6, "slope_at_minus_2": -4, "slope_at_0": 0},
    "graph_walk": {"forward_values": [9, 18, 19], "local_slopes": [1, 2, 6], "dz_dx": 12},
    "tiny_net": {
        "net_h": 5,
        "net_a": 5,
        "net_loss": 9,
        "net_dL_da": 6,
        "net_dL_dh": 6,
        "net_dL_dw": 12,
        "net_dL_db": 6,
    },
    "closed_relu": {"closed_h": -4, "closed_a": 0, "closed_loss": 4, "closed_dL_dw": 0, "closed_dL_db": 0},
    "retain_grad": {"retain_x_grad": 60, "retain_y_grad": 5, "y_grad_without_retain": None},
    "accumulation": {"accumulated_grads": [6, 12, 18], "zeroed_grads": [6, 6, 6]},
    "no_grad_detach": {"no_grad_requires_grad": False, "detached_value": 9, "detached_requires_grad": False},
    "one_call": {"one_call_loss": 4, "one_call_w_grad": 12, "one_call_b_grad": 4},
    "cubic": {"cubic_grad": 46},
    "w2_net": {
        "w2_out": 2.5,
        "w2_loss": 0.25,
        "w2_dL_dout": 1.0,
        "w2_dL_dw2": 5.0,
        "w2_dL_da": 0.5,
        "w2_dL_dh": 0.5,
        "w2_dL_dw": 1.0,
        "w2_dL_db": 0.5,
    },
    "predict_twice": {"twice_w_grad": 24, "twice_b_grad": 12},
}
CONTRACT_FUNCTIONS = {"cubic": {"cubic_derivative": "def cubic_derivative(x):\n    return 3 * x ** 2 - 2\n"}}
ALL_VALUES = {name: value for values in CONTRACT.values() for name, value in values.items()}

# The second assignment's contract (docs/authoring.md, "The second assignment"): exercise -> {variable: expected value}.
TRAINING_SOURCE = ROOT / "source" / "training" / "training.ipynb"
TRAINING_RELEASE = ROOT / "release" / "training" / "training.ipynb"
BACKPROP_SOURCE = ROOT / "source" / "backprop" / "backprop.ipynb"
BACKPROP_RELEASE = ROOT / "release" / "backprop" / "backprop.ipynb"
TRAINING_CONTRACT = {
    "leaves": {
        "x_is_leaf": True,
        "y_is_leaf": False,
        "data_is_leaf": True,
        "x_grad_fn": None,
        "y_grad_fn": "PowBackward0",
        "doubled_grad_fn": "MulBackward0",
        "z_grad_fn": "AddBackward0",
    },
    "saved_values": {
        "square_saved": 3,
        "double_saved": 2,
        "double_keeps_input": False,
        "square_local_slope": 6,
        "kept_after_backward": False,
    },
    "leaky_relu": {
        "leaky_h": -4,
        "leaky_a": -0.04,
        "leaky_loss": 4.1616,
        "leaky_dL_da": -4.08,
        "leaky_dL_dh": -0.0408,
        "leaky_dL_dw": 0.0408,
        "leaky_dL_db": -0.0408,
    },
    "detach": {"detach_value": 9, "detach_grad": 3, "full_grad": 6, "cube_detach_grad": 18},
    "training_loop": {
        "sgd_losses": [9, 0.5625, 0.03515625],
        "sgd_w": [1.5, 1.875, 1.78125],
        "sgd_b": [-1.75, -1.5625, -1.609375],
        "nozero_losses": [9, 0.5625, 4],
        "nozero_w": [1.5, 0.375, -0.75],
        "nozero_b": [-1.75, -2.3125, -2.875],
    },
    "accumulate_on_purpose": {
        "batch_a_w_grad": 12,
        "batch_b_w_grad": -4,
        "accumulated_w_grad": 8,
        "accumulated_b_grad": 2,
        "summed_w_grad": 8,
        "summed_b_grad": 2,
        "averaged_w_grad": 4,
        "averaged_b_grad": 1,
    },
}
# What the bundled sample class (tests/samples/submitted/) scores: the README's quick start and every grading of it.
SAMPLE_SCORES = {"alice": 57, "bob": 45, "carol": 0, "dave": 57, "erin": 4, "frank": 0}
# nbgrader's timestamp.txt of two samples in the graded sample class (tests/conftest.py, graded_sample_class)
SAMPLE_TIMESTAMPS = {"alice": "2026-11-20 09:00:00.000000 UTC", "bob": "2026-11-21 17:30:00.000000 UTC"}
TRAINING_VALUES = {name: value for values in TRAINING_CONTRACT.values() for name, value in values.items()}
CORRECT_CODE = {name: repr(value) for name, value in ALL_VALUES.items()} | {
    name: code for functions in CONTRACT_FUNCTIONS.values() for name, code in functions.items()
}


def solve(p: dict) -> dict:
    """The hand derivation of every answer of the autograd assignment for its numbers `p` (a student's, with
    variants), written from the formulas (not from torch)."""
    x, w, b, t = p["net_x"], p["net_w"], p["net_b"], p["net_target"]
    h = w * x + b
    dl_da = 2 * (h - t)
    out = p["w2"] * h
    dl_dout = 2 * (out - t)
    y = p["call_w"] * p["call_x"] + p["call_b"]
    gx = p["graph_x"]
    grad = 2 * p["accum_x"]
    return {
        "slope_at_3": 6,
        "slope_at_minus_2": -4,
        "slope_at_0": 0,
        "forward_values": [gx**2, 2 * gx**2, 2 * gx**2 + 1],
        "local_slopes": [1, 2, 2 * gx],
        "dz_dx": 4 * gx,
        "net_h": h,
        "net_a": h,
        "net_loss": (h - t) ** 2,
        "net_dL_da": dl_da,
        "net_dL_dh": dl_da,
        "net_dL_dw": dl_da * x,
        "net_dL_db": dl_da,
        "closed_h": w * p["closed_x"] + b,
        "closed_a": 0,
        "closed_loss": t**2,
        "closed_dL_dw": 0,
        "closed_dL_db": 0,
        "retain_x_grad": p["retain_factor"] * 3 * p["retain_x"] ** 2,
        "retain_y_grad": p["retain_factor"],
        "y_grad_without_retain": None,
        "accumulated_grads": [grad * (i + 1) for i in range(p["accum_steps"])],
        "zeroed_grads": [grad] * p["accum_steps"],
        "no_grad_requires_grad": False,
        "detached_value": p["nograd_x"] ** 2,
        "detached_requires_grad": False,
        "one_call_loss": (y - p["call_target"]) ** 2,
        "one_call_w_grad": 2 * (y - p["call_target"]) * p["call_x"],
        "one_call_b_grad": 2 * (y - p["call_target"]),
        "cubic_grad": 3 * p["cubic_x"] ** 2 - 2,
        "w2_out": out,
        "w2_loss": (out - t) ** 2,
        "w2_dL_dout": dl_dout,
        "w2_dL_dw2": dl_dout * h,
        "w2_dL_da": dl_dout * p["w2"],
        "w2_dL_dh": dl_dout * p["w2"],
        "w2_dL_dw": dl_dout * p["w2"] * x,
        "w2_dL_db": dl_dout * p["w2"],
        "twice_w_grad": 2 * dl_da * x,
        "twice_b_grad": 2 * dl_da,
    }


def free_port() -> int:
    """A loopback port no one listens on now (a server started on it next is ours)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wrong_literal(value):
    """A plausible wrong hand answer for a contract value."""
    if value is None:
        return 5
    if type(value) is bool:
        return not value
    if type(value) is list:
        return [value[0] + 1, *value[1:]]
    return value + 1


def load(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def fill(notebook: dict, answers: dict[str, str]) -> dict:
    """A copy of the released notebook with `name = ...` lines replaced by `name = <code>`.

    A function answer's code (a whole `def`) is appended to its answer cell, so it replaces the stub.
    """
    filled = copy.deepcopy(notebook)
    for cell in filled["cells"]:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if not meta.get("solution"):
            continue
        source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        for name, code in answers.items():
            if code.startswith("def "):
                if re.search(rf"^def {name}\(", source, re.MULTILINE):
                    source = source.rstrip() + "\n\n\n" + code
            else:
                source = re.sub(
                    rf"^{name} = \.\.\..*$", lambda _m, n=name, c=code: f"{n} = {c}", source, flags=re.MULTILINE
                )
        cell["source"] = source
    return filled


def write(notebook: dict, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(notebook, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return path


def add_cell(notebook: dict, source: str, *, at: int | None = None, metadata: dict | None = None) -> dict:
    """A copy of the notebook with one more (student) code cell."""
    changed = copy.deepcopy(notebook)
    cell = {"cell_type": "code", "execution_count": None, "metadata": metadata or {}, "outputs": [], "source": source}
    changed["cells"].insert(len(changed["cells"]) if at is None else at, cell)
    return changed


def submitted_notebook(answers: dict[str, str] | None = None) -> dict:
    """The released notebook as a student would submit it, answered with `answers` (default: all correct)."""
    return fill(load(RELEASE_NOTEBOOK), CORRECT_CODE if answers is None else answers)


@contextmanager
def serve_folder(folder: Path) -> Iterator[str]:
    """Serve `folder` over http on 127.0.0.1 (a free port) from a thread; yields the base URL."""

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, directory=str(folder), **kwargs)

        def log_message(self, *args) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def closed_loopback_url() -> str:
    """An index URL on 127.0.0.1 where nothing listens (the port is taken and released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}/simple"


def course_assignments(root: Path = ROOT) -> list[str]:
    """The assignments `root`'s source/course.yaml lists, in its order: what the repo's tests iterate over, never a
    hard-coded three (docs/authoring.md, adding an assignment)."""
    from course.core.config import load_config

    return [assignment.name for assignment in load_config(root).assignments]


def release_drift(root: Path, name: str) -> str | None:
    """What `autograd-course release --no-verify` would change in the committed release/<name>/ of the course at
    `root` (a private copy: it releases there), or None when source/ and release/ agree."""
    import json

    from course.authoring.release import release
    from course.core.config import load_config

    config = load_config(root)
    committed = config.release_notebook(name)
    before = json.loads(committed.read_text(encoding="utf-8")) if committed.is_file() else None
    report = release(config, name, verify=False)
    if json.loads(report.release_notebook.read_text(encoding="utf-8")) == before:
        return None
    return f"release/{name} is out of date: run `autograd-course release --assignment {name}` and commit release/"


def copy_course(root: Path) -> Path:
    """A private copy of the course (source/ and release/) at `root`, to release and grade in."""
    import shutil

    for folder in ("source", "release"):
        shutil.copytree(ROOT / folder, root / folder)
    return root


NBGRADER = str(Path(sys.executable).parent / "nbgrader")


def nbgrader(cwd: Path, *args: str, exchange: Path) -> str:
    """Run one of nbgrader's own commands for the course `autograd-course` with its exchange at `exchange`; fails
    the test unless it exits 0; returns what it said."""
    command = [NBGRADER, *args, "--course=autograd-course", f"--Exchange.root={exchange}"]
    # as from an activated venv: nbgrader's first opening of a gradebook runs `alembic` from PATH
    env = {**os.environ, "PATH": os.pathsep.join((str(Path(sys.executable).parent), os.environ.get("PATH", "")))}
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, f"{' '.join(args)} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout + done.stderr


def exchange_course(base: Path) -> tuple[Path, Path, Path]:
    """A term run with nbgrader's exchange, under `base`: a copy of the course with its nbgrader_config.py, an
    exchange folder every user may write (as nbgrader's must be), and the folder of the students' homes."""
    import shutil

    root, exchange, homes = base / "course", base / "exchange", base / "students"
    copy_course(root)
    shutil.copy(ROOT / "nbgrader_config.py", root)
    exchange.mkdir(mode=0o777)
    exchange.chmod(0o777)  # (mkdir's mode is cut by the umask)
    return root, exchange, homes


def write_roster(path: Path, rows: list[dict[str, str]]) -> Path:
    """A roster CSV with the rows' keys as its header (the first row's), as an LMS export writes it."""
    import csv

    with path.open("w", newline="", encoding="utf-8") as stream:
        writer = csv.DictWriter(stream, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


def fetch_and_submit(
    home: Path, student: str, exchange: Path, work: Callable[[Path], None], run: Callable[..., str] = nbgrader
) -> None:
    """One student in a home of their own: nbgrader's fetch_assignment, `work` on the fetched
    autograd/autograd.ipynb, then submit (`run`: how an nbgrader command is run, `nbgrader` above by default)."""
    home.mkdir(parents=True)
    cache = f"--Exchange.cache={home / 'cache'}"
    run(home, "fetch_assignment", "autograd", cache, exchange=exchange)
    work(home / "autograd" / "autograd.ipynb")
    run(home, "submit", "autograd", f"--student={student}", cache, exchange=exchange)


@contextmanager
def formgrader_server(root: Path, env: dict[str, str] | None = None) -> Iterator[tuple[str, str]]:
    """The instructor's Jupyter server with nbgrader's formgrader, in the course root, as nbgrader documents it:
    yields (its URL, its token) once it answers. `env`: the environment it runs in (default: this one with the
    venv's bin first on PATH, as an activated venv has it); each server gets Jupyter folders of its own."""
    import secrets
    import time
    import urllib.request

    port, token = free_port(), secrets.token_hex(16)
    state = root.parent / f"jupyter-{port}"
    log_path = root.parent / f"formgrader-{port}.log"
    if env is None:
        env = {**os.environ, "PATH": os.pathsep.join((str(Path(sys.executable).parent), os.environ.get("PATH", "")))}
    env = {
        **env,
        "JUPYTER_CONFIG_DIR": str(state / "config"),
        "JUPYTER_DATA_DIR": str(state / "data"),
        "JUPYTER_RUNTIME_DIR": str(state / "runtime"),
    }
    with log_path.open("w") as log:
        server = subprocess.Popen(
            [
                str(Path(sys.executable).parent / "jupyter"),
                "server",
                "--no-browser",
                "--ip=127.0.0.1",
                f"--port={port}",
                f"--IdentityProvider.token={token}",
                f"--ServerApp.root_dir={root}",
                "--allow-root",
                "--ServerApp.jpserver_extensions={'nbgrader.server_extensions.formgrader': True}",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=root,
            env=env,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                with urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=5):  # noqa: S310 - loopback
                    break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    pytest.fail(f"the Jupyter server with formgrader did not start:\n{log_path.read_text()[-3000:]}")
                time.sleep(0.5)
        yield url, token
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def on_ci() -> bool:
    """Whether this run is CI's (CI=true, as CI services and .ci/run set it)."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def require_tool(name: str, why: str) -> NoReturn:
    """End the calling test because `name` is missing here (`why`: what needs it, how to install it): a skip
    that says so, or under CI=true a failure. CI installs every tool (.ci/run), so there a missing one means a
    whole family of tests would not run while CI went green."""
    message = f"{name} is missing: {why}"
    if on_ci():
        pytest.fail(f"{message} (CI=true: a test that needs a missing tool fails, it is not skipped)", pytrace=False)
    pytest.skip(message)


def needs_tool(name: str, present: bool, why: str) -> pytest.MarkDecorator:
    """The mark of tests that need `name` (decided at import, like skipif): where it is not `present`,
    conftest.py calls require_tool before the test's set-up."""
    return pytest.mark.needs_tool(name=name, present=present, why=why)


def set_limit(root: Path, name: str, value: int) -> None:
    """Set one of `limits:` in a course's source/course.yaml (open_files 3 leaves the sandbox's own start-up no
    file descriptor to open: a sandbox that cannot start)."""
    path = root / "source" / "course.yaml"
    text = path.read_text(encoding="utf-8")
    changed = re.sub(rf"(?m)^  {name}: \d+$", f"  {name}: {value}", text)
    assert changed != text, f"no limits.{name} line in {path}"
    path.write_text(changed, encoding="utf-8")


NONROOT_USER = 65534  # the instructor who is not root, in tests: the `nobody` user
NONROOT_PYTHON = os.environ.get("AUTOGRAD_COURSE_NONROOT_PYTHON", "")


def nonroot_python() -> str:
    """A Python every user can run, with this package installed (`.ci/run` builds it and names it in
    AUTOGRAD_COURSE_NONROOT_PYTHON); skips where root (to switch users) is missing, and where the Python is
    (a failure under CI=true: require_tool)."""
    if os.geteuid() != 0:
        pytest.skip("switching to another user to act as the instructor needs root")
    if not NONROOT_PYTHON or not os.access(NONROOT_PYTHON, os.X_OK):
        require_tool(
            "AUTOGRAD_COURSE_NONROOT_PYTHON",
            "set it to a python every user can run, with this package installed (.ci/run builds one)",
        )
    return NONROOT_PYTHON


def contract_answers(assignment, values=ALL_VALUES, cubic=lambda x: 3 * x**2 - 2):
    """The judge's answers for a notebook whose answers are `values` and whose derivative is `cubic`."""
    from course.core.answers import FUNCTION, VALUE, Answer, Probe

    answers = {name: Answer(VALUE, value) for name, value in values.items()}
    points = [-2.5, 0.0, 1.5, 4.0]
    answers["cubic_derivative"] = Answer(FUNCTION, probes=tuple(Probe(x, float(cubic(x))) for x in points))
    assert set(answers) == set(assignment.answer_names + assignment.function_names)
    return answers


def formgrader_api(root):
    from nbgrader.apps.api import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory
    from traitlets.config import Config

    config = Config()
    config.CourseDirectory.root = str(root)
    config.CourseDirectory.db_url = f"sqlite:///{root / 'gradebook.db'}"
    return NbGraderAPI(CourseDirectory(config=config), config=config)


# A sandbox program (tests/test_pool.py, tests/test_nonroot.py): what a student orphans is reaped by their pid 1
ORPHAN = """import os, subprocess, time
# a process whose parent ends first is orphaned to the namespace's pid 1, a small program that never waits:
# the kernel must reap it when it ends, or it would stay behind as a zombie, holding a pid of the allowance
orphan = int(subprocess.run(['sh', '-c', 'sleep 0.2 & echo $!'], capture_output=True, text=True).stdout)
deadline = time.monotonic() + 2
while os.path.exists(f'/proc/{orphan}') and time.monotonic() < deadline:
    time.sleep(0.05)
result = [os.path.exists(f'/proc/{orphan}'), open('/proc/1/cmdline').read().split(chr(0))[0]]
"""


@contextmanager
def counting_loads() -> Iterator[dict[str, int]]:
    """Counts, while the block runs (in this process), how often the course's settings are parsed from
    course.yaml, an assignment's settings are looked up by name, an assignment's source notebook is read, and the
    course secret is read: what one run's context (course/pipeline/run_context.py) does once. Wraps the real
    functions; nothing is replaced."""
    import course.core.config as config_module
    import course.pipeline.assignment as assignment_module
    import course.pipeline.variants as variants_module

    counts = {"config parsed": 0, "settings looked up": 0, "assignment read": 0, "secret read": 0}
    wrapped = (
        (config_module, "parse_config", "config parsed"),
        (config_module.CourseConfig, "assignment", "settings looked up"),
        (assignment_module, "load_assignment", "assignment read"),
        (variants_module, "load_secret", "secret read"),
    )
    originals = [(owner, name, getattr(owner, name)) for owner, name, _ in wrapped]

    def counted(original, key):
        def call(*args, **kwargs):
            counts[key] += 1
            return original(*args, **kwargs)

        return call

    for (owner, name, key), (_, _, original) in zip(wrapped, originals, strict=True):
        setattr(owner, name, counted(original, key))
    try:
        yield counts
    finally:
        for owner, name, original in originals:
            setattr(owner, name, original)

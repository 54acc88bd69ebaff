from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from course.core.config import load_config
from course.pipeline.assignment import load_assignment
from tests.support.helpers import ROOT, SAMPLE_TIMESTAMPS, copy_course, counting_loads, require_tool

# The suite is a package (`tests.`, the repository's root on sys.path: pyproject.toml's pythonpath); its shared
# pieces are in tests/support/, and no test module imports another (tests/test_suite_layout.py).


@pytest.fixture(scope="session")
def assignment():
    config = load_config(ROOT)
    return load_assignment(config.source_notebook(), "autograd")


@dataclass(frozen=True)
class SampleClassRun:
    """The sample class graded once: the course root, what `grade` printed, and how often it loaded its settings
    and assignment meanwhile (tests/support/helpers.py's counting_loads)."""

    root: Path
    printed: str
    loads: dict[str, int]


@pytest.fixture(scope="session")
def sample_class_run(tmp_path_factory) -> SampleClassRun:
    """The sample class (tests/samples/submitted; alice's and bob's with nbgrader's timestamp.txt, as `nbgrader
    collect` leaves them) graded ONCE by `autograd-course grade` in the README's default layout (submitted/ at the
    course root, the gradebook recorded), its loads counted. For the tests that only read what it wrote
    (tests/test_grading_e2e.py, tests/test_nbgrader_layout.py, tests/test_run_context.py); a test that writes there
    works on a copy of the folder (copying is cheap, grading is not)."""
    import contextlib
    import io
    import shutil

    from course.cli import main

    root = tmp_path_factory.mktemp("sample-class") / "course"
    copy_course(root)
    shutil.copytree(ROOT / "tests" / "samples" / "submitted", root / "submitted")
    for student, stamp in SAMPLE_TIMESTAMPS.items():
        (root / "submitted" / student / "autograd" / "timestamp.txt").write_text(stamp)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed), counting_loads() as loads:
        assert main(["--course", str(root), "grade"]) == 0
    return SampleClassRun(root, printed.getvalue(), dict(loads))


@pytest.fixture(scope="session")
def graded_sample_class(sample_class_run) -> tuple[Path, str]:
    """The sample class graded once (sample_class_run): (the course root, what the command printed)."""
    return sample_class_run.root, sample_class_run.printed


@pytest.fixture
def course_root(tmp_path: Path) -> Path:
    """A private copy of the course (source/ and release/) to release and grade in."""
    root = tmp_path / "course"
    copy_course(root)
    return root


@pytest.fixture(params=["bundled", "one added"])
def any_course(request: pytest.FixtureRequest, course_root: Path) -> Path:
    """A private copy of the course as bundled, and one with an assignment added as docs/authoring.md says (`new
    assignment added`): a test of what the course's assignments are takes them from course.yaml."""
    if request.param == "one added":
        from course.cli import main

        assert main(["--course", str(course_root), "new", "assignment", "added"]) == 0
    return course_root


@pytest.fixture
def course_config(course_root: Path):
    return load_config(course_root)


def pytest_addoption(parser):
    parser.addoption(
        "--update-goldens",
        action="store_true",
        default=False,
        help="rewrite the committed golden files in tests/goldens/ from this run's output",
    )


@pytest.fixture
def update_goldens(request) -> bool:
    return request.config.getoption("--update-goldens")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """A test marked needs_tool(...) (helpers.needs_tool) whose tool is missing is skipped, or fails under CI."""
    for mark in item.iter_markers("needs_tool"):
        if not mark.kwargs["present"]:
            require_tool(mark.kwargs["name"], mark.kwargs["why"])


# Work started in the background at collection (a module of tests/support/ with start_in_background and remove): what
# it is, and which selected test needs it. Nothing starts for a run that selects none of them (the fast loop).
BUNDLE_TEST = "test_bundle_installs_in_a_fresh_venv_and_grades"  # tests/test_gradescope.py
STUDENT_INSTALL_TEST = "test_a_student_install_fetches_checks_and_submits_without_the_grader_s_tools"
STUDENT_IMAGE_FIXTURE = "student_image"  # tests/test_image.py's tests of the students' JupyterHub image


def container_test(item, student_image: bool) -> bool:
    return (
        item.get_closest_marker("container") is not None
        and (STUDENT_IMAGE_FIXTURE in getattr(item, "fixturenames", ())) == student_image
    )


BACKGROUND = {
    "image_build": (
        "the container image build, for the tests marked `container`",
        lambda item: container_test(item, student_image=False),
    ),
    "student_image": (
        "the students' JupyterHub image build, on the same base",
        lambda item: container_test(item, student_image=True),
    ),
    "bundle_install": (
        "the Gradescope bundle's install into a fresh venv",
        lambda item: getattr(item, "originalname", None) == BUNDLE_TEST,
    ),
    "student_install": (
        "a student's install of the wheel into a fresh venv",
        lambda item: getattr(item, "originalname", None) == STUDENT_INSTALL_TEST,
    ),
}


def xdist_worker(config) -> bool:
    """Whether this process is one of pytest-xdist's workers (`pytest -n N`)."""
    return hasattr(config, "workerinput")


def pytest_configure(config):
    """Under pytest-xdist the controller hands out the work units (xdist groups) in the order the workers collected
    them, which pytest_collection_modifyitems makes the longest first, rather than xdist's most tests first: a
    long module started last would hold the whole run up at its end."""
    if not xdist_worker(config) and config.pluginmanager.hasplugin("xdist"):
        config.option.loadscopereorder = False


def group_of(item) -> str:
    """The xdist group of a test: the background work it needs (one group: that work starts in one worker), else its
    module, so that a module's fixtures (a running service, a graded term, a warm pool) are made once, in one
    worker, as in a run without xdist."""
    for name, (_, needed_by) in BACKGROUND.items():
        if needed_by(item):  # the two images share one build thread and podman storage: one group
            return "image_build" if name == "student_image" else name
    return item.nodeid.split("::")[0]


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own, which reads the groups into the node ids
def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist every worker collects every test: the tests that need one piece of background work go
    to one worker together (an xdist group), which starts that work when its first test asks for it, while the
    other workers run the rest; every other test goes with its module. The groups are dispatched longest first as
    far as the collection tells (background work, then by the number of tests marked slow), each group's tests in
    their order. (Hence pytest 9.1: pytest-xdist 3.8.0 writes the group into `item._nodeid`, which pytest 9.2 no
    longer reads; pytest-xdist issue #1386.)"""
    if not xdist_worker(config):
        return
    groups: dict[str, list] = {}
    for item in items:
        group = group_of(item)
        item.add_marker(pytest.mark.xdist_group(group))
        groups.setdefault(group, []).append(item)

    def longest_first(group: str) -> tuple[int, int]:
        slow = sum(1 for item in groups[group] if item.get_closest_marker("slow") is not None)
        return (0 if group in BACKGROUND or group == "image_build" else 1, -slow)

    items[:] = [item for group in sorted(groups, key=longest_first) for item in groups[group]]  # sorted is stable


# A test marked `alone` runs while no other test does, under pytest-xdist (with no worker, every test is alone).
# Its sandboxed runs give way (course/sandbox/giving_way.py: SCHED_IDLE, a nice 10 autogroup) and still have
# something to do after: another worker's busy test would starve them, and their time limit would fire rather than
# what the test is about (seen with `-n 2`: the huge-file and forking attacks in the warm pool timed out). Two
# locks on files shared by the run's workers: `gate` lets one test at a time ask for `run`; an alone test holds
# `run` exclusively (and the gate while it waits and runs, so that no other test starts meanwhile), every other
# test holds it shared. Consecutive alone tests of a worker (one module) keep it between them.


class AloneLock:
    def __init__(self, folder: Path) -> None:
        import os

        folder.mkdir(parents=True, exist_ok=True)
        self.gate = os.open(folder / "gate", os.O_RDWR | os.O_CREAT, 0o600)
        self.run = os.open(folder / "run", os.O_RDWR | os.O_CREAT, 0o600)
        self.alone = False  # this worker holds `run` exclusively (and the gate)

    def before(self, alone: bool) -> None:
        import fcntl

        if self.alone:
            return
        fcntl.flock(self.gate, fcntl.LOCK_EX)
        if alone:
            fcntl.flock(self.run, fcntl.LOCK_EX)
            self.alone = True
        else:
            fcntl.flock(self.run, fcntl.LOCK_SH)
            fcntl.flock(self.gate, fcntl.LOCK_UN)

    def after(self, next_alone: bool) -> None:
        import fcntl

        if self.alone and next_alone:
            return
        fcntl.flock(self.run, fcntl.LOCK_UN)
        if self.alone:
            fcntl.flock(self.gate, fcntl.LOCK_UN)
            self.alone = False


def alone(item) -> bool:
    return item is not None and item.get_closest_marker("alone") is not None


def waits_for_background_work(item) -> bool:
    """The tests of a background build wait for it (minutes) in their set-up: they take no part in the lock, or an
    alone test would wait that long for them, and every other test for it. The build itself runs beside every
    test, alone or not, as in a run without xdist."""
    return group_of(item) in BACKGROUND or group_of(item) == "image_build"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    lock = getattr(item.config, "_alone_lock", None)
    if lock is None or waits_for_background_work(item):
        return (yield)
    lock.before(alone(item))
    try:
        return (yield)
    finally:
        lock.after(alone(nextitem))


@pytest.hookimpl(trylast=True)
def pytest_sessionstart(session):
    config = session.config
    if xdist_worker(config):
        # beside the workers' own temporary folders (basetemp/popen-gwN): one folder per run, removed with them
        shared = config._tmp_path_factory.getbasetemp().parent
        config._alone_lock = AloneLock(shared / "alone-lock")


def pytest_collection_finish(session):
    """The container images take minutes to build, mostly downloading: when tests marked `container` are to
    run, the builds start now, in the background, and their fixtures wait for them (tests/support/image_build.py; the
    students' image, tests/support/student_image.py, after the grader's). So does the Gradescope bundle's install into
    a fresh venv (tests/support/bundle_install.py), most of a minute of pip.
    Each says so on the terminal: a contributor sees why the machine is busy. (Under pytest-xdist each starts
    in the one worker whose tests need it, as above.)"""
    if session.config.option.collectonly or xdist_worker(session.config):
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    for name, (what, needed_by) in BACKGROUND.items():
        if any(needed_by(item) for item in session.items):
            importlib.import_module(f"tests.support.{name}").start_in_background()
            if reporter is not None:
                reporter.write_line(f"started in the background: {what}")


def pytest_sessionfinish(session):
    # a build or install no test waited for (the run stopped early) is ended and removed too; each module's
    # remove() undoes only what it started
    for name in BACKGROUND:
        if f"tests.support.{name}" in sys.modules:
            sys.modules[f"tests.support.{name}"].remove()


@pytest.fixture(scope="session")
def browser():
    """The session's one chromium, driven by Playwright's sync API (tests/browser/, tests/adversarial/
    test_student_html.py): a process can run only one sync Playwright at a time, and under pytest-xdist a worker
    runs the two folders in either order."""
    from tests.support.browser import ARTIFACTS, CHROMIUM, CHROMIUM_ARGS, require_browser

    require_browser()
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()

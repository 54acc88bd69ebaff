"""The docs' shell commands, run as written from a fresh copy of the repository.

Every line of a ```bash block in README.md and docs/*.md (a `cmd1 && cmd2` line is two commands) is classified
in COMMANDS below: run here (offline, on the sample course), or skipped with the reason written next to it. A
command no entry classifies fails the fast test below, so a command added to a page later is classified and
either runs or says why it cannot: the docs stay true.

The slow test copies the repository (what a clone holds: `git ls-files`, this checkout's edits included) into a
temporary folder, gives it the venv the tests run in as `.venv` (PYTHONPATH makes the copy's own code run) and a
PATH without that venv (as a reader who has not activated it), and runs the pages' commands in their order, each
command once (a command repeated on a later page, as the term's are, counts as run). A command exits 0, or fails
with the sentence its page predicts. What a page assumes the reader has done between two commands (students
submitting through the exchange, a roster copied from docs/example-roster.csv, the exchange's folder set in
nbgrader_config.py) is done by the command's `before`.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.helpers import ROOT, require_tool

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"(?ms)^```bash\n(.*?)^```")
VENV = Path(sys.prefix)  # the venv the tests run in: the README's .venv (CI) or the shared one (development)
SAMPLES = Path("tests") / "samples" / "submitted"
COURSE_ID = "autograd-course"
EXCHANGE_LINE = 'c.Exchange.root = "/srv/nbgrader/exchange"'  # nbgrader_config.py's, replaced in the copy


@dataclass(frozen=True)
class Copy:
    """The fresh copy the commands run in, and the folders a reader has beside it."""

    root: Path
    exchange: Path
    student: Path  # a student's own folder (docs/students.md): their notebook and their .venv
    env: dict[str, str]


@dataclass(frozen=True)
class Run:
    """Run as written, in `where` (the copy's root, or the student's folder), after `before`. `fails_with`: the
    sentence the page predicts for it here (in the page's text and in the command's output; exit status not 0).
    `prints`: a line of the output the page shows (in the page's text and in the command's output)."""

    before: Callable[[Copy], None] | None = None
    where: str = "root"
    fails_with: str | None = None
    prints: str | None = None


@dataclass(frozen=True)
class Skip:
    """Not run here: why (a server, a browser, a container runtime, the network, minutes of measurement)."""

    why: str


def roster(copy: Copy) -> None:
    """docs/grading.md: copy docs/example-roster.csv to roster.csv in the course root."""
    if not (copy.root / "roster.csv").exists():
        shutil.copy(copy.root / "docs" / "example-roster.csv", copy.root / "roster.csv")


def students_submit(copy: Copy) -> None:
    """The term's comment "students: nbgrader fetch_assignment / submit": three sample students do, each in a home
    of their own, through the exchange the copy's nbgrader_config.py names."""
    for student in ("alice", "bob", "carol"):
        home = copy.exchange.parent / "homes" / student
        home.mkdir(parents=True)
        cache = f"--Exchange.cache={home / 'cache'}"
        config = f"--Exchange.root={copy.exchange}"
        nbgrader = str(copy.root / ".venv" / "bin" / "nbgrader")
        for command in (
            [nbgrader, "fetch_assignment", "autograd", cache, config, f"--course={COURSE_ID}"],
            [nbgrader, "submit", "autograd", f"--student={student}", cache, config, f"--course={COURSE_ID}"],
        ):
            if command[1] == "submit":
                shutil.copy(
                    copy.root / SAMPLES / student / "autograd" / "autograd.ipynb", home / "autograd" / "autograd.ipynb"
                )
            done = subprocess.run(
                command, cwd=home, env=copy.env, capture_output=True, text=True, timeout=600, check=False
            )
            assert done.returncode == 0, f"{' '.join(command)}:\n{done.stdout}\n{done.stderr}"


def training_folder(copy: Copy) -> None:
    """docs/grading.md's "a folder of <student>.ipynb": some/folder/ holds one student's training notebook."""
    folder = copy.root / "some" / "folder"
    folder.mkdir(parents=True)
    shutil.copy(copy.root / "release" / "training" / "training.ipynb", folder / "alice.ipynb")


def two_notebooks(copy: Copy) -> None:
    """docs/grading.md's alice.ipynb and bob.ipynb, in the course root."""
    for student in ("alice", "bob"):
        shutil.copy(copy.root / SAMPLES / student / "autograd" / "autograd.ipynb", copy.root / f"{student}.ipynb")


def student_exchange(copy: Copy) -> None:
    """docs/students.md: the student's Jupyter knows the course's exchange (a JupyterHub's nbgrader_config.py; here
    one in the student's folder, which nbgrader reads from the folder it runs in)."""
    (copy.student / "nbgrader_config.py").write_text(
        f"c = get_config()\nc.CourseDirectory.course_id = {COURSE_ID!r}\nc.Exchange.root = {str(copy.exchange)!r}\n"
        f"c.Exchange.cache = {str(copy.student / 'cache')!r}\n",
        encoding="utf-8",
    )


def students_notebook(copy: Copy) -> None:
    """docs/students.md: the fetched notebook, worked through (the sample alice's saved over it)."""
    fetched = copy.student / "autograd" / "autograd.ipynb"
    assert fetched.is_file(), "the student's fetch_assignment gave no autograd/autograd.ipynb"
    shutil.copy(copy.root / SAMPLES / "alice" / "autograd" / "autograd.ipynb", fetched)


SERVER = "a server that runs until it is stopped: tests/service/ start `serve` and talk to it"
DOCKER = "needs docker and an image build (minutes, the network): tests/test_image.py builds it with podman"
NETWORK = "downloads from a package index: the network"
WHEEL = (
    "pip builds the wheel with setuptools fetched from the package index (the network): "
    "tests/test_docs.py's test_the_readmes_wheel_command_builds_the_wheel_students_install runs it"
)
KIT = (
    "the walk-through's step 2 is an edit by hand: tests/test_kit.py runs `new assignment` and `kit write` in "
    "process and releases the new assignment, tests/test_preview.py previews a kit's assignment with a wrong answer "
    "and tests/test_backprop.py grades a wrong notebook of one"
)
DRAFTS = (
    "needs a class graded with shared slips: tests/test_class_insight.py grades a planted class and runs both, "
    "printing and accepting"
)
BENCHMARK = "a measurement taking minutes on an idle machine, whose figures are the page's; not a check"

# Every command of a ```bash block of README.md and docs/*.md, as written (its comment left out).
COMMANDS: dict[str, Run | Skip] = {
    # README.md
    "python3.11 -m venv .venv": Skip("makes the venv the tests run in (this test gives the copy that venv)"),
    ".venv/bin/pip install -e '.[test]'": Skip(NETWORK),
    ".venv/bin/autograd-course grade tests/samples/submitted --out graded": Run(
        prints="6 submissions: 5 graded, 1 failed, 0 timed out, 0 autograder errors"
    ),
    ".venv/bin/python -m pytest -n 4": Skip("the whole suite (this test among it)"),
    ".venv/bin/autograd-course release": Run(),
    ".venv/bin/autograd-course release --students roster.csv": Run(before=roster, fails_with="variants: true"),
    ".venv/bin/nbgrader release_assignment autograd": Run(),
    ".venv/bin/nbgrader collect autograd": Run(before=students_submit),
    ".venv/bin/autograd-course grade --roster roster.csv": Run(before=roster),
    ".venv/bin/nbgrader release_feedback autograd": Run(),
    ".venv/bin/nbgrader export": Run(),
    ".venv/bin/autograd-course export --format canvas --roster roster.csv": Run(before=roster),
    ".venv/bin/autograd-course autograder build": Run(),
    ".venv/bin/autograd-course serve tokens roster.csv --out tokens.csv": Run(before=roster),
    ".venv/bin/autograd-course serve --host 127.0.0.1 --port 8000": Skip(SERVER),
    # docs/service.md, managing the links (after the README's `serve tokens roster.csv`)
    ".venv/bin/autograd-course serve tokens --rotate alice --out tokens.csv": Run(),
    ".venv/bin/autograd-course serve tokens --revoke alice --out tokens.csv": Run(),
    ".venv/bin/autograd-course serve tokens --rotate-instructor --out tokens.csv": Run(),
    ".venv/bin/autograd-course check release/autograd/autograd.ipynb": Run(fails_with="Not ready yet"),
    ".venv/bin/pip wheel --no-deps -w dist .": Skip(WHEEL),
    # docs/gradescope-and-containers.md
    "docker build -f autograder/Dockerfile -t autograd-course-grader .": Skip(DOCKER),
    "docker run --rm --network none --cap-add SYS_ADMIN --cap-add NET_ADMIN -v "
    '"$PWD/submission:/autograder/submission:ro" -v "$PWD/results:/autograder/results" autograd-course-grader': Skip(
        DOCKER
    ),
    "docker build -f autograder/jupyterhub-singleuser.Dockerfile -t autograd-course-student --build-arg "
    "COURSE_ID=autograd-course --build-arg EXCHANGE_ROOT=/srv/nbgrader/exchange .": Skip(DOCKER),
    # docs/authoring.md: the authoring kit's walk-through (its step 2 is an edit of exercises.py by hand)
    ".venv/bin/autograd-course new assignment chain": Skip(KIT),
    ".venv/bin/autograd-course kit write --assignment chain": Skip(KIT),
    ".venv/bin/autograd-course preview --assignment chain --wrong product_df_dx=3": Skip(KIT),
    "mkdir -p /tmp/chain-try/submitted": Skip(KIT),
    "cp preview/chain/notebooks/wrong.ipynb /tmp/chain-try/submitted/alice.ipynb": Skip(KIT),
    ".venv/bin/autograd-course release --assignment chain": Skip(KIT),
    ".venv/bin/autograd-course grade /tmp/chain-try/submitted --assignment chain --out /tmp/chain-try/results": Skip(
        KIT
    ),
    # docs/grading.md
    ".venv/bin/autograd-course grade": Run(),
    ".venv/bin/autograd-course grade some/folder --assignment training --out results": Run(before=training_folder),
    ".venv/bin/autograd-course grade alice.ipynb bob.ipynb --assignment autograd --quiet": Run(before=two_notebooks),
    # docs/performance.md
    ".venv/bin/python tests/benchmarks/grade_throughput.py --sizes 100,400,2000 --mixed 400": Skip(BENCHMARK),
    ".venv/bin/python tests/benchmarks/serve_load.py": Skip(BENCHMARK),
    ".venv/bin/python tests/benchmarks/serve_upload_cpu.py --against ../before": Skip(BENCHMARK),
    ".venv/bin/python tests/benchmarks/serve_processes.py": Skip(BENCHMARK),
    ".venv/bin/python tests/benchmarks/sandbox_cpu.py --runs 40": Skip(BENCHMARK),
    ".venv/bin/python tests/benchmarks/slip_search.py --variants 40": Skip(BENCHMARK),
    ".venv/bin/autograd-course draft-rules --assignment backprop --results results": Skip(DRAFTS),
    ".venv/bin/autograd-course draft-rules --assignment backprop --results results --accept": Skip(DRAFTS),
    ".venv/bin/python tests/benchmarks/isolation_overhead.py": Skip(BENCHMARK),
    # docs/service.md
    "docker run -d --name autograd-serve --cap-add SYS_ADMIN --cap-add NET_ADMIN -p 127.0.0.1:8000:8000 -v "
    '"$PWD:/course" --entrypoint autograd-course autograd-course-grader --course /course serve --host 0.0.0.0 '
    "--port 8000 --forwarded-allow-ips '*'": Skip(DOCKER),
    # docs/students.md
    ".venv/bin/pip install autograd_course-*.whl": Skip(
        NETWORK + " (the wheel's dependencies): tests/test_student_install.py installs it"
    ),
    ".venv/bin/nbgrader fetch_assignment autograd": Run(before=student_exchange, where="student"),
    ".venv/bin/jupyter lab autograd/autograd.ipynb": Skip(SERVER + "; JupyterLab in a browser: tests/browser/"),
    ".venv/bin/jupyter labextension disable --level=sys_prefix @jupyter/nbgrader:formgrader "
    "@jupyter/nbgrader:create-assignment @jupyter/nbgrader:course-list": Skip(
        "changes the Jupyter settings of the venv it runs from (here, the tests' own): a student's venv only"
    ),
    ".venv/bin/jupyter server extension disable --sys-prefix nbgrader.server_extensions.formgrader "
    "nbgrader.server_extensions.course_list": Skip(
        "changes the Jupyter settings of the venv it runs from (here, the tests' own): a student's venv only"
    ),
    ".venv/bin/autograd-course check autograd/autograd.ipynb": Run(before=students_notebook, where="student"),
}


def commands(page: Path | str) -> list[str]:
    """The page's shell commands in its order (`page`: a file, or its text): each line of its ```bash blocks
    (continuation lines joined, the comment left out, whitespace made single), a `&&` list split into its
    commands."""
    found = []
    text = page.read_text(encoding="utf-8") if isinstance(page, Path) else page
    for block in FENCE.findall(text):
        for line in re.sub(r"\\\n", " ", block).splitlines():
            line = " ".join(re.sub(r"(^|\s)#.*$", "", line).split())
            found += [part.strip() for part in line.split(" && ") if part.strip()]
    return found


def test_every_command_of_the_docs_is_classified():
    in_docs = {command: page for page in reversed(PAGES) for command in commands(page)}
    unclassified = [
        f"{page.relative_to(ROOT)}: {command}" for command, page in in_docs.items() if command not in COMMANDS
    ]
    assert not unclassified, (
        "classify each in tests/test_docs_commands.py's COMMANDS (Run, or Skip with why):\n" + "\n".join(unclassified)
    )
    assert sorted(set(COMMANDS) - set(in_docs)) == [], "COMMANDS lists commands no page has any more: remove them"
    for command, what in COMMANDS.items():
        predicted = [said for said in (getattr(what, "fails_with", None), getattr(what, "prints", None)) if said]
        for said in predicted:  # the docs say it: the first page with the command
            page = next(page for page in PAGES if command in commands(page))
            assert said in page.read_text(encoding="utf-8"), f"{page.name} does not say {said!r} of `{command}`"


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_a_shell_command_is_in_a_bash_block(page):
    """A command in a fence of another kind would escape the classification above."""
    for kind, block in re.findall(r"(?ms)^```(\w*)\n(.*?)^```", page.read_text(encoding="utf-8")):
        if kind != "bash":
            assert not re.search(r"^\s*(\$ )?\.venv/bin/", block, re.MULTILINE), (
                f"{page.relative_to(ROOT)}: a ```{kind} block holds a shell command: make it ```bash"
            )


def test_the_command_list_of_a_page():
    page = "```bash\nA=1 x && .venv/bin/y --z '*'   # a comment\n.venv/bin/w \\\n    --v  # more\n```\n"
    assert commands(page) == ["A=1 x", ".venv/bin/y --z '*'", ".venv/bin/w --v"]
    assert commands("```\n.venv/bin/not-bash\n```\n```python\nprint()\n```\n") == []


def fresh_copy(base: Path) -> Copy:
    """What a clone of this checkout holds (its edits and new files included), with the tests' venv as .venv."""
    if shutil.which("git") is None:
        require_tool("git", "the docs' commands run in a copy of what git tracks (apt-get install git)")
    if not (VENV / "bin" / "autograd-course").is_file():
        require_tool("the venv", f"the docs run .venv/bin/...: run the tests from the README's venv, not {VENV}")
    listing = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=False,
    )
    if listing.returncode != 0:
        require_tool("a git checkout", f"the docs' commands run in a copy of what git tracks; {ROOT} is none")
    listed = listing.stdout.decode().split("\0")
    root = base / "clone"
    for name in filter(None, listed):
        source = ROOT / name
        if source.is_file():  # (a file deleted in the work tree but not yet in git's index is not copied)
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, root / name, follow_symlinks=False)
    (root / ".venv").symlink_to(VENV)
    exchange = base / "exchange"
    exchange.mkdir()
    config = root / "nbgrader_config.py"
    text = config.read_text(encoding="utf-8")
    assert EXCHANGE_LINE in text, "nbgrader_config.py no longer sets the exchange's folder as this test expects"
    config.write_text(text.replace(EXCHANGE_LINE, f"c.Exchange.root = {str(exchange)!r}"), encoding="utf-8")
    student = base / "student"
    student.mkdir()
    (student / ".venv").symlink_to(VENV)
    venv_bin = (VENV / "bin").resolve()
    path = os.pathsep.join(
        entry for entry in os.environ.get("PATH", "").split(os.pathsep) if entry and Path(entry).resolve() != venv_bin
    )  # the venv not activated
    env = {**os.environ, "PATH": path, "PYTHONPATH": str(root), "JUPYTER_CONFIG_DIR": str(base / "jupyter")}
    env.pop("VIRTUAL_ENV", None)
    return Copy(root=root, exchange=exchange, student=student, env=env)


@pytest.mark.slow
def test_the_docs_commands_run_as_written(tmp_path):
    copy = fresh_copy(tmp_path)
    which = subprocess.run(
        [".venv/bin/python", "-c", "import course; print(course.__file__)"],
        cwd=copy.root,
        env=copy.env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert Path(which).is_relative_to(copy.root), which  # the copy's code runs, not the venv's install
    done: set[str] = set()
    ran: list[str] = []
    for page in PAGES:
        for command in commands(page):
            what = COMMANDS[command]  # (test_every_command_of_the_docs_is_classified names any missing)
            if isinstance(what, Skip) or command in done:
                continue
            done.add(command)
            if what.before is not None:
                what.before(copy)
            cwd = copy.student if what.where == "student" else copy.root
            result = subprocess.run(
                ["bash", "-c", command], cwd=cwd, env=copy.env, capture_output=True, text=True, timeout=900, check=False
            )
            said = result.stdout + result.stderr
            where = f"{page.relative_to(ROOT)}: `{command}` exited {result.returncode}:\n{said[-3000:]}"
            if what.fails_with is None:
                assert result.returncode == 0, where
            else:
                assert result.returncode != 0, where
                assert what.fails_with in said, f"{where}\n(the page predicts {what.fails_with!r})"
            if what.prints is not None:
                assert what.prints in said, f"{where}\n(the page shows {what.prints!r})"
            ran.append(command)
    assert len(ran) == sum(isinstance(what, Run) for what in COMMANDS.values())
    # what the term's commands were to make, made
    for made in (
        "graded/grades-autograd.csv",
        "grades-autograd.csv",
        "grades.csv",
        "canvas-autograd.csv",
        "tokens.csv",
        "dist/autograd-course-autograd-gradescope.zip",
        "results/grades-training.csv",
    ):
        assert (copy.root / made).is_file(), made
    released = list((copy.exchange / COURSE_ID / "feedback").glob("*.html"))
    assert len(released) == 3  # alice's, bob's and carol's pages, through nbgrader's exchange

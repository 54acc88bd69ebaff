"""The container images, built and run with podman as the docs document them (docs/gradescope-and-containers.md,
docs/service.md): the grader's (autograder/Dockerfile), and the students' JupyterHub single-user image
(autograder/jupyterhub-singleuser.Dockerfile, built after it on the same base: tests/support/student_image.py).

No image registry is needed: the base is Debian bookworm made with mmdebstrap and imported
(`podman build --from` stands in for the Dockerfile's FROM), and torch's CPU wheel is served to the
build from a loopback index (the Dockerfile's TORCH_INDEX_URL), the one pip resolves on this machine.
Skipped, with the reason, where podman or mmdebstrap cannot run or no CPU wheel of torch is at hand.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import jsonschema
import pytest

import course
from tests.support import image_build
from tests.support import student_image as student_image_build
from tests.support.helpers import RELEASE_NOTEBOOK, ROOT, closed_loopback_url
from tests.support.image_build import BASE, IMAGE, Podman
from tests.support.student_image import BUILD_ARGS, DOCKERFILE, STUDENT_IMAGE, build_context

SAMPLES = ROOT / "tests" / "samples" / "submitted"
SCHEMA = json.loads((ROOT / "tests" / "gradescope_results.schema.json").read_text())
# What the docs, the Dockerfile and k8s-job.yaml tell users to grant: bubblewrap creates its namespaces
# with CAP_SYS_ADMIN and brings up the loopback of its network namespace with CAP_NET_ADMIN.
DOCUMENTED_FLAGS = ("--cap-add", "SYS_ADMIN", "--cap-add", "NET_ADMIN")
# Container uids 0..65535 are host uids USERNS_BASE.. here, so the grader's sandbox uids (61000 up) are not
# the host's: another grader on the host (a developer's test run) neither kills nor is killed by ours.
USERNS_BASE = 524288
USERNS = ("--uidmap", f"0:{USERNS_BASE}:65536", "--gidmap", f"0:{USERNS_BASE}:65536")


@pytest.fixture(scope="module")
def podman() -> Iterator[Podman]:
    """The image, built once per run: the build began in the background when the run started (see
    conftest.py), so its minutes of downloading overlap the other tests; here we wait for it."""
    engine = image_build.built_image()
    try:
        yield engine
    finally:
        image_build.remove(engine)


def grade_in_image(podman: Podman, notebook: Path, folder: Path, flags: tuple[str, ...]) -> tuple[dict, str]:
    """Run the image's entry point on one submission; (results.json, the grader's log)."""
    submission, results = folder / "submission", folder / "results"
    submission.mkdir(parents=True)
    shutil.copy(notebook, submission / "autograd.ipynb")
    results.mkdir(mode=0o700)
    os.chown(results, USERNS_BASE, USERNS_BASE)  # the container's root, seen from the host
    completed = podman(
        "run",
        "--rm",
        "--network",
        "none",
        *USERNS,
        *flags,
        "-v",
        f"{submission}:/autograder/submission:ro",
        "-v",
        f"{results}:/autograder/results",
        IMAGE,
        check=False,
        timeout=300,
    )
    log = completed.stdout + completed.stderr
    assert completed.returncode == 0, log
    report = json.loads((results / "results.json").read_text())
    jsonschema.validate(report, SCHEMA)
    return report, log


def sandbox_level(log: str) -> str:
    found = re.findall(r"^sandbox: (\w+):", log, flags=re.MULTILINE)
    assert len(found) == 1, log
    return found[0]


@pytest.mark.slow
@pytest.mark.container
@pytest.mark.parametrize(("student", "score"), [("alice", 57), ("bob", 45), ("frank", 0)])
def test_image_grades_with_the_documented_flags(podman, tmp_path, student, score):
    report, log = grade_in_image(podman, SAMPLES / student / "autograd" / "autograd.ipynb", tmp_path, DOCUMENTED_FLAGS)
    assert report["score"] == score, log
    assert sandbox_level(log) == "bwrap", log
    if student == "frank":
        assert "not a notebook" in report["output"]
    else:
        assert [t["number"] for t in report["tests"]] == [str(n) for n in range(1, 12)]


# Too little for bubblewrap. With `sandbox: auto` the grader refuses (a valid results.json saying so, the reason in
# its log); only a course that asks for `sandbox: uid` is graded at the uid level.
TOO_LITTLE = {
    "no flags": (),
    "SYS_ADMIN without NET_ADMIN (bwrap: loopback: Failed RTM_NEWADDR)": (
        "--cap-add",
        "SYS_ADMIN",
        "--security-opt",
        "seccomp=unconfined",
    ),
}


@pytest.mark.slow
@pytest.mark.container
@pytest.mark.parametrize("flags", list(TOO_LITTLE))
def test_image_refuses_without_namespaces_unless_the_course_accepts_the_uid_level(podman, tmp_path, flags):
    alice = SAMPLES / "alice" / "autograd" / "autograd.ipynb"
    report, log = grade_in_image(podman, alice, tmp_path / "auto", TOO_LITTLE[flags])
    assert report["score"] == 0, log
    assert "misconfigured" in report["output"]
    assert "student code cannot be isolated here and nothing was graded" in log
    course_yaml = tmp_path / "course.yaml"
    course_yaml.write_text((ROOT / "source" / "course.yaml").read_text().replace("sandbox: auto", "sandbox: uid"))
    course_yaml.chmod(0o644)
    report, log = grade_in_image(
        podman,
        alice,
        tmp_path / "uid",
        (*TOO_LITTLE[flags], "-v", f"{course_yaml}:/autograder/source/source/course.yaml:ro"),
    )
    assert report["score"] == 57, log
    assert sandbox_level(log) == "uid", log


@pytest.mark.slow
@pytest.mark.container
def test_image_build_stops_at_once_when_the_torch_index_is_unreachable(podman):
    url = closed_loopback_url()
    started = time.monotonic()
    completed = podman(
        "build",
        "--from",
        BASE,
        "--network",
        "host",
        "--build-arg",
        f"TORCH_INDEX_URL={url}",
        "-f",
        "autograder/Dockerfile",
        "-t",
        "localhost/autograd-course-grader:unreachable",
        str(ROOT),
        check=False,
    )
    seconds = time.monotonic() - started
    assert completed.returncode != 0
    assert f"error: the torch index {url} cannot be reached" in completed.stdout + completed.stderr
    assert "Collecting torch" not in completed.stdout + completed.stderr  # pip never started
    assert seconds < 120, seconds  # the cached layers, then the probe: not minutes of pip retries


def test_the_documented_flags_are_the_tested_ones():
    """The docs, the Dockerfile and the Kubernetes Job grant what the image test grants (runs without podman)."""
    documented = (
        ROOT / "docs" / "gradescope-and-containers.md",
        ROOT / "docs" / "service.md",
        ROOT / "autograder" / "Dockerfile",
    )
    for path in (*documented, ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))):
        commands = re.findall(r"docker run (?:.*\\\n)*.*", path.read_text(encoding="utf-8"))
        assert commands or path not in documented, path
        for command in commands:
            assert " ".join(DOCUMENTED_FLAGS) in command, (path, command)
            assert "seccomp" not in command, (path, command)
    job = (ROOT / "autograder" / "k8s-job.yaml").read_text()
    assert 'capabilities: { add: ["SYS_ADMIN", "NET_ADMIN"] }' in job
    assert "Unconfined" not in re.sub(r"#.*", "", job)


@pytest.mark.slow
@pytest.mark.container
def test_image_runs_the_submission_service(podman, tmp_path):
    """`autograd-course serve` from the image, as the README runs it (a course folder mounted, the documented
    flags; the host's network stands in for a published port), grades an upload in the sandbox."""
    import csv
    import urllib.request

    from tests.support.helpers import copy_course

    course = copy_course(tmp_path / "course")
    (course / "roster.csv").write_text("student_id\nalice\n")
    for path in [course, *course.rglob("*")]:
        os.chown(path, USERNS_BASE, USERNS_BASE)  # the container's root owns the course, as on a real host
    run = ("run", "--rm", *USERNS, *DOCUMENTED_FLAGS, "-v", f"{course}:/course", "--entrypoint", "autograd-course")
    podman(*run, IMAGE, "--course", "/course", "serve", "tokens", "/course/roster.csv", "--out", "/course/tokens.csv")
    with (course / "tokens.csv").open() as stream:
        token = next(csv.DictReader(stream))["token"]
    port = closed_loopback_url().split(":")[2].split("/")[0]
    podman(
        *run[:1],
        "-d",
        "--name",
        "autograd-serve",
        *run[2:],
        "--network",
        "host",
        IMAGE,
        "--course",
        "/course",
        "serve",
        "--host",
        "127.0.0.1",
        "--port",
        port,
        timeout=120,
    )
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/static/dashboard.js", timeout=5)
                break
            except OSError:
                assert time.monotonic() < deadline, podman("logs", "autograd-serve", check=False).stderr
                time.sleep(0.5)
        notebook = (SAMPLES / "alice" / "autograd" / "autograd.ipynb").read_bytes()
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/api/submissions",
            data=notebook,
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=120) as response:  # noqa: S310
            body = json.loads(response.read())
        assert (response.status, body["status"], body["score"]) == (200, "graded", 57)
    finally:
        logs = podman("logs", "autograd-serve", check=False)
        podman("rm", "-f", "autograd-serve", check=False)
    assert "INFO course.platforms.service.run: assignment autograd on http://127.0.0.1:" in logs.stdout + logs.stderr


@pytest.fixture(scope="module")
def student_image() -> Iterator[Podman]:
    """The students' JupyterHub image, built in the background after the grader's, on its base (conftest.py)."""
    engine = student_image_build.built_image()
    try:
        yield engine
    finally:
        image_build.remove(engine)


# Run inside the students' image, as its user: what a JupyterHub user gets, as one JSON object.
IN_STUDENT_IMAGE = r"""
import importlib.metadata as metadata, json, os, re, subprocess, sys
from packaging.requirements import Requirement

def key(name):
    return re.sub(r"[-_.]+", "-", name).lower()

def said(process):
    out, _ = process.communicate()
    return {"code": process.returncode, "said": re.sub(r"\x1b\[[0-9;]*m", "", out)}

commands = {"server_extensions": ["jupyter", "server", "extension", "list"],
            "lab_extensions": ["jupyter", "labextension", "list"],
            "hub_help": ["jupyterhub-singleuser", "--help-all"], "serve": ["autograd-course", "serve"]}
running = {name: subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
           for name, command in commands.items()}  # at once: each is seconds of imports
installed = {key(d.metadata["Name"]): d for d in metadata.distributions()}
needed, todo = set(), [(name, ("",)) for name in sys.argv[1:]]
while todo:  # what the named distributions require, with no extra of theirs: the student's install and the hub's
    name, extras = todo.pop()
    if key(name) in needed or key(name) not in installed:
        continue
    needed.add(key(name))
    for line in installed[key(name)].requires or []:
        requirement = Requirement(line)
        if requirement.marker is None or any(requirement.marker.evaluate({"extra": e}) for e in extras):
            todo.append((requirement.name, ("", *requirement.extras)))
print(json.dumps({
    "uid": os.getuid(),
    "nbgrader_config": open("/etc/jupyter/nbgrader_config.py").read(),
    "not_needed": sorted(set(installed) - needed - {"pip", "setuptools"}),
    "versions": {name: metadata.version(name) for name in ("torch", "autograd-course", "jupyterhub")},
} | {name: said(process) for name, process in running.items()}))
"""


@pytest.mark.slow
@pytest.mark.container
def test_the_student_image_is_a_student_s_install_for_jupyterhub(student_image):
    """What docs/gradescope-and-containers.md promises of the image: the student's install (the wheel without its
    extras) and JupyterHub's single-user server, nothing more; nbgrader's instructor tools off and locked; the
    build's course id and exchange root in /etc/jupyter/nbgrader_config.py; uid 1000."""
    completed = student_image(
        "run", "--rm", STUDENT_IMAGE, "python", "-c", IN_STUDENT_IMAGE, "autograd-course", "jupyterhub", timeout=300
    )
    seen = json.loads(completed.stdout)
    assert seen["uid"] == 1000
    assert seen["nbgrader_config"] == (
        f'c.CourseDirectory.course_id = "{BUILD_ARGS["COURSE_ID"]}"\n'
        f'c.Exchange.root = "{BUILD_ARGS["EXCHANGE_ROOT"]}"\n'
    )
    assert seen["not_needed"] == []  # nothing of the grader's or the service's extras but what nbgrader needs
    hub_pin = re.search(r"jupyterhub==([\w.]+)", DOCKERFILE.read_text()).group(1)
    assert seen["versions"] == {
        "torch": f"{image_build.torch_pin()}+cpu",
        "autograd-course": course.__version__,
        "jupyterhub": hub_pin,
    }
    servers = seen["server_extensions"]["said"]
    for extension, state in (
        ("formgrader", "disabled"),
        ("course_list", "disabled"),
        ("assignment_list", "enabled"),
        ("validate_assignment", "enabled"),
    ):
        assert f"nbgrader.server_extensions.{extension} {state}" in servers, servers
    lab = seen["lab_extensions"]["said"]
    plugins = ("course-list", "create-assignment", "formgrader")
    assert lab[lab.index("Disabled extensions:") :].split() == [
        "Disabled",
        "extensions:",
        *(f"@jupyter/nbgrader:{p}" for p in plugins),
    ], lab
    assert f"(plugins: {', '.join(f'@jupyter/nbgrader:{p}' for p in plugins)} locked)" in lab, lab
    assert seen["hub_help"]["code"] == 0, seen["hub_help"]
    assert "--JupyterHubSingleUser.hub_activity_interval" in seen["hub_help"]["said"]
    assert seen["serve"]["code"] == 1
    assert "autograd-course serve is the instructor's and needs the service extra" in seen["serve"]["said"]


# `check` runs its sandbox (bubblewrap in a user namespace: the image runs as uid 1000) only where the container may
# mount a new /proc; podman's default masks parts of the container's /proc, and then check refuses, saying why.
CHECK_FLAGS = {"the engine's defaults": (), "unmask=/proc/*": ("--security-opt", "unmask=/proc/*")}


@pytest.mark.slow
@pytest.mark.container
@pytest.mark.parametrize("flags", list(CHECK_FLAGS))
def test_check_in_the_student_image_runs_where_the_container_may_mount_proc(student_image, flags):
    release = f"{RELEASE_NOTEBOOK.parent}:/home/jovyan/work:ro"  # release/autograd/, as nbgrader's fetch gives it
    completed = student_image(
        "run",
        "--rm",
        *CHECK_FLAGS[flags],
        "-v",
        release,
        "-w",
        "/home/jovyan/work",
        STUDENT_IMAGE,
        "autograd-course",
        "check",
        RELEASE_NOTEBOOK.name,
        check=False,
        timeout=300,
    )
    said = completed.stdout + completed.stderr
    assert completed.returncode == 1, said  # refused, or (below) not ready: nothing is answered in a release
    assert "Traceback" not in said, said
    if flags == "the engine's defaults":
        assert completed.stdout == "", said  # nothing of the notebook ran
        last = completed.stderr.splitlines()[-1]
        assert last.startswith("autograd-course check: sandbox: "), said
        assert "could not start this Python in new namespaces" in last, said
        assert "Can't mount proc" in completed.stderr, said  # bubblewrap's own words, in the log line before
    else:
        lines = completed.stdout.splitlines()
        assert lines[0].startswith("This is the notebook as released: nothing in it is answered yet."), said
        assert any(line.startswith("[todo] 1. ") for line in lines), said
        assert lines[-2].startswith("Not ready yet"), said
        assert lines[-1].startswith("sandbox: userns: "), said


@pytest.mark.slow
@pytest.mark.container
def test_the_student_image_build_refuses_a_dist_with_two_wheels(student_image, tmp_path):
    """A dist/ that also holds an older wheel: the build stops at once, saying so, rather than give pip both."""
    context = build_context(tmp_path / "context")
    [wheel] = context.glob("dist/*.whl")
    shutil.copy(wheel, context / "dist" / "autograd_course-0.0.1-py3-none-any.whl")
    completed = student_image(
        "build",
        "--from",
        BASE,
        "-f",
        str(DOCKERFILE),
        "-t",
        "localhost/autograd-course-student:two-wheels",
        str(context),
        check=False,
        timeout=300,
    )
    assert completed.returncode != 0
    assert "error: dist/ holds 2 autograd_course wheels" in completed.stdout + completed.stderr

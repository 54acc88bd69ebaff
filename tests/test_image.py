"""The container image (autograder/Dockerfile), built and run with podman as the README documents it.

No image registry is needed: the base is Debian bookworm made with mmdebstrap and imported
(`podman build --from` stands in for the Dockerfile's FROM), and torch's CPU wheel is served to the
build from a loopback index (the Dockerfile's TORCH_INDEX_URL), the one pip resolves on this machine.
Skipped, with the reason, where podman or mmdebstrap cannot run or no CPU wheel of torch is at hand.
"""

from __future__ import annotations

import json
import os
import re
import resource
import shutil
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path

import jsonschema
import pytest

from helpers import ROOT, closed_loopback_url, serve_folder

SAMPLES = ROOT / "tests" / "samples" / "submitted"
SCHEMA = json.loads((ROOT / "tests" / "gradescope_results.schema.json").read_text())
IMAGE = "localhost/autograd-course-grader:test"
BASE = "localhost/autograd-course-base:bookworm"
# What the README, the Dockerfile and k8s-job.yaml tell users to grant: bubblewrap creates its namespaces
# with CAP_SYS_ADMIN and brings up the loopback of its network namespace with CAP_NET_ADMIN.
DOCUMENTED_FLAGS = ("--cap-add", "SYS_ADMIN", "--cap-add", "NET_ADMIN")
# Container uids 0..65535 are host uids USERNS_BASE.. here, so the grader's sandbox uids (61000 up) are not
# the host's: another grader on the host (a developer's test run) neither kills nor is killed by ours.
USERNS_BASE = 524288
USERNS = ("--uidmap", f"0:{USERNS_BASE}:65536", "--gidmap", f"0:{USERNS_BASE}:65536")
# podman 4.3 runs conmon with at most 32768 processes; runc cannot set a container's limits above it
PODMAN_ULIMIT_CAP = 32768


def torch_pin() -> str:
    dependencies = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    return next(d.split("==")[1] for d in dependencies if d.startswith("torch=="))


def containers_conf(folder: Path) -> Path:
    """runc and cgroupfs (crun and systemd cgroups need what CI machines may lack), events in a file,
    and ulimits no higher than root may set here (podman's defaults exceed them)."""
    limits = []
    for name, kind in (("nofile", resource.RLIMIT_NOFILE), ("nproc", resource.RLIMIT_NPROC)):
        hard = resource.getrlimit(kind)[1]
        value = PODMAN_ULIMIT_CAP if hard == resource.RLIM_INFINITY else min(hard, PODMAN_ULIMIT_CAP)
        limits.append(f'"{name}={value}:{value}"')
    path = folder / "containers.conf"
    path.write_text(
        f"[containers]\ndefault_ulimits = [{', '.join(limits)}]\n\n"
        f'[engine]\nruntime = "runc"\ncgroup_manager = "cgroupfs"\nevents_logger = "file"\n'
        f'events_logfile_path = "{folder / "events.log"}"\n'
    )
    return path


class Podman:
    """podman with its own storage and configuration under one folder, removed afterwards."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                    "CONTAINERS_CONF": str(containers_conf(folder)), "HOME": str(folder)}
        self.prefix = ["podman", "--root", str(folder / "storage"), "--runroot", str(folder / "run"),
                       "--tmpdir", str(folder / "libpod")]

    def __call__(self, *args: str, check: bool = True, timeout: float = 900) -> subprocess.CompletedProcess:
        completed = subprocess.run([*self.prefix, *args], env=self.env, capture_output=True, text=True,
                                   timeout=timeout, check=False)
        if check and completed.returncode != 0:
            pytest.fail(f"podman {' '.join(args[:2])} failed ({completed.returncode}):\n"
                        f"{completed.stdout[-3000:]}\n{completed.stderr[-3000:]}")
        return completed


def skip_reason(podman: Podman) -> str | None:
    if sys.platform != "linux" or not hasattr(resource, "RLIMIT_NPROC"):
        return "the image test needs Linux"
    if os.geteuid() != 0:
        return "the image test needs root (mmdebstrap and rootful podman)"
    missing = [tool for tool in ("podman", "runc", "mmdebstrap") if not shutil.which(tool)]
    if missing:
        return f"{', '.join(missing)} not installed (apt-get install podman buildah runc mmdebstrap uidmap)"
    info = podman("info", check=False, timeout=120)
    if info.returncode != 0:
        return f"podman cannot run here: podman info failed: {info.stderr.strip()[-500:]}"
    return None


def cpu_torch_wheel(into: Path) -> Path | str:
    """The CPU wheel of the pinned torch for the image's Python (3.11), as pip on this machine finds it,
    or why there is none. Asking for the +cpu version never downloads the CUDA build."""
    into.mkdir(parents=True)
    completed = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
         "--python-version", "3.11", "--platform", "manylinux_2_28_x86_64", "-d", str(into),
         f"torch=={torch_pin()}+cpu"],
        capture_output=True, text=True, timeout=600, check=False,
    )
    wheels = sorted(into.glob("torch-*+cpu-*.whl"))
    if completed.returncode != 0 or not wheels:
        return (f"pip finds no CPU wheel of torch=={torch_pin()} for Python 3.11 here (the CPU index is "
                "unreachable and PyPI's torch is the multi-GB CUDA build)")
    return wheels[0]


def write_index(wheel: Path, folder: Path) -> None:
    """A PEP 503 index of one wheel: folder/simple/torch/."""
    project = folder / "simple" / "torch"
    project.mkdir(parents=True)
    wheel.rename(project / wheel.name)
    quoted = wheel.name.replace("+", "%2B")
    (project / "index.html").write_text(f'<!DOCTYPE html>\n<a href="{quoted}">{wheel.name}</a>\n')


def build_base(podman: Podman, folder: Path) -> None:
    """Debian bookworm with Python 3.11 and pip, standing in for python:3.11-slim."""
    tarball = folder / "base.tar"
    hooks = [
        # pip inside the build must trust what the host trusts (a proxy's CA, say)
        "upload /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt",
        # like python:3.11-slim, the image's pip installs into the system Python
        'rm -f "$1"/usr/lib/python3*/EXTERNALLY-MANAGED',
    ]
    command = ["mmdebstrap", "--quiet", "--variant=minbase",
               "--include=python3,python3-pip,python-is-python3,ca-certificates"]
    command += [f"--customize-hook={hook}" for hook in hooks]
    completed = subprocess.run([*command, "bookworm", str(tarball)], capture_output=True, text=True,
                               timeout=900, check=False)
    if completed.returncode != 0:
        pytest.fail(f"mmdebstrap failed:\n{completed.stderr[-3000:]}")
    podman("import", "--change", "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
           str(tarball), BASE)
    tarball.unlink()


@pytest.fixture(scope="module")
def podman(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Podman]:
    folder = tmp_path_factory.mktemp("podman")
    engine = Podman(folder)
    reason = skip_reason(engine)
    if reason:
        pytest.skip(reason)
    wheel = cpu_torch_wheel(folder / "wheel")
    if isinstance(wheel, str):
        pytest.skip(wheel)
    try:
        build_base(engine, folder)
        write_index(wheel, folder / "index")
        with serve_folder(folder / "index") as base:  # on loopback: the build runs with --network host
            engine("build", "--from", BASE, "--network", "host", "--build-arg", f"TORCH_INDEX_URL={base}/simple",
                   "-f", "autograder/Dockerfile", "-t", IMAGE, str(ROOT), timeout=1800)
        yield engine
    finally:
        engine("system", "reset", "--force", check=False)
        shutil.rmtree(folder, ignore_errors=True)


def grade_in_image(podman: Podman, notebook: Path, folder: Path, flags: tuple[str, ...]) -> tuple[dict, str]:
    """Run the image's entry point on one submission; (results.json, the grader's log)."""
    submission, results = folder / "submission", folder / "results"
    submission.mkdir(parents=True)
    shutil.copy(notebook, submission / "autograd.ipynb")
    results.mkdir(mode=0o700)
    os.chown(results, USERNS_BASE, USERNS_BASE)  # the container's root, seen from the host
    completed = podman("run", "--rm", "--network", "none", *USERNS, *flags,
                       "-v", f"{submission}:/autograder/submission:ro", "-v", f"{results}:/autograder/results",
                       IMAGE, check=False, timeout=300)
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
    report, log = grade_in_image(podman, SAMPLES / student / "autograd" / "autograd.ipynb", tmp_path,
                                 DOCUMENTED_FLAGS)
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
    "SYS_ADMIN without NET_ADMIN (bwrap: loopback: Failed RTM_NEWADDR)": ("--cap-add", "SYS_ADMIN", "--security-opt",
                                                                          "seccomp=unconfined"),
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
    report, log = grade_in_image(podman, alice, tmp_path / "uid", (
        *TOO_LITTLE[flags], "-v", f"{course_yaml}:/autograder/source/source/course.yaml:ro"))
    assert report["score"] == 57, log
    assert sandbox_level(log) == "uid", log


@pytest.mark.slow
@pytest.mark.container
def test_image_build_stops_at_once_when_the_torch_index_is_unreachable(podman):
    url = closed_loopback_url()
    started = time.monotonic()
    completed = podman("build", "--from", BASE, "--network", "host", "--build-arg", f"TORCH_INDEX_URL={url}",
                       "-f", "autograder/Dockerfile", "-t", "localhost/autograd-course-grader:unreachable", str(ROOT),
                       check=False)
    seconds = time.monotonic() - started
    assert completed.returncode != 0
    assert f"error: the torch index {url} cannot be reached" in completed.stdout + completed.stderr
    assert "Collecting torch" not in completed.stdout + completed.stderr  # pip never started
    assert seconds < 120, seconds  # the cached layers, then the probe: not minutes of pip retries


def test_the_documented_flags_are_the_tested_ones():
    """README, Dockerfile and the Kubernetes Job grant what the image test grants (runs without podman)."""
    for path in (ROOT / "README.md", ROOT / "autograder" / "Dockerfile"):
        commands = re.findall(r"docker run (?:.*\\\n)*.*", path.read_text())
        assert commands, path
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

    from helpers import copy_course

    course = copy_course(tmp_path / "course")
    (course / "roster.csv").write_text("student_id\nalice\n")
    for path in [course, *course.rglob("*")]:
        os.chown(path, USERNS_BASE, USERNS_BASE)  # the container's root owns the course, as on a real host
    run = ("run", "--rm", *USERNS, *DOCUMENTED_FLAGS, "-v", f"{course}:/course", "--entrypoint", "autograd-course")
    podman(*run, IMAGE, "--course", "/course", "serve", "tokens", "/course/roster.csv", "--out", "/course/tokens.csv")
    with (course / "tokens.csv").open() as stream:
        token = next(csv.DictReader(stream))["token"]
    port = closed_loopback_url().split(":")[2].split("/")[0]
    podman(*run[:1], "-d", "--name", "autograd-serve", *run[2:], "--network", "host", IMAGE, "--course", "/course",
           "serve", "--host", "127.0.0.1", "--port", port, timeout=120)
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
        request = urllib.request.Request(f"http://127.0.0.1:{port}/api/submissions", data=notebook,
                                         headers={"Authorization": f"Bearer {token}",
                                                  "Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=120) as response:  # noqa: S310
            body = json.loads(response.read())
        assert (response.status, body["status"], body["score"]) == (200, "graded", 57)
    finally:
        logs = podman("logs", "autograd-serve", check=False)
        podman("rm", "-f", "autograd-serve", check=False)
    assert "serve: assignment autograd on http://127.0.0.1:" in logs.stdout + logs.stderr

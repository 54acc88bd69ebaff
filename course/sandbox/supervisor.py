"""The grader's side of one run, however it was started: read its output and messages, keep its clocks,
end it, and turn what came back into plain data."""

from __future__ import annotations

import os
import selectors
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from course.core.answers import NOT_REPORTED, Answer, decode_answer
from course.core.config import Limits
from course.core.text import MAX_ERROR_TEXT, safe_text
from course.sandbox.handed_in import Cell
from course.sandbox.limits import CPU_GRACE_SECONDS
from course.sandbox.memory import memory_sentence
from course.sandbox.protocol import EventReader

EXIT_GRACE_SECONDS = 2.0
# How long a run may take to reach its runner's `ready` (interpreter start and torch import for a cold run, a
# fork for a warm one): nothing of the student's runs before it, so none of it counts against their limits, and
# a run that does not get there in time ran no student code (an autograder error, tried again: retry.py).
START_SECONDS = 60.0
# Between two looks at a running notebook's channel the supervisor waits this long, so that the reports of a
# burst of short cells are read in one wake-up rather than one each (an honest notebook's 25 cells run in a few
# tens of milliseconds: 35 wake-ups a run became 12, about 1 ms less of the grader's CPU a run). A cell's clock
# starts when its predecessor's report is read, so it may start up to this much late (in the student's favour:
# nothing against limits of seconds, and never past the submission's deadline, which is the grader's own clock).
# Not after a look that read output: a notebook that prints fills its pipe, and waits, until the grader reads it.
GATHER_SECONDS = 0.002


@dataclass(frozen=True)
class CellOutcome:
    index: int
    label: str
    error: str | None


@dataclass(frozen=True)
class RunResult:
    """Everything the grader learns from one sandboxed run: plain data only."""

    answers: dict[str, Answer]
    cells: tuple[CellOutcome, ...]
    output: str
    output_truncated: bool
    limit_hit: str | None
    ended_early: str | None
    isolation: str
    seconds: float
    notes: tuple[str, ...] = field(default_factory=tuple)
    ready: bool = False  # the runner said `ready`, which it sends before any student code (see cold.py)


@dataclass
class Supervised:
    """What the supervisor needs of a running sandbox, however it was started."""

    output_fd: int
    channel_fd: int
    kill: Callable[[], None]
    exit_code: Callable[[float], int | None]  # waits up to the given seconds; None if still running
    cpu_seconds: Callable[[], float | None]  # the kernel's count for the ended run (None: not known)
    # Seconds of the run so far in which it was kept waiting for a processor (giving_way.py): not counted
    # against a cell's limit, up to one more limit.
    waited: Callable[[], float] = lambda: 0.0
    # Whether the run's processes together went over the memory limit (memory.py: the kernel's kill in the run's
    # cgroup, or the accounting's sum), asked on every tick and once more after the run.
    over_memory: Callable[[], bool] = lambda: False
    look_every: float = 0.1  # the longest the supervisor waits between two ticks (shorter for memory accounting)
    # Called once, when the runner's `ready` arrives (before any student code): the memory bound counts from there.
    at_ready: Callable[[], None] = lambda: None


class _Protocol:
    """What the grader accepts on a run's answer channel, and the clock of each cell.

    Only the first message, `ready`, is sent before student code runs; every later one could be forged by
    it. So the grader believes no message about time: each cell's clock is the grader's own, started when
    the previous cell's `done` (or `ready`) arrives, and a `done` is accepted only for the next cell of the
    request, in order, once each; anything else ends the run. A forged message can therefore only stop a
    cell's clock early and start the next one: it can never restart a clock, add one or move the
    submission's deadline (`submission_seconds` from `ready`), so a run lasts at most one `cell_seconds` per cell
    (two when it was kept waiting
    for a processor: giving_way.py, the kernel's count) and `submission_seconds` in all.
    """

    def __init__(
        self, cells: list[Cell], answer_names: tuple[str, ...], function_points: dict[str, list[float]], started: float
    ) -> None:
        self.order = [cell.index for cell in cells]
        self.answer_names, self.function_points = answer_names, function_points
        self.position = -1  # -1: waiting for ready; len(order): every cell done
        self.clock = started
        self.ready_at = started  # when `ready` came: the submission's clock starts there
        self.confined: bool | None = None
        self.harvested: dict[str, Answer] = {}  # each answer name's answer as last reported, decoded
        self.outcomes: list[tuple[int, str | None]] = []
        self.finished = False
        self.finished_at = 0.0  # when `finished` was read (the grader's clock): its grace to exit starts there
        self.violation = ""

    @property
    def running_cell(self) -> int | None:
        return self.order[self.position] if 0 <= self.position < len(self.order) else None

    def accept(self, event: dict[str, Any], now: float) -> None:
        kind = event.get("event")
        if self.position == -1 and kind == "ready":
            self.confined = event.get("confined") is True
            self.position, self.clock, self.ready_at = 0, now, now
        elif kind == "done" and self.running_cell is not None and event.get("cell") == self.running_cell:
            error = event.get("error")
            self.outcomes.append((self.running_cell, error if type(error) is str else None))
            self._report(event.get("answers"))
            self.position, self.clock = self.position + 1, now
        elif kind == "finished" and self.position == len(self.order) and not self.finished:
            self._report(event.get("answers"))
            self.finished = True
        else:
            self.violation = "a message out of the grader's order"

    def _report(self, changed: Any) -> None:
        """An event's answers are those that changed since the last report: each replaces the name's last one.
        Only the contract's names are kept, each decoded as it comes (an Answer is bounded: a forged report of a
        4 MB line per name keeps no more than an honest one)."""
        if type(changed) is dict:
            for name in self.answer_names:
                if name in changed:
                    self.harvested[name] = decode_answer(changed[name], self.function_points.get(name))


def supervise(
    run: Supervised,
    cells: list[Cell],
    answer_names: tuple[str, ...],
    function_points: dict[str, list[float]],
    limits: Limits,
    level: str,
    note: str,
    started: float,
) -> RunResult:
    """Read output and events of one run, enforce the time limits, and turn what came back into plain data."""
    protocol = _Protocol(cells, answer_names, function_points, started)
    streams = _Streams(output_limit=limits.output_kb * 1024)
    clock = _CellClock()
    limit_hit = _watch(run, protocol, streams, clock, limits, started)
    returncode = _end(run, finished_in_time=protocol.finished and not limit_hit)
    seconds = time.monotonic() - started
    # The kernel may have killed a process of the run for its memory between two looks, as the run ended (its end,
    # then, may be that kill): a run that went over the limit is named so however it ended, the same every time.
    if limit_hit is None and run.over_memory():
        limit_hit = "memory_mb"
    labels = {c.index: c.label for c in cells}
    ended_early = _ended_early(limit_hit, protocol, streams.channel, labels, limits, clock.credit, returncode)
    if _ended_by_its_cpu_limit(run, returncode, limits):
        limit_hit = limit_hit or "cpu_seconds"
    notes = [note] if note else []
    if protocol.confined is False:
        notes.append("The system-call filter could not be installed on this machine's architecture.")
    # After an early end each name's last report stands (function results included).
    answers = {name: protocol.harvested.get(name, NOT_REPORTED) for name in answer_names}
    return RunResult(
        answers=answers,
        cells=tuple(
            CellOutcome(
                index,
                labels.get(index, f"cell {index}"),
                safe_text(error, MAX_ERROR_TEXT) if error is not None else None,
            )
            for index, error in protocol.outcomes
        ),
        output=safe_text(streams.output.decode("utf-8", errors="replace"), streams.output_limit),
        output_truncated=streams.output_total > len(streams.output),
        limit_hit=limit_hit or ("output_kb" if streams.output_total > streams.output_limit else None),
        ended_early=ended_early,
        isolation=level,
        seconds=seconds,
        notes=tuple(notes),
        ready=protocol.confined is not None,
    )


@dataclass
class _Streams:
    """What a run wrote: its output (kept up to the limit, every byte counted) and its answer channel."""

    output_limit: int
    output: bytearray = field(default_factory=bytearray)
    output_total: int = 0
    channel: EventReader = field(default_factory=EventReader)

    def keep_output(self, data: bytes) -> None:
        self.output_total += len(data)
        if len(self.output) < self.output_limit:
            self.output += data[: self.output_limit - len(self.output)]


@dataclass
class _CellClock:
    """The running cell's limit: `credit` is what it is not charged, its wait for a processor, up to one more limit."""

    position: int = -1  # the position of the cell being timed
    waited_when_it_began: float = 0.0  # what the run had waited when it began
    credit: float = 0.0

    def over(self, run: Supervised, protocol: _Protocol, limits: Limits, now: float) -> bool:
        waited = run.waited()
        if self.position != protocol.position:
            self.position, self.waited_when_it_began = protocol.position, waited
        self.credit = min(limits.cell_seconds, waited - self.waited_when_it_began)
        return now > protocol.clock + limits.cell_seconds + self.credit


def _watch(
    run: Supervised, protocol: _Protocol, streams: _Streams, clock: _CellClock, limits: Limits, started: float
) -> str | None:
    """Read the run's output and messages until both streams close, the channel is broken, the run has finished
    (and its grace to exit has passed) or a limit is reached: the limit, if one was."""
    with selectors.DefaultSelector() as selector:
        selector.register(run.output_fd, selectors.EVENT_READ, "output")
        selector.register(run.channel_fd, selectors.EVENT_READ, "channel")
        open_streams = 2
        gather = False
        while open_streams and not (streams.channel.broken or protocol.violation):
            now = time.monotonic()
            if protocol.finished and now > protocol.finished_at + EXIT_GRACE_SECONDS:
                return None
            limit_hit = _limit_reached(run, protocol, clock, limits, started, now)
            if limit_hit:
                return limit_hit
            if gather and protocol.position >= 0 and not protocol.finished:
                time.sleep(GATHER_SECONDS)  # a burst of cells' reports is read in one look (see GATHER_SECONDS)
            gather = True
            for key, _ in selector.select(timeout=run.look_every):
                data = os.read(key.fd, 65536)
                if not data:
                    selector.unregister(key.fd)
                    open_streams -= 1
                elif key.data == "output":
                    gather = False  # output is drained at once: a notebook blocked on a full pipe is not kept waiting
                    streams.keep_output(data)
                else:
                    _take_messages(run, protocol, streams.channel.feed(data))
    return None


def _limit_reached(
    run: Supervised, protocol: _Protocol, clock: _CellClock, limits: Limits, started: float, now: float
) -> str | None:
    ready = protocol.confined is not None
    # Until `ready`, the start-up's bound; from it, the submission's own limit.
    if now > (protocol.ready_at + limits.submission_seconds if ready else started + START_SECONDS):
        return "submission_seconds" if ready else "start_seconds"
    if run.over_memory():
        return "memory_mb"
    if protocol.running_cell is not None and clock.over(run, protocol, limits, now):
        return "cell_seconds"
    return None


def _take_messages(run: Supervised, protocol: _Protocol, events: list[dict[str, Any]]) -> None:
    for event in events:
        was_ready = protocol.confined is not None
        protocol.accept(event, time.monotonic())
        if not was_ready and protocol.confined is not None:
            run.at_ready()
        if protocol.violation:
            break
        if protocol.finished and not protocol.finished_at:
            protocol.finished_at = time.monotonic()


def _end(run: Supervised, *, finished_in_time: bool) -> int | None:
    """The run's exit code, once everything it started is ended: children or threads the notebook left behind die
    with it."""
    returncode = run.exit_code(EXIT_GRACE_SECONDS if finished_in_time else 0.0)
    run.kill()
    if returncode is None:
        returncode = run.exit_code(EXIT_GRACE_SECONDS)
    return returncode


def _ended_early(
    limit_hit: str | None,
    protocol: _Protocol,
    channel: EventReader,
    labels: dict[int, str],
    limits: Limits,
    credit: float,
    returncode: int | None,
) -> str | None:
    """Why the run ended before its last cell was done, in a sentence for the student; None if it did not."""
    current_cell = protocol.running_cell
    current_label = labels.get(current_cell, "a cell") if current_cell is not None else "a cell"
    if limit_hit == "cell_seconds":
        beside = f" (not counting {credit:.1f} s it waited for a processor)" if credit >= 0.1 else ""
        return (
            f"{current_label} ran longer than the limit of "
            f"{limits.cell_seconds:g} s per cell{beside}, so the run was stopped there"
        )
    if limit_hit == "submission_seconds":
        return f"the notebook ran longer than the limit of {limits.submission_seconds:g} s, so the run was stopped"
    if limit_hit == "memory_mb":
        where = (
            f"during {current_label}"
            if current_cell is not None
            else "after the last cell"
            if protocol.position == len(protocol.order)
            else "between cells"
        )
        return f"{memory_sentence(limits.memory_mb)} ({where})"
    if limit_hit == "start_seconds":
        return f"the sandbox did not start within {START_SECONDS:g} s (before any cell)"
    if channel.broken or protocol.violation:
        return (
            "the notebook wrote over the grader's answer channel "
            f"({channel.broken or protocol.violation}), so the run was stopped there; answers "
            "reported after that point were ignored"
        )
    if protocol.finished:
        return None
    if current_cell is not None:
        where = labels.get(current_cell, "start-up")
    else:  # before the runner's `ready` nothing of the notebook had run yet
        where = "between cells" if protocol.confined is not None else "start-up (before any cell)"
    if returncode == 0:
        return (
            f"the Python process stopped during {where} before grading finished "
            "(it exited, or the cell broke the grader's reporting inside the sandbox)"
        )
    return f"the Python process ended during {where} ({_exit_text(returncode)})"


def _ended_by_its_cpu_limit(run: Supervised, returncode: int | None, limits: Limits) -> bool:
    """The CPU limit is named only when the run ended by SIGXCPU (bubblewrap reports a signal as 128 + n) *and* the
    kernel's own account of its CPU time reaches the limit: student code can send itself the signal, or lower its
    own limit, but not fake the CPU time."""
    cpu = run.cpu_seconds()
    by_sigxcpu = returncode in (-signal.SIGXCPU, 128 + signal.SIGXCPU)
    return by_sigxcpu and cpu is not None and cpu >= (limits.submission_seconds + CPU_GRACE_SECONDS) * 0.99


def _exit_text(returncode: int | None) -> str:
    if returncode is None:
        return "it was stopped"
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit code {returncode}"

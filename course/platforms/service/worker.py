"""The service's grading: threads that take queued attempts in the scheduler's order (fair between students,
honest work first: course/platforms/service/schedule.py) and grade each through
`grading.grade_submission` on one warm pool kept up for the server's life, with the late policy of
`term.late_policy_at` (at the time the service received the notebook). The same engine as
`autograd-course grade`: nothing of the batch's guarantees is redone or loosened here."""

from __future__ import annotations

import fcntl
import logging
import os
import secrets
import shutil
import threading
from collections.abc import Callable
from datetime import datetime
from functools import partial
from pathlib import Path

from course import sandbox
from course.core.config import AssignmentSettings, CourseConfig
from course.core.errors import CourseError, NotThisAssignment, SubmissionError
from course.core.status import Status
from course.core.text import safe_text
from course.pipeline.assignment import Assignment
from course.pipeline.discovery import SubmissionRef
from course.pipeline.grading import grade_submission
from course.pipeline.release_cells import released_code_cells
from course.pipeline.run_context import RunContext
from course.pipeline.selftest import SelfTest, proven_setup
from course.pipeline.submission import other_assignment, read_submission
from course.platforms.service.heap import give_back_freed_memory
from course.platforms.service.policy import ServicePolicy, attempt_numbers
from course.platforms.service.schedule import LONG_GRADING_SECONDS, Scheduler
from course.platforms.service.shared import SharedQueue
from course.platforms.service.store import Attempt, GradedAttempt, Store
from course.term.nbgrader_bridge import assignment_due
from course.term.nbgrader_term import late_policy_at

log = logging.getLogger(__name__)

IDLE_POLL_SECONDS = 2.0  # a worker with nothing to do looks at the queue again this often (or when woken)
SCRATCH = "service-work"  # in the course root: uploads spooled while they arrive, exports while they are made


def scratch_folder(config: CourseConfig, assignment_name: str) -> Path:
    """Where the server of `assignment_name` keeps its work files (an upload's body past a small size while it
    arrives, an export while it is made; attempts are graded from the stored bytes): in the course root beside
    its database, never in /tmp, so a server that is killed leaves nothing behind that its next start does not
    clear (`Grader`)."""
    return config.root / SCRATCH / assignment_name


def _try_lock(path: Path) -> int | None:
    """An exclusive lock on `path`, held by the returned descriptor (None: another process holds it)."""
    descriptor = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(descriptor)
        return None
    return descriptor


def _hold_lock(path: Path, assignment_name: str) -> int:
    """An exclusive lock on `path`, held (by the returned descriptor) while this server runs: a second server of
    the same assignment on this course's SQLite database would clear the first one's attempts and grade its
    queue twice."""
    descriptor = _try_lock(path)
    if descriptor is None:
        raise CourseError(
            f"another `autograd-course serve` of assignment {assignment_name!r} is running on this course "
            f"(it holds {path}); a SQLite database serves one process: stop it first, or run every "
            f"process on one PostgreSQL database (--database postgresql+psycopg://...)"
        )
    return descriptor


def _own_folder(scratch: Path) -> tuple[int, Path]:
    """A folder of this process's own in `scratch`, locked while it runs (PostgreSQL: many processes of one
    assignment may share a course folder). What processes that are gone left behind goes first."""
    for lock in scratch.glob("process-*.lock"):
        descriptor = _try_lock(lock)
        if descriptor is not None:  # its process is gone: its attempts are graded again, from the database
            shutil.rmtree(lock.with_suffix(""), ignore_errors=True)
            lock.unlink(missing_ok=True)
            os.close(descriptor)
    while True:
        lock = scratch / f"process-{secrets.token_hex(6)}.lock"
        descriptor = _try_lock(lock)
        if descriptor is None:
            continue
        try:
            ours = os.path.samestat(os.fstat(descriptor), os.stat(lock))  # not removed by another start meanwhile
        except FileNotFoundError:  # removed by another start's clean-up between our open and our lock
            ours = False
        if ours:
            folder = lock.with_suffix("")
            folder.mkdir(mode=0o700)
            return descriptor, folder
        os.close(descriptor)


class Grader:
    """Grading threads (`pool.threads`) on a warm pool of `jobs` workers and two standby workers; `wake()` after
    storing an attempt, `listeners` are called with each attempt whose results were recorded, as recorded."""

    def __init__(self, context: RunContext, store: Store, policy: ServicePolicy, *, jobs: int | None = None) -> None:
        """`context`: the run's, built once by the service's front end (run_context.open_run: the course secret
        checked there, so a missing or readable one stops the server before it takes any work); its due date, when
        the YAML gives none, is the gradebook's, read here once."""
        config = context.config
        if context.due is None:
            context = context.with_due(assignment_due(config.gradebook_url, config.root / "gradebook.db", context.name))
        self.context, self.config, self.store, self.policy = context, config, store, policy
        self.jobs = sandbox.default_jobs() if jobs is None else jobs
        self.scratch = scratch_folder(config, self.settings.name)
        try:
            self.scratch.parent.mkdir(mode=0o700, exist_ok=True)  # students' uploads: the grader's user only
            for folder in (self.scratch.parent, self.scratch):
                if folder.is_symlink():
                    raise CourseError(
                        f"{folder} is a symbolic link; the service keeps its work files (uploads as "
                        "they arrive) there and clears it at start-up: make it a plain folder or "
                        "remove it"
                    )
            if store.shared:
                self.scratch.mkdir(mode=0o700, exist_ok=True)
                self._lock, self.scratch = _own_folder(self.scratch)
            else:
                self._lock = _hold_lock(self.scratch.parent / f"{self.settings.name}.lock", self.settings.name)
                # What a killed server left of the attempts it was grading goes (they are graded again, from the
                # database); no other server of this assignment is using it (the lock above).
                shutil.rmtree(self.scratch, ignore_errors=True)
                self.scratch.mkdir(mode=0o700, exist_ok=True)
        except OSError as error:
            raise CourseError(
                f"cannot make {self.scratch}, where the service keeps its work files (uploads as they "
                f"arrive): {error.strerror}; the service needs to write in the course folder"
            ) from None
        self.listeners: list[Callable[[Attempt], None]] = []
        self.scheduler = Scheduler()
        # PostgreSQL: the queue, turns and claims are the database's, shared with every process (shared.py).
        self.shared = SharedQueue(store, self.settings.name) if store.shared else None
        self._claiming = threading.Lock()  # one claim at a time: the scheduler sees every attempt being graded
        self._wake = threading.Condition()
        self._changes = 0  # counts wake(): the queue may have changed (an attempt stored, or one graded)
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        self.pool: sandbox.WarmPool | None = None

    @property
    def settings(self) -> AssignmentSettings:
        return self.context.settings

    @property
    def assignment(self) -> Assignment:
        return self.context.assignment

    @property
    def due(self) -> datetime | None:
        """The assignment's due date: the YAML's, else the gradebook's (None: none)."""
        return self.context.due

    def _start_pool(self) -> sandbox.WarmPool:
        # Two workers more are kept started, in standby: each stands in at once for a run that goes long (a
        # notebook spinning to its time limit, and a fork bomb beside it, say). Started on the thread that
        # serves (bubblewrap's --die-with-parent follows the thread that started a worker).
        if self.pool is None:
            self.pool = sandbox.WarmPool(
                self.jobs,
                self.config.limits,
                isolation=self.config.sandbox,
                base_uid=self.config.sandbox_uid,
                standby=2,
                compiled=released_code_cells(self.context.paths.release_notebook),
            )
        return self.pool

    def prove_setup(self, *, force: bool = False) -> SelfTest:
        """Before the service takes any work: the course's solution and untouched release through this server's
        own pool (selftest.py), or the proof an earlier run kept for the same course, sandbox and interpreter
        (unless `force`); SelfTestError, and the pool stopped, unless they score full marks and 0."""
        pool = self._start_pool()
        try:
            return proven_setup(self.context, partial(pool.run, cold_fallback=False), level=pool.level, force=force)
        except BaseException:
            self.stop()
            raise

    def start(self) -> None:
        requeued = (self.shared or self.store).requeue_interrupted()
        if requeued:
            log.info(f"{requeued} attempt{'s' if requeued != 1 else ''} interrupted by the last stop are graded again")
        self._start_pool()
        assert self.pool is not None  # noqa: S101 - started just above
        # More grading threads than workers, as the batch grader has: a run that sits out its time limit gets a
        # stand-in worker (course/sandbox/pool.py), so one student's sleeping notebook holds up nobody else.
        for index in range(self.pool.threads):
            thread = threading.Thread(target=self._loop, name=f"grader-{index}", daemon=True)
            thread.start()
            self._threads.append(thread)
        threading.Thread(target=self._say_when_standby_started, daemon=True).start()

    def _say_when_standby_started(self) -> None:
        pool = self.pool
        assert pool is not None  # noqa: S101 - started
        pool.standby_started.wait()
        if not self._stopping.is_set():
            ready = pool.standby_ready
            log.info(f"{ready} standby worker{'s' if ready != 1 else ''} ready for long runs (of {pool.standby})")

    def wake(self) -> None:
        with self._wake:
            self._changes += 1
            self._wake.notify()

    def stop(self) -> None:
        self._stopping.set()
        with self._wake:
            self._wake.notify_all()
        for thread in self._threads:
            thread.join()
        if self.pool is not None:
            self.pool.close()
        if self.shared is not None:
            self.shared.close()
        if self._lock >= 0:
            os.close(self._lock)
            self._lock = -1

    def _loop(self) -> None:
        while not self._stopping.is_set():
            with self._wake:
                seen = self._changes  # taken before the queue is read: a change after it is never missed
            try:
                if self.shared is not None:
                    claimed = self.shared.claim()
                else:
                    with self._claiming:
                        claimed = self.store.claim_next(self.scheduler.pick)
            except Exception as error:  # the database away for a moment: this thread must outlive it
                log.error(f"could not look at the queue: {safe_text(str(error), 2000)}")
                self._stopping.wait(IDLE_POLL_SECONDS)
                continue
            if claimed is None:
                # Nothing to take: wait for a change unless one came meanwhile. (A count of wakes to work off
                # instead had idle threads query the queue once for every upload they had not been woken for.)
                with self._wake:
                    if self._changes == seen:
                        self._wake.wait(IDLE_POLL_SECONDS)
                continue
            attempt, notebook = claimed
            try:
                recorded = self.grade(attempt, notebook)
            except Exception as error:  # the database away at that moment: the attempt is graded again, later
                log.error(
                    f"could not record attempt {attempt.id} ({safe_text(str(error), 2000)}): it goes back "
                    "to the queue once the database answers"
                )
                self._give_back(attempt.id)
                continue
            self.wake()  # the student's next attempt, held back while this one was graded, may start now
            for listener in self.listeners:
                listener(recorded or attempt)
            del attempt, notebook, recorded, claimed  # a notebook of up to the upload limit, and its feedback
            give_back_freed_memory()

    def _give_back(self, attempt_id: int) -> None:
        """Put a claimed attempt whose results could not be recorded back in the queue, trying until the database
        answers (or the service stops: a restart requeues it then). Left claimed, it would hold up the student's
        later attempts until a restart, with /healthz still answering that all is well."""
        while not self._stopping.is_set():
            try:
                (self.shared if self.shared is not None else self.store).give_back(attempt_id)
            except Exception as error:
                log.warning(f"attempt {attempt_id} is not back in the queue yet: {safe_text(str(error), 2000)}")
                self._stopping.wait(IDLE_POLL_SECONDS)
            else:
                self.wake()
                return

    def upload_problem(self, student_id: str, notebook: bytes) -> str:
        """Why an upload cannot be graded as this assignment's notebook at all ("" when it can): not the
        notebook's format, or none of its answer cells. Read as the grader will read it (the same checks and
        messages), so an upload refused here never uses up an attempt, and one accepted here is graded."""
        named = Path(self.settings.notebook)
        try:
            read_submission(
                named,
                student_id,
                self.assignment,
                params=self.assignment.default_params,
                max_bytes=self.config.limits.notebook_mb * 1024 * 1024,
                max_cells=self.config.limits.max_cells,
                content=notebook,
            )
        except NotThisAssignment as problem:
            # Another assignment's notebook is named as that one's (not as this assignment's file).
            other = other_assignment(self.config, self.settings.name, problem.answer_ids)
            if other:
                return (
                    f"this is the notebook of assignment {other!r}; this page takes assignment "
                    f"{self.settings.name!r}: upload your {named.name} of {self.settings.name!r} here (and your "
                    f"{other!r} notebook where {other!r} is submitted)"
                )
            return str(problem).removeprefix(f"{named.name}: ")
        except SubmissionError as problem:
            # The upload is read under the assignment's file name, but the student's file may be another: the
            # message names no file.
            return str(problem).removeprefix(f"{named.name}: ")
        return ""

    def grade(self, attempt: Attempt, notebook: bytes) -> Attempt | None:
        """Grade one claimed attempt and record its results (grade_submission never raises); the attempt as
        recorded (None: it was no longer this run's to record)."""
        assert self.pool is not None  # noqa: S101 - started
        settings = self.settings
        params = attempt_numbers(
            self.config,
            self.policy,
            self.assignment.content,
            attempt.student_id,
            attempt.number,
            self.assignment.default_params,
        )
        # Graded from the stored bytes (no file is written); the late policy applies at the time the service
        # received (and stored) the notebook.
        graded = grade_submission(
            SubmissionRef(attempt.student_id, Path(settings.notebook), content=notebook),
            self.assignment,
            self.config,
            run=self.pool.run,
            reveal_torch_values=self.config.reveals_torch_values(gradescope=True),
            params=params,
        )
        graded = late_policy_at(self.context, graded, attempt.submitted_at)
        if graded.internal_error:
            # The instructor's record of our failure (the dashboard counts them per student): it used none of the
            # student's attempts; the same notebook failing SAME_NOTEBOOK_ERRORS times is not taken again.
            log.error(
                f"autograder error for attempt {attempt.id} ({attempt.student_id}'s attempt {attempt.number}, "
                f"{len(notebook)} bytes; it uses none of their attempts):\n"
                f"{safe_text(graded.internal_error, 20_000)}"
            )
        went_long = graded.status == Status.TIMED_OUT or graded.seconds >= LONG_GRADING_SECONDS
        feedback = graded.feedback
        results = GradedAttempt(
            status=graded.status,
            score=feedback.score,
            raw_score=feedback.before_penalty,
            late_penalty=graded.late_penalty,
            max_score=feedback.max_score,
            feedback=feedback,
            integrity=tuple(graded.integrity),
            seconds=graded.seconds,
        )
        if self.shared is not None:
            recorded = self.shared.record(attempt.id, attempt.student_id, results, went_long=went_long)
        else:
            self.scheduler.graded(attempt.student_id, went_long=went_long)
            recorded = self.store.record(attempt.id, results)
        return attempt.recorded(results) if recorded else None

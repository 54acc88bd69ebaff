"""The service's secret tokens, one per student (`serve tokens`): the roster's new students added, one student's
token rotated or revoked, the instructor's replaced; every other link keeps working.

The database keeps only the tokens' hashes, so a token can be shown once: when it is issued. The tokens file
(`--out`) is the instructor's list of links: each run writes the tokens it issued into it, marked "new", and keeps
the rows of the file as it was that still work (each checked against the database); a student whose working link
was written to another file is named as such, and `--rotate` gives them a new one.

One run at a time per course (`_one_run`, an flock held for the whole run, as the dashboard's recordings take
theirs): two runs at once each read the file and the hashes at their start and wrote their own view, so one
could drop a link the other had just issued or rotated.
"""

from __future__ import annotations

import csv
import functools
import hmac
import io
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Concatenate, ParamSpec, TypeVar

from sqlalchemy.exc import IntegrityError, SQLAlchemyError

from course.core.config import CourseConfig
from course.core.errors import CourseError
from course.core.files import Busy, atomic_write_bytes, atomic_write_text, locked, make_folders
from course.core.text import csv_text, safe_text
from course.pipeline.submission import student_id_problem
from course.platforms.service.run import refuse_committable_secret
from course.platforms.service.store import Store, TokenRow, database_url, hash_token, new_token, shown_url
from course.platforms.service.worker import SCRATCH
from course.term.nbgrader_bridge import record_students
from course.term.roster import Student, nbgrader_student

HEADER = ["student_id", "token", "new"]  # "new": "yes" for a token this run issued (to be sent), else ""
TOKENS_FILE_BYTES = 16 * 1024 * 1024  # an earlier tokens file read back: 100,000 students' rows fit in 10 MB
P = ParamSpec("P")
R = TypeVar("R")
SHOWN_NAMES = 20  # students named in one line of the command's report; beyond, how many more
RUN_WAIT_SECONDS = 120.0  # a run waits this long for another run on the course to end (a big roster: seconds)
LOCK_FILE = "serve-tokens.lock"  # in the course's scratch folder (SCRATCH): one `serve tokens` run at a time


@dataclass(frozen=True)
class TokensRun:
    """What a `serve tokens` run did, for its report (`lines`)."""

    database: str  # shown without its password
    out: Path | None = None
    issued: list[str] = field(default_factory=list)  # new tokens, in `out` marked new
    kept: list[str] = field(default_factory=list)  # earlier working links kept in `out`
    elsewhere: list[str] = field(default_factory=list)  # working links issued before, not in `out`
    dropped: int = 0  # rows of the earlier `out` that no longer work, left out
    revoked: list[str] = field(default_factory=list)  # revoked by this run
    still_revoked: list[str] = field(default_factory=list)  # roster students revoked before: they stay revoked
    revoked_before: list[str] = field(default_factory=list)  # asked to revoke, revoked already
    restored: list[str] = field(default_factory=list)  # revoked before, given a working token by this run
    not_in_roster: list[str] = field(default_factory=list)  # in the database, not in the roster: links unchanged
    lms_updated: list[str] = field(default_factory=list)  # whose LMS columns the roster changed
    instructor_file: Path | None = None  # where the instructor token issued by this run is
    instructors: int = 0  # working instructor tokens after the run
    instructors_replaced: int = 0

    def lines(self) -> list[str]:
        lines = []
        if self.out is not None:
            lines.append(
                f"{self.out}: {len(self.issued)} new student link(s) (new: yes, to be sent), "
                f"{len(self.kept)} earlier link(s) that still work; each link is <server>/s/<token>/"
            )
        if self.issued:
            lines.append(f"new tokens for: {_names(self.issued)}")
        if self.restored:
            lines.append(f"revoked before, now with a new working link: {_names(self.restored)}")
        if self.dropped:
            lines.append(
                f"left out of {self.out}: {self.dropped} earlier row(s) whose token no longer works "
                "(rotated or revoked)"
            )
        if self.elsewhere:
            lines.append(
                f"links issued before that still work but are not in {self.out} (the database keeps only "
                f"hashes, so they cannot be written again): {_names(self.elsewhere)}; give one a new link "
                "with --rotate STUDENT_ID"
            )
        if self.revoked:
            lines.append(
                f"revoked: {_names(self.revoked)}: their links answer 410 (revoked), their attempts stay "
                "in the record; --rotate STUDENT_ID gives one a working link again"
            )
        if self.revoked_before:
            lines.append(f"revoked already, nothing changed: {_names(self.revoked_before)}")
        if self.still_revoked:
            lines.append(
                f"in the roster but revoked, and left revoked: {_names(self.still_revoked)} "
                "(--rotate STUDENT_ID gives one a working link again)"
            )
        if self.not_in_roster:
            lines.append(
                f"in the database but not in the roster, their links unchanged (still working unless "
                f"revoked): {_names(self.not_in_roster)}; --revoke STUDENT_ID stops one"
            )
        if self.lms_updated:
            lines.append(f"LMS columns updated from the roster (tokens unchanged): {_names(self.lms_updated)}")
        if self.instructor_file is not None:
            replaced = (
                f"; the {self.instructors_replaced} earlier instructor token(s) no longer work"
                if self.instructors_replaced
                else ""
            )
            lines.append(
                f"new instructor token in {self.instructor_file}{replaced}; the dashboard is <server>/i/<token>/"
            )
        elif self.instructors:
            lines.append(
                f"instructor token unchanged ({self.instructors} working; --rotate-instructor replaces "
                "them with one new token)"
            )
        lines.append(f"database: {self.database} (it keeps only the tokens' hashes)")
        return lines


def _one_run(run: Callable[Concatenate[CourseConfig, P], R]) -> Callable[Concatenate[CourseConfig, P], R]:
    """The run, once no other `serve tokens` run on the course is under way: an flock (files.locked, the kind the
    dashboard's recordings take) held from before it reads the database's hashes and the tokens file until its
    last write, so each run starts from what the one before it left. A run waits RUN_WAIT_SECONDS (saying so),
    then stops, changing nothing."""

    @functools.wraps(run)
    def one_at_a_time(config: CourseConfig, /, *args: P.args, **kwargs: P.kwargs) -> R:
        folder = config.root / SCRATCH
        make_folders(folder)
        lock = folder / LOCK_FILE
        try:
            with locked(
                lock,
                wait=RUN_WAIT_SECONDS,
                waiting=lambda: print(
                    f"another serve tokens run on {config.root} is under way: waiting for it to end (up to "
                    f"{RUN_WAIT_SECONDS:g} s)",
                    file=sys.stderr,
                    flush=True,
                ),
            ):
                return run(config, *args, **kwargs)
        except Busy:
            raise CourseError(
                f"another serve tokens run on {config.root} is still under way after "
                f"{RUN_WAIT_SECONDS:g} s (it holds {lock}): nothing changed; run the command again "
                "once it has ended"
            ) from None

    return one_at_a_time


def _names(ids: list[str]) -> str:
    shown = ", ".join(ids[:SHOWN_NAMES])
    return shown + (f" and {len(ids) - SHOWN_NAMES} more" if len(ids) > SHOWN_NAMES else "")


@_one_run
def issue_tokens(
    config: CourseConfig,
    roster: list[Student],
    out: Path,
    *,
    database: str | None = None,
    instructor_out: Path | None = None,
) -> TokensRun:
    """A token for every roster student who has none yet; every other student's token stays as it is (a revoked
    one stays revoked; one not in the roster keeps theirs). The instructor token is issued when there is none.
    `out` gets the new tokens and keeps its working earlier rows (the module's docstring)."""
    instructor_path = _paths(out, instructor_out)
    store = _open(config, database)
    try:
        rows = store.token_rows()
        new = {student.student_id: new_token() for student in roster if student.student_id not in rows}
        changed = {
            student.student_id: student.lms
            for student in roster
            if student.student_id in rows and rows[student.student_id].lms != student.lms
        }
        instructor = new_token() if store.instructor_count() == 0 else None
        listed = {student.student_id for student in roster}
        with _store_errors(out):
            links = _written_links(out, rows, new)
            with links.provisional():
                with _provisionally(instructor_path, instructor + "\n") if instructor else nullcontext():
                    store.add_students(
                        {
                            student.student_id: (new[student.student_id], student.lms)
                            for student in roster
                            if student.student_id in new
                        },
                        lms=changed,
                        instructor=instructor,
                    )
        run = TokensRun(
            shown_url(database, config.root),
            out,
            issued=list(new),
            kept=links.kept,
            elsewhere=links.elsewhere,
            dropped=links.dropped,
            still_revoked=[s.student_id for s in roster if s.student_id in rows and rows[s.student_id].revoked],
            not_in_roster=[sid for sid in rows if sid not in listed],
            lms_updated=list(changed),
            instructor_file=instructor_path if instructor else None,
            instructors=store.instructor_count(),
        )
    finally:
        store.close()
    # The roster's names reach nbgrader's student table too (formgrader, nbgrader export), as grade --roster does.
    try:
        record_students(config.gradebook_url, {student.student_id: nbgrader_student(student) for student in roster})
    except Exception as problem:  # nbgrader's or the database's own errors: one sentence, the tokens stand
        raise CourseError(
            f"the tokens are written ({out}), but nbgrader's gradebook ({config.gradebook_url}) did "
            f"not take the roster's names: {type(problem).__name__}: {problem}"
        ) from None
    return run


@_one_run
def rotate_tokens(config: CourseConfig, student_ids: list[str], out: Path, *, database: str | None = None) -> TokensRun:
    """A new token for each of these students (already in the database): their old one stops working and its link
    says it was replaced; a revoked student's new token works (that is how one is let back in)."""
    _paths(out, None)
    store = _open(config, database)
    try:
        rows = store.token_rows()
        _known(student_ids, rows, "rotate")
        new = {student_id: new_token() for student_id in dict.fromkeys(student_ids)}
        with _store_errors(out):
            links = _written_links(out, rows, new)
            with links.provisional():
                store.rotate_students(new)
        return TokensRun(
            shown_url(database, config.root),
            out,
            issued=list(new),
            kept=links.kept,
            elsewhere=links.elsewhere,
            dropped=links.dropped,
            restored=[sid for sid in new if rows[sid].revoked],
            instructors=store.instructor_count(),
        )
    finally:
        store.close()


@_one_run
def revoke_tokens(
    config: CourseConfig, student_ids: list[str], out: Path | None = None, *, database: str | None = None
) -> TokensRun:
    """These students' tokens stop working: their links answer 410 with a sentence saying so; their rows and
    attempts stay (the dashboard, exports, recording). With `out`, the tokens file is rewritten without them."""
    if out is not None:
        _paths(out, None)
        read_tokens_file(out)  # a file that is not a tokens file is refused before anything changes
    store = _open(config, database)
    try:
        rows = store.token_rows()
        _known(student_ids, rows, "revoke")
        with _store_errors(out):
            revoked = store.revoke_students(list(dict.fromkeys(student_ids)))
        run = TokensRun(
            shown_url(database, config.root),
            revoked=revoked,
            revoked_before=[sid for sid in dict.fromkeys(student_ids) if sid not in revoked],
            instructors=store.instructor_count(),
        )
        if out is None:
            return run
        links = _written_links(out, store.token_rows(), {})
        links.write()
        return replace(run, out=out, kept=links.kept, elsewhere=links.elsewhere, dropped=links.dropped)
    finally:
        store.close()


@_one_run
def rotate_instructor(
    config: CourseConfig, out: Path, *, database: str | None = None, instructor_out: Path | None = None
) -> TokensRun:
    """One new instructor token, written beside `out`; every earlier instructor token stops working (its link says
    it was replaced). There is one instructor token at a time: the staff share it, and replace it when one leaves."""
    instructor_path = _paths(out, instructor_out)
    store = _open(config, database)
    try:
        token = new_token()
        with _store_errors(instructor_path), _provisionally(instructor_path, token + "\n"):
            replaced = store.replace_instructors(token)
        return TokensRun(
            shown_url(database, config.root),
            instructor_file=instructor_path,
            instructors=store.instructor_count(),
            instructors_replaced=replaced,
        )
    finally:
        store.close()


# ------------------------------------------------------------------------------------------- the tokens file


@dataclass
class _Links:
    out: Path
    rows: list[list[str]]
    kept: list[str]
    elsewhere: list[str]
    dropped: int

    def write(self) -> None:
        atomic_write_text(self.out, csv_text([HEADER, *self.rows]))  # mode 600 from its first byte

    @contextmanager
    def provisional(self) -> Iterator[None]:
        """Written before the database changes, and put back as it was should they fail: a token is on disk
        before it works, so none works that nobody can send."""
        with _provisionally(self.out, csv_text([HEADER, *self.rows])):
            yield


def _written_links(out: Path, rows: dict[str, TokenRow], new: dict[str, str]) -> _Links:
    """The tokens file's rows once `new` (student: token) is issued: the earlier file's rows whose token still
    works (not revoked, its hash the student's), in their order, a rotated student's row in its place, then the
    new students."""
    earlier = read_tokens_file(out)
    lines: list[list[str]] = []
    kept: list[str] = []
    dropped = 0
    for student_id, token in earlier.items():
        if student_id in new:
            lines.append([student_id, new[student_id], "yes"])
            continue
        row = rows.get(student_id)
        if row is not None and not row.revoked and hmac.compare_digest(hash_token(token), row.token_hash):
            lines.append([student_id, token, ""])
            kept.append(student_id)
        else:
            dropped += 1
    lines += [[student_id, token, "yes"] for student_id, token in new.items() if student_id not in earlier]
    listed = {line[0] for line in lines}
    elsewhere = [sid for sid, row in rows.items() if not row.revoked and sid not in listed]
    return _Links(out, lines, kept, elsewhere, dropped)


def read_tokens_file(path: Path) -> dict[str, str]:
    """An earlier tokens file (student_id,token[,new] rows; `serve tokens` of any version), read as input: bounded,
    UTF-8, its header ours; rows that are not a usable id and a token are left out (they open nothing). {} when
    there is none. A file that is not a tokens file is refused: it is never overwritten."""
    if not path.exists():
        return {}
    try:
        if path.stat().st_size > TOKENS_FILE_BYTES:
            raise CourseError(
                f"{path} is larger than a tokens file ({TOKENS_FILE_BYTES // 2**20} MB): name another "
                "--out, or move it away"
            )
        text = path.read_bytes().decode("utf-8-sig")
        rows = list(csv.reader(io.StringIO(text)))
    except OSError as error:
        raise CourseError(f"{path}: cannot read the earlier tokens file ({error.strerror})") from None
    except (UnicodeDecodeError, csv.Error):
        rows = [["?"]]
    if not rows:
        return {}
    if [cell.strip() for cell in rows[0][:2]] != HEADER[:2]:
        raise CourseError(
            f"{path} is there and is not a tokens file (its first row is not student_id,token): it "
            "is left as it is; name another --out, or move it away"
        )
    found: dict[str, str] = {}
    for row in rows[1:]:
        if len(row) >= 2 and not student_id_problem(row[0]) and row[0] not in found and 0 < len(row[1]) <= 100:
            found[row[0]] = row[1]
    return found


# ------------------------------------------------------------------------------------------- shared steps


def _paths(out: Path, instructor_out: Path | None) -> Path:
    """The instructor token's file beside `out`; both checked before any token changes (a refusal leaves the old
    ones working)."""
    if out.exists() and out.is_dir():
        raise CourseError(f"{out} is a folder: name the CSV file to write the tokens to")
    instructor_path = instructor_out or out.with_name(f"{out.stem}-instructor.txt")
    for path in (out, instructor_path):
        refuse_committable_secret(path)
    return instructor_path


def _open(config: CourseConfig, database: str | None) -> Store:
    return Store(database_url(database, config.root))


def _known(student_ids: list[str], rows: dict[str, TokenRow], verb: str) -> None:
    for student_id in student_ids:
        problem = student_id_problem(student_id)
        if problem:
            raise CourseError(f"--{verb}: {problem}")
    unknown = [sid for sid in student_ids if sid not in rows]
    if unknown:
        raise CourseError(
            f"--{verb}: no token was ever issued to {', '.join(safe_text(s, 100) for s in unknown)}: "
            "nothing changed (a new student: add them to the roster and run serve tokens ROSTER again)"
        )


@contextmanager
def _provisionally(path: Path, text: str) -> Iterator[None]:
    """`text` written to `path` (mode 600) for the block; should the block fail, `path` as it was before."""
    earlier = path.read_bytes() if path.exists() else None
    atomic_write_text(path, text)
    try:
        yield
    except BaseException:
        if earlier is None:
            path.unlink(missing_ok=True)
        else:
            atomic_write_bytes(path, earlier)
        raise


@contextmanager
def _store_errors(out: Path | None) -> Iterator[None]:
    """The database's refusals as one sentence: nothing changed, and the files are as they were."""
    files = f"; {out} is as it was" if out is not None else ""
    try:
        yield
    except IntegrityError:
        raise CourseError(
            f"another serve tokens changed the same students meanwhile: nothing changed{files}; run the command again"
        ) from None
    except SQLAlchemyError as error:
        raise CourseError(
            f"the service's database refused the change ({type(error).__name__}): nothing changed{files}"
        ) from None

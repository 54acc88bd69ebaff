"""The numbers a recorded attempt was issued, recorded with it (issue 50).

With `service.fresh_numbers_per_attempt`, a student's attempt n > 1 is issued numbers of its own
(`variants.numbers_for(attempt=n)`). When the term's recording (course/term/term_record.py) makes such an attempt the
student's submission in `submitted/<student>/<assignment>/`, it writes LABEL beside the notebook: the attempt whose
numbers the notebook was issued, the notebook's SHA-256 and an HMAC of both, the assignment and the student under
the course secret. Whoever grades or analyses that submission in the course root (`grade`, the item analysis) asks
`submission_numbers`, which reads the label back as input:

- no label: the student's own numbers, as for every collected submission (nbgrader's collect replaces the folder,
  a label with it);
- a label the recording wrote for this student, assignment and notebook under this secret: that attempt's numbers;
- anything else (a link, not our JSON, another student's, assignment's or notebook's, an HMAC the secret does not
  give: a student who puts such a file in their exchange submission cannot make one) is a NumbersLabelError naming
  the file and what to do. The grader makes it an autograder error for that student: never a grade with numbers
  that may not be the ones the attempt was issued.
"""

from __future__ import annotations

import errno
import hashlib
import hmac
import json
import os
import stat
from pathlib import Path
from typing import Any

from course.core.config import CourseConfig
from course.core.errors import CourseError, NumbersLabelError, UnreadableSubmission
from course.core.files import atomic_write_json
from course.core.text import safe_text
from course.pipeline.assignment import Assignment
from course.pipeline.submission import read_regular_file
from course.pipeline.variants import Params, course_secret, numbers_for

LABEL = "autograd-numbers.json"  # beside the notebook in submitted/<student>/<assignment>/
MAX_LABEL_BYTES = 4096  # what the recording writes is ~200 bytes
MAX_ATTEMPT = 1_000_000  # no service gives more attempts: a larger number is not ours
_DOMAIN = b"autograd-course numbers label 1\0"  # the HMAC of a label is never that of a student's numbers


def _mac(secret: bytes, assignment_name: str, student_id: str, attempt: int, notebook_sha256: str) -> str:
    message = json.dumps([assignment_name, student_id, attempt, notebook_sha256]).encode("utf-8")
    return hmac.new(secret, _DOMAIN + message, hashlib.sha256).hexdigest()


def write_label(
    folder: Path, secret: bytes | None, assignment_name: str, student_id: str, attempt: int, notebook: bytes
) -> None:
    """Record in `folder` (the student's submitted/<student>/<assignment>/, where `notebook` is written) whose numbers
    the notebook was issued: attempt `attempt`'s own (n > 1), or the student's own (1: no label, an older one
    removed, as in every collected submission). secret: the course secret (variants: true has one)."""
    path = folder / LABEL
    if attempt <= 1:
        path.unlink(missing_ok=True)
        return
    if secret is None:
        raise CourseError(f"{path}: attempt {attempt}'s own numbers can be recorded only with the course secret")
    digest = hashlib.sha256(notebook).hexdigest()
    atomic_write_json(
        path,
        {
            "attempt": attempt,
            "notebook_sha256": digest,
            "mac": _mac(secret, assignment_name, student_id, attempt, digest),
        },
    )


def _read_label(path: Path) -> bytes | None:
    """The label's bytes (None: there is none). A link is not followed, a pipe never waited on."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError as error:
        said = "is a symbolic link" if error.errno == errno.ELOOP else f"cannot be read ({error.strerror})"
        raise _Wrong(said) from None
    with os.fdopen(descriptor, "rb") as stream:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            raise _Wrong("is not a regular file")
        try:
            data = stream.read(MAX_LABEL_BYTES + 1)
        except OSError as error:
            raise _Wrong(f"cannot be read ({error.strerror})") from None
    if len(data) > MAX_LABEL_BYTES:
        raise _Wrong(f"is larger than the {MAX_LABEL_BYTES} bytes a label takes")
    return data


class _Wrong(Exception):
    """What is wrong with a label, for NumbersLabelError's sentence."""


def _attempt_of(data: bytes, secret: bytes, assignment_name: str, student_id: str, notebook: bytes | None) -> int:
    """The attempt a label names, once it is checked to be the one the recording wrote; else _Wrong."""
    try:
        found: Any = json.loads(data)
    except (ValueError, RecursionError):
        raise _Wrong("is not JSON") from None
    if not isinstance(found, dict) or set(found) != {"attempt", "notebook_sha256", "mac"}:
        raise _Wrong("is not a label the term's recording writes (attempt, notebook_sha256, mac)")
    attempt, digest, mac = found["attempt"], found["notebook_sha256"], found["mac"]
    if type(attempt) is not int or not 2 <= attempt <= MAX_ATTEMPT:
        raise _Wrong("names no attempt of the service (a whole number from 2)")
    if not all(isinstance(text, str) and len(text) == 64 for text in (digest, mac)):
        raise _Wrong("has no SHA-256 digests where the recording writes them")
    if notebook is None:
        raise _Wrong("has no notebook beside it")
    if not hmac.compare_digest(digest, hashlib.sha256(notebook).hexdigest()):
        raise _Wrong(f"was recorded with another notebook than the one beside it (attempt {attempt}'s)")
    if not hmac.compare_digest(mac, _mac(secret, assignment_name, student_id, attempt, digest)):
        raise _Wrong(
            f"was not written for this student and {assignment_name} under this course's secret (the term's "
            "recording writes it; a copied, edited or student-made file, or a secret changed since, is not that)"
        )
    return attempt


def recorded_attempt(folder: Path, secret: bytes, assignment_name: str, student_id: str, notebook: bytes | None) -> int:
    """Whose numbers the submission in `folder` was issued, by its label (1: none, the student's own numbers).
    notebook: the bytes of the notebook beside it (None: there is none). Raises NumbersLabelError."""
    path = folder / LABEL
    try:
        data = _read_label(path)
        return 1 if data is None else _attempt_of(data, secret, assignment_name, student_id, notebook)
    except _Wrong as wrong:
        raise NumbersLabelError(
            f"{safe_text(str(path), 300, one_line=True)} {wrong}: {student_id!r} was not graded, rather than graded "
            "with numbers that may not be the ones their attempt was issued. Record their counted attempt into "
            "the term again from the service's dashboard, or remove the file to grade the notebook with the "
            "student's own numbers"
        ) from None


def labelled_attempt(folder: Path) -> int | None:
    """The attempt the label in `folder` names, unchecked (1: there is none; None: a label that names none): enough
    for the term's recording to tell whether it must write the label again, never to grade with (that is
    `recorded_attempt`, which checks it)."""
    try:
        data = _read_label(folder / LABEL)
        found = json.loads(data) if data is not None else {"attempt": 1}
    except (_Wrong, ValueError, RecursionError):
        return None
    attempt = found.get("attempt") if isinstance(found, dict) else None
    return attempt if type(attempt) is int else None


def submission_numbers(
    config: CourseConfig,
    assignment: Assignment,
    student_id: str,
    folder: Path,
    notebook: bytes | None,
    secret: bytes | None = None,
) -> Params:
    """The numbers the submission in `folder` (a student's submitted/<student>/<assignment>/, or wherever a notebook
    is graded from), whose notebook's bytes are `notebook`, is graded with: those it was issued, by its label
    (`recorded_attempt`); the student's own when there is none. Without variants, everyone's. Raises
    NumbersLabelError for a label that is not the recording's."""
    attempt = 1
    if config.variants:
        secret = secret or course_secret(config)
        attempt = recorded_attempt(folder, secret, assignment.name, student_id, notebook)
    return numbers_for(config, assignment.content, student_id, assignment.default_params, secret, attempt=attempt)


def submitted_numbers(config: CourseConfig, assignment: Assignment, student_id: str) -> Params:
    """`submission_numbers` of the student's submission in the course root (submitted/<student>/<assignment>/): the
    numbers `grade` grades it with, for a view of the class's results (the item analysis). The notebook is named
    as its source notebook is (the assignment's `notebook` setting)."""
    if not config.variants:
        return numbers_for(config, assignment.content, student_id, assignment.default_params)
    folder = config.root / "submitted" / student_id / assignment.name
    limit = config.limits.notebook_mb * 2**20
    try:
        notebook: bytes | None = read_regular_file(folder / assignment.notebook_path.name, limit)
    except UnreadableSubmission:
        notebook = None
    return submission_numbers(config, assignment, student_id, folder, notebook)

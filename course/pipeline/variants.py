"""Per-student variants: every student's numbers derive from an HMAC of the course secret and their id.

The grader recomputes a student's numbers from the secret and the id it grades under; it never trusts
numbers read from the notebook. Which numbers an assignment has and how they may vary is the assignment's
own (`derive` and `constraint_violations` in its exercises module, see `course.pipeline.content`).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import random
import re
import stat
from pathlib import Path
from typing import Any

from course.core.config import CourseConfig
from course.core.errors import ConfigError
from course.pipeline.content import Content

Params = dict[str, Any]

PLACEHOLDER = re.compile(r"\{\{\s*(\w+)\s*\}\}")


def _rng(secret: bytes, student_id: str) -> random.Random:
    digest = hmac.new(secret, student_id.encode("utf-8"), hashlib.sha256).digest()
    return random.Random(int.from_bytes(digest, "big"))  # noqa: S311 - a seeded draw, not a secret


def derive(content: Content, secret: bytes, student_id: str, names: set[str] | None = None) -> Params:
    """The numbers of one student: the assignment's `derive`, drawn from a generator seeded by an HMAC of the
    course secret and the student's id, so deterministic in (secret, id) and unguessable without the secret.
    Numbers that are not exactly `names` (the numbers cell's), or that the assignment's own constraints
    refuse, are an error in its exercises module."""
    where = content.path or "the assignment's exercises.py"
    if content.derive is None:
        raise ConfigError(
            f"variants: true, but {where} defines no derive(rng) to give each student numbers (nor VARIANTS = "
            "variants(EXERCISES) for exercises that declare their ranges)"
        )
    numbers = content.derive(_rng(secret, student_id))
    if not isinstance(numbers, dict) or (names is not None and set(numbers) != names):
        given = sorted(numbers) if isinstance(numbers, dict) else type(numbers).__name__
        raise ConfigError(
            f"{where}: derive() must return the numbers cell's names {sorted(names or [])}, returned {given}"
        )
    problems = content.constraint_violations(numbers)
    if problems:
        raise ConfigError(f"{where}: derive() gave numbers its own constraints refuse: {'; '.join(problems)}")
    return numbers


def show(value: Any) -> str:
    """A number as the notebook's text shows it: 2, 0.5, −1, 6.881373587019543. Exactly the number graded: an int as
    an int, a float in its shortest form that reads back as the same float (repr), never rounded (a student who
    works from a rounded b = 6.88137 is 7.6e-6 off and loses the mark); only a leading minus is typeset."""
    text = repr(value) if type(value) is float else str(value)
    return "−" + text[1:] if text.startswith("-") else text


def fill_text(text: str, params: Params) -> str:
    """Markdown with {{name}} placeholders -> the student's numbers."""
    return PLACEHOLDER.sub(
        lambda match: show(params[match.group(1)]) if match.group(1) in params else match.group(0), text
    )


def numbers_source(params: Params, content: Content) -> str:
    """The locked `numbers` cell for these numbers, laid out in the assignment's groups."""
    groups = content.groups_for(params)
    lines = ["# Your numbers: every exercise below uses them, and the grader uses the same ones.", "P = {"]
    for group in groups:
        lines.append("    " + " ".join(f'"{key}": {params[key]!r},' for key in group))
    lines.append("}")
    return "\n".join(lines)


def _check_private(path: Path) -> None:
    """Refuse a secret file that anyone but the grader's own user could read: student code runs as other
    uids, and with the secret it could derive every other student's numbers."""
    status = path.stat()
    if status.st_mode & 0o077:
        raise ConfigError(
            f"variants: the course secret file {path} can be read by other users (mode "
            f"{stat.S_IMODE(status.st_mode):04o}); run `chmod 600 {path}` so that student code cannot "
            "read it"
        )
    if status.st_uid != os.geteuid():
        raise ConfigError(
            f"variants: the course secret file {path} belongs to uid {status.st_uid}, not to the "
            f"grader (uid {os.geteuid()}); make the grader's user its owner, mode 600"
        )


def load_secret(env_name: str, file_name: str | None, root: Path) -> bytes:
    """The course secret, from the environment variable or the file the course YAML names."""
    value = os.environ.get(env_name, "")
    if value:
        return value.encode("utf-8")
    if file_name:
        path = (root / file_name) if not Path(file_name).is_absolute() else Path(file_name)
        try:
            _check_private(path)
            secret = path.read_bytes().strip()
        except OSError as error:
            raise ConfigError(f"variants: cannot read the course secret file {path} ({error.strerror})") from None
        if secret:
            return secret
    raise ConfigError(
        f"variants: true needs a course secret: set the environment variable {env_name} or name a file in "
        "variant_secret_file (keep it out of the repository)"
    )


def course_secret(config: CourseConfig) -> bytes:
    """The course's variants secret, from where its settings say (refused when others could read it)."""
    return load_secret(config.variant_secret_env, config.variant_secret_file, config.root)


def attempt_seed(student_id: str, attempt: int = 1) -> str:
    """What a student's numbers are drawn from (`derive`'s id): their id for their own numbers (those of the
    notebook released to them), else their id and the attempt whose own numbers they are (the service's fresh
    numbers per attempt, `service.fresh_numbers_per_attempt`: attempt n > 1)."""
    return student_id if attempt <= 1 else f"{student_id}#attempt-{attempt}"


def numbers_for(
    config: CourseConfig,
    content: Content,
    student_id: str,
    defaults: Params,
    secret: bytes | None = None,
    *,
    attempt: int = 1,
) -> Params:
    """The numbers a student's exercises use: their own when variants are on (and the assignment has numbers),
    else `defaults` (those of the source notebook's numbers cell). secret: the course secret as a run's context
    read it once (None: read here). attempt: whose numbers with variants: 1 the student's own, n > 1 those
    attempt n of theirs was issued as its own (`attempt_seed`); every grader of an attempt asks here, with the
    attempt recorded with it (course/pipeline/numbers_label.py), so one attempt is graded with one set of numbers."""
    if not config.variants or (not defaults and content.derive is None):
        return dict(defaults)
    return derive(content, secret or course_secret(config), attempt_seed(student_id, attempt), set(defaults))

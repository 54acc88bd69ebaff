"""The service database's schema, versioned with Alembic (as nbgrader's gradebook is): `migrate` brings a database
to this code's head revision when a Store opens it.

- A new database is made at the head, revision by revision.
- A database made before there were revisions (tables made by `create_all`, no version table) is recognised by its
  tables, its columns checked against what that revision made, then stamped at that revision and upgraded.
- A database at an earlier revision is upgraded; one at a later revision (a newer `serve` wrote it) is refused
  with a sentence and left as it is, as is one whose version table holds what no version of this package writes.

The revisions are plain files in versions/, run on the caller's connection and in the caller's transaction
(no env.py, no engine of alembic's own): the Store holds the database's lock around it (store.py), so of two
processes opening one database at once, one migrates and the other then finds it at the head.

The version table is ours (`autograd_service_version`), not alembic's default `alembic_version`: nbgrader's
gradebook keeps its own revision there, and a PostgreSQL database may hold both.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Any

from alembic.config import Config
from alembic.runtime.environment import EnvironmentContext
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import inspect, text
from sqlalchemy.engine import Connection
from sqlalchemy.exc import SQLAlchemyError

from course.core.errors import CourseError
from course.core.text import safe_text

log = logging.getLogger(__name__)

VERSION_TABLE = "autograd_service_version"
HERE = Path(__file__).parent
REVISION_ID = re.compile(r"[0-9]{4}")  # how this package names its revisions: 0001, 0002, ...

# The tables and columns a database made before the version table holds, by the revision that made them (frozen:
# what `create_all` made from b99931e's and then b5172c4's store.py). The shared queue's tables were made only
# where shared.py had been imported; when present they are checked too, and revision 0003 makes them if missing.
BEFORE_VERSIONS: dict[str, dict[str, frozenset[str]]] = {
    "0001": {
        "students": frozenset({"student_id", "token_hash", "lms"}),
        "instructors": frozenset({"id", "token_hash"}),
        "attempts": frozenset(
            {
                "id",
                "student_id",
                "assignment",
                "number",
                "submitted_at",
                "status",
                "score",
                "raw_score",
                "late_penalty",
                "max_score",
                "integrity",
                "graded_at",
                "seconds",
                "results_written",
                "feedback",
                "notebook",
            }
        ),
        "settings": frozenset({"name", "value"}),
    },
}
BEFORE_VERSIONS["0002"] = {
    **BEFORE_VERSIONS["0001"],
    "retired_tokens": frozenset({"token_hash", "student_id", "reason", "retired_at"}),
}
SHARED_QUEUE_TABLES = {
    "claims": frozenset({"attempt_id", "owner", "claimed_at"}),
    "grading_turns": frozenset({"assignment", "state"}),
}
OURS = set(BEFORE_VERSIONS["0002"]) | set(SHARED_QUEUE_TABLES)


@cache
def script() -> ScriptDirectory:
    """The revisions this code knows (versions/), read once per process."""
    config = Config()
    config.set_main_option("script_location", str(HERE))
    return ScriptDirectory.from_config(config)


def head() -> str:
    found = script().get_current_head()
    assert found is not None  # noqa: S101 - versions/ holds at least the first revision
    return found


def migrate(db: Connection, where: str) -> None:
    """Bring the database on `db` to the head revision, in the caller's transaction (which holds the database's
    lock); CourseError, the database untouched, when it is newer than this code or not one this package made.
    `where`: the database as the sentences name it (its URL, password hidden)."""
    revisions = script()
    target = head()
    current = _current(db, where, revisions, target)
    if current == target:
        return
    if current is None and (found := _made_before_versions(db, where)) is not None:
        MigrationContext.configure(db, opts={"version_table": VERSION_TABLE}).stamp(revisions, found)
        log.info(
            "the service's database %s: made before its schema had revisions, recognised as revision %s", where, found
        )
        current = found

    def upgrade(revision: Any, _context: MigrationContext) -> Any:
        # What alembic's own `command.upgrade` runs (a private name: alembic is pinned, and test_migrations runs it).
        return revisions._upgrade_revs(target, revision)

    with EnvironmentContext(Config(), revisions, fn=upgrade, destination_rev=target) as environment:
        environment.configure(connection=db, version_table=VERSION_TABLE)
        environment.run_migrations()
    if current is None:
        log.info("the service's database %s: new, made at revision %s", where, target)
    else:
        log.info("the service's database %s: upgraded from revision %s to revision %s", where, current, target)


def _current(db: Connection, where: str, revisions: ScriptDirectory, target: str) -> str | None:
    """The revision the version table names (None: no version table, or an empty one), checked."""
    if VERSION_TABLE not in inspect(db).get_table_names():
        return None
    try:
        rows: Sequence[Any] = db.execute(text(f"SELECT version_num FROM {VERSION_TABLE}")).all()  # noqa: S608 - ours
    except SQLAlchemyError as error:
        raise CourseError(
            f"the service's database {where}: its version table {VERSION_TABLE} cannot be read "
            f"({safe_text(str(getattr(error, 'orig', error)), 200)}); it was not written by this "
            "package: restore the database from a backup"
        ) from None
    values = [row[0] for row in rows]
    if not values:
        return None
    shown = ", ".join(repr(safe_text(str(value), 40)) for value in values[:3])
    if len(values) == 1 and isinstance(values[0], str) and REVISION_ID.fullmatch(values[0]):
        if values[0] in {script.revision for script in revisions.walk_revisions()}:
            return values[0]
        if int(values[0]) > int(target):
            raise CourseError(
                f"the service's database {where} is at revision {values[0]}, written by a newer "
                f"version of autograd-course (this one knows up to revision {target}): run that "
                "version or a later one here (to go back to this one, restore a backup taken before "
                "the upgrade); the database was left as it is"
            )
    raise CourseError(
        f"the service's database {where}: its version table {VERSION_TABLE} holds {shown}, which no "
        f"version of autograd-course writes (one revision like {target}): restore the database from "
        "a backup, or mend that table; the database was left as it is"
    )


def _made_before_versions(db: Connection, where: str) -> str | None:
    """The revision of a database made before the version table (by `create_all`), from its tables; None when it
    holds none of ours (a new database, or one shared with other tables, such as nbgrader's gradebook)."""
    inspector = inspect(db)
    tables = set(inspector.get_table_names()) & OURS
    if not tables:
        return None
    found = "0002" if "retired_tokens" in tables else "0001"
    expected = {
        **BEFORE_VERSIONS[found],
        **{name: SHARED_QUEUE_TABLES[name] for name in SHARED_QUEUE_TABLES if name in tables},
    }
    problems = [f"no table {name}" for name in sorted(set(expected) - tables)]
    for name in sorted(set(expected) & tables):
        columns = {column["name"] for column in inspector.get_columns(name)}
        if missing := sorted(expected[name] - columns):
            problems.append(f"table {name} lacks {', '.join(missing)}")
        if extra := sorted(columns - expected[name]):
            problems.append(f"table {name} has columns no version made ({', '.join(safe_text(c, 40) for c in extra)})")
    if problems:
        raise CourseError(
            f"the service's database {where} holds tables of autograd-course's but not as any version "
            f"made them ({'; '.join(problems)}): restore it from a backup, or point serve at a new "
            "database; it was left as it is"
        )
    return found

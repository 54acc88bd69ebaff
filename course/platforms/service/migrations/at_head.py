"""A database at the head revision checked against the tables this code declares (store.py's metadata, and
shared.py's where it is imported), as SQLAlchemy's inspection reads them on SQLite and PostgreSQL alike.

The version table says which revision made the tables; nothing stops a hand (or a botched restore) from dropping
a column or a table afterwards, and every request that reads it would then end in the database's error, a bare 500
to a student. So at every start, after `migrate`, in the same transaction: every declared table, each of its
columns (of the same kind: integer, number, time, bytes, text; as nullable as declared), its primary key, its
unique constraints and its indexes (by their columns, whatever their names). What the database holds besides
(another program's tables, an index of the shared queue's own) is left alone. Only names of ours are printed, with
the kinds the database reports bounded and made printable.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlalchemy import DateTime, Float, Index, Integer, LargeBinary, MetaData, String, Table, UniqueConstraint, inspect
from sqlalchemy.engine import Connection, Inspector

from course.core.errors import CourseError
from course.core.text import safe_text

# The kinds of column a revision makes, as the dialects reflect them (SQLite's VARCHAR/TEXT/BLOB/FLOAT/DATETIME,
# PostgreSQL's VARCHAR/TEXT/BYTEA/DOUBLE PRECISION/TIMESTAMP): a column of another kind was not made by a revision.
KINDS = (Integer, Float, DateTime, LargeBinary, String)
SHOWN = 6  # problems named in the sentence; the rest counted


def _kind(type_: Any) -> type | None:
    return next((kind for kind in KINDS if isinstance(type_, kind)), None)


def _keys(inspector: Inspector, name: str) -> tuple[set[frozenset[str]], set[frozenset[str]]]:
    """The column sets the database keeps unique in table `name` (primary key, unique constraints, unique indexes),
    and those it indexes at all (an index on an expression is none of ours: left out)."""
    unique = {frozenset(inspector.get_pk_constraint(name)["constrained_columns"])}
    unique |= {frozenset(c["column_names"]) for c in inspector.get_unique_constraints(name)}
    indexes = [
        (frozenset(str(c) for c in i["column_names"]), i["unique"])
        for i in inspector.get_indexes(name)
        if None not in i["column_names"]
    ]
    unique |= {columns for columns, is_unique in indexes if is_unique}
    return unique, unique | {columns for columns, _ in indexes}


def _columns(names: Iterable[str]) -> str:
    return ", ".join(sorted(names))


def _table_problems(inspector: Inspector, table: Table) -> list[str]:
    found = {column["name"]: column for column in inspector.get_columns(table.name)}
    problems = []
    if missing := [column.name for column in table.columns if column.name not in found]:
        problems.append(f"table {table.name} lacks column {', '.join(missing)}")
    for column in table.columns:
        there = found.get(column.name)
        if there is None:
            continue
        kind, made = _kind(there["type"]), _kind(column.type)
        if kind is not made and kind is not None:
            wanted = made.__name__ if made else str(column.type)
            problems.append(f"column {table.name}.{column.name} is {safe_text(str(there['type']), 40)}, not {wanted}")
        if bool(there["nullable"]) != column.nullable:
            problems.append(f"column {table.name}.{column.name} is {'' if there['nullable'] else 'NOT '}NULL")
    declared = set(table.columns.keys())
    if extra := [n for n, c in found.items() if n not in declared and not c["nullable"] and c.get("default") is None]:
        problems.append(f"table {table.name} has NOT NULL column {safe_text(_columns(extra), 120)} no revision made")
    unique, indexed = _keys(inspector, table.name)
    wanted_unique = [frozenset(table.primary_key.columns.keys())]
    wanted_unique += [frozenset(c.columns.keys()) for c in table.constraints if isinstance(c, UniqueConstraint)]
    wanted_unique += [frozenset(i.columns.keys()) for i in table.indexes if isinstance(i, Index) and i.unique]
    for columns in wanted_unique:
        if columns not in unique:
            problems.append(f"table {table.name} does not keep ({_columns(columns)}) unique")
    for index in table.indexes:
        if frozenset(index.columns.keys()) not in indexed:
            problems.append(f"table {table.name} has no index on ({_columns(index.columns.keys())})")
    return problems


def schema_problems(db: Connection, metadata: MetaData) -> list[str]:
    """What the database on `db` lacks or holds otherwise than `metadata` declares, one phrase each ([]: none)."""
    inspector = inspect(db)
    present = set(inspector.get_table_names())
    problems = []
    for table in metadata.sorted_tables:
        if table.name not in present:
            problems.append(f"no table {table.name}")
        else:
            problems += _table_problems(inspector, table)
    return problems


def check_at_head(db: Connection, where: str, revision: str, metadata: MetaData) -> None:
    """CourseError, naming what differs and how to mend it, when the database on `db` (at `revision`, this code's
    head) does not hold the tables `metadata` declares."""
    problems = schema_problems(db, metadata)
    if not problems:
        return
    shown = "; ".join(problems[:SHOWN]) + (f"; and {len(problems) - SHOWN} more" if len(problems) > SHOWN else "")
    raise CourseError(
        f"the service's database {where} says it is at revision {revision} but does not hold the tables that "
        f"revision made ({shown}): restore it from a backup (a copy of service.db taken with serve stopped, or "
        "pg_dump's), or rebuild it: move it aside and run `autograd-course serve tokens ROSTER --out FILE` to make "
        "a new one (every student gets a new token, earlier attempts stay in the old one); it was left as it is"
    )

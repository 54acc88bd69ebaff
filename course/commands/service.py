"""The submission service's command: `serve` (students upload, read their feedback once graded) and its action
`serve tokens` (the students' and the instructor's secret links)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING

from course.commands import Command
from course.core.config import CourseConfig, load_config
from course.core.errors import CourseError
from course.core.extras import require
from course.core.output_paths import writable_output
from course.platforms.service.edge import Edge

if TYPE_CHECKING:
    from course.platforms.service.tokens import TokensRun

SERVE_HELP = "Run the instant-feedback service: students upload a notebook and read its feedback once graded."
TOKENS_HELP = (
    "Issue secret tokens, one per student: the roster's students who have none yet (every other "
    "link keeps working), or rotate or revoke one student's, or replace the instructor's."
)


def _serve_arguments(serve: argparse.ArgumentParser) -> None:
    """The options of `serve`, then its action `serve tokens`, in the order `--help` lists them."""
    _service_arguments(serve)
    _edge_arguments(serve)
    actions = serve.add_subparsers(dest="action", metavar="ACTION")
    _tokens_arguments(actions.add_parser("tokens", help=TOKENS_HELP, description=TOKENS_HELP))


def _service_arguments(serve: argparse.ArgumentParser) -> None:
    """Where the service listens, its database, its assignment and its workers."""
    serve.add_argument("--host", default="127.0.0.1", help="the address to listen on (default: 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8000, help="the port (default: 8000)")
    # No default here: argparse lets an action's own default overwrite what was given before the action
    # (`serve --database URL tokens ...` once wrote the tokens into SQLite); `_database` applies the default once.
    serve.add_argument(
        "--database",
        metavar="URL",
        help="SQLAlchemy URL of the service's database, e.g. postgresql+psycopg://user@host/db "
        "(default: $AUTOGRAD_SERVICE_DATABASE, else sqlite service.db in the course root); "
        "the same for its actions (serve --database URL tokens ...)",
    )
    serve.add_argument("--assignment", help="which assignment (default: the first in the course YAML)")
    serve.add_argument(
        "--jobs", type=int, default=None, metavar="N", help="warm sandboxed workers (default: one per core)"
    )
    serve.add_argument(
        "--self-test",
        action="store_true",
        help="grade the course's solution and the untouched release at start-up even where an earlier run's "
        "proof holds (same course, sandbox and interpreter: reused by default)",
    )
    serve.add_argument(
        "--wait",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="how long an upload waits for its grade before answering 202 (default: 30)",
    )


def _edge_arguments(serve: argparse.ArgumentParser) -> None:
    """The limits on connections at the service's edge, and the trusted reverse proxy."""
    serve.add_argument(
        "--connections",
        type=int,
        metavar="N",
        help=f"connections open at once; the next is answered 503 (default: {Edge.connections})",
    )
    serve.add_argument(
        "--connections-per-client",
        type=int,
        metavar="N",
        help=f"waiting connections (kept alive, or a request not yet in full) from one address, "
        f"without --forwarded-allow-ips; beyond, its longest-waiting one is closed "
        f"(default: {Edge.per_client})",
    )
    serve.add_argument(
        "--header-seconds",
        type=float,
        metavar="SECONDS",
        help=f"from a request's first byte to the end of its headers, else 408 (default: {Edge.header_seconds:g})",
    )
    serve.add_argument(
        "--body-seconds",
        type=float,
        metavar="SECONDS",
        help=f"for an upload's body to arrive after its headers, else 408 (default: {Edge.body_seconds:g})",
    )
    serve.add_argument(
        "--forwarded-allow-ips",
        metavar="IPS",
        help="behind a reverse proxy: the proxy's address(es), whose X-Forwarded-* headers are trusted",
    )


def _tokens_arguments(tokens: argparse.ArgumentParser) -> None:
    """The roster and tokens file of `serve tokens`, its one change (rotate, revoke) and its --database."""
    tokens.add_argument(
        "roster",
        type=Path,
        nargs="?",
        metavar="ROSTER",
        help="CSV with a student_id column (and LMS ids): a token for each student who has none "
        "yet; every other student's link is left as it is",
    )
    tokens.add_argument(
        "--out",
        type=Path,
        metavar="FILE",
        help="the tokens file, student_id,token,new rows (mode 600): the tokens issued now (new: "
        "yes) and the earlier rows of FILE that still work (the database keeps only hashes); "
        "the instructor token goes to FILE's name with -instructor.txt",
    )
    change = tokens.add_mutually_exclusive_group()
    change.add_argument(
        "--rotate",
        action="append",
        metavar="STUDENT_ID",
        help="a new token for this student (repeatable; with --out): their old link stops "
        "working; a revoked student gets a working link again",
    )
    change.add_argument(
        "--revoke",
        action="append",
        metavar="STUDENT_ID",
        help="this student's link stops working (repeatable; answers 410, revoked); their "
        "attempts stay in the record; with --out, FILE is rewritten without it",
    )
    change.add_argument(
        "--rotate-instructor",
        action="store_true",
        help="one new instructor token (with --out); every earlier instructor token stops working",
    )
    tokens.add_argument(
        "--database",
        dest="action_database",
        metavar="URL",
        help="as for serve (given before or after `tokens`: one database; two that differ are refused)",
    )


def _edge(args: argparse.Namespace) -> Edge:
    given = {
        "connections": args.connections,
        "per_client": args.connections_per_client,
        "header_seconds": args.header_seconds,
        "body_seconds": args.body_seconds,
    }
    for name, value in given.items():
        if value is not None and value <= 0:
            option = "connections-per-client" if name == "per_client" else name.replace("_", "-")
            raise CourseError(f"--{option} must be more than 0, got {value:g}")
    return Edge(**{name: value for name, value in given.items() if value is not None})


def _database(args: argparse.Namespace) -> str | None:
    """The one database of `serve` and its action: --database given before the action or after it (both: the
    same URL, else a refusal), else $AUTOGRAD_SERVICE_DATABASE, else None (SQLite in the course root)."""
    from course.platforms.service.store import shown_url

    before, after = args.database, getattr(args, "action_database", None)
    if before is not None and after is not None and before != after:
        raise CourseError(
            f"serve --database {shown_url(before, Path())} and {args.action} --database "
            f"{shown_url(after, Path())} name two databases: give --database once (the tokens go "
            "where `serve` reads them)"
        )
    return before or after or os.environ.get("AUTOGRAD_SERVICE_DATABASE") or None


def _refuse_protected_database(database: str | None, config: CourseConfig) -> None:
    """A SQLite file named by --database (or $AUTOGRAD_SERVICE_DATABASE) is an output path like any --out: never in
    release/ or nbgrader's folders (an unreadable URL is left for the store to report)."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    from course.platforms.service.store import database_url

    try:
        url = make_url(database_url(database, config.root))
    except ArgumentError:
        return
    file = url.database if url.get_backend_name() == "sqlite" else None
    if file and file != ":memory:" and not file.startswith("file:"):
        writable_output("--database", Path(file), config.root)


def _serve(args: argparse.Namespace) -> int:
    require("service", "autograd-course serve")
    from course.platforms.service.run import serve

    config = load_config(args.course)
    database = _database(args)
    _refuse_protected_database(database, config)
    if args.action == "tokens":
        for line in _tokens(args, config, database).lines():
            print(line)
        return 0
    if args.jobs is not None and args.jobs < 1:
        raise CourseError("--jobs must be 1 or more")
    serve(
        config,
        host=args.host,
        port=args.port,
        database=database,
        jobs=args.jobs,
        assignment_name=args.assignment,
        wait_seconds=args.wait,
        forwarded_allow_ips=args.forwarded_allow_ips,
        edge=_edge(args),
        self_test=args.self_test,
    )
    return 0


def _tokens(args: argparse.Namespace, config: CourseConfig, database: str | None) -> TokensRun:
    """`serve tokens`: one of adding the roster's new students, --rotate, --revoke, --rotate-instructor."""
    from course.platforms.service import tokens

    if args.out is not None:
        writable_output("--out", args.out, config.root)  # (the instructor's file goes beside it)
    if args.revoke:
        if args.roster is not None:
            raise CourseError("serve tokens --revoke takes no ROSTER: name the students to revoke")
        return tokens.revoke_tokens(config, args.revoke, args.out, database=database)
    if args.roster is None and not (args.rotate or args.rotate_instructor):
        raise CourseError("serve tokens needs a ROSTER (or --rotate, --revoke or --rotate-instructor)")
    if args.roster is not None and (args.rotate or args.rotate_instructor):
        raise CourseError("serve tokens: give a ROSTER or --rotate/--rotate-instructor, not both")
    if args.out is None:
        raise CourseError("serve tokens needs --out FILE: where the new tokens are written (mode 600)")
    if args.rotate:
        return tokens.rotate_tokens(config, args.rotate, args.out, database=database)
    if args.rotate_instructor:
        return tokens.rotate_instructor(config, args.out, database=database)
    from course.term.roster import read_roster

    return tokens.issue_tokens(config, read_roster(args.roster), args.out, database=database)


SERVE = Command("serve", SERVE_HELP, _serve_arguments, _serve, {"serve": SERVE_HELP, "serve tokens": TOKENS_HELP})

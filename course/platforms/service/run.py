"""Starting the service (uvicorn, one process: the warm pool and the attempt counter live in it), and the check
that a file of secrets is not one git would commit (`refuse_committable_secret`; the tokens themselves are
issued by `course.platforms.service.tokens`)."""

from __future__ import annotations

import logging
import resource
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

from course.core.config import CourseConfig
from course.core.errors import CourseError, SecretFileError
from course.pipeline.run_context import open_run
from course.platforms.service.app import create_app
from course.platforms.service.connections import protocol_for
from course.platforms.service.edge import BACKLOG, EDGE_HEADER_BYTES, Edge
from course.platforms.service.heap import bound_the_heap
from course.platforms.service.state import WAIT_SECONDS, Service
from course.platforms.service.store import Store, database_url
from course.platforms.service.worker import Grader

log = logging.getLogger(__name__)


def make_service(
    config: CourseConfig,
    *,
    database: str | None = None,
    jobs: int | None = None,
    assignment_name: str | None = None,
    wait_seconds: float = WAIT_SECONDS,
    edge: Edge | None = None,
) -> Service:
    policy = config.service
    context = open_run(config, assignment_name)  # the run's context, once: settings, notebook, secret checked
    store = Store(database_url(database, config.root), context.name)
    grader = Grader(context, store, policy, jobs=jobs)
    return Service(config, store, policy, grader, wait_seconds=wait_seconds, edge=edge or Edge())


def serve(
    config: CourseConfig,
    *,
    host: str,
    port: int,
    database: str | None = None,
    jobs: int | None = None,
    assignment_name: str | None = None,
    wait_seconds: float = WAIT_SECONDS,
    forwarded_allow_ips: str | None = None,
    announce: bool = True,
    edge: Edge | None = None,
    self_test: bool = False,
) -> None:
    """Run the service until stopped. `edge` bounds connections and the time a request's headers and body may take
    (edge.py): uvicorn alone bounds neither the connections that never finish a request nor their headers' time.
    `self_test`: run the self-test even where an earlier run's proof holds (selftest_proof.py)."""
    import uvicorn

    bound_the_heap()  # before the server's threads start
    edge = edge or Edge()
    if forwarded_allow_ips is not None:  # behind the proxy every connection comes from its address
        edge = replace(edge, per_client=None)
    _allow_descriptors(edge)
    service = make_service(
        config, database=database, jobs=jobs, assignment_name=assignment_name, wait_seconds=wait_seconds, edge=edge
    )
    # Nothing is served before the course's own notebooks grade as they must on this server's pool.
    proven = service.grader.prove_setup(force=self_test)
    if announce:
        log.info(proven.line())
        log.info(
            f"assignment {service.assignment} on http://{host}:{port}/ ({service.grader.jobs} warm "
            f"workers); students open /s/<token>/, instructors /i/<token>/"
        )
    # No access log: the personal links carry the tokens in their paths.
    # HTTP/1.1 serves one request at a time per connection, so the connection cap bounds requests in progress too;
    # uvicorn's own limit_concurrency would only answer 503 to requests that arrived in full.
    uvicorn.run(
        create_app(service),
        host=host,
        port=port,
        access_log=False,
        log_level="warning",
        proxy_headers=forwarded_allow_ips is not None,
        forwarded_allow_ips=forwarded_allow_ips,
        timeout_graceful_shutdown=5,
        http=protocol_for(edge),
        timeout_keep_alive=int(edge.keep_alive_seconds),
        h11_max_incomplete_event_size=EDGE_HEADER_BYTES,
        backlog=BACKLOG,
    )


def _allow_descriptors(edge: Edge) -> None:
    """Raise the process's soft limit on open files to what the edge's bounds may hold (the common soft limit,
    1024, is below it: a flood would make accept() fail, and honest clients wait, before the caps refuse anything),
    or refuse to start when the hard limit is below it, saying what to do."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    needed = edge.descriptors
    if soft >= needed:
        return
    if hard != resource.RLIM_INFINITY and hard < needed:
        raise CourseError(
            f"serve: --connections {edge.connections} may need {needed} open files, but this process may "
            f"open at most {hard} (ulimit -Hn); lower --connections or raise the limit"
        )
    resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))


def refuse_committable_secret(path: Path) -> None:
    """Raise SecretFileError when `path` lies in a git work tree and git does not ignore it: a `git add -A`
    would commit it. Without git, or outside a work tree, nothing is checked (there is no commit to fear)."""
    git = shutil.which("git")
    if git is None:
        return
    existing = path.absolute().parent
    while not existing.is_dir() and existing != existing.parent:  # the file's folder may not exist yet
        existing = existing.parent
    folder = existing.resolve()  # git names paths by their real location
    target = folder / path.absolute().relative_to(existing)
    inside = subprocess.run(  # noqa: S603 - fixed argument list, no shell
        [git, "-C", str(folder), "rev-parse", "--show-toplevel"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    if inside.returncode != 0:  # not a work tree (or one git will not read): nothing would commit the file
        return
    top = inside.stdout.strip()
    ignored = subprocess.run(  # noqa: S603 - fixed argument list, no shell
        [git, "-C", str(folder), "check-ignore", "--quiet", "--", str(target)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    if ignored.returncode == 1:
        raise SecretFileError(
            f"{path} is in the git work tree {top} and git does not ignore it, so `git add -A` "
            f"would commit these secrets: write it outside the work tree, or add its name to "
            f"{top}/.gitignore first"
        )
    if ignored.returncode != 0:
        raise SecretFileError(
            f"cannot tell whether git ignores {path} in the work tree {top} (git check-ignore: "
            f"{ignored.stderr.strip()[-300:]}): write it outside the work tree"
        )

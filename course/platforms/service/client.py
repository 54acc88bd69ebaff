"""`autograd-course submit NOTEBOOK --server URL --token T`: one POST of the contract, then the result in
words (standard library only, so a student's machine needs nothing more than the course package)."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urljoin, urlsplit

from course.core.errors import CourseError

POLL_SECONDS = 2.0


@dataclass(frozen=True)
class Submitted:
    result: dict[str, Any]
    feedback_url: str

    def lines(self) -> list[str]:
        result = self.result
        # The student's own number, as their page calls it (an older server sends only the service's id).
        name = f"attempt {result['attempt']}" if "attempt" in result else f"submission {result['id']}"
        if result["status"] in ("queued", "grading"):
            return [f"{name} is {result['status']}; its feedback will be at {self.feedback_url}"]
        return [
            f"{name}: {result['status'].replace('_', ' ')}, score {result['score']:g} of {result['max_score']:g}",
            f"feedback: {self.feedback_url}",
        ]


def _request(url: str, token: str, data: bytes | None = None) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(  # noqa: S310
        url,
        data=data,
        method="POST" if data is not None else "GET",
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=120) as response:  # noqa: S310 - http(s) checked by submit
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        try:
            body = json.loads(error.read())
        except ValueError:
            body = {}
        return error.code, body
    except (urllib.error.URLError, TimeoutError, OSError) as error:
        raise CourseError(f"cannot reach the server {url}: {getattr(error, 'reason', error)}") from None


def submit(notebook: Path, server: str, token: str, *, wait: bool = True) -> Submitted:
    if urlsplit(server).scheme not in ("http", "https"):
        raise CourseError(f"--server must be an http:// or https:// address, got {server!r}")
    try:
        data = notebook.read_bytes()
    except OSError as error:
        raise CourseError(f"{notebook}: cannot read the notebook ({error.strerror})") from None
    base = server.rstrip("/") + "/"
    status, body = _request(urljoin(base, "api/submissions"), token, data)
    if status == 401:  # a revoked or replaced token: the server's sentence says which (access.RETIRED_LINK)
        reason = body.get("error") if body.get("token") in ("revoked", "replaced") else None
        raise CourseError(
            "the server did not accept the token: "
            + (reason[:300] if isinstance(reason, str) and reason else "use the one from your personal link")
        )
    if status == 429:
        raise CourseError(f"not submitted: {body.get('error', 'the attempt policy refuses it now')}")
    if status not in (200, 202):
        raise CourseError(f"not submitted: {body.get('error', f'the server answered {status}')}")
    while wait and body.get("status") in ("queued", "grading"):
        time.sleep(POLL_SECONDS)
        attempt = body["id"]
        status, body = _request(urljoin(base, f"api/submissions/{attempt}"), token)
        while status == 429 and isinstance(body.get("retry_after"), int):  # asked too often: the server's pace
            time.sleep(body["retry_after"])
            status, body = _request(urljoin(base, f"api/submissions/{attempt}"), token)
        if status != 200:
            raise CourseError(f"the server answered {status} while the submission was being graded")
    return Submitted(body, urljoin(base, body["feedback_url"].lstrip("/")))

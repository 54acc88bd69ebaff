"""The app's one middleware: the same protective headers on every response it makes (the edge's own answers,
made before the app, carry theirs: connections.py), and a 429's Retry-After told to the edge (strikes.py)."""

from __future__ import annotations

import base64
import hashlib
from typing import Any

from course.platforms.service.edge import EDGE_ANSWERED, EDGE_REFUSED
from course.term.summary_page import SORT_SCRIPT

# The class summary's one inline script (it sorts the student table) is allowed by its hash, nothing else inline.
SUMMARY_SCRIPT = "'sha256-" + base64.b64encode(hashlib.sha256(SORT_SCRIPT.encode("utf-8")).digest()).decode() + "'"
SECURITY_HEADERS = {
    "Content-Security-Policy": f"default-src 'none'; style-src 'unsafe-inline'; script-src 'self' {SUMMARY_SCRIPT}; "
    "connect-src 'self'; "
    "img-src 'self' data:; form-action 'self'; frame-src 'self'; frame-ancestors 'self'; "
    "base-uri 'none'",
    # The personal link is a secret: never sent on to another site. (Not no-referrer: with it, Chromium sends
    # `Origin: null` on the form's own posts, which the CSRF check refuses.)
    "Referrer-Policy": "same-origin",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-store",
}


class SecurityHeaders:
    """Pure ASGI middleware: the same protective headers on every response."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if (scope.get("state") or {}).get(EDGE_ANSWERED):
            return  # the edge has answered it already (over TOKEN_REQUESTS_IN_FLIGHT) and closed its connection

        async def send_with_headers(message: Any) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                if message["status"] == 429 and "state" in scope:  # the edge counts whose Retry-After is ignored
                    retry = next((value for name, value in headers if name.lower() == b"retry-after"), b"")
                    if retry.isdigit():
                        scope["state"][EDGE_REFUSED] = float(retry)
                present = {name.lower() for name, _ in headers}
                headers += [
                    (name.lower().encode(), value.encode())
                    for name, value in SECURITY_HEADERS.items()
                    if name.lower().encode() not in present
                ]
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_headers)

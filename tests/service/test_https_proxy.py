"""The documented HTTPS setup (docs/service.md), run: nginx terminates TLS (a self-signed certificate made here)
in front of `autograd-course serve --forwarded-allow-ips`, with the docs' own `location` block, and a student submits
through it by the API and by the upload form (whose CSRF check compares the browser's Origin with the Host
the proxy passes on)."""

from __future__ import annotations

import re
import shutil
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.support.helpers import ROOT, needs_tool, submitted_notebook
from tests.support.service import NGINX, Reply, Server, course_for_service, free_port, multipart, notebook_bytes

# /usr/sbin is not on every user's PATH
pytestmark = [
    pytest.mark.slow,
    needs_tool("nginx", NGINX is not None, "the HTTPS proxy test runs it (apt-get install nginx-light)"),
    needs_tool("openssl", shutil.which("openssl") is not None, "the HTTPS proxy test makes its certificate"),
]


def documented_location_block() -> str:
    """The nginx `location` block docs/service.md gives, as it is written there."""
    text = (ROOT / "docs" / "service.md").read_text(encoding="utf-8")
    found = re.search(r"or nginx: `(location / \{.*?\})`", text, re.S)
    assert found, "the nginx example of docs/service.md is gone"
    return " ".join(found.group(1).split())


def https(
    url: str,
    context: ssl.SSLContext,
    *,
    method: str = "GET",
    data: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> Reply:
    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kwargs):
            return None

    opener = urllib.request.build_opener(urllib.request.HTTPSHandler(context=context), NoRedirect)
    req = urllib.request.Request(url, data=data, method=method, headers=headers or {})  # noqa: S310 - the test proxy
    try:
        with opener.open(req, timeout=120) as response:
            return Reply(response.status, response.read(), {k.lower(): v for k, v in response.headers.items()})
    except urllib.error.HTTPError as error:
        return Reply(error.code, error.read(), {k.lower(): v for k, v in error.headers.items()})


def start_nginx(folder: Path, upstream: int) -> tuple[subprocess.Popen, int]:
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=DNS:localhost",
            "-keyout",
            str(folder / "key.pem"),
            "-out",
            str(folder / "cert.pem"),
        ],
        check=True,
        capture_output=True,
    )
    port = free_port()
    location = documented_location_block().replace("http://127.0.0.1:8000", f"http://127.0.0.1:{upstream}")
    temp = "".join(
        f"{kind}_temp_path {folder / kind};\n" for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    # As root, nginx's workers would become `nobody`, who cannot write request bodies into this test's folder.
    (folder / "nginx.conf").write_text(
        f"""
daemon off;
user root root;
pid {folder / "nginx.pid"};
error_log {folder / "error.log"};
events {{}}
http {{
    access_log off;
    {temp}
    server {{
        listen 127.0.0.1:{port} ssl;
        server_name localhost;
        ssl_certificate {folder / "cert.pem"};
        ssl_certificate_key {folder / "key.pem"};
        {location}
    }}
}}
""",
        encoding="utf-8",
    )
    assert NGINX is not None
    process = subprocess.Popen(
        [NGINX, "-p", str(folder), "-c", str(folder / "nginx.conf")], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    return process, port


def test_a_student_submits_through_the_documented_https_reverse_proxy(tmp_path):
    server = Server(course_for_service(tmp_path / "course"), options=("--forwarded-allow-ips", "127.0.0.1"))
    server.issue_tokens(["alice"])
    server.start()
    proxy_folder = tmp_path / "nginx"
    proxy_folder.mkdir()
    nginx, port = start_nginx(proxy_folder, server.port)
    try:
        context = ssl.create_default_context(cafile=str(proxy_folder / "cert.pem"))
        site = f"https://localhost:{port}"
        deadline = time.monotonic() + 30
        while True:  # nginx is up once it answers
            try:
                https(f"{site}/static/dashboard.js", context)
                break
            except OSError:
                assert nginx.poll() is None, nginx.stderr.read() if nginx.stderr else ""
                assert time.monotonic() < deadline, "nginx did not answer"
                time.sleep(0.1)

        token = server.tokens["alice"]
        notebook = notebook_bytes(submitted_notebook())
        reply = https(
            f"{site}/api/submissions",
            context,
            method="POST",
            data=notebook,
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        )
        assert reply.status == 200, reply.text
        assert (reply.json["status"], reply.json["score"]) == ("graded", 57)
        assert https(site + reply.json["feedback_url"], context).status == 200

        page = f"{site}/s/{token}/"
        csrf = re.search(r'name=csrf value="([^"]+)"', https(page, context).text)
        assert csrf, "the upload form has no CSRF token"
        body, kind = multipart({"notebook": notebook, "csrf": csrf.group(1)})
        for origin, status in ((f"https://evil.example:{port}", 403), (site, 303)):  # as a browser sends it
            reply = https(
                page + "upload", context, method="POST", data=body, headers={"Content-Type": kind, "Origin": origin}
            )
            assert reply.status == status, reply.text
        assert reply.headers["location"] == "attempts/2"  # at once, the student's own number
        deadline = time.monotonic() + 120
        while "57 / 57" not in (shown := https(page + reply.headers["location"], context).text):
            assert "Being graded" in shown or "Queued" in shown, shown  # the page refreshes itself meanwhile
            assert time.monotonic() < deadline, "not graded in time"
            time.sleep(0.5)
    finally:
        nginx.terminate()
        nginx.wait(30)
        server.stop()

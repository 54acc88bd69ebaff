"""The instructor dashboard's form that records the service's attempts into the term, as a browser posts it
(tests/adversarial/test_records.py, tests/adversarial/test_private_modes.py)."""

from __future__ import annotations

import re

from tests.support.service import multipart, request


def recording_page(server):
    base = f"{server.url}/i/{server.instructor}"
    preview = request(f"{base}/export/gradebook").text
    csrf = re.search(r'name=csrf value="([^"]+)"', preview).group(1)
    plan = re.search(r'name=plan value="([^"]+)"', preview)
    return base, preview, csrf, plan.group(1) if plan else None


def post_form(server, **fields):
    base, preview, csrf, _ = recording_page(server)
    if "plan" in fields and "student" not in fields:  # as the preview's form sends it: every student ticked
        fields["student"] = re.findall(r'name=student value="([^"]+)"', preview)
    body, kind = multipart({"csrf": csrf, **fields})
    return request(f"{base}/export/gradebook", method="POST", data=body, content_type=kind)


def message(reply) -> str:
    found = re.search(r"role=status>(.*?)</div>", reply.text, re.S)
    return found.group(1) if found else reply.text[:500]

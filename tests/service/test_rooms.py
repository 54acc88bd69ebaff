"""The service's app in rooms (issue 41): `app.py` only wires routes and middleware, and each room imports only
the rooms below it, so that the student's form never goes through the API's JSON (it once rendered a refusal as
JSON and parsed it back) and no room reaches up into the app that wires it."""

from __future__ import annotations

import ast

from tests.support.helpers import ROOT

SERVICE = ROOT / "course" / "platforms" / "service"
# From the bottom up: a room may import the rooms before it in this list, never one after it.
ROOMS = ["state", "middleware", "uploads", "access", "api", "student_pages", "instructor_pages", "app"]


def service_imports(room: str) -> set[str]:
    """The modules of course/platforms/service/ that `room` imports (at any depth: a lazy import counts too)."""
    tree = ast.parse((SERVICE / f"{room}.py").read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module is not None:
            if node.module.startswith("course.platforms.service."):
                found.add(node.module.split(".")[3])
            elif node.module == "course.platforms.service":
                found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(
                alias.name.split(".")[3] for alias in node.names if alias.name.startswith("course.platforms.service.")
            )
    return found


def test_each_room_imports_only_the_rooms_below_it():
    for position, room in enumerate(ROOMS):
        above = set(ROOMS[position:])
        assert service_imports(room) & above == set(), f"{room}.py imports a room at or above it"


def test_app_py_only_wires_routes_and_middleware():
    tree = ast.parse((SERVICE / "app.py").read_text(encoding="utf-8"))
    defined = [
        node.name for node in tree.body if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
    ]
    assert defined == ["create_app"]


def test_only_the_runner_imports_the_app():
    importers = sorted(
        path.stem for path in SERVICE.glob("*.py") if path.stem != "app" and "app" in service_imports(path.stem)
    )
    assert importers == ["run"]

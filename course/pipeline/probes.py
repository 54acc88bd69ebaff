"""Where function answers are called: the same points for every submission of a course's assignment.

A function answer (`def slope(x): ...` in an answer cell) is scored by calling it in the sandbox at some points and
comparing each result with torch's. The points are a function of the course, the assignment and the answer's
name (and of the student's numbers, for the exercise's own point), never of the run: the same notebook earns
the same score on every regrade, for every grader front end (`grade`, `serve`, Gradescope), and a function
wrong for some inputs is wrong on every run, not on the runs that happen to draw those inputs.

Each function answer is called at
- the exercise's own point, where the assignment names one (`FUNCTION_POINTS` in its exercises module: the
  number of the numbers cell the exercise asks about, e.g. `{"slope": "slope_x"}`);
- zero;
- `function_probes` points drawn from a grid of halves in [-8, 8] (the first negative, the second positive, the
  rest anywhere on it): exact in floating point, small enough for any polynomial a student writes, and with
  zero, both signs always there, so a function wrong only for negative inputs always fails.

The drawn points come from HMAC-SHA256 keyed with the course secret when the course has one (`variants: true`
or a `variant_secret_file`): they cannot be known in advance, so a notebook cannot hold a table of torch's
values at them. Without a secret they come from the same hash under a public key: fixed and reproducible, but
anyone who reads this file can compute them (SECURITY.md, "The same notebook always earns the same score").
"""

from __future__ import annotations

import hashlib
import hmac
import math
from dataclasses import dataclass, field

from course.core.answers import is_number
from course.core.config import CourseConfig
from course.core.errors import ConfigError
from course.pipeline.assignment import Assignment
from course.pipeline.variants import Params, course_secret

GRID = tuple(n / 2 for n in range(-16, 17) if n)  # the halves in [-8, 8] but zero, which is always called
NEGATIVE = tuple(x for x in GRID if x < 0)
POSITIVE = tuple(x for x in GRID if x > 0)
MAX_DRAWN = len(GRID) - 1  # room for the exercise's own point, if it lies on the grid
PUBLIC_KEY = b"autograd-course: probe points of a course without a secret"
OWN_POINT_LIMIT = 1e6  # an exercise's own point past this is no number a student's function should be called at


@dataclass(frozen=True)
class ProbePoints:
    """The points each function answer is called at, in order (`points`), and of those, the ones drawn with the
    course secret (`private`: empty without a secret). The feedback states a private point only where the
    course shows torch's values (course/pipeline/feedback.py): a verdicts-only page, where resubmitting is cheap, names
    it by its sign."""

    points: dict[str, list[float]]
    private: dict[str, frozenset[float]] = field(default_factory=dict)


def has_secret(config: CourseConfig) -> bool:
    """Whether the course has a secret to key the points with: decided by its settings alone, so that every
    grader of the course (`grade`, `serve`, Gradescope's zip) decides alike, never by whether one shell happens
    to hold the variable."""
    return config.variants or bool(config.variant_secret_file)


def probe_secret(config: CourseConfig) -> bytes | None:
    """The course secret when it has one (refused, as for the variants, when others could read its file)."""
    return course_secret(config) if has_secret(config) else None


def _draw(key: bytes, label: str, index: int, choices: tuple[float, ...]) -> float:
    """One deterministic choice among `choices`: HMAC-SHA256 of the label and the draw's index, as an integer,
    modulo their number (256 bits over at most 32 choices: no bias worth the name)."""
    digest = hmac.new(key, f"{label}\0{index}".encode(), hashlib.sha256).digest()
    return choices[int.from_bytes(digest, "big") % len(choices)]


def drawn_points(
    key: bytes, course_id: str, assignment_name: str, function: str, count: int, taken: frozenset[float] = frozenset()
) -> list[float]:
    """`count` (at least two) distinct points of the grid, none in `taken`: a negative one, a positive one, then
    any."""
    label = f"probe points\0{course_id}\0{assignment_name}\0{function}"
    points: list[float] = []
    for index in range(min(max(count, 2), MAX_DRAWN)):  # always a negative and a positive one
        pool = NEGATIVE if index == 0 else POSITIVE if index == 1 else GRID
        choices = tuple(x for x in pool if x not in points and x not in taken)
        points.append(_draw(key, label, index, choices))
    return points


def own_point(assignment: Assignment, function: str, params: Params) -> float | None:
    """The number the exercise asks about for this function answer (the student's own), or None."""
    name = assignment.content.function_points.get(function)
    if name is None:
        return None
    where = assignment.content.path or "the assignment's exercises.py"
    value = params.get(name)
    if not is_number(value) or not math.isfinite(value) or abs(value) > OWN_POINT_LIMIT:
        raise ConfigError(
            f"{where}: FUNCTION_POINTS names {name!r} as the point of {function!r}, but the "
            f"numbers hold {value!r} there; name a number of the numbers cell (P)"
        )
    return float(value)


def probe_points(config: CourseConfig, assignment: Assignment, params: Params, secret: bytes | None) -> ProbePoints:
    """The points of every function answer of `assignment` for a student whose numbers are `params`."""
    key = secret if secret else PUBLIC_KEY
    points: dict[str, list[float]] = {}
    private: dict[str, frozenset[float]] = {}
    for function in assignment.function_names:
        own = own_point(assignment, function, params)
        fixed = [own] if own is not None and own != 0 else []
        fixed.append(0.0)
        drawn = drawn_points(key, config.course_id, assignment.name, function, config.function_probes, frozenset(fixed))
        points[function] = fixed + drawn
        if secret:
            private[function] = frozenset(drawn)
    return ProbePoints(points, private)


def course_probe_points(
    config: CourseConfig, assignment: Assignment, params: Params, secret: bytes | None = None
) -> ProbePoints:
    """`probe_points` with the course's own secret (if it has one): `secret` as a run's context read it once, else
    read here."""
    return probe_points(config, assignment, params, secret if secret is not None else probe_secret(config))

"""Where function answers are called: points of one student's own, the same on every regrade.

A function answer (`def slope(x): ...` in an answer cell) is scored by calling it in the sandbox at some points and
comparing each result with torch's. The points are a function of the course secret, the course, the assignment, the
answer's name, the student, the student's numbers and the notebook's code, never of the run: the same notebook of the
same student earns the same score on every regrade, for every grader front end (`grade`, `serve`, Gradescope), and a
function wrong for some inputs is wrong on every run, not on the runs that happen to draw those inputs.

Each function answer is called at
- the exercise's own point, where the assignment names one (`FUNCTION_POINTS` in its exercises module: the
  number of the numbers cell the exercise asks about, e.g. `{"slope": "slope_x"}`);
- zero;
- two *plausible* points, halves in [-8, 8] (one negative, one positive): the points a table of torch's values
  would hold;
- `function_probes` points *drawn* for the student: reals in [-8, 8] on a grid of 2**-20 (some 16.8 million
  values, none of them a half; a table of them all would be hundreds of megabytes, past any notebook's limit),
  one from each of `function_probes` equal slices of the range (the first slice all negative, the last all
  positive, drawn first and second). A point of 24 significant bits has an exact square, so a quadratic with
  small whole coefficients (the derivative of a cubic) comes out exactly alike however it is evaluated, in the
  student's arithmetic and in torch's float64, and any other polynomial a student writes agrees far inside the
  tolerance;
- WORK_POINTS more drawn the same way for this notebook: of its code's digest too (`work_digest`).

The drawn points decide whether a table wins: a function that answers the plausible points (and zero and its own
point) right and every drawn point wrong is a table, or a function right only on a grid, and the integrity
report says so (course/pipeline/tables.py; its points earn nothing, as any wrong function's).

Each draw is HMAC-SHA256 keyed with the course secret when the course has one (`variants: true` or a
`variant_secret_file`), of a label naming the course, assignment, function, student and the student's numbers (and,
for the notebook's own points, the digest of its code): no one without the secret can compute them, one student's
points say nothing of another's, a function wrong somewhere is called at the student's own points whatever else she
edits (a resubmission can only add points, never take one away), and points one attempt gave away (a function that
records its inputs, a later cell's error that prints them) do not hold the next attempt's own. Without a secret they
come from the same hash under a public key: still per student and reproducible, but anyone who reads this file and
knows a student's id and numbers can compute that student's points (SECURITY.md, "The same notebook always earns the
same score"). Drawn points are never named to a student, with or without a secret (course/pipeline/feedback.py)."""

from __future__ import annotations

import hashlib
import hmac
import json
import math
from collections.abc import Iterable
from dataclasses import dataclass, field

from course.core.answers import is_number
from course.core.config import CourseConfig
from course.core.errors import ConfigError
from course.pipeline.assignment import Assignment
from course.pipeline.variants import Params, course_secret

GRID = tuple(n / 2 for n in range(-16, 17) if n)  # the halves in [-8, 8] but zero: plausible, public points
NEGATIVE = tuple(x for x in GRID if x < 0)
POSITIVE = tuple(x for x in GRID if x > 0)
RANGE = 8.0  # drawn points lie in [-RANGE, RANGE]: small enough for any polynomial a student writes
STEP_BITS = 20  # drawn points are whole multiples of 2**-STEP_BITS: 24 significant bits, an exact square
UNITS = int(RANGE) << STEP_BITS  # the drawn points' range in those steps, each side of zero
PUBLIC_KEY = b"autograd-course: probe points of a course without a secret"
WORK_POINTS = 2  # drawn points of the notebook's own (its code's digest), beside the student's own ones
OWN_POINT_LIMIT = 1e6  # an exercise's own point past this is no number a student's function should be called at


@dataclass(frozen=True)
class ProbePoints:
    """The points each function answer is called at, in order (`points`), and of those, the ones drawn for the
    student (`private`): never named to a student (course/pipeline/feedback.py), and the ones that tell a table
    from a derivative (course/pipeline/tables.py). A test may name its own points, none of them private."""

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


def _number(key: bytes, label: str, what: str, index: int, attempt: int) -> int:
    """A 256-bit whole number, HMAC-SHA256 of the label, what is drawn, the draw's index and attempt."""
    digest = hmac.new(key, f"{label}\0{what}\0{index}\0{attempt}".encode(), hashlib.sha256).digest()
    return int.from_bytes(digest, "big")


def points_label(
    course_id: str, assignment_name: str, function: str, student: str, params: Params, work: str = ""
) -> str:
    """What the points are a function of, besides the key: the student's numbers in one canonical spelling, and
    `work`, the digest of the notebook's code (`work_digest`)."""
    numbers = json.dumps(params, sort_keys=True, separators=(",", ":"), default=repr)
    return f"probe points\0{course_id}\0{assignment_name}\0{function}\0{student}\0{numbers}\0{work}"


def work_digest(sources: Iterable[str]) -> str:
    """The SHA-256 of a notebook's code, its cells' texts in order: the same notebook has the same digest on every
    regrade, and any edit (a table of points one attempt's error text gave away, say) draws other points."""
    digest = hashlib.sha256()
    for source in sources:
        text = source.encode("utf-8", "surrogatepass")
        digest.update(len(text).to_bytes(8, "big") + text)
    return digest.hexdigest()


def plausible_points(key: bytes, label: str, taken: frozenset[float] = frozenset()) -> list[float]:
    """A negative and a positive half of [-8, 8], none in `taken` (256 bits over at most 16 choices: no bias worth
    the name)."""
    points = []
    for index, pool in enumerate((NEGATIVE, POSITIVE)):
        choices = tuple(x for x in pool if x not in taken)
        points.append(choices[_number(key, label, "plausible", index, 0) % len(choices)])
    return points


def drawn_points(key: bytes, label: str, count: int, taken: frozenset[float] = frozenset()) -> list[float]:
    """`count` (at least two) distinct points, one in each of `count` equal slices of [-8, 8], none in `taken`
    nor on the grid of halves: the first slice's (all negative), the last's (all positive), then the others."""
    count = max(count, 2)
    slices = [0, count - 1, *range(1, count - 1)]
    points: list[float] = []
    for index, which in enumerate(slices):
        low = -UNITS + (2 * UNITS * which) // count
        high = -UNITS + (2 * UNITS * (which + 1)) // count  # each slice [low, high) in steps
        for attempt in range(64):  # a point already taken, zero or a half: one chance in 2**19 each
            x = (low + _number(key, label, "drawn", index, attempt) % (high - low)) / (1 << STEP_BITS)
            if x not in taken and x not in points and (2 * x) % 1:
                points.append(x)
                break
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


def probe_points(
    config: CourseConfig, assignment: Assignment, params: Params, secret: bytes | None, student: str, work: str = ""
) -> ProbePoints:
    """The points of every function answer of `assignment` for `student`, whose numbers are `params`, in the
    notebook whose code has the digest `work`."""
    key = secret if secret else PUBLIC_KEY
    points: dict[str, list[float]] = {}
    private: dict[str, frozenset[float]] = {}
    for function in assignment.function_names:
        label = points_label(config.course_id, assignment.name, function, student, params)
        own = own_point(assignment, function, params)
        fixed = [own] if own is not None and own != 0 else []
        fixed.append(0.0)
        fixed += plausible_points(key, label, frozenset(fixed))
        drawn = drawn_points(key, label, config.function_probes, frozenset(fixed))
        if work:  # and points of this notebook's own, where no table of points an earlier attempt gave away holds
            notebook_label = points_label(config.course_id, assignment.name, function, student, params, work)
            drawn += drawn_points(key, notebook_label, WORK_POINTS, frozenset(fixed + drawn))
        points[function] = fixed + drawn
        private[function] = frozenset(drawn)
    return ProbePoints(points, private)


def course_probe_points(
    config: CourseConfig,
    assignment: Assignment,
    params: Params,
    student: str,
    secret: bytes | None = None,
    work: str = "",
) -> ProbePoints:
    """`probe_points` with the course's own secret (if it has one): `secret` as a run's context read it once, else
    read here."""
    key = secret if secret is not None else probe_secret(config)
    return probe_points(config, assignment, params, key, student, work)

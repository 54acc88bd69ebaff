"""Per-student variants: every student's numbers derive from an HMAC of the course secret and their id.

The grader recomputes a student's numbers from the secret and the id it grades under; it never trusts
numbers read from the notebook. Numbers are small integers or halves, chosen so that every exercise stays
what the article makes it: the tiny network's ReLU open (and shut for the closed-ReLU input), no zero
gradient where the article has a non-zero one, and every answer exact in floating point.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import random
import re
import stat
from pathlib import Path
from typing import Any

from course.config import CourseConfig
from course.errors import ConfigError

Params = dict[str, Any]

# The article's numbers: what everyone gets when variants are off (and what the answer key is for).
DEFAULTS: Params = {
    "graph_x": 3,
    "net_x": 2, "net_w": 3, "net_b": -1, "net_target": 2,
    "closed_x": -1,
    "retain_x": 2, "retain_factor": 5,
    "accum_x": 3, "accum_steps": 3,
    "nograd_x": 3,
    "call_w": 2, "call_b": 1, "call_x": 3, "call_target": 5,
    "cubic_x": 4,
    "w2": 0.5,
}
PLACEHOLDER = re.compile(r"\{\{(\w+)\}\}")


def _rng(secret: bytes, student_id: str) -> random.Random:
    digest = hmac.new(secret, student_id.encode("utf-8"), hashlib.sha256).digest()
    return random.Random(int.from_bytes(digest, "big"))  # noqa: S311 - a seeded draw, not a secret


def derive(secret: bytes, student_id: str) -> Params:
    """The numbers of one student: deterministic in (secret, student id), constrained as described above."""
    rng = _rng(secret, student_id)
    while True:
        net = {"net_x": rng.choice([1, 2, 3, 4]), "net_w": rng.choice([2, 3, 4, 5]),
               "net_b": rng.choice([-3, -2, -1, 1, 2]), "net_target": rng.choice([1, 2, 3, 4, 5, 6])}
        h = net["net_w"] * net["net_x"] + net["net_b"]
        if h > 0 and h != net["net_target"]:
            break
    closed = [x for x in (-1, -2, -3) if net["net_w"] * x + net["net_b"] < 0]
    w2 = rng.choice([w for w in (0.5, 1.5, 2.0, 2.5, 3.0) if w * h != net["net_target"]])
    while True:
        call = {"call_w": rng.choice([1, 2, 3, 4]), "call_b": rng.choice([-2, -1, 1, 2, 3]),
                "call_x": rng.choice([1, 2, 3, 4]), "call_target": rng.choice([2, 3, 4, 5, 6, 7, 8, 9])}
        if call["call_w"] * call["call_x"] + call["call_b"] != call["call_target"]:
            break
    return {
        "graph_x": rng.choice([2, 3, 4, 5, 6, 7]),
        **net,
        "closed_x": rng.choice(closed),
        "retain_x": rng.choice([1, 2, 3, 4]), "retain_factor": rng.choice([2, 3, 4, 5, 6, 7]),
        "accum_x": rng.choice([1, 2, 3, 4, 5, 6]), "accum_steps": rng.choice([2, 3, 4, 5]),
        "nograd_x": rng.choice([2, 3, 4, 5, 6, 7]),
        **call,
        "cubic_x": rng.choice([2, 3, 4, 5, 6, 7]),
        "w2": w2,
    }


def constraint_violations(params: Params) -> list[str]:
    """What, if anything, makes these numbers unfit for the exercises (empty list: fit)."""
    problems = []
    for key, value in params.items():
        if type(value) not in (int, float) or (value * 2) != int(value * 2) or abs(value) > 10:
            problems.append(f"{key} = {value!r} is not a small integer or half")
    h = params["net_w"] * params["net_x"] + params["net_b"]
    if h <= 0:
        problems.append("the tiny network's ReLU is shut")
    if params["net_w"] * params["closed_x"] + params["net_b"] >= 0:
        problems.append("the closed-ReLU input does not shut the ReLU")
    if h == params["net_target"]:
        problems.append("the tiny network's loss gradient is zero")
    if params["w2"] * h == params["net_target"]:
        problems.append("the w2 network's loss gradient is zero")
    if params["call_w"] * params["call_x"] + params["call_b"] == params["call_target"]:
        problems.append("the one-call loss gradient is zero")
    if params["net_target"] == 0:
        problems.append("the closed ReLU has a zero loss")
    if 0 in (params["retain_x"], params["accum_x"], params["call_x"], params["net_x"]):
        problems.append("a zero input makes a gradient zero")
    if params["accum_steps"] < 2:
        problems.append("accumulation needs at least two steps")
    return problems


def show(value: Any) -> str:
    """A number as the notebook's text shows it: 2, 0.5, −1."""
    text = f"{value:g}" if type(value) is float else str(value)
    return text.replace("-", "−")


def fill_text(text: str, params: Params) -> str:
    """Markdown with {{name}} placeholders -> the student's numbers."""
    return PLACEHOLDER.sub(lambda match: show(params[match.group(1)]) if match.group(1) in params else match.group(0),
                           text)


def numbers_source(params: Params) -> str:
    """The locked `numbers` cell for these numbers."""
    groups = [["graph_x"], ["net_x", "net_w", "net_b", "net_target"], ["closed_x"], ["retain_x", "retain_factor"],
              ["accum_x", "accum_steps"], ["nograd_x"], ["call_w", "call_b", "call_x", "call_target"], ["cubic_x"],
              ["w2"]]
    lines = ["# Your numbers: every exercise below uses them, and the grader uses the same ones.", "P = {"]
    for group in groups:
        lines.append("    " + " ".join(f'"{key}": {params[key]!r},' for key in group))
    lines.append("}")
    return "\n".join(lines)


def _check_private(path: Path) -> None:
    """Refuse a secret file that anyone but the grader's own user could read: student code runs as other
    uids, and with the secret it could derive every other student's numbers."""
    status = path.stat()
    if status.st_mode & 0o077:
        raise ConfigError(f"variants: the course secret file {path} can be read by other users (mode "
                          f"{stat.S_IMODE(status.st_mode):04o}); run `chmod 600 {path}` so that student code cannot "
                          "read it")
    if status.st_uid != os.geteuid():
        raise ConfigError(f"variants: the course secret file {path} belongs to uid {status.st_uid}, not to the "
                          f"grader (uid {os.geteuid()}); make the grader's user its owner, mode 600")


def load_secret(env_name: str, file_name: str | None, root: Path) -> bytes:
    """The course secret, from the environment variable or the file the course YAML names."""
    value = os.environ.get(env_name, "")
    if value:
        return value.encode("utf-8")
    if file_name:
        path = (root / file_name) if not Path(file_name).is_absolute() else Path(file_name)
        try:
            _check_private(path)
            secret = path.read_bytes().strip()
        except OSError as error:
            raise ConfigError(f"variants: cannot read the course secret file {path} ({error.strerror})") from None
        if secret:
            return secret
    raise ConfigError(
        f"variants: true needs a course secret: set the environment variable {env_name} or name a file in "
        "variant_secret_file (keep it out of the repository)"
    )


def course_secret(config: CourseConfig) -> bytes:
    """The course's variants secret, from where its settings say (refused when others could read it)."""
    return load_secret(config.variant_secret_env, config.variant_secret_file, config.root)


def numbers_for(config: CourseConfig, student_id: str, defaults: Params) -> Params:
    """The numbers a student's exercises use: their own when variants are on, else `defaults` (those of the
    source notebook's numbers cell)."""
    if not config.variants:
        return dict(defaults)
    return derive(course_secret(config), student_id)

"""The course YAML -> typed, validated settings. Errors name the file and the key."""

from __future__ import annotations

import functools
import importlib.metadata
import sys
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import yaml

from course.errors import ConfigError
from course.late import ACCEPT, PENALTY, UNIT_SECONDS, ZERO, LatePolicy

CONFIG_RELATIVE_PATH = Path("source") / "course.yaml"
DEFAULT_SANDBOX_UID = 61000
# limits.memory_mb is an address-space limit (RLIMIT_AS), which counts every mapped library. Importing the
# CPU build of torch maps about 0.6 GiB; the CUDA build (PyPI's torch on Linux) about 3.1 GiB, more than
# the whole default, so every notebook's `import torch` would fail. With that build the default grows by
# the difference, rounded up, leaving a notebook's own data the same room.
DEFAULT_MEMORY_MB = 2048
CUDA_TORCH_EXTRA_MB = 3072


@functools.cache
def torch_is_cuda_build() -> bool:
    """Whether the installed torch is a CUDA build, from its metadata (torch itself is not imported)."""
    try:
        requires = importlib.metadata.distribution("torch").requires or []
    except importlib.metadata.PackageNotFoundError:
        return False
    return sys.platform == "linux" and any(r.startswith(("nvidia-", "cuda-")) for r in requires)


def default_memory_mb() -> int:
    return DEFAULT_MEMORY_MB + (CUDA_TORCH_EXTRA_MB if torch_is_cuda_build() else 0)


@dataclass(frozen=True)
class Limits:
    """Resource limits for one student's code."""

    cell_seconds: float = 10
    submission_seconds: float = 60
    memory_mb: int = field(default_factory=default_memory_mb)
    processes: int = 64
    output_kb: int = 10240
    file_size_mb: int = 16
    open_files: int = 256
    tmp_mb: int = 64
    notebook_mb: int = 64
    max_cells: int = 2000


def setting(default: Any, help: str, must_be: str, valid: Callable[[Any], bool],
            convert: Callable[[Any], Any] = lambda value: value) -> Any:
    """One key of a section's schema, declared as a dataclass field: its type is the field's, then its default,
    what it does (help), what a value must be (the words of the error), the check, and the conversion."""
    return field(default=default, metadata={"help": help, "must_be": must_be, "valid": valid, "convert": convert})


BEST, LAST = "best", "last"


@dataclass(frozen=True)
class ServicePolicy:
    """`service:`, the policies of the submission service (`autograd-course serve`, course/service/)."""

    attempts: int | None = setting(
        None, "attempts per student; left out: no limit",
        "a whole number of at least 1 (or left out for no limit)", lambda v: v is None or (type(v) is int and v >= 1))
    cooldown_minutes: float = setting(
        0.0, "minutes between one attempt and the next", "a number of minutes, 0 or more",
        lambda v: type(v) in (int, float) and v >= 0, float)
    counts: str = setting(BEST, "which attempt's score is the grade", "best or last", lambda v: v in (BEST, LAST))
    upload_kb: int = setting(
        2048, "the largest notebook accepted, in KB (413 above it); at most limits.notebook_mb",
        "a whole number of kilobytes", lambda v: type(v) is int and v >= 1)
    # A real notebook is 10-200 KB: 20 MB holds a hundred such attempts, or ten at the 2 MB upload limit; a
    # class of 300 students then stores at most 6 GB per assignment.
    storage_mb: int = setting(
        20, "the notebooks one student may store per assignment, in MB, all attempts together (429 once full); "
            "at least upload_kb", "a whole number of megabytes", lambda v: type(v) is int and v >= 1)
    fresh_numbers_per_attempt: bool = setting(
        False, "with variants: true, attempt n > 1 gets numbers of its own", "true or false",
        lambda v: type(v) is bool)

    @property
    def upload_bytes(self) -> int:
        return self.upload_kb * 1024

    @property
    def storage_bytes(self) -> int:
        return self.storage_mb * 2**20


@dataclass(frozen=True)
class AssignmentSettings:
    name: str
    notebook: str
    due: datetime | None = None  # naive UTC, as nbgrader keeps it; None: nbgrader's gradebook decides
    extensions: dict[str, float] = field(default_factory=dict)  # student id -> extra hours
    exercises: str = "exercises.py"  # the assignment's content module, beside its notebook (optional)


@dataclass(frozen=True)
class CourseConfig:
    root: Path
    course_id: str
    assignments: tuple[AssignmentSettings, ...]
    tolerance: float = 1e-6
    hand_work: str = "note"
    hand_work_deduction: float = 0.5
    function_probes: int = 5
    limits: Limits = field(default_factory=Limits)
    sandbox: str = "auto"
    sandbox_uid: int = DEFAULT_SANDBOX_UID
    variants: bool = False
    variant_secret_env: str = "AUTOGRAD_COURSE_SECRET"  # noqa: S105 - the name of a variable, not a secret
    variant_secret_file: str | None = None
    feedback_reveals: str = "auto"
    late_policy: LatePolicy = field(default_factory=LatePolicy)
    service: ServicePolicy = field(default_factory=ServicePolicy)  # `autograd-course serve`'s policies

    def reveals_torch_values(self, *, gradescope: bool) -> bool:
        """Whether feedback shows torch's value beside each answer. `auto`: yes for local grading (the
        instructor decides when students see it), no on Gradescope, where a student can resubmit at once
        and copy torch's values into full marks."""
        if self.feedback_reveals == "auto":
            return not gradescope
        return self.feedback_reveals == "torch_values"

    def assignment(self, name: str | None = None) -> AssignmentSettings:
        """The named assignment, or the only one when name is None."""
        if name is None:
            return self.assignments[0]
        for assignment in self.assignments:
            if assignment.name == name:
                return assignment
        known = ", ".join(a.name for a in self.assignments)
        raise ConfigError(f"unknown assignment {name!r}; the course has: {known}")

    def source_notebook(self, name: str | None = None) -> Path:
        settings = self.assignment(name)
        return self.root / "source" / settings.name / settings.notebook

    def exercises_module(self, name: str | None = None) -> Path:
        """The assignment's content module: numbers' variants, chain tables, misconceptions (may not exist)."""
        settings = self.assignment(name)
        return self.root / "source" / settings.name / settings.exercises

    def release_notebook(self, name: str | None = None) -> Path:
        settings = self.assignment(name)
        return self.root / "release" / settings.name / settings.notebook

    def release_template(self, name: str | None = None) -> Path:
        """nbgrader's release with the {{placeholders}} of the numbers still in: personalised copies start here.
        Kept outside release/<assignment>/ so that nbgrader and students see only real notebooks."""
        settings = self.assignment(name)
        return self.root / "release" / f".{settings.name}-template.ipynb"

    @property
    def gradebook_url(self) -> str:
        return f"sqlite:///{self.root / 'gradebook.db'}"


_CHOICES = {"hand_work": ("note", "deduct"), "sandbox": ("auto", "bwrap", "uid", "rlimits"),
            "feedback_reveals": ("auto", "torch_values", "verdicts")}


def _number(where: str, value: Any, kind: type, *, positive: bool = True) -> Any:
    if type(value) is bool or not isinstance(value, int | float) or (kind is int and not isinstance(value, int)):
        wanted = "a whole number" if kind is int else "a number"
        raise ConfigError(f"{where} must be {wanted}, got {value!r}")
    if positive and value <= 0:
        raise ConfigError(f"{where} must be greater than 0, got {value!r}")
    return value


def _check_keys(where: str, data: dict, allowed: set[str], required: set[str]) -> None:
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise ConfigError(f"{where}: unknown key {unknown[0]!r} (known keys: {', '.join(sorted(allowed))})")
    missing = sorted(required - set(data))
    if missing:
        raise ConfigError(f"{where}: missing key {missing[0]!r}")


Section = TypeVar("Section")


def _section(where: str, data: Any, schema: type[Section]) -> Section:
    """A section's mapping, checked against its schema (a dataclass of `setting` fields): every key known,
    every value valid; `where` names the file and the section."""
    declared = {f.name: f.metadata for f in fields(schema)}  # type: ignore[arg-type]
    if not isinstance(data, dict):
        raise ConfigError(f"{where} must be a mapping ({', '.join(declared)})")
    _check_keys(where, data, set(declared), set())
    values = {}
    for key, value in data.items():
        if not declared[key]["valid"](value):
            raise ConfigError(f"{where}.{key} must be {declared[key]['must_be']}, got {value!r}")
        values[key] = declared[key]["convert"](value)
    return schema(**values)


def _service(where: str, data: Any, limits: Limits, variants: bool) -> ServicePolicy:
    """The `service:` section, and what it asks of other sections."""
    policy = _section(where, data, ServicePolicy)
    if policy.upload_kb > limits.notebook_mb * 1024:
        raise ConfigError(f"{where}.upload_kb ({policy.upload_kb}) is larger than limits.notebook_mb "
                          f"({limits.notebook_mb} MB), which the grader would refuse anyway")
    if policy.storage_mb * 1024 < policy.upload_kb:
        raise ConfigError(f"{where}.storage_mb ({policy.storage_mb} MB) is smaller than upload_kb "
                          f"({policy.upload_kb} KB): a student could not store one notebook of the largest size")
    if policy.fresh_numbers_per_attempt and not variants:
        raise ConfigError(f"{where}.fresh_numbers_per_attempt needs variants: true (numbers per student)")
    return policy


def _due(where: str, value: Any) -> datetime | None:
    """A due date as nbgrader writes them ("2026-11-20 23:59:00 UTC", an ISO time with an offset, or a YAML
    timestamp); a time without a zone is UTC."""
    if value is None:
        return None
    from nbgrader.utils import parse_utc

    if not isinstance(value, str | datetime):
        raise ConfigError(f"{where}.due must be a date and time like '2026-11-20 23:59 UTC', got {value!r}")
    try:
        return parse_utc(value)
    except (ValueError, OverflowError):
        raise ConfigError(f"{where}.due must be a date and time like '2026-11-20 23:59 UTC', got {value!r}") from None


def _extensions(where: str, value: Any) -> dict[str, float]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(f"{where}.extensions must map student ids to extra hours, e.g. {{carol: 48}}")
    return {str(student): float(_number(f"{where}.extensions.{student}", hours, float))
            for student, hours in value.items()}


def _late_policy(where: str, value: Any) -> LatePolicy:
    if not isinstance(value, dict):
        raise ConfigError(f"{where} must be a mapping (mode, percent, per, cutoff_hours)")
    _check_keys(where, value, {"mode", "percent", "per", "cutoff_hours"}, {"mode"})
    modes = (ACCEPT, PENALTY, ZERO)
    if value["mode"] not in modes:
        raise ConfigError(f"{where}.mode must be one of {', '.join(modes)}, got {value['mode']!r}")
    if value.get("per", "day") not in UNIT_SECONDS:
        raise ConfigError(f"{where}.per must be day or hour, got {value['per']!r}")
    if value["mode"] == PENALTY and "percent" not in value:
        raise ConfigError(f"{where}: mode penalty needs percent (of the maximum score, per day or hour late)")
    percent = float(_number(f"{where}.percent", value.get("percent", 0), float, positive=False))
    if not 0 <= percent <= 100:
        raise ConfigError(f"{where}.percent must be between 0 and 100, got {percent!r}")
    cutoff = value.get("cutoff_hours")
    return LatePolicy(value["mode"], percent, value.get("per", "day"),
                      None if cutoff is None else float(_number(f"{where}.cutoff_hours", cutoff, float)))


def parse_config(data: Any, root: Path, where: str) -> CourseConfig:
    """Validate the parsed YAML mapping; `where` names the file in every message."""
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping of settings at the top level")
    top_keys = {f.name for f in fields(CourseConfig)} - {"root"}
    _check_keys(where, data, top_keys, {"course_id", "assignments"})
    if not isinstance(data["course_id"], str) or not data["course_id"]:
        raise ConfigError(f"{where}: course_id must be a non-empty string")
    raw_assignments = data["assignments"]
    if not isinstance(raw_assignments, list) or not raw_assignments:
        raise ConfigError(f"{where}: assignments must be a non-empty list of {{name, notebook}}")
    assignments: list[AssignmentSettings] = []
    for index, item in enumerate(raw_assignments):
        item_where = f"{where}: assignments[{index}]"
        if not isinstance(item, dict):
            raise ConfigError(f"{item_where} must be a mapping with name and notebook")
        _check_keys(item_where, item, {"name", "notebook", "due", "extensions", "exercises"}, {"name", "notebook"})
        for key in ("name", "notebook", "exercises"):
            if key in item and (not isinstance(item[key], str) or not item[key] or "/" in item[key]
                                or item[key].startswith(".")):
                raise ConfigError(f"{item_where}.{key} must be a plain file or folder name, got {item[key]!r}")
        if any(known.name == item["name"] for known in assignments):
            raise ConfigError(f"{item_where}: the assignment name {item['name']!r} is used twice")
        assignments.append(AssignmentSettings(item["name"], item["notebook"], _due(item_where, item.get("due")),
                                              _extensions(item_where, item.get("extensions")),
                                              item.get("exercises", "exercises.py")))

    settings: dict[str, Any] = {}
    for key, choices in _CHOICES.items():
        if key in data:
            if data[key] not in choices:
                raise ConfigError(f"{where}: {key} must be one of {', '.join(choices)}, got {data[key]!r}")
            settings[key] = data[key]
    if "tolerance" in data:
        settings["tolerance"] = float(_number(f"{where}: tolerance", data["tolerance"], float))
    if "hand_work_deduction" in data:
        value = _number(f"{where}: hand_work_deduction", data["hand_work_deduction"], float, positive=False)
        if not 0 <= value <= 1:
            raise ConfigError(f"{where}: hand_work_deduction must be between 0 and 1, got {value!r}")
        settings["hand_work_deduction"] = float(value)
    for key in ("function_probes", "sandbox_uid"):
        if key in data:
            settings[key] = _number(f"{where}: {key}", data[key], int)
    if "variants" in data:
        if type(data["variants"]) is not bool:
            raise ConfigError(f"{where}: variants must be true or false, got {data['variants']!r}")
        settings["variants"] = data["variants"]
    for key in ("variant_secret_env", "variant_secret_file"):
        if key in data:
            if not isinstance(data[key], str) or not data[key]:
                raise ConfigError(f"{where}: {key} must be a non-empty string, got {data[key]!r}")
            settings[key] = data[key]
    if "late_policy" in data:
        settings["late_policy"] = _late_policy(f"{where}: late_policy", data["late_policy"])
    if "limits" in data:
        raw_limits = data["limits"]
        if not isinstance(raw_limits, dict):
            raise ConfigError(f"{where}: limits must be a mapping")
        limit_types = {f.name: f.type for f in fields(Limits)}
        _check_keys(f"{where}: limits", raw_limits, set(limit_types), set())
        settings["limits"] = Limits(**{
            key: _number(f"{where}: limits.{key}", value, float if limit_types[key] == "float" else int)
            for key, value in raw_limits.items()
        })
    if "service" in data:
        settings["service"] = _service(f"{where}: service", data["service"], settings.get("limits", Limits()),
                                       settings.get("variants", False))
    return CourseConfig(root=root, course_id=data["course_id"], assignments=tuple(assignments), **settings)


def find_config(root: Path | str = ".") -> CourseConfig | None:
    """The course's settings when `root` holds source/course.yaml, else None (a student's folder: the
    self-check then uses the defaults)."""
    if not (Path(root) / CONFIG_RELATIVE_PATH).exists():
        return None
    return load_config(root)


def load_config(root: Path | str = ".") -> CourseConfig:
    """Read `source/course.yaml` under the course root."""
    root = Path(root).resolve()
    path = root / CONFIG_RELATIVE_PATH
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(
            f"{path}: not found. Run autograd-course from the course root (the folder holding source/), "
            "or pass --course DIR."
        ) from None
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(f"{path}: cannot be read ({error})") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise ConfigError(f"{path}: not valid YAML ({error})") from None
    return parse_config(data, root, str(path))

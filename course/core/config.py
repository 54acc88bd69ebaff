"""The course YAML -> typed, validated settings. Errors name the file and the key."""

from __future__ import annotations

import functools
import importlib.metadata
import sys
from dataclasses import Field, dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from course.core.errors import ConfigError
from course.core.late import PENALTY, LatePolicy
from course.core.schema import (
    BOOLEAN,
    TEXT,
    Kind,
    check_keys,
    declared,
    number,
    one_of,
    optional,
    read_section,
    read_values,
    setting,
    subsection,
    whole,
)

CONFIG_RELATIVE_PATH = Path("source") / "course.yaml"
DEFAULT_SANDBOX_UID = 61000
SANDBOX_UID_RANGE = 64  # sandbox uids base .. base+63: one per concurrently running sandbox on the machine
OVERFLOW_UID = 65534  # `nobody`: daemons run as it, and the kernel shows an unmapped uid as it
NO_LOGIN_SHELLS = ("nologin", "false", "sync")  # an empty shell field means /bin/sh: a login
# uids systemd hands out itself, mostly absent from the accounts until used: homed users, DynamicUser= services
SYSTEMD_UID_RANGES = ((60001, 60513, "systemd-homed's users"), (61184, 65519, "systemd's DynamicUser services"))
MAX_SANDBOX_UID = 2**31 - 1  # far below (uid_t)-1, which setuid reads as "unchanged"


def _sandbox_uids() -> Kind:
    """The first sandbox uid: after each run the grader kills every process of the uid it leased, so no uid of
    the range may be a system account's, `nobody` or a login account's (an account made for the sandbox, with no
    login shell, as the container image's `student`, is what the range is for)."""

    def problem(value: Any) -> str | None:
        if type(value) is not int or value < 1000:
            return "a whole number of at least 1000 (below are the system's own accounts)"
        if value + SANDBOX_UID_RANGE > MAX_SANDBOX_UID:
            return f"a whole number of at most {MAX_SANDBOX_UID - SANDBOX_UID_RANGE}"
        for low, high, whose in SYSTEMD_UID_RANGES:
            if value <= high and low < value + SANDBOX_UID_RANGE:
                return (
                    f"a range of {SANDBOX_UID_RANGE} uids outside {low}-{high} ({whose}: the grader kills every "
                    "process of its sandbox uids)"
                )
        if value <= OVERFLOW_UID < value + SANDBOX_UID_RANGE:
            return (
                f"a range of {SANDBOX_UID_RANGE} uids without {OVERFLOW_UID} (`nobody`: daemons run as it, and "
                "the grader kills every process of its sandbox uids)"
            )
        login = _login_account_in(value, value + SANDBOX_UID_RANGE)
        if login:
            return (
                f"a range of {SANDBOX_UID_RANGE} uids that no login account has ({login} has a uid in it: the "
                "grader kills every process of its sandbox uids)"
            )
        return None

    return Kind(f"a whole number from 1000 up, the first of {SANDBOX_UID_RANGE} uids no login account has", problem)


@functools.lru_cache(maxsize=8)
def _login_account_in(low: int, high: int) -> str:
    """The name of an account with a login shell whose uid is in [low, high), "" when there is none. Asked uid by
    uid: listing every account can mean a whole directory service where the machine uses one."""
    import pwd

    for uid in range(low, high):
        try:
            account = pwd.getpwuid(uid)
        except KeyError:
            continue
        if Path(account.pw_shell).name not in NO_LOGIN_SHELLS:
            return repr(account.pw_name)
    return ""


# A student's pages and API reads in a row before service.pages_per_minute paces them (service/edge.py).
PAGE_BURST = 20
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


PLAIN_NAME = Kind(
    "a plain file or folder name (no /, not starting with .)",
    lambda value: (
        None
        if isinstance(value, str) and value and "/" not in value and not value.startswith(".")
        else "a plain file or folder name"
    ),
)


@dataclass(frozen=True)
class Limits:
    """`limits:`, resource limits for one student's code."""

    cell_seconds: float = setting(
        10,
        "wall-clock limit of one cell; its clock does not count the time its run was kept waiting for a "
        "processor by other work (the kernel's count; up to one more limit); the whole process group is killed",
        number(),
    )
    submission_seconds: float = setting(
        60, "wall-clock limit of the whole submission; it counts everything (from the runner's ready)", number()
    )
    memory_mb: int = setting(
        help="memory of one run, bounded twice: each process's address space (RLIMIT_AS, which counts mapped "
        "libraries: about 0.6 GiB for the CPU build of torch, 3 GiB for a CUDA build, with which the default is "
        "5120), and what all the run's processes together allocate once the sandbox is ready (a memory cgroup "
        "of the run's own where the grader may make one, else the supervisor's accounting: SECURITY.md); going "
        "over ends the run, named in the feedback",
        kind=whole(),
        default_factory=default_memory_mb,
        shown_default=str(DEFAULT_MEMORY_MB),
    )
    processes: int = setting(32, "processes and threads (RLIMIT_NPROC)", whole())
    output_kb: int = setting(10240, "output a submission may print", whole())
    file_size_mb: int = setting(16, "largest file it may write (RLIMIT_FSIZE)", whole())
    open_files: int = setting(256, "open files (RLIMIT_NOFILE)", whole())
    tmp_mb: int = setting(64, "size of the sandbox's own /tmp", whole())
    notebook_mb: int = setting(64, "largest submitted notebook accepted", whole())
    max_cells: int = setting(2000, "most cells a submitted notebook may have", whole())


BEST, LAST = "best", "last"


@dataclass(frozen=True)
class ServicePolicy:
    """`service:`, the policies of the submission service (`autograd-course serve`, course/platforms/service/); see
    docs/service.md. A new policy is one `setting` line here."""

    attempts: int | None = setting(
        None,
        "attempts per student; left out: no limit",
        optional(whole(words="a whole number of at least 1"), "or left out for no limit"),
    )
    cooldown_minutes: float = setting(
        0.0,
        "minutes between one attempt and the next",
        number(at_least=0, to_float=True, words="a number of minutes, 0 or more"),
    )
    counts: str = setting(BEST, "which attempt's score is the grade", one_of(BEST, LAST, words="best or last"))
    upload_kb: int = setting(
        2048,
        "the largest notebook accepted, in KB (413 above it); at most limits.notebook_mb",
        whole(words="a whole number of kilobytes"),
    )
    # A real notebook is 10-200 KB: 20 MB holds a hundred such attempts, or ten at the 2 MB upload limit; a
    # class of 300 students then stores at most 6 GB per assignment.
    storage_mb: int = setting(
        20,
        "the notebooks one student may store per assignment, in MB, all attempts together (429 once full); "
        "at least upload_kb",
        whole(words="a whole number of megabytes"),
    )
    fresh_numbers_per_attempt: bool = setting(
        False, "with variants: true, attempt n > 1 gets numbers of its own", BOOLEAN
    )
    # A page or the API's GET costs a little of the server's one interpreter each time: a loop reloading them
    # once took it from everyone's uploads. A browser loads a page at a time (the "being graded" page reloads
    # every 2 s, `submit` polls every 2 s: 30 a minute each), so these leave a student room to spare.
    pages_in_flight: int = setting(
        2,
        "a student's pages and API reads (GET) being answered at once (429 with Retry-After beyond)",
        whole(words="a whole number of at least 1"),
    )
    pages_per_minute: int = setting(
        120,
        f"a student's pages and API reads (GET) per minute, after a first burst of {PAGE_BURST} (429 with "
        "Retry-After beyond)",
        whole(words="a whole number of at least 1"),
    )

    @property
    def upload_bytes(self) -> int:
        return self.upload_kb * 1024

    @property
    def storage_bytes(self) -> int:
        return self.storage_mb * 2**20


def _parse_due(value: Any) -> datetime:
    from nbgrader.utils import parse_utc

    due: datetime = parse_utc(value)
    return due


def _due_problem(value: Any) -> str | None:
    words = "a date and time like '2026-11-20 23:59 UTC'"
    if not isinstance(value, str | datetime):
        return words
    try:
        _parse_due(value)
    except (ValueError, OverflowError):
        return words
    return None


def _is_positive_number(value: Any) -> bool:
    return type(value) in (int, float) and value > 0


DUE = optional(
    Kind(
        "a date and time as nbgrader writes it (`2026-11-20 23:59:00 UTC`; no zone means UTC)", _due_problem, _parse_due
    ),
    "or left out: the due date in nbgrader's gradebook",
)
EXTENSIONS = Kind(
    "a mapping of student ids to extra hours, e.g. `{carol: 48}`",
    lambda value: (
        None
        if value is None or (isinstance(value, dict) and all(_is_positive_number(hours) for hours in value.values()))
        else "a mapping of student ids to extra hours (numbers greater than 0), e.g. {carol: 48}"
    ),
    lambda value: {str(student): float(hours) for student, hours in (value or {}).items()},
)


@dataclass(frozen=True)
class AssignmentSettings:
    """One item of `assignments:`."""

    name: str = setting(help="its folder under source/ and release/, and nbgrader's name for it", kind=PLAIN_NAME)
    notebook: str = setting(help="its notebook in that folder", kind=PLAIN_NAME)
    due: datetime | None = setting(  # naive UTC, as nbgrader keeps it
        None,
        "when it is due; without it, the due date in nbgrader's gradebook "
        "(`nbgrader db assignment add autograd --duedate=...`)",
        DUE,
    )
    extensions: dict[str, float] = setting(help="extra hours per student", kind=EXTENSIONS, default_factory=dict)
    exercises: str = setting(
        "exercises.py",
        "its content module beside the notebook: numbers' variants, chain tables, misconceptions "
        "(optional; authoring.md, adding an assignment)",
        PLAIN_NAME,
    )


@dataclass(frozen=True)
class CourseConfig:
    """The top level of source/course.yaml."""

    root: Path  # the course root (not a setting: where the file was found)
    course_id: str = setting(help="the course's id, nbgrader's `CourseDirectory.course_id`")
    assignments: tuple[AssignmentSettings, ...] = subsection(
        AssignmentSettings, "the assignments, each a folder under source/ with its notebook", many=True
    )
    tolerance: float = setting(
        1e-6, "how close a hand value must be to torch's", number(to_float=True), shown_default="1e-6"
    )
    hand_work: str = setting(
        "note",
        "`note`: feedback says when an answer was computed with torch; `deduct`: it also costs "
        "`hand_work_deduction` of that value's points",
        one_of("note", "deduct"),
    )
    hand_work_deduction: float = setting(
        0.5,
        "the share of a value's points that `hand_work: deduct` takes off",
        number(at_least=0, at_most=1, to_float=True),
    )
    function_probes: int = setting(
        5,
        "how many points drawn for each student a function answer is called at, beside zero, the exercise's "
        "own point and two halves: reals in [-8, 8], one per equal slice (so a negative and a positive one; at "
        "least two are drawn), the same on every regrade of the student's notebook, never named to her, keyed "
        "with the course secret when there is one (course/pipeline/probes.py)",
        whole(at_most=16),
    )
    limits: Limits = subsection(Limits, "resource limits for one student's code")
    sandbox: str = setting(
        "auto",
        "`auto` (bubblewrap as root, or in a user namespace otherwise; refuse to grade without either), "
        "`bwrap` (the same), `uid` (root without namespaces: a uid drop only) or `rlimits` (rlimits and timeouts "
        "only)",
        one_of("auto", "bwrap", "uid", "rlimits"),
    )
    sandbox_uid: int = setting(
        DEFAULT_SANDBOX_UID,
        "the first of 64 uids/gids that sandboxes lease (one per concurrently running "
        "sandbox); nothing else may use them: leftover processes of a sandbox's uid are killed after each "
        "submission",
        _sandbox_uids(),
    )
    variants: bool = setting(False, "per-student numbers (authoring.md, per-student variants)", BOOLEAN)
    variant_secret_env: str = setting(
        "AUTOGRAD_COURSE_SECRET",  # the name of a variable, not a secret
        "the environment variable that holds the course secret of the variants",
    )
    variant_secret_file: str | None = setting(
        None,
        "a file that holds the course secret instead; it must be readable by the grader's user alone "
        "(`chmod 600`), or grading stops",
        optional(TEXT, "or left out"),
    )
    feedback_reveals: str = setting(
        "auto",
        "`torch_values`: feedback shows torch's value beside each answer and in the chain tables; "
        "`verdicts`: only right or wrong, each answer's `idea` in place of its hint (authoring.md, hidden tests), "
        "the chain table's verdicts and, of each misconception note, its idea (the concept the slip violates), "
        "never its diagnosis, which relates the answer to torch's, and no sign slip at all; `auto`: "
        "`torch_values` for `autograd-course grade`, `verdicts` on Gradescope (a student can resubmit there at "
        "once, so torch's values would be full marks one copy away)",
        one_of("auto", "torch_values", "verdicts"),
    )
    late_policy: LatePolicy = subsection(LatePolicy, "what late work costs (grading.md)")
    service: ServicePolicy = subsection(ServicePolicy, "the submission service's policies (service.md)")

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

    def paths(self, name: str | None = None) -> AssignmentPaths:
        """Where the files of assignment `name` (the first when None) are in the course folder."""
        return AssignmentPaths(self.root, self.assignment(name))

    def source_notebook(self, name: str | None = None) -> Path:
        return self.paths(name).source_notebook

    def exercises_module(self, name: str | None = None) -> Path:
        return self.paths(name).exercises_module

    def release_notebook(self, name: str | None = None) -> Path:
        return self.paths(name).release_notebook

    def release_template(self, name: str | None = None) -> Path:
        return self.paths(name).release_template

    def personalised_folder(self, name: str | None = None) -> Path:
        return self.paths(name).personalised_folder

    def personalised_notebook(self, student_id: str, name: str | None = None) -> Path:
        return self.paths(name).personalised_notebook(student_id)

    @property
    def gradebook_url(self) -> str:
        return f"sqlite:///{self.root / 'gradebook.db'}"


@dataclass(frozen=True)
class AssignmentPaths:
    """Where one assignment's files are in the course folder (`root`): from settings already looked up, so that a
    run that holds them (pipeline/run_context.py) asks for a path without looking the assignment up again by name."""

    root: Path
    settings: AssignmentSettings

    @property
    def source_notebook(self) -> Path:
        return self.root / "source" / self.settings.name / self.settings.notebook

    @property
    def exercises_module(self) -> Path:
        """The assignment's content module: numbers' variants, chain tables, misconceptions (may not exist)."""
        return self.root / "source" / self.settings.name / self.settings.exercises

    @property
    def release_notebook(self) -> Path:
        return self.root / "release" / self.settings.name / self.settings.notebook

    @property
    def release_template(self) -> Path:
        """nbgrader's release with the {{placeholders}} of the numbers still in: personalised copies start here.
        Kept outside release/<assignment>/ so that nbgrader and students see only real notebooks."""
        return self.root / "release" / f".{self.settings.name}-template.ipynb"

    @property
    def personalised_folder(self) -> Path:
        """personalised/<assignment>/: each student's own copy (variants), one folder per student id. Outside
        release/ on purpose: `nbgrader release_assignment` copies all of release/<assignment>/ into the exchange for
        every student, and a classmate's copy holds that classmate's numbers."""
        return self.root / "personalised" / self.settings.name

    def personalised_notebook(self, student_id: str) -> Path:
        """The notebook released for one student: personalised/<assignment>/<id>/<notebook>."""
        return self.personalised_folder / student_id / self.settings.notebook


def _assignments(where: str, data: Any) -> tuple[AssignmentSettings, ...]:
    if not isinstance(data, list) or not data:
        raise ConfigError(f"{where} must be a non-empty list of {{name, notebook}}")
    assignments: list[AssignmentSettings] = []
    for index, item in enumerate(data):
        assignment = read_section(f"{where}[{index}]", item, AssignmentSettings)
        if any(known.name == assignment.name for known in assignments):
            raise ConfigError(f"{where}[{index}]: the assignment name {assignment.name!r} is used twice")
        assignments.append(assignment)
    return tuple(assignments)


def _late_policy(where: str, data: Any) -> LatePolicy:
    if isinstance(data, dict):
        check_keys(where, data, [f.name for f in declared(LatePolicy)], ["mode"])
    policy = read_section(where, data, LatePolicy)
    if policy.mode == PENALTY and "percent" not in data:
        raise ConfigError(f"{where}: mode penalty needs percent (of the maximum score, per day or hour late)")
    return policy


def _service(where: str, data: Any, limits: Limits, variants: bool) -> ServicePolicy:
    """The `service:` section, and what it asks of other sections."""
    policy = read_section(where, data, ServicePolicy)
    if policy.upload_kb > limits.notebook_mb * 1024:
        raise ConfigError(
            f"{where}.upload_kb ({policy.upload_kb}) is larger than limits.notebook_mb "
            f"({limits.notebook_mb} MB), which the grader would refuse anyway"
        )
    if policy.storage_mb * 1024 < policy.upload_kb:
        raise ConfigError(
            f"{where}.storage_mb ({policy.storage_mb} MB) is smaller than upload_kb "
            f"({policy.upload_kb} KB): a student could not store one notebook of the largest size"
        )
    if policy.fresh_numbers_per_attempt and not variants:
        raise ConfigError(f"{where}.fresh_numbers_per_attempt needs variants: true (numbers per student)")
    return policy


def parse_config(data: Any, root: Path, where: str) -> CourseConfig:
    """Validate the parsed YAML mapping against the schema (the dataclasses above); `where` names the file in
    every message."""
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping of settings at the top level")

    def subsection_value(name: str, value: Any, setting_field: Field[Any]) -> Any:
        if setting_field.name == "assignments":
            return _assignments(name, value)
        if setting_field.name == "late_policy":
            return _late_policy(name, value)
        if setting_field.name == "service":
            return value  # read below, once limits and variants are known
        return read_section(name, value, setting_field.metadata["section"])

    settings = read_values(where, data, CourseConfig, lambda key: f"{where}: {key}", subsection_value)
    if "service" in settings:
        settings["service"] = _service(
            f"{where}: service", settings["service"], settings.get("limits", Limits()), settings.get("variants", False)
        )
    return CourseConfig(root=root, **settings)


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

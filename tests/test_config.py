from __future__ import annotations

from dataclasses import MISSING, fields
from pathlib import Path

import pytest
import yaml

from course.core import config as config_module
from course.core.config import ServicePolicy, default_memory_mb, load_config, parse_config
from course.core.errors import ConfigError
from tests.support.helpers import ROOT


def test_the_course_yaml_loads_with_documented_defaults():
    config = load_config(ROOT)
    assert config.course_id == "autograd-course"
    assert config.assignment().name == "autograd"
    assert config.tolerance == 1e-6
    assert config.limits.cell_seconds == 10
    assert config.limits.submission_seconds == 60
    assert config.limits.memory_mb == default_memory_mb()
    assert config.limits.processes == 32
    assert config.limits.output_kb == 10240


BASE = {"course_id": "c", "assignments": [{"name": "a", "notebook": "a.ipynb"}]}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"course_id": None}, "course_id must be a non-empty string"),
        ({"assignments": []}, "assignments must be a non-empty list"),
        ({"assignments": [{"name": "a"}]}, "assignments[0]: missing key 'notebook'"),
        ({"assignments": [{"name": "../a", "notebook": "a.ipynb"}]}, "assignments[0].name must be a plain"),
        ({"tolerance": "small"}, "tolerance must be a number, got 'small'"),
        ({"tolerance": -1}, "tolerance must be greater than 0"),
        ({"hand_work": "ignore"}, "hand_work must be one of note, deduct"),
        ({"limits": {"cell_seconds": "ten"}}, "limits.cell_seconds must be a number"),
        ({"limits": {"memory_mb": 1.5}}, "limits.memory_mb must be a whole number"),
        ({"limits": {"cpu": 3}}, "limits: unknown key 'cpu'"),
        ({"limit": {}}, "unknown key 'limit'"),
        ({"sandbox": "docker"}, "sandbox must be one of auto, bwrap, uid, rlimits"),
        ({"hand_work_deduction": 2}, "hand_work_deduction must be between 0 and 1"),
        # The grader kills every process of its sandbox uids after each run: never a system account's, nobody's
        # (an instructor's plausible choice, which killed the machine's `nobody` daemons) or a login account's.
        ({"sandbox_uid": 500}, "sandbox_uid must be a whole number of at least 1000"),
        ({"sandbox_uid": 65534}, "sandbox_uid must be a range of 64 uids without 65534"),
        ({"sandbox_uid": 65520}, "sandbox_uid must be a range of 64 uids without 65534"),
        ({"sandbox_uid": 61150}, "sandbox_uid must be a range of 64 uids outside 61184-65519"),
        ({"sandbox_uid": 60500}, "sandbox_uid must be a range of 64 uids outside 60001-60513"),
        ({"sandbox_uid": 2**31}, "sandbox_uid must be a whole number of at most"),
    ],
)
def test_bad_settings_name_the_file_and_the_key(change, message):
    data = {**BASE, **change}
    with pytest.raises(ConfigError) as raised:
        parse_config(data, Path("/course"), "/course/source/course.yaml")
    assert message in str(raised.value)
    assert str(raised.value).startswith("/course/source/course.yaml")


def test_missing_required_key_is_named():
    with pytest.raises(ConfigError, match="missing key 'assignments'"):
        parse_config({"course_id": "c"}, Path("/c"), "course.yaml")


def test_missing_file_says_where_to_run(tmp_path):
    with pytest.raises(ConfigError, match=r"not found\. Run autograd-course from the course root"):
        load_config(tmp_path)


def test_invalid_yaml_is_reported(tmp_path):
    (tmp_path / "source").mkdir()
    (tmp_path / "source" / "course.yaml").write_text("course_id: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(tmp_path)


def test_limits_override(tmp_path):
    (tmp_path / "source").mkdir()
    data = {**BASE, "limits": {"cell_seconds": 2.5, "processes": 8}}
    (tmp_path / "source" / "course.yaml").write_text(yaml.safe_dump(data))
    config = load_config(tmp_path)
    assert config.limits.cell_seconds == 2.5
    assert config.limits.processes == 8
    assert config.limits.memory_mb == default_memory_mb()


@pytest.mark.parametrize(("cuda", "memory_mb"), [(False, 2048), (True, 5120)])
def test_memory_default_makes_room_for_a_cuda_build_of_torch(monkeypatch, cuda, memory_mb):
    """RLIMIT_AS counts mapped libraries: the CUDA build maps about 3 GiB at `import torch`."""
    monkeypatch.setattr(config_module, "torch_is_cuda_build", lambda: cuda)
    assert default_memory_mb() == memory_mb
    assert parse_config(BASE, Path(), "c.yaml").limits.memory_mb == memory_mb


def test_the_installed_torch_build_is_recognised():
    import torch

    assert config_module.torch_is_cuda_build() == (torch.version.cuda is not None)


@pytest.mark.parametrize(
    ("service", "message"),
    [
        (
            {"attemps": 3},
            "service: unknown key 'attemps' (known keys: attempts, cooldown_minutes, counts, "
            "fresh_numbers_per_attempt, pages_in_flight, pages_per_minute, storage_mb, upload_kb)",
        ),
        ({"attempts": 0}, "service.attempts must be a whole number of at least 1 (or left out for no limit), got 0"),
        ({"attempts": "3"}, "service.attempts must be a whole number of at least 1"),
        ({"cooldown_minutes": -1}, "service.cooldown_minutes must be a number of minutes, 0 or more, got -1"),
        ({"cooldown_minutes": True}, "service.cooldown_minutes must be a number of minutes"),
        ({"counts": "first"}, "service.counts must be best or last, got 'first'"),
        ({"upload_kb": 1.5}, "service.upload_kb must be a whole number of kilobytes, got 1.5"),
        ({"upload_kb": 10**9}, "service.upload_kb (1000000000) is larger than limits.notebook_mb (64 MB)"),
        ({"fresh_numbers_per_attempt": "yes"}, "service.fresh_numbers_per_attempt must be true or false"),
        ({"fresh_numbers_per_attempt": True}, "service.fresh_numbers_per_attempt needs variants: true"),
        ({"storage_mb": 0}, "service.storage_mb must be a whole number of megabytes, got 0"),
        ({"storage_mb": 1, "upload_kb": 2048}, "service.storage_mb (1 MB) is smaller than upload_kb (2048 KB)"),
        (
            3,
            "service must be a mapping (attempts, cooldown_minutes, counts, upload_kb, storage_mb, "
            "fresh_numbers_per_attempt, pages_in_flight, pages_per_minute)",
        ),
    ],
)
def test_bad_service_settings_name_the_file_and_the_key(service, message):
    with pytest.raises(ConfigError) as raised:
        parse_config({**BASE, "service": service}, Path("/course"), "/course/source/course.yaml")
    assert str(raised.value).startswith("/course/source/course.yaml: service")
    assert message in str(raised.value)


def test_service_settings_are_typed_at_load_with_their_defaults():
    assert parse_config(BASE, Path("/c"), "c.yaml").service == ServicePolicy()
    data = {
        **BASE,
        "variants": True,
        "limits": {"notebook_mb": 1},
        "service": {
            "attempts": 3,
            "cooldown_minutes": 2,
            "counts": "last",
            "upload_kb": 1024,
            "fresh_numbers_per_attempt": True,
        },
    }
    policy = parse_config(data, Path("/c"), "c.yaml").service
    assert policy == ServicePolicy(
        attempts=3, cooldown_minutes=2.0, counts="last", upload_kb=1024, fresh_numbers_per_attempt=True
    )
    assert type(policy.cooldown_minutes) is float
    assert policy.upload_bytes == 1024 * 1024
    assert ServicePolicy().storage_bytes == 20 * 2**20  # a hundred notebooks of 200 KB
    assert parse_config({**BASE, "service": {"attempts": None}}, Path("/c"), "c.yaml").service.attempts is None


def test_every_service_setting_is_declared_with_a_default_and_help():
    """The schema is the dataclass: each key's type, default, help and the words of its error in one place."""
    for setting in fields(ServicePolicy):
        assert setting.default is not MISSING, setting.name
        assert setting.metadata["help"], setting.name
        assert setting.metadata["kind"].problem(setting.default) is None, setting.name  # the default passes its check


def test_a_sandbox_uid_range_with_a_login_account_is_refused(monkeypatch):
    """Read from the machine's own accounts (root's, uid 0, as its shell says); an account without a login shell
    (the container image's `student`, made for the sandbox) does not count."""
    import pwd

    root_logs_in = Path(pwd.getpwuid(0).pw_shell).name not in config_module.NO_LOGIN_SHELLS
    assert config_module._login_account_in(0, 1) == ("'root'" if root_logs_in else "")
    monkeypatch.setattr(config_module, "_login_account_in", lambda low, high: "'alice'" if low <= 61000 < high else "")
    with pytest.raises(
        ConfigError,
        match=r"sandbox_uid must be a range of 64 uids that no login account has "
        r"\('alice' has a uid in it",
    ):
        parse_config({**BASE, "sandbox_uid": 60990}, Path("/course"), "/course/source/course.yaml")
    assert parse_config({**BASE, "sandbox_uid": 61064}, Path("/course"), "/course/source/course.yaml")

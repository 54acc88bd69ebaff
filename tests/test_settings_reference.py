"""The settings' schema is one declaration (course/core/config.py's dataclasses): every section is checked by it at
load, and docs/settings.md is generated from it (docs/generators/settings_reference.py, a script of the repository)
and must not drift from it."""

from __future__ import annotations

import runpy
from dataclasses import MISSING
from pathlib import Path

import pytest

from course.core.config import CourseConfig, parse_config
from course.core.errors import ConfigError
from course.core.schema import declared
from tests.support.helpers import ROOT

# the script's names, as it defines them
GENERATOR = runpy.run_path(str(ROOT / "docs" / "generators" / "settings_reference.py"))
REGENERATE, main, render = GENERATOR["REGENERATE"], GENERATOR["main"], GENERATOR["render"]

SETTINGS_MD = ROOT / "docs" / "settings.md"
BASE = {"course_id": "c", "assignments": [{"name": "a", "notebook": "a.ipynb"}]}


def _sections(schema: type = CourseConfig, path: tuple[str, ...] = ()):
    """(path of keys, schema) of every section: the top level, then each section inside, depth first."""
    yield path, schema
    for setting in declared(schema):
        if "section" in setting.metadata:
            yield from _sections(setting.metadata["section"], (*path, setting.name))


SECTIONS = list(_sections())
SECTION_IDS = [".".join(path) or "top level" for path, _ in SECTIONS]


def test_docs_settings_md_is_what_the_schema_says():
    assert SETTINGS_MD.read_text(encoding="utf-8") == render(), (
        f"docs/settings.md differs from the settings' schema: regenerate it with `{REGENERATE}` and commit it"
    )


def test_the_generator_writes_the_file(tmp_path):
    assert main([str(tmp_path / "settings.md")]) == 0
    assert (tmp_path / "settings.md").read_text(encoding="utf-8") == render()


@pytest.mark.parametrize(("path", "schema"), SECTIONS, ids=SECTION_IDS)
def test_every_setting_is_declared_documented_and_its_default_valid(path, schema):
    text = render()
    prefix = "".join(f"{key}[]." if key == "assignments" else f"{key}." for key in path)
    for setting in declared(schema):
        assert f"| `{prefix}{setting.name}` |" in text, (prefix, setting.name)
        if "section" in setting.metadata:
            continue
        kind = setting.metadata["kind"]
        assert kind.words, setting.name
        if setting.default is not MISSING:  # a declared default passes its own check
            assert kind.problem(setting.default) is None, setting.name


def _with(path: tuple[str, ...], value: dict) -> dict:
    """BASE with `value` merged into the section at `path` (an assignment for assignments)."""
    data = {**BASE, "late_policy": {"mode": "accept"}}
    if not path:
        return {**data, **value}
    if path == ("assignments",):
        return {**data, "assignments": [{**BASE["assignments"][0], **value}]}
    return {**data, path[0]: {**data.get(path[0], {}), **value}}


@pytest.mark.parametrize(("path", "schema"), SECTIONS, ids=SECTION_IDS)
def test_a_mistyped_key_in_any_section_names_the_key_the_section_and_the_file(path, schema):
    assert parse_config(_with(path, {}), Path("/course"), "/course/source/course.yaml")  # the base is valid
    with pytest.raises(ConfigError) as raised:
        parse_config(_with(path, {"mistyped_key": 1}), Path("/course"), "/course/source/course.yaml")
    where = {(): "", ("assignments",): ": assignments[0]"}.get(path, f": {'.'.join(path)}")
    assert str(raised.value).startswith(f"/course/source/course.yaml{where}: unknown key 'mistyped_key' (known keys: ")


@pytest.mark.parametrize(("path", "schema"), SECTIONS, ids=SECTION_IDS)
def test_a_value_of_the_wrong_kind_in_any_section_says_what_it_must_be(path, schema):
    for setting in declared(schema):
        if "section" in setting.metadata:
            continue
        with pytest.raises(ConfigError) as raised:
            parse_config(_with(path, {setting.name: [object]}), Path("/course"), "/course/source/course.yaml")
        assert f"{setting.name} must be " in str(raised.value), setting.name
        assert str(raised.value).startswith("/course/source/course.yaml: "), setting.name


def test_the_sample_course_yaml_comments_agree_with_the_settings():
    """source/course.yaml is the first settings file an instructor reads: its comments name the pages that exist and
    every value a choice setting accepts, as docs/settings.md says them (issue 40: `sandbox: auto` was said to fall
    back to rlimits, `uid` was missing, and a README section that no longer exists was named)."""
    text = (ROOT / "source" / "course.yaml").read_text(encoding="utf-8")
    comments = "\n".join(line for line in text.splitlines() if line.lstrip().startswith("#"))
    assert "README" not in comments
    for page in ("docs/settings.md",):
        assert page in comments
        assert (ROOT / page).exists()
    for value in ("auto", "bwrap", "uid", "rlimits"):  # the one_of of `sandbox` in course/core/config.py
        assert f"#   {value} " in comments, value
    assert "else rlimits only" not in comments  # auto refuses to grade without bubblewrap
    assert "the first of 64 uids/gids" in comments.lower()

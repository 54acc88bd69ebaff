"""The course YAML's schema, declared once: each setting is a field of its section's dataclass, carrying its type
(the field's), its default, what a value must be (a `Kind`), and what it does (help). Loading checks a section's
mapping against it (`read_section`); docs/settings.md is generated from it (docs/generators/settings_reference.py).

A new setting is one line in its section's dataclass, e.g. in `ServicePolicy`:

    storage_mb: int | None = setting(None, "what it bounds", optional(whole(), "or left out for no cap"))

Checks that relate two settings (the service's upload size against limits.notebook_mb) stay beside the
section's reading in course/core/config.py.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import MISSING, Field, dataclass, field, fields
from typing import Any, TypeVar

from course.core.errors import ConfigError


def _same(value: Any) -> Any:
    return value


@dataclass(frozen=True)
class Kind:
    """What a setting's value must be. `words` says it for the reference; `problem(value)` is None for a good
    value, else the words of the error (`<key> must be <problem>, got <value>`); `convert` makes the typed value."""

    words: str
    problem: Callable[[Any], str | None]
    convert: Callable[[Any], Any] = _same


def _is_number(value: Any) -> bool:
    return type(value) in (int, float)


def number(
    *,
    above: float | None = 0,
    at_least: float | None = None,
    at_most: float | None = None,
    to_float: bool = False,
    words: str | None = None,
) -> Kind:
    """A number (not a boolean): greater than `above`, or at least `at_least`, and at most `at_most`."""

    def problem(value: Any) -> str | None:
        if not _is_number(value):
            return words or "a number"
        if at_least is not None and at_most is not None and not at_least <= value <= at_most:
            return words or f"between {at_least:g} and {at_most:g}"
        if at_least is not None and value < at_least:
            return words or f"at least {at_least:g}"
        if above is not None and at_least is None and value <= above:
            return words or f"greater than {above:g}"
        return None

    if words is None:
        if at_least is not None and at_most is not None:
            words_ = f"a number between {at_least:g} and {at_most:g}"
        elif at_least is not None:
            words_ = f"a number, at least {at_least:g}"
        else:
            words_ = f"a number greater than {above:g}"
    else:
        words_ = words
    return Kind(words_, problem, float if to_float else _same)


def whole(*, at_least: int = 1, at_most: int | None = None, words: str | None = None) -> Kind:
    """A whole number (not a boolean) of at least `at_least` (and at most `at_most`, when given)."""

    def problem(value: Any) -> str | None:
        if type(value) is not int:
            return words or "a whole number"
        if at_most is not None and not at_least <= value <= at_most:
            return words or f"between {at_least} and {at_most}"
        if value < at_least:
            return words or ("greater than 0" if at_least == 1 else f"at least {at_least}")
        return None

    if at_most is not None:
        return Kind(words or f"a whole number between {at_least} and {at_most}", problem)
    return Kind(words or f"a whole number, at least {at_least}", problem)


def one_of(*choices: str, words: str | None = None) -> Kind:
    text = words or f"one of {', '.join(choices)}"
    return Kind(text, lambda value: None if value in choices else text)


def optional(kind: Kind, absent: str) -> Kind:
    """`kind`, or null (YAML's `~`, the same as leaving the key out); `absent` says what that means."""

    def problem(value: Any) -> str | None:
        inner = None if value is None else kind.problem(value)
        return None if inner is None else f"{inner} ({absent})"

    return Kind(f"{kind.words} ({absent})", problem, lambda value: None if value is None else kind.convert(value))


BOOLEAN = Kind("true or false", lambda value: None if type(value) is bool else "true or false")
TEXT = Kind("a non-empty string", lambda value: None if isinstance(value, str) and value else "a non-empty string")


def setting(
    default: Any = MISSING,
    help: str = "",
    kind: Kind = TEXT,
    *,
    default_factory: Callable[[], Any] | None = None,
    shown_default: str | None = None,
) -> Any:
    """One key of a section, declared as a dataclass field: its default (none: the key is required), what it does
    (help), what a value must be (kind). `shown_default` is the default as the reference writes it, when the
    value's repr is not what a reader would type."""
    metadata = {"help": help, "kind": kind, "shown_default": shown_default}
    if default_factory is not None:
        return field(default_factory=default_factory, metadata=metadata)
    return field(default=default, metadata=metadata)


def subsection(schema: type, help: str, *, many: bool = False) -> Any:
    """A key whose value is a section of its own (`limits:`, `service:`), or with `many` a non-empty list of them
    (`assignments:`, required)."""
    metadata = {"help": help, "section": schema, "many": many}
    if many:
        return field(metadata=metadata)
    return field(default_factory=schema, metadata=metadata)


def declared(schema: type) -> list[Field[Any]]:
    """The section's settings, in the order they are declared (fields without help are not read from YAML)."""
    return [f for f in fields(schema) if f.metadata.get("help")]


def required(setting_field: Field[Any]) -> bool:
    return setting_field.default is MISSING and setting_field.default_factory is MISSING


def check_keys(where: str, data: dict[str, Any], allowed: list[str], needed: list[str]) -> None:
    unknown = sorted(str(key) for key in set(data) - set(allowed))
    if unknown:
        raise ConfigError(f"{where}: unknown key {unknown[0]!r} (known keys: {', '.join(sorted(allowed))})")
    missing = [key for key in needed if key not in data]
    if missing:
        raise ConfigError(f"{where}: missing key {missing[0]!r}")


Section = TypeVar("Section")


def read_values(
    where: str,
    data: Any,
    schema: type,
    key_name: Callable[[str], str],
    read_subsection: Callable[[str, Any, Field[Any]], Any],
) -> dict[str, Any]:
    """A section's mapping checked against its schema: every key known, every required key there, every value
    valid. Returns the typed values of the keys given (the dataclass supplies the defaults of the others).
    `key_name(key)` is how a message names a key; `read_subsection` reads a key that is a section of its own."""
    settings = declared(schema)
    if not isinstance(data, dict):
        raise ConfigError(f"{where} must be a mapping ({', '.join(f.name for f in settings)})")
    check_keys(where, data, [f.name for f in settings], [f.name for f in settings if required(f)])
    values: dict[str, Any] = {}
    for setting_field in settings:
        if setting_field.name not in data:
            continue
        value = data[setting_field.name]
        if "section" in setting_field.metadata:
            values[setting_field.name] = read_subsection(key_name(setting_field.name), value, setting_field)
            continue
        kind: Kind = setting_field.metadata["kind"]
        problem = kind.problem(value)
        if problem is not None:
            raise ConfigError(f"{key_name(setting_field.name)} must be {problem}, got {value!r}")
        values[setting_field.name] = kind.convert(value)
    return values


def read_section(where: str, data: Any, schema: type[Section]) -> Section:
    """A section without sections inside (`limits:`, `service:`, one assignment), as its dataclass."""

    def no_subsections(name: str, value: Any, setting_field: Field[Any]) -> Any:
        raise AssertionError(f"{schema.__name__} has a section inside: read it with read_values")

    return schema(**read_values(where, data, schema, lambda key: f"{where}.{key}", no_subsections))


def shown_default(setting_field: Field[Any]) -> str:
    """A setting's default as a reader would write it in the YAML (`none` for null, `true` for True)."""
    if setting_field.metadata.get("shown_default") is not None:
        shown: str = setting_field.metadata["shown_default"]
        return shown
    if required(setting_field):
        return ""
    value = setting_field.default
    if value is MISSING:
        value = setting_field.default_factory()  # type: ignore[misc]
    if value is None or value == {}:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    return f"{value:g}" if isinstance(value, float) else str(value)

"""What an exercise declares about its variants: which of its numbers vary, over what, and what must hold.

    Exercise(id="gate", ..., numbers={"x": -2, "y": 5, "z": -4},
             vary={"x": Integers(-4, 3, skip=[0]), "y": Integers(1, 6), "z": OneOf(-5, -4, -3, -2, 2, 3, 4)},
             require=[NoZero(), NoKink()])

`numbers` stay the exercise's own (the source notebook's, the release's); `vary` names the numbers each student
draws afresh and the values each may take (`Integers(low, high)`, `Halves(low, high)`, `OneOf(...)`, all ends
included, `skip` left out); `require` lists what every student's numbers must keep, checked on what `build`
returns and on what torch ran while building:

- `ReluOpen(name)` / `ReluShut(name)`: the value `name` (an answer or a number of the exercise) is above / below 0,
  so the ReLU it feeds is open / shut at it;
- `NoKink()`: no ReLU (or abs) the build applies gets exactly 0, its kink, where torch's slope is a convention;
- `NoZero(*answers)`: no answer (all when none is named; every item of a list) is 0: a guess of 0, or a sign slip,
  would pass;
- `ExactFloat32(*answers)`: every named answer (all by default) is exact in float32, so a student who checks with
  torch's default dtype sees the very number the grader expects;
- `Holds(test, why)`: `test(values)` is true, where `values` maps every answer and number of the exercise by name;
  `why` says, as a sentence, what is wrong when it is not.

Every answer must also be finite. course/authoring/draws.py draws a student's numbers from these declarations,
searches them when the kit writes or releases, and gives the exercises module `VARIANTS = variants(EXERCISES)`.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

MAX_VALUES = 10_000  # values one range may hold: a range is a list to draw from, never an open interval
KINK = 1e-12  # a ReLU's input this close to 0 sits at its kink


Number = int | float


# ----------------------------------------------------------------------------- ranges


class Range:
    """The values one number may take in a variant: a finite list, drawn from with the student's generator."""

    def values(self) -> tuple[Number, ...]:
        raise NotImplementedError

    def size(self) -> int:
        """How many values it spans, counted without listing them (a range of a million is refused unlisted)."""
        return len(self.values())

    def describe(self) -> str:
        raise NotImplementedError


@dataclass(frozen=True)
class Integers(Range):
    """The integers from `low` to `high`, both included, but those in `skip`."""

    low: int
    high: int
    skip: Sequence[int] = ()

    def values(self) -> tuple[Number, ...]:
        if not (_integer(self.low) and _integer(self.high)) or self.size() > MAX_VALUES:
            return ()
        return tuple(value for value in range(self.low, self.high + 1) if value not in self.skip)

    def size(self) -> int:
        return max(0, self.high - self.low + 1) if _integer(self.low) and _integer(self.high) else 0

    def describe(self) -> str:
        return f"Integers({self.low}, {self.high}" + (f", skip={list(self.skip)})" if self.skip else ")")


@dataclass(frozen=True)
class Halves(Range):
    """The multiples of 0.5 from `low` to `high`, both included, but those in `skip` (as floats: -1.5, 2.0)."""

    low: float
    high: float
    skip: Sequence[float] = ()

    def values(self) -> tuple[Number, ...]:
        if not (_real(self.low) and _real(self.high)) or self.size() > MAX_VALUES:
            return ()
        doubled = range(math.ceil(2 * self.low), math.floor(2 * self.high) + 1)
        return tuple(value / 2 for value in doubled if value / 2 not in self.skip)

    def size(self) -> int:
        if not (_real(self.low) and _real(self.high)):
            return 0
        return max(0, math.floor(2 * self.high) - math.ceil(2 * self.low) + 1)

    def describe(self) -> str:
        return f"Halves({self.low}, {self.high}" + (f", skip={list(self.skip)})" if self.skip else ")")


class OneOf(Range):
    """One of the values listed: `OneOf(-5, -4, 2, 3)`."""

    def __init__(self, *choices: Number) -> None:
        self.choices = tuple(choices)

    def values(self) -> tuple[Number, ...]:
        return self.choices if all(_real(value) for value in self.choices) else ()

    def describe(self) -> str:
        return f"OneOf({', '.join(map(repr, self.choices))})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, OneOf) and other.choices == self.choices

    def __hash__(self) -> int:
        return hash(self.choices)

    def __repr__(self) -> str:
        return self.describe()


def _integer(value: object) -> bool:
    return type(value) is int


def _real(value: object) -> bool:
    return type(value) in (int, float) and math.isfinite(value)  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- what must hold


@dataclass(frozen=True)
class Trial:
    """One exercise at one set of its numbers: the numbers (its own names), its answers as plain values, and the
    inputs of every ReLU (or abs) torch ran while `build` built it (operation, plain input)."""

    numbers: dict[str, Number]
    answers: dict[str, Any]
    kinks: tuple[tuple[str, Any], ...] = ()

    def value(self, name: str) -> Any:
        return self.answers[name] if name in self.answers else self.numbers[name]


class Property:
    """A property every variant of an exercise keeps; `broken` says, in a few words, how a trial breaks it."""

    def names(self) -> tuple[str, ...]:
        """The answers or numbers it names (checked against the exercise's own)."""
        return ()

    def broken(self, trial: Trial) -> str | None:
        raise NotImplementedError


@dataclass(frozen=True)
class ReluOpen(Property):
    """The value `name` is above 0: the ReLU it feeds is open there (its slope 1)."""

    name: str

    def names(self) -> tuple[str, ...]:
        return (self.name,)

    def broken(self, trial: Trial) -> str | None:
        value = trial.value(self.name)
        if all(item > KINK for item in numbers_in(value)):
            return None
        return f"{self.name} = {shown(value)} is not above 0, so the ReLU there is not open"


@dataclass(frozen=True)
class ReluShut(Property):
    """The value `name` is below 0: the ReLU it feeds is shut there (its slope 0)."""

    name: str

    def names(self) -> tuple[str, ...]:
        return (self.name,)

    def broken(self, trial: Trial) -> str | None:
        value = trial.value(self.name)
        if all(item < -KINK for item in numbers_in(value)):
            return None
        return f"{self.name} = {shown(value)} is not below 0, so the ReLU there is not shut"


@dataclass(frozen=True)
class NoKink(Property):
    """No ReLU (or abs) the build applies gets 0, its kink, where torch's slope is a convention, not calculus."""

    def broken(self, trial: Trial) -> str | None:
        for operation, value in trial.kinks:
            if any(abs(item) <= KINK for item in numbers_in(value)):
                return (
                    f"a {operation} gets 0 ({operation}({shown(value)})), its kink, where torch's slope is a convention"
                )
        return None


class _Answers(Property):
    """A property of some answers: those named, or every answer when none is."""

    def __init__(self, *answers: str) -> None:
        self.answers = tuple(answers)

    def names(self) -> tuple[str, ...]:
        return self.answers

    def chosen(self, trial: Trial) -> list[str]:
        return list(self.answers or trial.answers)

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.answers == self.answers

    def __hash__(self) -> int:
        return hash((type(self).__name__, self.answers))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(map(repr, self.answers))})"


class NoZero(_Answers):
    """No answer (of those named; all when none is) is 0, nor has a 0 item: a guess of 0 or a sign slip would pass."""

    def broken(self, trial: Trial) -> str | None:
        for name in self.chosen(trial):
            if any(abs(item) <= KINK for item in numbers_in(trial.answers[name])):
                return f"answer {name} is {shown(trial.answers[name])} (a guess of 0, or a sign slip, would pass)"
        return None


class ExactFloat32(_Answers):
    """Every answer (of those named; all when none is) is exact in float32, torch's default dtype."""

    def broken(self, trial: Trial) -> str | None:
        for name in self.chosen(trial):
            off = [item for item in numbers_in(trial.answers[name]) if float32(item) != item]
            if off:
                return f"answer {name} is not exact in float32 ({off[0]!r} is {float32(off[0])!r} there)"
        return None


@dataclass(frozen=True)
class Holds(Property):
    """`test(values)` is true, `values` mapping every answer and number of the exercise by name; `why` says what is
    wrong when it is not (a sentence of the exercise's own: "e = c - d is 0, and g divides by e²")."""

    test: Callable[[dict[str, Any]], object]
    why: str

    def broken(self, trial: Trial) -> str | None:
        try:
            held = bool(self.test(trial.numbers | trial.answers))
        except Exception as error:
            return f"{self.why} (its test raised {type(error).__name__}: {error})"
        return None if held else self.why


def float32(value: float) -> float:
    """`value` rounded to float32, as torch's default dtype holds it."""
    try:
        return float(struct.unpack("f", struct.pack("f", value))[0])
    except OverflowError:
        return math.copysign(math.inf, value)


def numbers_in(value: Any) -> list[Any]:
    """The numbers of a plain value (a list's items, nested lists flattened; nothing else counts)."""
    if type(value) is list:
        return [item for inner in value for item in numbers_in(inner)]
    return [value] if type(value) in (int, float) else []


def shown(value: Any) -> str:
    return repr(value) if type(value) is not float else f"{value:.10g}"

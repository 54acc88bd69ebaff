"""A student's numbers from an exercise's declared ranges (course/authoring/ranges.py), and the check of them.

In the exercises module, `VARIANTS = variants(EXERCISES)` (also importable from course.authoring.kit) derives the
module's `derive(rng)` and `constraint_violations(numbers)` (course/pipeline/content.py reads them; a module-level
`derive` or `constraint_violations` wins over VARIANTS'). A student's draw is deterministic in the generator it is
handed: each exercise draws its varying numbers in the order `vary` names them, at most MAX_DRAWS times, until its
requirements hold. `kit write` and `release` refuse a definition whose ranges cannot satisfy its requirements, after
a bounded search (every combination when there are at most CHECK_TRIALS, else CHECK_TRIALS seeded draws), with a
sentence naming the file, the exercise and what to change.
"""

from __future__ import annotations

import inspect
import itertools
import math
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from course.authoring.errors import AuthoringError
from course.authoring.ranges import MAX_VALUES, Number, Property, Range, Trial, numbers_in, shown
from course.forms import form

MAX_DRAWS = 200  # candidates one student's draw tries per exercise before it gives up (never an endless loop)
CHECK_TRIALS = 512  # what the definition's check tries: every combination when there are no more, else seeded draws
MIN_SHARE = 1 / 20  # fewer fit than this, and a student's MAX_DRAWS could all miss (0.95**200 < 4e-5): refused


# ----------------------------------------------------------------------------- an exercise under its declarations


class Declared(Protocol):
    """What this module reads of an exercise (course/authoring/kit.py's Exercise)."""

    @property
    def id(self) -> str: ...
    @property
    def numbers(self) -> Mapping[str, Number]: ...
    @property
    def vary(self) -> Mapping[str, Range]: ...
    @property
    def require(self) -> Sequence[Property]: ...
    @property
    def answers(self) -> Sequence[Any]: ...  # Ask: .name, .form
    @property
    def build(self) -> Callable[..., Mapping[str, Any]]: ...
    def number_names(self) -> dict[str, str]: ...


def where_of(exercise: Declared) -> str:
    """`<file>: exercise '<id>'`, the file being the one that defines its build."""
    try:
        path = inspect.getsourcefile(exercise.build) or "the exercises module"
    except TypeError:
        path = "the exercises module"
    return f"{path}: exercise {exercise.id!r}"


def check_declaration(exercise: Declared, at: str) -> None:
    """What `vary` and `require` say, checked without building anything (it runs when the module loads)."""
    if not isinstance(exercise.vary, Mapping) or not isinstance(exercise.require, list | tuple):
        raise AuthoringError(f"{at}: vary must be a dict (number -> Integers/Halves/OneOf) and require a list")
    for name, declared in exercise.vary.items():
        if name not in exercise.numbers:
            raise AuthoringError(
                f"{at}: vary names {name!r}, which is none of its numbers ({', '.join(exercise.numbers) or 'none'}); "
                "vary only numbers the exercise has"
            )
        if not isinstance(declared, Range):
            raise AuthoringError(
                f"{at}: vary[{name!r}] is {declared!r}; declare it as Integers(low, high), Halves(low, high) "
                "or OneOf(...) (course.authoring.ranges)"
            )
        if declared.size() > MAX_VALUES:
            raise AuthoringError(
                f"{at}: vary[{name!r}] = {declared.describe()} holds more than {MAX_VALUES} values; narrow it "
                f"(a range is a list to draw from: at most {MAX_VALUES})"
            )
        if not declared.values():
            raise AuthoringError(
                f"{at}: vary[{name!r}] = {declared.describe()} holds no value; give it plain numbers and ends that "
                "leave at least one value"
            )
    known = {ask.name for ask in exercise.answers} | set(exercise.numbers)
    for required in exercise.require:
        if not isinstance(required, Property):
            raise AuthoringError(
                f"{at}: require holds {required!r}; use ReluOpen, ReluShut, NoKink, NoZero, ExactFloat32 or "
                "Holds (course.authoring.ranges)"
            )
        unknown = [name for name in required.names() if name not in known]
        if unknown:
            raise AuthoringError(
                f"{at}: {required!r} names {', '.join(unknown)}, which is no answer or number of the "
                f"exercise ({', '.join(sorted(known))}); name one of those"
            )


def trial(exercise: Declared, numbers: Mapping[str, Number]) -> Trial | str:
    """The exercise built at `numbers` (its own names): its answers as plain values and the ReLUs torch ran; or,
    when build raised, what it raised."""
    from torch.overrides import TorchFunctionMode

    from course.pipeline.judge import to_plain

    kinks: list[tuple[str, Any]] = []

    class Kinks(TorchFunctionMode):
        """Records the input of every ReLU and abs torch runs (tensor method, torch.* or functional)."""

        def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            name = getattr(func, "__name__", "").rstrip("_")
            if name in ("relu", "abs") and args:
                kinks.append(("ReLU" if name == "relu" else "abs", to_plain(args[0])))
            return func(*args, **(kwargs or {}))

    try:
        with Kinks():
            returned = dict(exercise.build(**dict(numbers)))
        answers = {}
        for ask in exercise.answers:
            value = to_plain(returned[ask.name])
            shape = form(ask.form)
            if type(value) is list and len(value) == 1 and shape is not None and shape.length is None:
                value = value[0]  # a one-element tensor for a number, as the answer key holds it
            answers[ask.name] = value
    except Exception as error:
        return f"build raised {type(error).__name__}: {error}"
    return Trial(dict(numbers), answers, tuple(kinks))


def problems(exercise: Declared, numbers: Mapping[str, Number]) -> list[str]:
    """What makes `numbers` (the exercise's own names) unfit for it: each broken requirement, a non-finite answer."""
    built = trial(exercise, numbers)
    if isinstance(built, str):
        return [built]
    found = [
        f"answer {name} is {shown(value)}, not a finite number"
        for name, value in built.answers.items()
        if any(not math.isfinite(item) for item in numbers_in(value))
    ]
    return found + [said for said in (required.broken(built) for required in exercise.require) if said]


def _candidate(exercise: Declared, rng: random.Random) -> dict[str, Number]:
    drawn = dict(exercise.numbers)
    for name, declared in exercise.vary.items():  # in the order vary names them: the same rng, the same numbers
        drawn[name] = rng.choice(declared.values())
    return drawn


def draw(exercise: Declared, rng: random.Random) -> dict[str, Number]:
    """One student's numbers for the exercise (its own names): at most MAX_DRAWS candidates, the first that fits."""
    if not exercise.vary:
        return dict(exercise.numbers)
    for _ in range(MAX_DRAWS):
        candidate = _candidate(exercise, rng)
        if not problems(exercise, candidate):
            return candidate
    raise AuthoringError(
        f"{where_of(exercise)}: none of {MAX_DRAWS} numbers drawn from its ranges keeps its requirements; widen a "
        "range in vary or drop a requirement, then run `autograd-course kit write` (it checks them)"
    )


def check_feasible(exercise: Declared, at: str) -> None:
    """Refuse an exercise whose own numbers break its requirements, or whose ranges cannot keep them (or keep them
    too rarely for a student's bounded draw): a bounded search, every combination or CHECK_TRIALS seeded draws."""
    if not exercise.vary and not exercise.require:
        return
    own = problems(exercise, exercise.numbers)
    if own:
        raise AuthoringError(
            f"{at}: its own numbers break its requirements: {'; '.join(own)}; change its numbers or its require"
        )
    if not exercise.vary:
        return
    pools = [declared.values() for declared in exercise.vary.values()]
    space = math.prod(len(pool) for pool in pools)
    if space <= CHECK_TRIALS:
        candidates = [
            dict(exercise.numbers) | dict(zip(exercise.vary, combination, strict=True))
            for combination in itertools.product(*pools)
        ]
        how = f"all {space} combinations of its ranges"
    else:
        rng = random.Random(f"check {exercise.id}")  # noqa: S311 - a fixed, seeded sample: the same verdict every run
        candidates = [_candidate(exercise, rng) for _ in range(CHECK_TRIALS)]
        how = f"{CHECK_TRIALS} numbers drawn from its ranges"
    reasons: dict[str, int] = {}
    fit = 0
    for candidate in candidates:
        found = problems(exercise, candidate)
        fit += not found
        for said in found[:1]:
            reasons[_kind(said)] = reasons.get(_kind(said), 0) + 1
    if fit >= MIN_SHARE * len(candidates):
        return
    common = max(reasons, key=lambda said: reasons[said])
    ranges = ", ".join(f"{name}: {declared.describe()}" for name, declared in exercise.vary.items())
    verdict = (
        f"none of {how} keeps its requirements"
        if not fit
        else f"only {fit} of {how} keep its requirements (under 1 in {round(1 / MIN_SHARE)}: a student's draw of "
        f"{MAX_DRAWS} could find none)"
    )
    raise AuthoringError(
        f"{at}: {verdict}; most often {common} ({reasons[common]} of {len(candidates)}). Widen a range in vary "
        f"({ranges}) or drop that requirement"
    )


def _kind(said: str) -> str:
    """A problem without its numbers, so that the search can say which one is most common."""
    return said.split(" (", 1)[0] if said.startswith("a ") else said


# ----------------------------------------------------------------------------- the module's derive and constraints


@dataclass(frozen=True)
class Variants:
    """`derive(rng)` and `constraint_violations(numbers)` of an exercises module, derived from its definitions'
    declarations (course/pipeline/content.py reads them as VARIANTS; a module-level function of either name wins)."""

    exercises: tuple[Declared, ...] = field(default_factory=tuple)

    def derive(self, rng: random.Random) -> dict[str, Any]:
        """One student's numbers, every kit exercise's (those it does not vary at their defaults), by their names
        in the numbers cell's P."""
        numbers: dict[str, Any] = {}
        for exercise in self.exercises:
            own = draw(exercise, rng)
            numbers.update({key: own[name] for name, key in exercise.number_names().items()})
        return numbers

    def constraint_violations(self, numbers: Mapping[str, Any]) -> list[str]:
        """What makes the numbers cell's `numbers` unfit for the exercises that declare requirements or ranges."""
        found = []
        for exercise in self.exercises:
            names = exercise.number_names()
            if not (exercise.vary or exercise.require) or not all(key in numbers for key in names.values()):
                continue
            own = {name: numbers[key] for name, key in names.items()}
            found += [f"exercise {exercise.id!r}: {said}" for said in problems(exercise, own)]
        return found


def variants(exercises: Sequence[Declared]) -> Variants:
    """VARIANTS of an exercises module: `VARIANTS = variants(EXERCISES)`. The declarations are checked here, without
    building anything; `kit write` and `release` also search the ranges (check_feasible)."""
    for exercise in exercises:
        check_declaration(exercise, where_of(exercise))
    return Variants(tuple(exercises))

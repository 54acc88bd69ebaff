"""What a student's notebook imports: `check_form`, the public form checks, `check_with_torch`, which says
whether a hand value matches torch without saying torch's value, and `Marks`, nbgrader's scoring.

It knows no exercise and no answer (it ships in the package students install). The form cell of a
question names its answers and the form each must have; `check_form` looks them up in the notebook and
reports every problem of the question at once, in sentences, never a traceback through this module:

    check_form(slope="number", values="list of 3 numbers", derivative="function")

Forms: "number", "number or None", "True or False", "class name or None" (a class's name in quotes), "list of
N numbers", "function" (of x, returning a number). Under plain `nbgrader autograde` the hidden tests score
with `Marks`; the course's own grader never runs this module's `Marks`: it injects its own into the hidden
tests (course/pipeline/judge.py).

The grader hands this file's text to the sandbox, where it becomes the module `course.notebook`
(course/pipeline/submission.py), so it imports nothing of the course but `course.forms` (the forms' rules and words,
handed in as text the same way, before this file), and nothing but torch beyond the standard library.
"""

from __future__ import annotations

import inspect
import random
import sys
import textwrap
from collections.abc import Callable

import torch

from course import forms

TOLERANCE = 1e-6  # hand values are exact; the tolerance only absorbs float rounding
FUNCTION_PROBE = 1.5  # where the form check calls a function answer (the grader picks its own points)
WIDTH = 84  # nbgrader validate cuts its lines at 87 characters


class FormError(AssertionError):
    """Some answers of a question do not have their form yet. IPython shows `_render_traceback_`'s lines
    in place of a traceback, so a student reads the problems and nothing else."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = tuple(problems)
        super().__init__("\n".join(self.problems))

    def _render_traceback_(self) -> list[str]:
        count = len(self.problems)
        heading = (
            "Not ready yet: one answer here needs your attention."
            if count == 1
            else f"Not ready yet: {count} answers here need your attention."
        )
        lines = [heading]
        for problem in self.problems:
            lines += textwrap.wrap(problem, WIDTH, initial_indent="  - ", subsequent_indent="    ")
        lines.append("(This checks only the form of your answers, never whether a value is right.)")
        return lines


def _shown(value: object) -> str:
    """A value as a student would type it, cut short."""
    try:
        text = repr(value)
    except Exception:
        text = f"<a {type(value).__name__}>"
    return text if len(text) <= 40 else text[:37] + "..."


def _article(word: str) -> str:
    return "an" if word[:1].lower() in "aeiou" else "a"


def _a(value: object) -> str:
    """'a float: 2.5', 'a tensor', 'None', ... : what the value is, in words (no memory address)."""
    if isinstance(value, torch.Tensor):
        return "a tensor"
    if value is None:
        return "None"
    if isinstance(value, type):
        return f"a class ({value.__name__})"
    if inspect.isroutine(value):  # a function, or a method named without its call: `x.item` for `x.item()`
        return f"a function ({getattr(value, '__name__', '?')})"
    kind = type(value).__name__
    shown = _shown(value)
    if " at 0x" in shown:  # an object with no readable value of its own: a grad_fn node, say
        return f"{_article(kind)} {kind} object" if kind != "object" else "an object"
    return f"{_article(kind)} {kind}: {shown}"


def _form_problem(name: str, value: object, shape: forms.Form) -> str | None:
    """What is wrong with the form of one answer (None when nothing is)."""
    if value is ...:
        return f"{name} is still `...`: replace it with the value you derived by hand."
    if isinstance(value, torch.Tensor):
        if shape.length is not None:
            return (
                f"{name} is a tensor: write down the {shape.length} plain numbers you derived as a list, "
                f"e.g. {name} = [7.5, ...]"
            )
        return f"{name} is a tensor: write down the plain number you derived, e.g. {name} = 7.5"
    gap = forms.gap(value, shape)
    if gap is not None:
        return f"{name} should be {shape.words}, but {gap.said(_a_or_still)}."
    # The form's gap has checked that a function answer is callable; `callable` says so to the type checker too.
    return _function_problem(name, value) if shape.name == forms.FUNCTION and callable(value) else None


def _a_or_still(value: object) -> str:
    """As `_a`, but an item still `...` is said to be so."""
    return "still `...`" if value is ... else _a(value)


def _function_problem(name: str, value: Callable[..., object]) -> str | None:
    """What is wrong with what a function answer returns (None when nothing is)."""
    call = f"{name}({FUNCTION_PROBE})"
    try:
        result = value(FUNCTION_PROBE)
    except Exception as error:
        return f"{call} raised {type(error).__name__}: {error}"
    if result is ...:
        return f"{call} returns `...`: replace `return ...` with your derivative."
    if not forms.is_number(result):
        return f"{name} should return a number, but {call} returned {_a(result)}."
    return None


def check_form(*, quiet: bool = False, **declared: str) -> None:
    """Check the *form* of each named answer (never whether it is right); say every problem at once.

    The answers are looked up by name in the notebook (the caller's globals), so an answer whose line
    was deleted is reported as such instead of stopping the check at the first NameError."""
    shapes = {}
    for name, form in declared.items():
        shape = forms.form(form)
        if shape is None:
            raise ValueError(
                f"check_form: {name}={form!r} is not a form; use one of "
                f"{', '.join(forms.NAMES[:-1])} or {forms.NAMES[-1]!r}"
            )
        shapes[name] = shape
    namespace = sys._getframe(1).f_globals
    problems = []
    for name, shape in shapes.items():
        if name not in namespace:
            problem: str | None = f"{name} is not defined: run its answer cell (keep the line `{name} = ...`)."
        else:
            problem = _form_problem(name, namespace[name], shape)
        if problem:
            problems.append(problem)
        elif not quiet:
            print(f"ok   {name}: right form ({shape.name})")
    if problems:
        raise FormError(problems)


def _direction(answer: object, expected: object) -> str:
    """How one hand value stands against torch's, never torch's value itself."""
    if _matches(answer, expected):
        return "matches torch"
    if forms.is_number(answer) and forms.is_number(expected):
        return "not yet: yours is " + ("higher" if answer > expected else "lower") + " than torch's"
    return "not yet: torch disagrees"


def _against_torch(name: str, answer: object, expected: object) -> tuple[bool, str]:
    """(matches, what to say) for one hand value beside torch's."""
    if answer is ...:
        return False, f"{name} is still `...`: write your hand value first, then run this cell again."
    if isinstance(answer, torch.Tensor):
        return False, f"{name} is a tensor: write down the plain value you derived, not torch's."
    if callable(answer):
        return False, f"{name} is a function: compare what it returns at a point with torch's slope there."
    if type(expected) is list:
        if type(answer) is not list or len(answer) != len(expected):
            return False, f"{name} should be a list of {len(expected)} numbers, as torch's is."
        if _matches(answer, expected):
            return True, f"{name} matches torch at every item."
        wrong = [
            f"item {i}: {_direction(a, e).removeprefix('not yet: ')}"
            for i, (a, e) in enumerate(zip(answer, expected, strict=True), start=1)
            if not _matches(a, e)
        ]
        return False, f"{name} not yet ({'; '.join(wrong)})."
    said = _direction(answer, expected)
    return said == "matches torch", f"{name} {said}."


def check_with_torch(**torch_values: object) -> None:
    """The step after the hand work: for each named answer, whether the hand value in the notebook matches
    torch's (and for a number, whether yours is higher or lower), never torch's value itself, so it cannot be
    copied before it has been worked out. Lists are compared item by item."""
    namespace = sys._getframe(1).f_globals
    matched = 0
    for name, reference in torch_values.items():
        if name not in namespace:
            print(f"{name} is not defined: run its answer cell first.")
            continue
        ok, said = _against_torch(name, namespace[name], _plain(reference))
        matched += ok
        print(("✓ " if ok else "✗ ") + said)
    print(
        f"{matched} of {len(torch_values)} match torch."
        + ("" if matched == len(torch_values) else " Find the slip on paper, then run this cell again.")
    )


def _plain(reference: object) -> object:
    """Turn torch's reference (a tensor of any shape, a list or tuple of them, None, a bool, a number, a name)
    into plain Python, as the grader's `judge.to_plain` does."""
    if isinstance(reference, torch.Tensor):
        return reference.detach().tolist()
    if isinstance(reference, list | tuple):
        return [_plain(r) for r in reference]
    return reference


def _matches(answer: object, expected: object) -> bool:
    """The judge's comparison (`course.forms.matches`) at the course's default tolerance, for plain nbgrader and
    check_with_torch."""
    return forms.matches(answer, expected, TOLERANCE)


class Marks:
    """Scores one question value by value, for the hidden tests when plain nbgrader grades.

    `hint` explains a value and may tell it; `idea` is what the course's feedback says in its place when it
    shows only verdicts (course/pipeline/judge.py): the concept or step to revisit, never the value or the verdict.
    Plain nbgrader prints the hint of each value that does not match: its feedback is the instructor's to
    release."""

    def __init__(self) -> None:
        self.earned: float = 0
        self.notes: list[str] = []

    def value(
        self, name: str, answer: object, reference: object, hint: str, points: float = 1, *, idea: str = ""
    ) -> None:
        del idea
        if _matches(answer, _plain(reference)):
            self.earned += points
        else:
            self.notes.append(f"{name} does not match torch. {hint}")

    def function(
        self,
        name: str,
        answer: Callable[[float], object],
        reference: Callable[[float], object],
        hint: str,
        points: float = 1,
        *,
        idea: str = "",
    ) -> None:
        xs = [random.randint(-6, 6) + random.choice([0.0, 0.5]) for _ in range(5)]  # noqa: S311 - not a secret
        try:
            ok = all(_matches(answer(x), _plain(reference(x))) for x in xs)
        except Exception:
            ok = False
        self.value(name, True if ok else None, True, hint, points, idea=idea)

    def total(self) -> float:
        for note in self.notes:
            print(note)
        return self.earned

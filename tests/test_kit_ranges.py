"""Variants from declared ranges (course/authoring/ranges.py, draws.py): an exercise says which numbers vary, over
what, and what must hold; VARIANTS = variants(EXERCISES) derives derive(rng) and constraint_violations(numbers),
deterministic in the student's generator; a definition whose ranges cannot keep its requirements is refused, after a
bounded search, with a sentence naming the file, the exercise and what to change; a module-level derive still wins."""

from __future__ import annotations

import random

import pytest

from course.authoring.draws import MAX_DRAWS, draw, problems
from course.authoring.kit import AuthoringError, check_exercises, load_exercises
from course.authoring.ranges import ExactFloat32, Halves, Integers, NoZero, OneOf
from course.pipeline.content import load_content
from tests.support.helpers import ROOT
from tests.support.kit import SLOPE, exercises_module

FIXED = 'build=line, numbers={"w": 3, "x": 2, "b": -1},'


def declared(vary: str, require: str = "[]", tail: str = "") -> str:
    """SLOPE (y = w·x + b, asking y and dy/dw = x) with `vary` and `require` declared, and VARIANTS derived."""
    text = SLOPE.replace(
        "from course.authoring.kit import Ask, Exercise\n",
        "from course.authoring.kit import Ask, Exercise, variants\n"
        "from course.authoring.ranges import *  # noqa: F403\n",
    )
    text = text.replace(FIXED, f"{FIXED}\n    vary={vary}, require={require},")
    return text + "\nVARIANTS = variants(EXERCISES)\n" + tail


WIDE = '{"w": Integers(-3, 3, skip=[0]), "x": Halves(-2, 2), "b": OneOf(-1, 1, 5)}'


def test_declared_ranges_give_each_generator_its_own_numbers_that_keep_the_requirements(tmp_path):
    path = exercises_module(tmp_path, declared(WIDE, "[NoZero()]"))
    content = load_content(path)
    assert content.derive is not None
    drawn = [content.derive(random.Random(seed)) for seed in range(60)]
    assert drawn == [content.derive(random.Random(seed)) for seed in range(60)]  # the same student, the same numbers
    assert len({tuple(sorted(numbers.items())) for numbers in drawn}) > 20
    for numbers in drawn:
        assert set(numbers) == {"line_w", "line_x", "line_b"}
        assert numbers["line_w"] in (-3, -2, -1, 1, 2, 3)
        assert numbers["line_x"] in {k / 2 for k in range(-4, 5)} - {0.0}  # x = 0 would make dy/dw 0: never drawn
        assert numbers["line_b"] in (-1, 1, 5)
        assert numbers["line_w"] * numbers["line_x"] + numbers["line_b"] != 0  # nor y = 0
        assert content.constraint_violations(numbers) == []
    assert content.constraint_violations({"line_w": 3, "line_x": 0.0, "line_b": -1}) == [
        "exercise 'line': answer line_dy_dw is 0 (a guess of 0, or a sign slip, would pass)"
    ]


def test_a_module_level_derive_or_constraint_violations_wins_over_the_declared_ones(tmp_path):
    hand_written = (
        "\n\ndef derive(rng):\n    return {'line_w': 7, 'line_x': 1, 'line_b': 0}\n\n\n"
        "def constraint_violations(numbers):\n    return ['by hand'] if numbers['line_w'] == 7 else []\n"
    )
    content = load_content(exercises_module(tmp_path, declared(WIDE, "[NoZero()]", hand_written)))
    assert content.derive(random.Random(1)) == {"line_w": 7, "line_x": 1, "line_b": 0}
    assert content.constraint_violations({"line_w": 7, "line_x": 0, "line_b": 0}) == ["by hand"]


@pytest.mark.parametrize(
    ("vary", "require", "said"),
    [
        (  # every value the range allows gives dy/dw = x = 0
            '{"x": OneOf(0, 0.0)}',
            "[NoZero()]",
            "none of all 2 combinations of its ranges keeps its requirements; most often answer line_dy_dw is 0",
        ),
        (  # 1 in 201 fits: a student's bounded draw could miss it
            '{"x": Integers(-100, 100)}',
            '[Holds(lambda v: v["x"] == 2, "x is not 2")]',
            "only 1 of all 201 combinations of its ranges keep its requirements (under 1 in 20",
        ),
        (  # sampled, not enumerated: 17**4 combinations
            '{"w": Integers(-8, 8), "x": Integers(-8, 8), "b": Integers(-8, 8)}',
            '[Holds(lambda v: v["w"] == 3 and v["x"] == 2 and v["b"] == -1, "not the defaults")]',
            "none of 512 numbers drawn from its ranges keeps its requirements; most often not the defaults",
        ),
    ],
)
def test_ranges_that_cannot_keep_the_requirements_are_refused_with_a_sentence(tmp_path, vary, require, said):
    path = exercises_module(tmp_path, declared(vary, require))
    with pytest.raises(AuthoringError) as refused:
        check_exercises(load_exercises(path), path)
    message = str(refused.value)
    assert message.startswith(f"{path}: exercise 'line': "), message
    assert said in message, message
    assert "Widen a range in vary (" in message
    assert "or drop that requirement" in message


@pytest.mark.parametrize(
    ("vary", "require", "said"),
    [
        ('{"v": Integers(1, 3)}', "[]", "vary names 'v', which is none of its numbers (w, x, b)"),
        ('{"x": Integers(3, 1)}', "[]", "vary['x'] = Integers(3, 1) holds no value"),
        ('{"x": Integers(0, 10**6)}', "[]", "holds more than 10000 values"),
        ('{"x": [1, 2, 3]}', "[]", "vary['x'] is [1, 2, 3]; declare it as Integers(low, high)"),
        ("{}", '[ReluOpen("h")]', "ReluOpen(name='h') names h, which is no answer or number of the exercise"),
        ("{}", '["no zero"]', "require holds 'no zero'; use ReluOpen, ReluShut, NoKink, NoZero"),
    ],
)
def test_a_declaration_that_names_nothing_real_is_refused_when_the_module_loads(tmp_path, vary, require, said):
    path = exercises_module(tmp_path, declared(vary, require))
    with pytest.raises(AuthoringError) as refused:
        load_content(path)
    assert f"{path}: exercise 'line': " in str(refused.value)
    assert said in str(refused.value), str(refused.value)


def test_numbers_of_its_own_that_break_its_requirements_are_refused(tmp_path):
    path = exercises_module(tmp_path, declared('{"w": Integers(1, 3)}', '[ExactFloat32(), ReluShut("line_y")]'))
    with pytest.raises(AuthoringError) as refused:
        check_exercises(load_exercises(path), path)
    assert str(refused.value) == (
        f"{path}: exercise 'line': its own numbers break its requirements: line_y = 5 is not below 0, so the ReLU "
        "there is not shut; change its numbers or its require"
    )


BACKPROP = ROOT / "source" / "backprop" / "exercises.py"


def test_each_requirement_reads_what_it_names_and_what_torch_ran(tmp_path):
    by_id = {exercise.id: exercise for exercise in load_exercises(BACKPROP)}
    micrograd, neuron = by_id["micrograd"], by_id["neuron"]
    assert problems(micrograd, {"a": -4, "b": 2}) == []  # the published numbers: ReLU(-2) shut, ReLU(6) open
    assert problems(micrograd, {"a": -2, "b": 2}) == [
        "a ReLU gets 0 (ReLU(0)), its kink, where torch's slope is a convention"
    ]
    (line,) = load_exercises(exercises_module(tmp_path, declared("{}", '[ReluOpen("w"), ReluShut("b"), NoKink()]')))
    assert problems(line, {"w": 3, "x": 2, "b": -1}) == []
    assert problems(line, {"w": 0, "x": 2, "b": 1}) == [
        "w = 0 is not above 0, so the ReLU there is not open",
        "b = 1 is not below 0, so the ReLU there is not shut",
    ]
    exact = [ExactFloat32("neuron_dot"), ExactFloat32()]
    assert [required.broken(_trial(neuron)) for required in exact] == [
        None,
        "answer neuron_f is not exact in float32 (0.7310585786300049 is 0.7310585975646973 there)",
    ]
    assert NoZero("neuron_dot").broken(_trial(neuron, w2=-4)) == (
        "answer neuron_dot is 0 (a guess of 0, or a sign slip, would pass)"
    )


def _trial(exercise, **changed):
    from course.authoring.draws import trial

    return trial(exercise, dict(exercise.numbers) | changed)


def test_a_students_draw_is_bounded_even_when_its_ranges_were_never_checked(tmp_path):
    """variants() checks declarations only (it runs when the module loads); kit write and release search the ranges.
    A draw whose ranges never fit gives up after MAX_DRAWS candidates with a sentence, never loops."""
    calls = []
    path = exercises_module(tmp_path, declared('{"x": Integers(5, 9)}', '[Holds(lambda v: v["x"] == 2, "x is not 2")]'))
    (line,) = load_exercises(path)
    original = line.build

    def counted(**numbers):
        calls.append(numbers)
        return original(**numbers)

    object.__setattr__(line, "build", counted)
    with pytest.raises(AuthoringError) as refused:
        draw(line, random.Random(3))
    assert len(calls) == MAX_DRAWS
    assert f"none of {MAX_DRAWS} numbers drawn from its ranges keeps its requirements" in str(refused.value)
    assert "exercise 'line'" in str(refused.value)


@pytest.mark.parametrize(
    ("declared_range", "values"),
    [
        (Integers(-2, 2, skip=[0]), (-2, -1, 1, 2)),
        (Halves(-1, 1.2), (-1.0, -0.5, 0.0, 0.5, 1.0)),
        (OneOf(3, -1.5), (3, -1.5)),
        (OneOf(3, float("nan")), ()),  # not a plain number: holds nothing, refused by check_declaration
    ],
)
def test_each_range_holds_the_values_it_says(declared_range, values):
    assert declared_range.values() == values


def _hand_written(numbers: dict) -> bool:
    """backprop's constraint_violations as it was written by hand (3e77494): True when the numbers are unfit."""
    a, b = numbers["micrograd_a"], numbers["micrograd_b"]
    c = 4 * (a + b) + 3 - a
    d = 4 * (3 * (a * b + b**3) + max(a + b, 0)) + max(b - a, 0)
    total = numbers["neuron_w0"] * numbers["neuron_x0"] + numbers["neuron_w1"] * numbers["neuron_x1"]
    return (
        numbers["gate_x"] + numbers["gate_y"] == 0
        or numbers["gate_z"] == 0
        or total + numbers["neuron_w2"] == 0
        or a + b == 0
        or b - a == 0
        or c - d == 0
    )


def test_backprops_declared_requirements_refuse_what_its_hand_written_constraints_refused():
    """Over each exercise's declared ranges (the neuron's 3456 combinations sampled), the others at their published
    numbers, the declared requirements refuse exactly the numbers the hand-written constraint_violations did."""
    import itertools

    content = load_content(BACKPROP)
    defaults = {
        "gate_x": -2, "gate_y": 5, "gate_z": -4, "neuron_w0": 2, "neuron_w1": -3, "neuron_w2": -3,
        "neuron_x0": -1, "neuron_x1": -2, "micrograd_a": -4, "micrograd_b": 2,
    }  # fmt: skip
    checked = refused = 0
    rng = random.Random(42)
    for exercise in load_exercises(BACKPROP):
        names = list(exercise.vary)
        combinations = list(itertools.product(*(exercise.vary[name].values() for name in names)))
        for combination in rng.sample(combinations, min(300, len(combinations))):
            numbers = defaults | {
                f"{exercise.id}_{name}": value for name, value in zip(names, combination, strict=True)
            }
            declared = bool(content.constraint_violations(numbers))
            assert declared == _hand_written(numbers), numbers
            checked += 1
            refused += declared
    assert checked == 294 + 300 + 15  # the gate has 7 · 6 · 7 combinations, micrograd 5 · 3
    assert refused > 10  # the comparison saw refusals, not only fit numbers

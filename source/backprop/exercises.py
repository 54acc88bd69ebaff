"""The third assignment, `backprop`: three backward passes from public examples, each defined once for the
authoring kit (docs/authoring.md). `autograd-course kit write --assignment backprop` writes the notebook's
cells from EXERCISES; the hidden tests are the `build` functions below, so edit them here, never in the notebook.

The numbers are the published ones: Stanford CS231n's notes on backpropagation (a circuit of two gates, a 2-D
neuron with a sigmoid) and the expression of the micrograd README. tests/test_backprop.py checks that torch
gives the published values. Every build works in float64: the sigmoid's and micrograd's values are not exact in
float32, and their float32 rounding would sit near the course's tolerance.
"""

from __future__ import annotations

import torch

from course.authoring.kit import Ask, Exercise, chains, number_groups, variants
from course.authoring.ranges import Holds, Integers, NoKink, NoZero
from course.pipeline.graph_chain import kit_graphs

# ----------------------------------------------------------------------------- 1. a circuit of two gates


def gate_circuit(x, y, z):
    x = torch.tensor(float(x), dtype=torch.float64, requires_grad=True)
    y = torch.tensor(float(y), dtype=torch.float64, requires_grad=True)
    z = torch.tensor(float(z), dtype=torch.float64, requires_grad=True)
    q = x + y
    q.retain_grad()
    f = q * z
    f.backward()
    return {
        "gate_q": q,
        "gate_f": f,
        "gate_df_dq": q.grad,
        "gate_df_dz": z.grad,
        "gate_df_dx": x.grad,
        "gate_df_dy": y.grad,
    }


GATE = Exercise(
    id="gate",
    title="1. Two gates: an adder feeding a multiplier",
    question="""\
Three inputs, x = {{x}}, y = {{y}} and z = {{z}}, go through two gates: an adder makes q = x + y, and a
multiplier makes f = q · z. Run the circuit forwards, then send the gradient back from f, one gate at a time.

* `gate_q` and `gate_f`: the two forward values.
* `gate_df_dq` and `gate_df_dz`: the multiplier's inputs each receive the *other* input as their local slope.
* `gate_df_dx` and `gate_df_dy`: the adder passes the gradient arriving at q on to both of its inputs unchanged.""",
    build=gate_circuit,
    numbers={"x": -2, "y": 5, "z": -4},
    # Small non-zero integers; no zero answer (x + y = 0 would make df/dz 0, z = 0 every gradient below f).
    vary={"x": Integers(-4, 3, skip=[0]), "y": Integers(1, 6), "z": Integers(-5, 4, skip=[-1, 0, 1])},
    require=[NoZero()],
    answers=[
        Ask("gate_q", hint="The adder's output: x + y.", idea="The forward pass through the adder."),
        Ask("gate_f", hint="The multiplier's output: q · z.", idea="The forward pass through the multiplier."),
        Ask(
            "gate_df_dq",
            hint="For f = q · z, ∂f/∂q is z.",
            idea="A multiplier's local slope for one input is the value of its other input.",
        ),
        Ask(
            "gate_df_dz",
            hint="For f = q · z, ∂f/∂z is q.",
            idea="A multiplier's local slope for one input is the value of its other input.",
        ),
        Ask(
            "gate_df_dx",
            hint="∂q/∂x is 1: the adder hands ∂f/∂q to x as it is.",
            points=2,
            idea="The chain rule through an adder: its local slopes are 1, so it routes the gradient unchanged.",
        ),
        Ask(
            "gate_df_dy",
            hint="∂q/∂y is 1: y receives the same gradient as x.",
            points=2,
            idea="The chain rule through an adder: its local slopes are 1, so it routes the gradient unchanged.",
        ),
    ],
)

# ----------------------------------------------------------------------------- 2. a neuron with a sigmoid


def sigmoid_neuron(w0, w1, w2, x0, x1):
    w = torch.tensor([float(w0), float(w1), float(w2)], dtype=torch.float64, requires_grad=True)
    x = torch.tensor([float(x0), float(x1)], dtype=torch.float64, requires_grad=True)
    dot = w[0] * x[0] + w[1] * x[1] + w[2]
    dot.retain_grad()
    f = 1 / (1 + torch.exp(-dot))
    f.backward()
    return {
        "neuron_dot": dot,
        "neuron_f": f,
        "neuron_df_ddot": dot.grad,
        "neuron_df_dx": x.grad,
        "neuron_df_dw": w.grad,
    }


NEURON = Exercise(
    id="neuron",
    title="2. A neuron with two inputs and a sigmoid",
    question="""\
A neuron weighs its inputs x = [{{x0}}, {{x1}}] with w = [{{w0}}, {{w1}}, {{w2}}], the last weight being the
bias, and squashes the sum with the sigmoid σ(s) = 1 / (1 + e^(−s)):

f = σ(w₀x₀ + w₁x₁ + w₂)

Work out the forward values and every gradient by hand. The sigmoid has a handy derivative, written with its
own output: σ′(s) = σ(s)·(1 − σ(s)). Values like these are not round: type the arithmetic (`math.exp` is
available) or at least seven decimals.

* `neuron_dot`: the weighted sum s; `neuron_f`: the neuron's output.
* `neuron_df_ddot`: the gradient at s, the sigmoid's local slope.
* `neuron_df_dx`: the list [∂f/∂x₀, ∂f/∂x₁]; `neuron_df_dw`: the list [∂f/∂w₀, ∂f/∂w₁, ∂f/∂w₂].""",
    build=sigmoid_neuron,
    numbers={"w0": 2, "w1": -3, "w2": -3, "x0": -1, "x1": -2},
    # Non-zero weights and inputs; the sum away from 0 (there the output is exactly 1/2).
    vary={
        "w0": Integers(-3, 3, skip=[0]),
        "w1": Integers(-3, 3, skip=[0]),
        "w2": Integers(-3, 3, skip=[0]),
        "x0": Integers(-2, 2, skip=[0]),
        "x1": Integers(-2, 2, skip=[0]),
    },
    require=[NoZero("neuron_dot")],
    float64=True,  # the question asks for the arithmetic or seven decimals: σ's values are not exact in float32
    answers=[
        Ask("neuron_dot", hint="w₀x₀ + w₁x₁ + w₂.", idea="The forward pass: the weighted sum with the bias."),
        Ask("neuron_f", hint="σ of the weighted sum.", idea="The forward pass: the sigmoid of the weighted sum."),
        Ask(
            "neuron_df_ddot",
            hint="σ(s)(1 − σ(s)) at this s.",
            points=2,
            idea="The sigmoid's local slope, written with its own output.",
        ),
        Ask(
            "neuron_df_dx",
            form="list of 2 numbers",
            points=2,
            hint="Each input's gradient is the gradient at s times that input's weight.",
            idea="The chain rule through a product: each input's local slope is the weight it is multiplied by.",
        ),
        Ask(
            "neuron_df_dw",
            form="list of 3 numbers",
            points=3,
            hint="Each weight's gradient is the gradient at s times its input; the bias's input is 1.",
            idea="The chain rule through a product, and the bias as a weight on a constant input of 1.",
        ),
    ],
)

# ----------------------------------------------------------------------------- 3. micrograd's expression


def micrograd_expression(a, b):
    a = torch.tensor(float(a), dtype=torch.float64, requires_grad=True)
    b = torch.tensor(float(b), dtype=torch.float64, requires_grad=True)
    c = a + b
    d = a * b + b**3
    c = c + c + 1
    c = c + 1 + c + (-a)
    d = d + d * 2 + (b + a).relu()
    d = d + 3 * d + (b - a).relu()
    e = c - d
    f = e**2
    g = f / 2.0
    g = g + 10.0 / f
    g.backward()
    return {"mg_c": c, "mg_d": d, "mg_g": g, "mg_dg_da": a.grad, "mg_dg_db": b.grad}


MICROGRAD = Exercise(
    id="micrograd",
    title="3. Challenge: the expression of micrograd's README",
    question="""\
micrograd, a tiny autograd engine, opens its README with this expression of two numbers, a = {{a}} and
b = {{b}}. Each line makes a new value (a `+=` does not change a value in place, it builds a new one from the
old), so a and b reach g along many paths:

```
c = a + b
d = a * b + b**3
c += c + 1
c += 1 + c + (-a)
d += d * 2 + (b + a).relu()
d += 3 * d + (b - a).relu()
e = c - d
f = e**2
g = f / 2.0
g += 10.0 / f
```

Find the final c and d, then g, and the gradients of g with respect to a and b. Draw the graph first: wherever
a value feeds two later nodes, the gradients from both paths add up. Exact fractions are fine
(`24.5 + 10 / 49`).""",
    build=micrograd_expression,
    numbers={"a": -4, "b": 2},
    # Both ReLUs clearly open or shut (never at the kink, where torch's slope is a convention), and e = c - d not 0.
    vary={"a": Integers(-5, -1), "b": Integers(1, 3)},
    require=[NoKink(), Holds(lambda v: v["mg_c"] != v["mg_d"], "micrograd's e = c - d is 0, and g divides by e²")],
    float64=True,  # the question asks for the arithmetic or exact fractions: g's values are not exact in float32
    answers=[
        Ask(
            "mg_c",
            hint="Follow the three lines that make c, using the newest c each time.",
            idea="The forward pass, line by line: each `+=` builds a new value from the latest one.",
        ),
        Ask(
            "mg_d",
            hint="Follow the three lines that make d; the ReLUs pass a positive input and shut a negative one.",
            idea="The forward pass, line by line, with ReLU's value for the sign of its input.",
        ),
        Ask(
            "mg_g",
            points=2,
            hint="e = c − d, f = e², then g = f/2 + 10/f.",
            idea="The forward pass through the last four lines.",
        ),
        Ask(
            "mg_dg_da",
            points=3,
            hint="dg/df = 1/2 − 10/f²; then back through e = c − d and every path from c and d to a.",
            idea="Backpropagation through a graph with forks: the gradients of every path to a leaf add up.",
        ),
        Ask(
            "mg_dg_db",
            points=3,
            hint="The same walk back, to b: b also reaches d through b³ and a·b.",
            idea="Backpropagation through a graph with forks: the gradients of every path to a leaf add up.",
        ),
    ],
)


EXERCISES = [GATE, NEURON, MICROGRAD]


# ----------------------------------------------------------------------------- per-student numbers (variants: true)
# Each exercise declares which numbers vary and what every student's numbers must keep (vary= and require= above);
# VARIANTS derives the module's derive(rng) and constraint_violations(numbers) from them (course/authoring/draws.py).

NUMBER_GROUPS = number_groups(EXERCISES)
VARIANTS = variants(EXERCISES)
CHAINS = chains(EXERCISES)  # none hand-written
GRAPHS = kit_graphs(EXERCISES)  # so each table is read from its build's graph (course/pipeline/graph_chain.py)

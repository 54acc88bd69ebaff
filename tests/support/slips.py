"""Slips planted in the course's own assignments, each value worked out by hand at the notebooks' numbers (never by
the search's code): the slip search's tests (tests/test_slip_search.py) and its benchmark
(tests/benchmarks/slip_search.py) plant them."""

from __future__ import annotations

import math

from course.pipeline.slips import (
    ACCUMULATION_OFF,
    DROPPED_LOCAL,
    FORWARD_FOR_SLOPE,
    GATE_IGNORED,
    ONE_BRANCH,
    SIGN_FLIPPED,
    SUM_FOR_MEAN,
)

# autograd's numbers cell: x = 2, w = 3, b = -1, target 2; w2 = 0.5; the closed ReLU's x = -1; accumulation at x = 3
# over 3 steps. The tiny network: h = 3*2 - 1 = 5, a = relu(5) = 5, L = (5 - 2)^2 = 9, dL/da = 2(5 - 2) = 6,
# dL/dh = 6 (ReLU open), dL/dw = 6 * 2 = 12, dL/db = 6.
AUTOGRAD_P = {"net_x": 2, "net_w": 3, "net_b": -1, "net_target": 2, "w2": 0.5, "closed_x": -1, "accum_x": 3}
# The w2 network: out = 0.5 * 5 = 2.5, dL/dout = 2(2.5 - 2) = 1, dL/da = 1 * w2 = 0.5.
# The closed ReLU: h = 3*(-1) - 1 = -4 < 0, so a = 0 and dL/da = 2(0 - 2) = -4; the gate passes nothing: dL/dw = 0.
# Accumulation: d(x^2)/dx = 2*3 = 6 per backward(); .grad holds [6, 12, 18] without zeroing, [6, 6, 6] with it.
# Two backward() calls of the tiny network: .grad of w = 12 + 12 = 24.

# training's numbers cell: x = 2, w = 3, b = -1, target 2, lr = 1/8; the leaky network's x = -1; batch B: x = 1,
# target 4. Leaky: h = -4, a = 0.01 * -4 = -0.04, dL/da = 2(-0.04 - 2) = -4.08, dL/dh = -4.08 * 0.01 = -0.0408.
TRAINING_P = {"net_x": 2, "net_w": 3, "net_b": -1, "net_target": 2, "lr": 0.125, "closed_x": -1, "batch_x": 1}

# micrograd's README expression at a = -4, b = 2 (backprop's numbers): c = a + b = -2, d = a*b + b^3 = 0,
# c2 = c + c + 1 = -3, c3 = c2 + 1 + c2 - a = -1, d2 = 3*d + relu(b + a) = 0 (relu(-2) shut),
# d3 = 4*d2 + relu(b - a) = 6 (relu(6) open), e = c3 - d3 = -7, f = e^2 = 49, g = f/2 + 10/f.
# dg/de = (1/2 - 10/f^2) * 2e. Back to a: through c, dc3/da = 2 * 2 * 1 - 1 = 3; through d, dd3/da = 4 * 3 * b - 1 = 23
# (d = a*b has d/da = b = 2; relu(b - a) open, slope -1); e = c - d, so dg/da = dg/de * (3 - 23) = 138.8338...
DG_DE = (1 / 2 - 10 / 49**2) * 2 * -7


def micrograd_dg_da(through_c: float, through_d: float) -> float:
    return DG_DE * (through_c - through_d)


# The sigmoid neuron at w = [2, -3, -3], x = [-1, -2]: s = -2 + 6 - 3 = 1, built as f = 1 / (1 + exp(-s)).
NEURON_F = 1 / (1 + math.exp(-1))


CASES = [
    # (assignment, question, answer, the slip's value by hand, the kind)
    # dL/dw with dh/dw = x taken as 1: the gradient at h, 6.
    ("autograd", "tiny_net", "net_dL_dw", 6.0, DROPPED_LOCAL),
    # The square's slope 2(a - t) taken with the wrong sign: 2(2 - 5) = -6.
    ("autograd", "tiny_net", "net_dL_da", -6.0, SIGN_FLIPPED),
    # The square's own value (a - t)^2 = 9 used as its slope.
    ("autograd", "tiny_net", "net_dL_da", 9.0, FORWARD_FOR_SLOPE),
    # d(out)/da = w2 taken as 1: dL/da = 1, not 0.5.
    ("autograd", "w2_net", "w2_dL_da", 1.0, DROPPED_LOCAL),
    # The shut ReLU's slope taken as 1: dL/dw = -4 * x = -4 * -1 = 4, dL/db = -4.
    ("autograd", "closed_relu", "closed_dL_dw", 4.0, GATE_IGNORED),
    ("autograd", "closed_relu", "closed_dL_db", -4.0, GATE_IGNORED),
    # Each backward() replacing .grad: [6, 6, 6]; the first counted twice: [12, 18, 24]; left out: [0, 6, 12].
    ("autograd", "accumulation", "accumulated_grads", [6.0, 6.0, 6.0], ACCUMULATION_OFF),
    ("autograd", "accumulation", "accumulated_grads", [12.0, 18.0, 24.0], ACCUMULATION_OFF),
    ("autograd", "accumulation", "accumulated_grads", [0.0, 6.0, 12.0], ACCUMULATION_OFF),
    # zero_() ignored: the gradients pile up, [6, 12, 18].
    ("autograd", "accumulation", "zeroed_grads", [6.0, 12.0, 18.0], ACCUMULATION_OFF),
    # One backward() of two: 12, not 24.
    ("autograd", "predict_twice", "twice_w_grad", 12.0, ACCUMULATION_OFF),
    # LeakyReLU's slope 0.01 taken as 1: dL/dh = dL/da = -4.08, dL/dw = -4.08 * -1 = 4.08.
    ("training", "leaky_relu", "leaky_dL_dh", -4.08, GATE_IGNORED),
    ("training", "leaky_relu", "leaky_dL_dw", 4.08, GATE_IGNORED),
    # Each loss halved before backward(): (12 + -4) / 2 = 4. With the halving left out (a sum for the mean): 8.
    # Batch A: dL/dh = 2(5 - 2) = 6, dL/dw = 6 * 2 = 12; batch B: h = 3*1 - 1 = 2, dL/dh = 2(2 - 4) = -4, dL/dw = -4.
    ("training", "accumulate_on_purpose", "averaged_w_grad", 8.0, SUM_FOR_MEAN),
    # optimizer.zero_grad() ignored in the training loop (lr 1/8): step 1 w = 3 - 12/8 = 1.5, b = -1 - 6/8 = -1.75;
    # step 2: h = 1.5*2 - 1.75 = 1.25, dL/dh = 2(1.25 - 2) = -1.5, .grad of w = 12 - 3 = 9, w = 1.5 - 9/8 = 0.375;
    # step 3: h = 0.75 - 2.3125 < 0 adds nothing, w = 0.375 - 9/8 = -0.75.
    ("training", "training_loop", "sgd_w", [1.5, 0.375, -0.75], ACCUMULATION_OFF),
    # The multiplier f = q*z: df/dq = z taken as 1 reaches x unchanged: 1 (not -4).
    ("backprop", "gate", "gate_df_dx", 1.0, DROPPED_LOCAL),
    # df/dz given z's own value (-4) where the other input's, q = 3, belongs.
    ("backprop", "gate", "gate_df_dz", -4.0, FORWARD_FOR_SLOPE),
    # The reciprocal r = 1/u (u = 1 + e^-s) given its value f where its slope -1/u^2 = -f^2 belongs:
    # df/ds = f * 1 * e^-s * -1 (the exp's slope e^-s, the negation's -1).
    ("backprop", "neuron", "neuron_df_ddot", -NEURON_F * math.exp(-1), FORWARD_FOR_SLOPE),
    # relu(b + a) = relu(-2) passing the gradient as if open: dd3/da = 4 * (3b + 1) - 1 = 27, so dg/da = dg/de*(3 - 27).
    ("backprop", "micrograd", "mg_dg_da", micrograd_dg_da(3, 27), GATE_IGNORED),
    # e = c - d with de/dd = +1: dg/da = dg/de * (3 + 23).
    ("backprop", "micrograd", "mg_dg_da", micrograd_dg_da(3, -23), SIGN_FLIPPED),
    # c2 = c + c + 1 with one use of c followed: dc2/dc = 1, so dc3/da = 2 * 1 - 1 = 1.
    ("backprop", "micrograd", "mg_dg_da", micrograd_dg_da(1, 23), ONE_BRANCH),
    # d2 = d + d*2 + ... with only the d path followed: dd2/dd = 1, so dd3/da = 4 * 1 * 2 - 1 = 7.
    ("backprop", "micrograd", "mg_dg_da", micrograd_dg_da(3, 7), ONE_BRANCH),
]

# torch's own values, by hand, for the answers above: never attributed to a slip.
RIGHT = [
    ("autograd", "tiny_net", "net_dL_dw", 12.0),
    ("autograd", "tiny_net", "net_dL_da", 6.0),
    ("autograd", "w2_net", "w2_dL_da", 0.5),
    ("autograd", "closed_relu", "closed_dL_dw", 0.0),
    ("autograd", "accumulation", "accumulated_grads", [6.0, 12.0, 18.0]),
    ("autograd", "accumulation", "zeroed_grads", [6.0, 6.0, 6.0]),
    ("autograd", "predict_twice", "twice_w_grad", 24.0),
    ("training", "leaky_relu", "leaky_dL_dh", -0.0408),
    ("training", "accumulate_on_purpose", "averaged_w_grad", 4.0),
    ("training", "training_loop", "sgd_w", [1.5, 1.875, 1.78125]),
    ("backprop", "gate", "gate_df_dx", -4.0),
    ("backprop", "neuron", "neuron_df_ddot", NEURON_F * (1 - NEURON_F)),
    ("backprop", "micrograd", "mg_dg_da", micrograd_dg_da(3, 23)),
]
RANDOM_WRONG = (17.25, -3.5, 1234.0, 0.123456)

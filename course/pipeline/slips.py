"""Slips: the mistake in a backward pass that turns torch's value into a student's wrong one (issue 43).

A slip is found, not written: the grader re-runs a question's torch computation (its `GRAPHS` build, or the
authoring kit's `build`) with one mutation at a time - a local derivative dropped, a sign flipped, the ReLU's gate
ignored, one path of a fork left out, a step of accumulation too many or too few, a sum taken for a mean, the
forward value used where the local slope belongs - and names the one whose result matches the wrong value within
the grading tolerance. Everything here runs in the trusted grader, on grader-chosen numbers; the student's value
is only compared with, never executed.

This module holds the plain-data answer (`Slip`) and the kinds; the search itself is written beside it.
"""

from __future__ import annotations

from dataclasses import dataclass

# The kinds of slip the search tries, each with the words a class summary uses for it.
DROPPED_LOCAL = "dropped_local"  # a local derivative dropped (taken as 1)
SIGN_FLIPPED = "sign_flipped"  # a sign flipped on one step
FORWARD_FOR_SLOPE = "forward_for_slope"  # the forward value used where the local slope belongs
GATE_IGNORED = "gate_ignored"  # the ReLU's gate ignored on the way back
ACCUMULATION_OFF = "accumulation_off"  # gradients accumulated over one step too many or too few
SUM_FOR_MEAN = "sum_for_mean"  # a sum taken for a mean (or a mean for a sum)
ONE_BRANCH = "one_branch"  # a fork's gradients taken from one path instead of added

SLIP_KINDS: dict[str, str] = {
    DROPPED_LOCAL: "a local derivative dropped",
    SIGN_FLIPPED: "a sign flipped",
    FORWARD_FOR_SLOPE: "the forward value used as the local slope",
    GATE_IGNORED: "the ReLU's gate ignored on the way back",
    ACCUMULATION_OFF: "gradients accumulated one step too many or too few",
    SUM_FOR_MEAN: "a sum taken for a mean",
    ONE_BRANCH: "only one path of a fork followed",
}


@dataclass(frozen=True)
class Slip:
    """One slip that reproduces a wrong value: its kind (a key of SLIP_KINDS), where in the graph it happened
    (the node or step, in the chain table's words: "ReLU", "the fork at h") and the sentence an instructor reads
    ("the ReLU's gate ignored on the way back, at h = relu(z)")."""

    kind: str
    where: str
    sentence: str

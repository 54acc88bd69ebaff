"""What the instructor should look at: code that patched torch or builtins, rigged number types, edited
locked cells, a notebook personalised for someone else or (with variants) one with the default numbers. None of
it changes a score (the judge is immune by design, and a notebook is graded with its student's own numbers
whatever it shows) and none of these lines reaches the student's feedback: they go to the class summary only,
with what was seen (whose numbers a notebook shows has a feedback sentence of its own, `grading.numbers_messages`).

A static look at the submitted text in the grader: the code is parsed (once, within the hand-work
check's budget, `handwork.parse_cells`), never run.
"""

from __future__ import annotations

import ast
import time
from collections import deque
from collections.abc import Iterable, Iterator, Sequence

from course.core.answers import VALUE
from course.pipeline.feedback_model import Feedback
from course.pipeline.handwork import ANALYSIS_SECONDS, ParsedCells
from course.pipeline.submission import Submission

PATCHED_ROOTS = {"torch": "torch", "builtins": "builtins", "__builtins__": "builtins"}
NUMBER_TYPES = {"float", "int", "complex", "bool", "list", "tuple", "str", "Tensor"}
MAX_FINDINGS = 20


def _root_name(node: ast.AST) -> tuple[str | None, str]:
    """For `torch.Tensor.item` the root `torch` and the dotted text."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return node.id, ".".join(reversed(parts))
    return None, ""


_BLOCK_ITEMS = (ast.stmt, ast.excepthandler, ast.match_case)


def _statements(tree: ast.Module) -> Iterator[ast.AST]:
    """The statements of a tree (with the except and case clauses that hold some), in `ast.walk`'s order: a
    statement is never inside an expression, so these are all the statements there are."""
    pending: deque[ast.AST] = deque(tree.body)
    while pending:
        node = pending.popleft()
        yield node
        for field in node._fields:
            value = getattr(node, field, None)
            if type(value) is list:
                pending.extend(item for item in value if isinstance(item, _BLOCK_ITEMS))


def _nodes(tree: ast.Module, source: str) -> Iterable[ast.AST]:
    """What the checks below look at: the statements, which hold every assignment, deletion and class;
    every node only when the text may call setattr or delattr (a name may be spelled in other Unicode
    letters that Python reads as the same identifier, so any non-ASCII text counts too). The whole tree
    costs several times as much to walk, for each student."""
    if "setattr" in source or "delattr" in source or not source.isascii():
        return ast.walk(tree)
    return _statements(tree)


def _patches(nodes: Iterable[ast.AST]) -> list[str]:
    seen = []
    for node in nodes:
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        elif isinstance(node, ast.Delete):
            targets = node.targets
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("setattr", "delattr")
            and node.args
        ):
            root, dotted = _root_name(node.args[0])
            if root in PATCHED_ROOTS:
                seen.append(f"{node.func.id}({dotted}, ...)")
        for target in targets:
            if isinstance(target, ast.Attribute):
                root, dotted = _root_name(target)
                if root in PATCHED_ROOTS:
                    seen.append(f"{dotted} = ...")
            elif isinstance(target, ast.Subscript):  # __builtins__["abs"] = ...
                root, dotted = _root_name(target.value)
                if root in PATCHED_ROOTS:
                    seen.append(f"{dotted}[...] = ...")
    return seen


def _rigged_types(nodes: Iterable[ast.AST]) -> list[str]:
    seen = []
    for node in nodes:
        if isinstance(node, ast.ClassDef):
            bases = [_root_name(base)[1].rsplit(".", 1)[-1] for base in node.bases]
            numeric = [base for base in bases if base in NUMBER_TYPES]
            if numeric:
                dunders = sorted(
                    item.name
                    for item in node.body
                    if isinstance(item, ast.FunctionDef) and item.name.startswith("__") and item.name != "__init__"
                )
                overriding = f" overriding {', '.join(dunders)}" if dunders else ""
                seen.append(f"class {node.name}({', '.join(numeric)}){overriding}")
    return seen


def review(
    submission: Submission, graded_as: str, parsed: ParsedCells, *, default_numbers: bool = False
) -> tuple[str, ...]:
    """One line per thing seen, each naming the cell: for the instructor, never for the student. Whose numbers
    the notebook carries comes first (it explains the score). default_numbers: variants are on and the notebook
    carries the default numbers, not the student's own."""
    findings = []
    if submission.personalised_for not in (None, graded_as):
        findings.append(
            f"submitted a notebook personalised for {submission.personalised_for!r} "
            f"(graded with {graded_as!r}'s numbers)"
        )
    if default_numbers:
        findings.append(
            f"submitted a notebook with the default numbers, the release everyone was given, not one "
            f"personalised for {graded_as!r} (graded with {graded_as!r}'s own numbers)"
        )
    deadline = time.monotonic() + ANALYSIS_SECONDS  # the hand-work check's budget, again: walking is linear
    for cell, tree in parsed.trees:
        if time.monotonic() > deadline:
            break
        where = cell.label.replace("your answer cell for", "the answer cell of")
        nodes = list(_nodes(tree, cell.source))
        findings += [f"{where}: patches {what}" for what in _patches(nodes)]
        findings += [f"{where}: defines a rigged number type, {what}" for what in _rigged_types(nodes)]
    findings += [
        f"edited the locked cell {grade_id} (it was run as the student's code; the grader used its own)"
        for grade_id in submission.edited_locked_cells
    ]
    return tuple(findings[:MAX_FINDINGS])


MIN_BORROWED = 3  # values that must match one classmate's references before it is worth an instructor's look


def borrowed_numbers(class_feedback: Sequence[Feedback]) -> dict[str, list[str]]:
    """With per-student numbers: students whose wrong answers are another student's right ones.

    For each wrong value of A that equals torch's value for the same name under B's numbers, A and B are
    counted; a pair with at least MIN_BORROWED such values (and more than half of A's wrong values) is
    reported for A. With everyone on the same numbers nothing can match: a wrong answer is never
    anyone's reference."""
    references: dict[tuple[str, str], set[str]] = {}
    for feedback in class_feedback:
        for question in feedback.questions:
            for value in question.values:
                if value.status == VALUE and value.torch_value is not None:
                    references.setdefault((value.name, value.torch_value), set()).add(feedback.student_id)
    found: dict[str, list[str]] = {}
    for feedback in class_feedback:
        student = feedback.student_id
        wrong = [
            (v.name, yours)
            for q in feedback.questions
            for v in q.values
            if v.status == VALUE and not v.correct and (yours := v.your_value) is not None
        ]
        matches: dict[str, list[str]] = {}
        for name, yours in wrong:
            for other in references.get((name, yours), set()) - {student}:
                matches.setdefault(other, []).append(name)
        for other, names in sorted(matches.items(), key=lambda item: (-len(item[1]), item[0])):
            if len(names) >= MIN_BORROWED and 2 * len(names) > len(wrong):
                found.setdefault(student, []).append(
                    f"{len(names)} of {len(wrong)} wrong answers are right for {other!r}'s numbers "
                    f"({', '.join(names[:6])}{', …' if len(names) > 6 else ''})"
                )
                break
    return found

"""Chain tables from torch's own graph: the backward walk of an exercise, read from what torch records.

An exercise's torch build (a scalar `output` made from leaf tensors that require grad) leaves a graph behind:
each computed tensor's `grad_fn` is a node, its `next_functions` the edges back to the nodes of its inputs
(`AccumulateGrad` for a leaf). `walk` runs one real backward pass over that graph (`torch.autograd.grad`, so no
leaf's `.grad` changes and the graph is kept) with a hook on every node, and returns what each node received
and sent, as plain data, in the order backward visited the nodes.

A step of the walk is a *named* value, not a torch node: the author names the tensors the table should show
(`names`: symbol -> tensor, the leaves and the intermediates a student computes), and the torch nodes between
two named values are one step, written as one expression (`h = w·x + b` is torch's AddBackward node and
its MulBackward one). A torch node whose value is used twice (a fork) is always a step of its own, named `t1`, `t2`,
...  when the author gave it no name: its gradient is the sum of what each use sends back, and the step lists
each contribution and the sum (`Contribution`). Name every intermediate to see torch's walk node by node.

A node with several outputs (`unbind`, `split`) is shown with the gradient of its first.

`chain_from_graph` turns a walk into the `ChainStep`s of a feedback chain table (course/pipeline/content.py), one per
edge whose gradient is an answer. Everything here runs in the trusted grader, on the instructor's own build,
never on anything from a student.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from course.core.answers import PlainValue, describe
from course.core.errors import SourceNotebookError
from course.pipeline.content import EXERCISES_FILE, ChainStep, Content

if TYPE_CHECKING:
    import torch

OUTPUT = "output"  # the output's name in the walk when `names` gives it none
MAX_NODES = 500  # an exercise's graph is a handful of nodes; a step's expression is written one frame a node
MAX_EXPRESSION = 200  # characters of a step's expression shown; past them, an ellipsis


class GraphChainError(SourceNotebookError):
    """An exercise's torch build cannot give a chain table (not a scalar, no graph, names that do not fit)."""


class NotOneBackward(GraphChainError):
    """A kit build that calls backward() other than once: there is no one output whose walk is the table."""


@dataclass(frozen=True)
class Contribution:
    """One use of a value sending its gradient back: from the step `source`, this much."""

    source: str
    gradient: PlainValue


@dataclass(frozen=True)
class GraphStep:
    """One named value of the backward walk. `expression` is how it was computed from its `inputs` (empty for
    a leaf), `operations` the torch nodes that did it, `forward` its value. `contributions` are the gradients
    its uses sent back (two or more: a fork), `upstream` their sum (1 for the output). For each input: the local
    derivative ∂value/∂input (`local`, torch's gradient over the upstream one, None where that is no number)
    and the gradient sent to it (`gradients`)."""

    name: str
    expression: str
    operations: tuple[str, ...]
    forward: PlainValue
    contributions: tuple[Contribution, ...]
    upstream: PlainValue
    inputs: tuple[str, ...] = ()
    local: tuple[PlainValue, ...] = ()
    gradients: tuple[PlainValue, ...] = ()
    leaf: bool = False

    @property
    def fork(self) -> bool:
        """The value was used more than once: its gradient is the sum of its contributions."""
        return len(self.contributions) > 1

    @property
    def node(self) -> str:
        """The step as the feedback names it: `h = w·x + b`, or the leaf's name."""
        return self.name if self.leaf else f"{self.name} = {self.expression}"


# ----------------------------------------------------------------------------- expressions of torch nodes

SUPERSCRIPTS = {2: "²", 3: "³"}
# torch's node classes are the operation's name and Backward with a number: the operation is what they show.
INFIX = {"Add": " + ", "Sub": " − ", "Mul": "·", "Div": "/", "Dot": "·"}
SPECIAL = ("Pow", "Neg", "Rsub", "Reciprocal", "Select")  # written as torch's notation would be
SYMBOLS = {"Sigmoid": "σ"}  # a function's name as the course writes it; else torch's own (`relu` -> ReLU, `exp`)


def _operation(node: Any) -> str:
    return type(node).__name__


def _kind(node: Any) -> str:
    """The operation of a torch node, from its class: `Mul` for MulBackward, `AccumulateGrad` for a leaf's."""
    return re.sub(r"Backward\d*$", "", _operation(node))


def _call(kind: str) -> str | None:
    """How a function-like operation is written (`exp`, `ReLU`, `σ`), None for an infix or special one."""
    if kind in INFIX or kind in SPECIAL:
        return None
    if kind in SYMBOLS:
        return SYMBOLS[kind]
    if kind.endswith("Relu"):  # the rectifiers keep their capitals: ReLU, and its variants' prefix
        return kind.removesuffix("Relu") + "ReLU"
    return kind.lower()


def _constant(node: Any, slot: int, symbols: dict[int, str]) -> str:
    """An operand that is no node of the graph (a tensor that needs no gradient, a number): its name when
    `names` has it, its value when torch kept it and it is one number, else `const` (torch keeps only what the
    backward pass needs: a subtraction keeps neither operand)."""
    kept = {0: ("_saved_self",), 1: ("_saved_other",)}.get(slot, ())
    for attribute in (*kept, "_saved_other" if slot == 1 else "_saved_scalar"):
        try:
            value = getattr(node, attribute, None)
        except RuntimeError:  # freed by the backward pass that ran (a graph not retained)
            value = None
        if value is None:
            continue
        if id(value) in symbols:
            return symbols[id(value)]
        if hasattr(value, "numel") and value.numel() == 1:
            return describe(value.item())
        if isinstance(value, int | float):
            return describe(value)
    return "const"


def _wrapped(text: str, kind: str, slot: int, parent: str) -> str:
    """Brackets where reading left to right would bind the operand otherwise."""
    if kind in ("constant", "named", "Select") or _call(kind) is not None:
        return text
    loose = kind in ("Add", "Sub", "Rsub", "Neg")
    if parent == "Add" or (parent == "Sub" and slot == 0):
        return text
    if parent in ("Mul", "Dot") and not loose and kind != "Div":
        return text
    return f"({text})"


# ----------------------------------------------------------------------------- the walk


def _plain(tensor: Any) -> PlainValue:
    if tensor is None:
        return None
    value: PlainValue = tensor.detach().tolist()
    return value


def _ratio(gradient: Any, upstream: Any) -> PlainValue:
    """∂value/∂input as torch's numbers give it: the gradient sent over the gradient received, where that is
    one number per input element (a scalar upstream, or the same shape with no zero in it)."""
    if gradient is None or upstream is None:
        return None
    if upstream.numel() == 1:
        if upstream.item() == 0:
            return None
        return _plain(gradient / upstream.reshape(()))
    if gradient.shape == upstream.shape and bool((upstream != 0).all()):
        return _plain(gradient / upstream)
    return None


@dataclass
class _Graph:
    """The graph behind `output`, with what one backward pass sent along each edge."""

    nodes: list[Any] = field(default_factory=list)  # every torch node, each once
    parents: dict[int, int] = field(default_factory=dict)  # id(node) -> how many edges reach it
    order: dict[int, int] = field(default_factory=dict)  # id(node) -> when backward ran it
    received: dict[int, Any] = field(default_factory=dict)  # id(node) -> gradient arriving at it
    sent: dict[int, tuple[Any, ...]] = field(default_factory=dict)  # id(node) -> gradient along each edge


def _collect(output: Any) -> _Graph:
    graph = _Graph()
    seen: set[int] = set()
    stack = [output.grad_fn]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        graph.nodes.append(node)
        if len(graph.nodes) > MAX_NODES:
            raise GraphChainError(f"the graph has more than {MAX_NODES} nodes: an exercise's is a handful")
        for child, _ in node.next_functions:
            if child is not None:
                graph.parents[id(child)] = graph.parents.get(id(child), 0) + 1
                stack.append(child)
    return graph


def graph_nodes(output: torch.Tensor) -> list[Any]:
    """Every torch node of `output`'s graph, each once, in a fixed order (depth first from the output's node, as
    the walk collects them): the same build gives the same order, so a position names a node across runs (the
    slip search, course/pipeline/slip_search.py). Raises GraphChainError past MAX_NODES."""
    return _collect(output).nodes


def operation_kind(node: Any) -> str:
    """A torch node's operation, from its class: `Mul` for MulBackward, `AccumulateGrad` for a leaf's."""
    return _kind(node)


def _run_backward(output: Any, graph: _Graph) -> dict[int, Any]:
    """One backward pass with a hook on every node; the leaves' gradients by id(AccumulateGrad node)."""
    import torch

    handles = []
    for node in graph.nodes:
        if _operation(node) == "AccumulateGrad":
            continue

        def hook(grad_inputs: tuple[Any, ...], grad_outputs: tuple[Any, ...], node: Any = node) -> None:
            graph.order[id(node)] = len(graph.order)
            graph.received[id(node)] = grad_outputs[0]
            graph.sent[id(node)] = tuple(grad_inputs)

        handles.append(node.register_hook(hook))
    accumulators = [node for node in graph.nodes if _operation(node) == "AccumulateGrad"]
    try:
        grads = torch.autograd.grad(
            output, [node.variable for node in accumulators], retain_graph=True, allow_unused=True
        )
    except RuntimeError as error:
        if "second time" not in str(error):
            raise
        raise GraphChainError(
            "torch has freed this graph: backward() ran on it already. Return the "
            "Computation before calling backward(), or read a build that calls it with "
            "computation_from_build"
        ) from None
    finally:
        for handle in handles:
            handle.remove()
    return {id(node): grad for node, grad in zip(accumulators, grads, strict=True)}


def walk(output: torch.Tensor, names: Mapping[str, torch.Tensor]) -> tuple[GraphStep, ...]:
    """The backward walk of `output` over its named values, in the order torch's backward visits them (a leaf
    when its last gradient arrives). `names`: symbol -> tensor, for the leaves that require grad and for any
    intermediate the table should show (the output too, else it is called `output`). Raises GraphChainError
    for an output that is not a scalar with a graph, or a leaf of the graph that has no name."""
    import torch

    if not isinstance(output, torch.Tensor) or output.numel() != 1 or output.grad_fn is None:
        raise GraphChainError("the output must be a one-number tensor computed from tensors that require grad")
    symbols = {id(tensor): name for name, tensor in names.items()}
    graph = _collect(output)
    leaf_grads = _run_backward(output, graph)
    named, forward = _step_names(output, names, symbols, graph)
    steps, contributions, last_arrival = _node_steps(graph, named, forward, symbols)
    return _in_walk_order(graph, named, forward, steps, contributions, last_arrival, leaf_grads)


def _step_names(
    output: torch.Tensor, names: Mapping[str, torch.Tensor], symbols: Mapping[int, str], graph: _Graph
) -> tuple[dict[int, str], dict[int, PlainValue]]:
    """The walk's steps by id(node): their names and forward values; raises GraphChainError for a nameless leaf."""
    # The steps: the output, every named value, every leaf, every fork. Everything else is inlined.
    named: dict[int, str] = {}
    forward: dict[int, PlainValue] = {}
    for name, tensor in names.items():
        node = tensor.grad_fn
        if node is None and tensor.requires_grad:
            node = _accumulator(graph, tensor)
        if node is not None:
            named[id(node)] = name
            forward[id(node)] = _plain(tensor)
    root = output.grad_fn
    named.setdefault(id(root), symbols.get(id(output), OUTPUT))
    forward.setdefault(id(root), _plain(output))
    forks = 0
    for node in sorted(graph.nodes, key=lambda n: graph.order.get(id(n), len(graph.nodes))):
        if id(node) in named:
            continue
        if _operation(node) == "AccumulateGrad":
            raise GraphChainError(
                f"a leaf that requires grad has no name (its value {describe(_plain(node.variable))}"
                "): give it one in the names"
            )
        if graph.parents.get(id(node), 0) > 1:
            forks += 1
            named[id(node)] = f"t{forks}"
            forward[id(node)] = None  # torch keeps no output of a node; name the tensor to see its value
    return named, forward


def _node_steps(
    graph: _Graph, named: dict[int, str], forward: Mapping[int, PlainValue], symbols: dict[int, str]
) -> tuple[dict[int, GraphStep], dict[int, list[Contribution]], dict[int, tuple[int, int]]]:
    """The named nodes' steps in backward order, the gradients each node received, and when its last came."""
    steps: dict[int, GraphStep] = {}
    contributions: dict[int, list[Contribution]] = {}
    arrivals = 0
    last_arrival: dict[int, tuple[int, int]] = {}  # id(leaf node) -> (when, which edge) its last gradient came
    for node in sorted(
        (n for n in graph.nodes if id(n) in named and id(n) in graph.order), key=lambda n: graph.order[id(n)]
    ):
        name = named[id(node)]
        upstream = graph.received[id(node)]
        text, operations, edges = _segment(node, named, symbols, graph)
        edges = [(target, gradient) for target, gradient in edges if gradient is not None]
        for target, gradient in edges:
            contributions.setdefault(id(target), []).append(Contribution(name, _plain(gradient)))
            last_arrival[id(target)] = (graph.order[id(node)], arrivals)
            arrivals += 1
        steps[id(node)] = GraphStep(
            name=name,
            expression=text,
            operations=operations,
            forward=forward[id(node)],
            contributions=tuple(contributions.get(id(node), ())),
            upstream=_plain(upstream),
            inputs=tuple(named[id(target)] for target, _ in edges),
            local=tuple(_ratio(gradient, upstream) for _, gradient in edges),
            gradients=tuple(_plain(gradient) for _, gradient in edges),
        )
    return steps, contributions, last_arrival


def _in_walk_order(
    graph: _Graph,
    named: Mapping[int, str],
    forward: Mapping[int, PlainValue],
    steps: Mapping[int, GraphStep],
    contributions: Mapping[int, list[Contribution]],
    last_arrival: Mapping[int, tuple[int, int]],
    leaf_grads: Mapping[int, Any],
) -> tuple[GraphStep, ...]:
    """The node steps and a step for each leaf, in backward order (a leaf when its last gradient arrived)."""
    leaves = [n for n in graph.nodes if _operation(n) == "AccumulateGrad"]
    ordered = sorted(
        [
            *(((graph.order[id(n)], -1), steps[id(n)]) for n in graph.nodes if id(n) in steps),
            *(
                (
                    last_arrival.get(id(n), (-1, -1)),
                    GraphStep(
                        name=named[id(n)],
                        expression="",
                        operations=("AccumulateGrad",),
                        forward=forward[id(n)],
                        contributions=tuple(contributions.get(id(n), ())),
                        upstream=_plain(leaf_grads[id(n)]),
                        leaf=True,
                    ),
                )
                for n in leaves
            ),
        ],
        key=lambda item: item[0],
    )
    return tuple(step for _, step in ordered)


def node_expression(node: Any, named: Mapping[int, str], symbols: Mapping[int, str]) -> str:
    """How a torch node's value is computed, written as the walk writes a step (`w·x + b`): an input by its name
    where `named` (id(node) -> symbol) has one, else inlined; an operand that is no node by its name in `symbols`
    (id(tensor) -> name) or its value where torch kept it. For the slip search's sentences
    (course/pipeline/slip_search.py), about nodes the author gave no name."""
    text, _, _ = _segment(node, dict(named), dict(symbols), _Graph())
    return text


def _accumulator(graph: _Graph, tensor: Any) -> Any:
    for node in graph.nodes:
        if _operation(node) == "AccumulateGrad" and node.variable is tensor:
            return node
    return None


def _segment(
    node: Any, named: dict[int, str], symbols: dict[int, str], graph: _Graph
) -> tuple[str, tuple[str, ...], list[tuple[Any, Any]]]:
    """The expression of one step, the torch nodes in it, and (target step node, gradient) for every edge that
    leaves it: the torch nodes under `node` down to the next named ones, which the walk shows as steps."""
    operations: list[str] = []
    edges: list[tuple[Any, Any]] = []

    def render(current: Any) -> str:
        operations.append(_operation(current))
        sent = graph.sent.get(id(current), ())
        operands = []
        for slot, (child, _) in enumerate(current.next_functions):
            if child is None:
                operands.append((_constant(current, slot, symbols), "constant"))
                continue
            gradient = sent[slot] if slot < len(sent) else None
            if id(child) in named:
                edges.append((child, gradient))
                operands.append((named[id(child)], "named"))
            else:
                operands.append((render(child), _kind(child)))
        return _expression(current, _kind(current), operands)

    text = render(node)
    shown = text if len(text) <= MAX_EXPRESSION else text[: MAX_EXPRESSION - 1] + "…"
    return shown, tuple(operations), edges


def _expression(node: Any, kind: str, operands: list[tuple[str, str]]) -> str:
    if kind == "AccumulateGrad":  # a leaf the author gave no name (the slip search names nodes of any cell)
        return "leaf"
    texts = [_wrapped(text, of, slot, kind) for slot, (text, of) in enumerate(operands)]
    joined = ", ".join(text for text, _ in operands)
    if kind == "Mul" and len(operands) == 2 and operands[0][1] == "Reciprocal" and operands[1][1] == "constant":
        numerator = operands[1][0]  # torch writes k / x as x's reciprocal times k
        return operands[0][0] if numerator == "1" else f"{numerator}/{operands[0][0].removeprefix('1/')}"
    if kind in INFIX:
        if len(texts) == 1:  # the other operand a Python number: its value where torch keeps it
            return f"{texts[0]}{INFIX[kind]}{_constant(node, 1, {})}"
        return INFIX[kind].join(texts)
    if kind == "Pow" and texts:
        exponent = getattr(node, "_saved_exponent", None)
        if not isinstance(exponent, int | float):
            return "^".join(texts)
        power = (
            SUPERSCRIPTS.get(int(exponent), f"^{describe(exponent)}")
            if exponent == int(exponent)
            else f"^{describe(exponent)}"
        )
        simple = operands[0][1] in ("named", "constant") or _call(operands[0][1]) is not None
        return f"{operands[0][0]}{power}" if simple else f"({operands[0][0]}){power}"
    if kind == "Neg" and texts:
        return f"−{texts[0]}"
    if kind == "Rsub" and texts:
        return f"{_constant(node, 1, {})} − {texts[0]}"
    if kind == "Reciprocal" and texts:
        return f"1/{texts[0]}"
    if kind == "Select" and texts:
        return f"{operands[0][0]}[{getattr(node, '_saved_index', '?')}]"
    return f"{_call(kind) or kind.lower()}({joined})"


# ----------------------------------------------------------------------------- chain tables


def chain_from_graph(
    output: torch.Tensor,
    names: Mapping[str, torch.Tensor],
    *,
    forwards: Mapping[str, str] | None = None,
    gradients: Mapping[str, str] | None = None,
    partial: bool = False,
) -> tuple[ChainStep, ...]:
    """The feedback chain table of `output`'s backward walk (`walk`), as `ChainStep`s: one per edge (step ->
    input) whose gradient is an answer, in the walk's order. `forwards`: symbol -> the answer holding its
    forward value; `gradients`: symbol -> the answer holding the gradient at it (the output's is 1 and needs
    none). The feedback computes each local derivative as the gradient sent over the gradient received, so the
    gradient at a step that sends an answer must itself be an answer (or the output's): GraphChainError says
    which to add otherwise, or with `partial` the row is left out (the table shows what the answers cover)."""
    forwards, gradients = dict(forwards or {}), dict(gradients or {})
    steps = walk(output, names)
    known = {step.name for step in steps}
    unknown = sorted((set(forwards) | set(gradients)) - known)
    if unknown:
        raise GraphChainError(
            f"{', '.join(map(repr, unknown))} name no value of the walk (its values: {', '.join(sorted(known))})"
        )
    if partial:
        return whole_walk(steps, forwards, gradients)
    root = steps[0].name  # backward starts at the output
    chain = []
    for step in steps:
        several = len(set(step.inputs)) > 1
        for target in dict.fromkeys(step.inputs):  # a value used twice by one step: one row, the sum
            if target not in gradients:
                continue
            upstream = gradients.get(step.name)
            if upstream is None and step.name != root:
                if partial:
                    continue
                raise GraphChainError(
                    f"the gradient at {step.name!r} is no answer, so the chain table cannot show "
                    f"∂{step.name}/∂{target}: name the answer that holds it in `gradients`, or "
                    "write the table by hand (CHAINS)"
                )
            chain.append(
                ChainStep(
                    f"{step.node} (to {target})" if several else step.node,
                    f"∂{step.name}/∂{target}",
                    forwards.get(step.name),
                    gradients[target],
                    upstream,
                )
            )
    if not chain and not partial:
        raise GraphChainError(
            "no gradient of the walk is an answer, so the chain table would be empty: name in "
            "`gradients` the answers that hold the gradients"
        )
    return tuple(chain)


MAX_ROWS = 40  # a table longer than this is no help to read: the exercise gets none (kit write says why)


def whole_walk(
    steps: tuple[GraphStep, ...], forwards: Mapping[str, str], gradients: Mapping[str, str]
) -> tuple[ChainStep, ...]:
    """The chain table of the whole walk, the rows no answer holds included, with the graph's own numbers: one
    row per (step, input) edge, carrying the gradient that edge sends; and, for a value whose gradient arrives
    along edges from two or more steps (a fork), one more row where its paths add up. A row shows the student's
    value where an answer holds that gradient (an edge into a value used only there: its whole gradient), and
    torch's alone where none does (`asked` False: the student computed it on the way, and the table shows where
    their walk left torch's). Empty when no gradient of the walk is an answer (the table would check nothing),
    or when it would pass MAX_ROWS rows."""
    sources: dict[str, set[str]] = {}
    for step in steps:
        for target in step.inputs:
            sources.setdefault(target, set()).add(step.name)
    chain: list[ChainStep] = []
    for step in steps:  # in backward's order: a fork (a leaf too) once its last path has sent its gradient
        if step.fork and len(sources.get(step.name, ())) > 1:
            chain.append(_sum_row(step, forwards, gradients))
        several = len(set(step.inputs)) > 1
        for target in dict.fromkeys(step.inputs):
            sent = _added([g for t, g in zip(step.inputs, step.gradients, strict=True) if t == target])
            local = _added([v for t, v in zip(step.inputs, step.local, strict=True) if t == target])
            alone = len(sources.get(target, ())) == 1  # the edge carries the target's whole gradient
            answer = gradients.get(target) if alone else None
            chain.append(
                ChainStep(
                    f"{step.node} (to {target})" if several else step.node,
                    f"∂{step.name}/∂{target}",
                    forwards.get(step.name),
                    answer or (f"{target} (from {step.name})" if not alone else target),
                    gradients.get(step.name),
                    asked=answer is not None,
                    torch_gradient=sent,
                    torch_local=local,
                )
            )
    if not any(step.asked for step in chain) or len(chain) > MAX_ROWS:
        return ()
    return tuple(chain)


def _sum_row(step: GraphStep, forwards: Mapping[str, str], gradients: Mapping[str, str]) -> ChainStep:
    """The row where a fork's paths add up: its gradient is the sum of what each use sent back."""
    answer = gradients.get(step.name)
    paths = len({contribution.source for contribution in step.contributions})
    return ChainStep(
        f"{step.name} ({paths} paths add up)",
        "sum of the paths",
        forwards.get(step.name) if step.leaf else None,
        answer or step.name,
        None,
        asked=answer is not None,
        torch_gradient=step.upstream,
        torch_local=None,
    )


def _added(values: list[PlainValue]) -> PlainValue:
    """The sum of one edge's gradients (a step that uses a value twice, `f/2 + 10/f`, sends it twice)."""
    if any(value is None for value in values):
        return None
    if len(values) == 1:
        return values[0]
    import torch

    total = torch.tensor(values[0], dtype=torch.float64)
    for value in values[1:]:
        total = total + torch.tensor(value, dtype=torch.float64)
    plain: PlainValue = total.tolist()
    return plain


# ----------------------------------------------------------------------------- an exercise's declared build


@dataclass(frozen=True)
class Computation:
    """What an exercise's torch build returns for the chain table: the scalar `output`, the named tensors of
    the walk (`names`, symbol -> tensor), and which answers hold which forward value (`forwards`) and which
    gradient (`gradients`), symbol -> answer name (see `chain_from_graph`)."""

    output: Any
    names: Mapping[str, Any]
    forwards: Mapping[str, str] = field(default_factory=dict)
    gradients: Mapping[str, str] = field(default_factory=dict)
    partial: bool = False  # rows whose upstream gradient is no answer are left out, not refused

    def chain(self) -> tuple[ChainStep, ...]:
        return chain_from_graph(
            self.output, self.names, forwards=self.forwards, gradients=self.gradients, partial=self.partial
        )


def computation_from_build(build: Callable[..., Mapping[str, Any]], numbers: Mapping[str, Any]) -> Computation:
    """The `Computation` of a build in the authoring kit's shape (course/authoring/kit.py): `build(**numbers)` makes its
    tensors, calls `backward()` on its output and returns {answer name: tensor}. Read from the run itself: the
    output is the tensor `backward()` was called on (that call is made to keep its graph, as a thread-local torch
    function mode does it, so the walk can run it again); the names are the build's own local variables (its
    last binding of each); an answer is a forward value when it is a named tensor, a gradient when it is a named
    tensor's `.grad`. Raises GraphChainError when the build calls `backward()` other than once."""
    import sys

    import torch
    from torch.overrides import TorchFunctionMode

    outputs: list[Any] = []

    class KeepGraph(TorchFunctionMode):
        def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            kwargs = dict(kwargs or {})
            if func is torch.Tensor.backward:
                outputs.append(args[0])
                kwargs["retain_graph"] = True
            return func(*args, **kwargs)

    found: dict[str, Any] = {}

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "return" and frame.f_code is getattr(build, "__code__", None):
            found.update(frame.f_locals)

    previous = sys.getprofile()
    sys.setprofile(profile)
    try:
        with KeepGraph():
            returned = dict(build(**dict(numbers)))
    finally:
        sys.setprofile(previous)
    if len(outputs) != 1:
        raise NotOneBackward(f"the build called backward() {len(outputs)} times: a chain table walks one output")
    names = {name: value for name, value in found.items() if isinstance(value, torch.Tensor)}
    forwards, gradients = {}, {}
    for answer, value in returned.items():
        for name, tensor in names.items():
            if value is tensor and tensor.grad_fn is not None:
                forwards[name] = answer
            elif value is not None and (tensor.is_leaf or tensor.retains_grad) and value is tensor.grad:
                gradients[name] = answer
    return Computation(outputs[0], names, forwards, gradients, partial=True)


def kit_graphs(exercises: Any) -> dict[str, Build]:
    """`GRAPHS` for the authoring kit's exercises (course/authoring/kit.py: each with `id`, `build` and
    `number_names()`,
    its own names of its numbers -> theirs in the numbers cell's P): the chain table of each read from its build,
    the part of the walk its answers cover (`Computation.partial`). A build that calls backward() other than once
    has no one output to walk: it gives no table (None), and `kit write` says so (`no_table_reason`)."""

    def graph(exercise: Any) -> Build:
        def computation(P: dict[str, Any]) -> Computation | None:
            try:
                return computation_from_build(
                    exercise.build, {own: P[name] for own, name in exercise.number_names().items()}
                )
            except NotOneBackward:
                return None

        return computation

    return {exercise.id: graph(exercise) for exercise in exercises}


def no_table_reason(build: Callable[..., Mapping[str, Any]], numbers: Mapping[str, Any]) -> str | None:
    """Why a kit exercise's build gives no chain table at its own numbers, as a sentence for `kit write` (None
    when it gives one)."""
    try:
        chain = computation_from_build(build, numbers).chain()
    except NotOneBackward as error:
        return f"{error} (call it once, on the output, or write the table by hand: Exercise(chain=...))"
    except Exception as error:  # the instructor's own build: whatever stops the walk is said, never raised
        return f"its graph cannot be walked ({type(error).__name__}: {error})"
    if not chain:
        return (
            f"none of its answers is a gradient its walk reaches, or the walk has more than {MAX_ROWS} rows; "
            "return a leaf's or a retained tensor's .grad as an answer, or write the table by hand "
            "(Exercise(chain=...))"
        )
    return None


# The exercise's numbers (the `P` of its notebook) -> its build's Computation, or None: this build gives no table.
Build = Callable[[dict[str, Any]], Computation | None]


def derived_chain(content: Content, question: str, numbers: dict[str, Any]) -> tuple[ChainStep, ...]:
    """The chain table of `question` read from its build in the exercises module (`GRAPHS`) with `numbers`.
    Raises GraphChainError naming the file and the question."""
    where = f"{content.path or EXERCISES_FILE}: GRAPHS[{question!r}]"
    try:
        computation = content.graphs[question](dict(numbers))
        if computation is None:  # a build that gives no table (kit_graphs: backward() called other than once)
            return ()
        if not isinstance(computation, Computation):
            raise GraphChainError(
                f"it returned {type(computation).__name__}, not a course.pipeline.graph_chain.Computation"
            )
        return computation.chain()
    except GraphChainError as error:
        raise GraphChainError(f"{where}: {error}") from None
    except Exception as error:
        raise GraphChainError(f"{where}: the build fails with these numbers: {type(error).__name__}: {error}") from None


def to_derive(content: Content) -> list[str]:
    """The questions whose chain table comes from their graph: a build and no hand-written table (it overrides)."""
    return [question for question in content.graphs if question not in content.chains]


def check_graphs(content: Content, answers: Mapping[str, tuple[str, ...]], numbers: dict[str, Any]) -> None:
    """At load, with the notebook's own numbers: every build names a question (`answers`: question id -> its
    answer names), gives a chain table, and that table names only the question's own answers. Raises
    GraphChainError (a SourceNotebookError) saying where and what to do."""
    for question in content.graphs:
        if question not in answers:
            raise GraphChainError(
                f"{content.path or EXERCISES_FILE}: GRAPHS names {question!r}, which is no "
                f"question of the notebook (its questions: {', '.join(answers)})"
            )
    for question in to_derive(content):
        chain = derived_chain(content, question, numbers)
        named = {
            name
            for step in chain
            for name in (step.forward, step.gradient if step.asked else None, step.upstream)
            if name
        }
        foreign = sorted(named - set(answers[question]))
        if foreign:
            raise GraphChainError(
                f"{content.path or EXERCISES_FILE}: GRAPHS[{question!r}] names "
                f"{', '.join(map(repr, foreign))}, which {'is' if len(foreign) == 1 else 'are'} no "
                f"answer of {question!r}: map each value to one of {', '.join(answers[question])}"
            )


# Derived tables by (exercises file, question, numbers): a submission's table is the same as the last one's with the
# same numbers (without variants, every student's), so the build and its walk run once, not once a submission.
# Bounded: at most CACHE_SIZE entries, the least recently used dropped first. A build's own time is not bounded
# here: it is the instructor's code, run in the trusted grader (never on anything of a student's but the numbers
# derive(rng) gives, which the module's constraints check), and it is checked at load with the notebook's
# numbers (check_graphs), which is where a slow or failing build shows; its graph is held to MAX_NODES.
CACHE_SIZE = 512
_cache: OrderedDict[tuple[str, str, tuple[tuple[str, Any], ...]], tuple[Any, tuple[ChainStep, ...] | None]] = (
    OrderedDict()
)
_cache_lock = threading.Lock()  # the service grades in threads


def _cached_chain(content: Content, question: str, numbers: dict[str, Any]) -> tuple[ChainStep, ...] | None:
    """derived_chain, once per (file, question, numbers); None where the build failed with these numbers."""
    build = content.graphs[question]
    try:
        key = (str(content.path), question, tuple(sorted(numbers.items())))
        hash(key)
    except TypeError:  # numbers that are no plain values cannot key the cache
        key = None
    if key is not None:
        with _cache_lock:
            hit = _cache.get(key)
            if hit is not None and hit[0] is build:  # the same module loaded, not one reloaded since
                _cache.move_to_end(key)
                return hit[1]
    try:
        chain: tuple[ChainStep, ...] | None = derived_chain(content, question, numbers)
    except GraphChainError:
        chain = None
    if key is not None:
        with _cache_lock:
            _cache[key] = (build, chain)  # the build is kept with its table: its id is never another's
            _cache.move_to_end(key)
            while len(_cache) > CACHE_SIZE:
                _cache.popitem(last=False)
    return chain


def with_derived_chains(content: Content, numbers: dict[str, Any] | None) -> Content:
    """`content` with the chain tables read from the graphs (with this student's numbers) beside the hand-written
    ones. Never raises: the builds were checked with the notebook's numbers at load (`check_graphs`), and a
    build that fails with other numbers costs its question the table, never the student anything."""
    questions = to_derive(content)
    if not questions or numbers is None:
        return content
    chains = dict(content.chains)
    for question in questions:
        chain = _cached_chain(content, question, numbers)
        if chain:
            chains[question] = chain
    return replace(content, chains=chains)

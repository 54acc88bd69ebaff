"""Mutations of a backward pass: one change at a time to what torch's graph sends back (issue 43, the slip search).

A mutation is a hook on torch's graph (`Node.register_hook`, `register_prehook` on a leaf's AccumulateGrad), placed
by position: `graph_chain.graph_nodes` lists a graph's nodes in a fixed order, and a graph's structure (each node's
class and its inputs' positions) is its signature, so the same mutation lands on the same node in every run, at
every `backward()` whose graph has that signature (a slip a student makes at every step of a loop, they make at
each). `mutating(run)` is the thread-local torch function mode under which a computation runs: it records each
computed tensor's forward value and routes every backward pass of one output (`Tensor.backward`,
`torch.autograd.backward`, `torch.autograd.grad`) through `run`, which installs the mutation's hooks for that one
pass and removes them after.

The mutations, in the order they are tried (the first match names the slip). First the slips of a graph's
structure, which the exercises are built around and each name in their text (a ReLU's gate, .grad accumulating, a
fork's paths adding up); then the slips of one edge, from the smallest change to the largest; within a kind,
nearest the output first. Two kinds can give the same value (at a fork whose paths send g and 2g, keeping the 2g
path alone and flipping the sign of the g path both give g): the earlier kind names it.

1. `gate_ignored`: at a ReLU node (or one of its leaky variants), the gradient passed through as if its slope were 1;
2. `accumulation_off` (only where one `.grad` is accumulated into by two or more `backward()` calls): each
   `backward()` replacing `.grad`; `zero_()`/`zero_grad()` ignored; the first gradient counted twice; left out;
3. `one_branch`: at a value used twice or more (a fork), only one use's gradient kept (each use tried);
4. `dropped_local`: one local derivative taken as 1 (not tried where it is ±1 already: an addition, a
   subtraction, a negation; at a ReLU it is `gate_ignored`, at a division by a whole number `sum_for_mean`);
5. `sign_flipped`: the gradient sent along one edge negated;
6. `sum_for_mean`: a mean's gradient not divided by its count, a sum's divided by it, a division by a whole
   number n >= 2 (a mean written by hand) left out;
7. `forward_for_slope`: one local derivative replaced by the node's forward value, then by the input's own value.

Structural nodes (indexing, views, copies) carry no slope a student computes and get no mutation.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from course.pipeline.slips import (
    ACCUMULATION_OFF,
    DROPPED_LOCAL,
    FORWARD_FOR_SLOPE,
    GATE_IGNORED,
    ONE_BRANCH,
    SIGN_FLIPPED,
    SUM_FOR_MEAN,
)

# Not a slip: the gradient arriving at a graph's output made NaN, to see which answers that graph's backward passes
# reach (the slip search tries a graph's mutations only for those).
PROBE = "probe"
ORDER = (GATE_IGNORED, ACCUMULATION_OFF, ONE_BRANCH, DROPPED_LOCAL, SIGN_FLIPPED, SUM_FOR_MEAN, FORWARD_FOR_SLOPE)
# Nodes that move values about rather than compute them: no slope of theirs is a student's.
STRUCTURAL = frozenset(
    {
        "AccumulateGrad",
        "Select",
        "Unbind",
        "Split",
        "SplitWithSizes",
        "View",
        "Reshape",
        "ReshapeAlias",
        "UnsafeView",
        "Expand",
        "Squeeze",
        "Unsqueeze",
        "Clone",
        "Slice",
        "Index",
        "Cat",
        "Stack",
        "Permute",
        "T",
        "Transpose",
        "ToCopy",
        "Alias",
        "Copy",
        "CopySlices",
        "AsStrided",
    }
)
INDEXING = frozenset({"Select", "Unbind", "Split", "SplitWithSizes", "Slice", "Index"})  # parts, not copies
UNIT_SLOPE = frozenset({"Add", "Sub", "Neg", "Rsub"})  # local derivatives ±1: nothing to drop or to confuse
ACCUMULATIONS = {
    "overwrite": "each backward() replaced .grad instead of adding to it",
    "zeroing_ignored": "the gradients piled up where .grad was emptied (zero_() or zero_grad() ignored)",
    "one_more": "one backward() too many: the first gradient counted twice",
    "one_fewer": "one backward() too few: the first gradient left out",
}


@dataclass(frozen=True)
class Mutation:
    """One change of the backward pass: its `kind` (a key of SLIP_KINDS), the graph it lands on (`signature`; None
    for the accumulation ones, which act on every leaf's .grad), the node (`node`, its position in
    `graph_nodes`' order) and input `slot` (for `one_branch`, the one use of the fork kept), and a `variant`
    (`forward_for_slope`: "output" or "input"; `accumulation_off`: a key of ACCUMULATIONS)."""

    kind: str
    signature: tuple[Any, ...] | None
    node: int = -1
    slot: int = -1
    variant: str = ""


@dataclass
class Graph:
    """One backward() call's graph: its nodes in graph_nodes' order, each node's operation and inputs' positions."""

    nodes: list[Any]
    kinds: tuple[str, ...]
    children: tuple[tuple[int | None, ...], ...]
    divisors: dict[int, float]  # position -> n, for a division by a whole number n >= 2 (read before backward frees it)

    @property
    def signature(self) -> tuple[Any, ...]:
        return tuple(zip((type(node).__name__ for node in self.nodes), self.children, strict=True))


def graph_of(output: Any) -> Graph:
    from course.pipeline.graph_chain import graph_nodes, operation_kind

    nodes = graph_nodes(output)
    position = {id(node): index for index, node in enumerate(nodes)}
    children = tuple(
        tuple(None if child is None else position[id(child)] for child, _ in node.next_functions) for node in nodes
    )
    kinds = tuple(operation_kind(node) for node in nodes)
    divisors = {index: _constant_divisor(node) for index, node in enumerate(nodes) if kinds[index] == "Div"}
    return Graph(nodes, kinds, children, {index: n for index, n in divisors.items() if n is not None})


def _constant_divisor(node: Any) -> float | None:
    """n for a division by a whole number n >= 2 that needs no gradient (a mean written by hand), else None."""
    if len(node.next_functions) > 1 and node.next_functions[1][0] is not None:
        return None
    other: Any = getattr(node, "_saved_other", None)
    value = other.item() if hasattr(other, "numel") and other.numel() == 1 else other
    if isinstance(value, int | float) and value >= 2 and float(value).is_integer():
        return float(value)
    return None


def forks(graph: Graph) -> list[tuple[int, list[tuple[int, int]]]]:
    """Each node used twice or more, with its uses (parent position, slot), uses by an indexing node left out."""
    uses: dict[int, list[tuple[int, int]]] = {}
    for parent, children in enumerate(graph.children):
        for slot, child in enumerate(children):
            if child is not None:
                uses.setdefault(child, []).append((parent, slot))
    return [
        (child, edges)
        for child, edges in sorted(uses.items())
        if len(edges) > 1 and not any(graph.kinds[parent] in INDEXING for parent, _ in edges)
    ]


def mutations_of(graphs: list[Graph], accumulating: bool) -> list[Mutation]:
    """Every mutation of these graphs (one per signature), in the order they are tried (ORDER, then position)."""
    found: dict[str, list[Mutation]] = {kind: [] for kind in ORDER}
    for graph in graphs:
        signature = graph.signature
        for position, kind in enumerate(graph.kinds):
            if kind in STRUCTURAL:
                continue
            for slot, child in enumerate(graph.children[position]):
                if child is None:
                    continue
                at = Mutation(DROPPED_LOCAL, signature, position, slot)
                if kind.endswith("Relu"):
                    found[GATE_IGNORED].append(Mutation(GATE_IGNORED, signature, position, slot))
                elif kind in ("Mean", "Sum") or (kind == "Div" and slot == 0 and position in graph.divisors):
                    found[SUM_FOR_MEAN].append(Mutation(SUM_FOR_MEAN, signature, position, slot))
                elif kind not in UNIT_SLOPE:
                    found[DROPPED_LOCAL].append(at)
                found[SIGN_FLIPPED].append(Mutation(SIGN_FLIPPED, signature, position, slot))
                if kind not in UNIT_SLOPE and kind not in ("Mean", "Sum"):
                    for variant in ("output", "input"):
                        found[FORWARD_FOR_SLOPE].append(Mutation(FORWARD_FOR_SLOPE, signature, position, slot, variant))
        for child, edges in forks(graph):
            found[ONE_BRANCH] += [Mutation(ONE_BRANCH, signature, child, kept) for kept in range(len(edges))]
    if accumulating:
        found[ACCUMULATION_OFF] = [Mutation(ACCUMULATION_OFF, None, variant=variant) for variant in ACCUMULATIONS]
    return [mutation for kind in ORDER for mutation in found[kind]]


def _fit(tensor: Any, like: Any) -> Any:
    """`tensor` in `like`'s shape (broadcast, or summed down to it), or None when it cannot be."""
    if tensor.shape == like.shape:
        return tensor
    try:
        return tensor.expand(like.shape).clone()
    except RuntimeError:
        pass
    try:
        return tensor.sum_to_size(like.shape)
    except RuntimeError:
        return None


class MutatedRun:
    """One run of a computation under (at most) one mutation: records each computed tensor's forward value by its
    node, and installs the mutation's hooks at each backward pass whose graph it fits."""

    def __init__(self, mutation: Mutation | None) -> None:
        self.mutation = mutation
        self.graphs: list[Graph] = []
        self.forwards: dict[int, tuple[Any, Any]] = {}  # id(node) -> (node, its output, detached)
        self.accumulated: dict[int, tuple[Any, int]] = {}  # id(leaf) -> (leaf, backward passes reaching it)
        self.grads: dict[int, tuple[Any, Any]] = {}  # id(leaf) -> (leaf, its .grad after the last pass)
        self.seen: dict[int, Any] = {}  # leaves whose first gradient arrived (one_more, one_fewer)

    @property
    def accumulating(self) -> bool:
        return any(count > 1 for _, count in self.accumulated.values())

    def record(self, result: Any) -> None:
        grad_fn = getattr(result, "grad_fn", None)
        if grad_fn is not None:
            self.forwards[id(grad_fn)] = (grad_fn, result.detach())

    def is_grad(self, tensor: Any) -> bool:
        return any(grad is tensor for _, grad in self.grads.values())

    def backward(self, output: Any, run: Callable[[], Any]) -> Any:
        """`run()` (one backward pass of `output`'s graph) with the mutation's hooks in place."""
        graph = graph_of(output)
        self.graphs.append(graph)
        handles = self._install(graph)
        try:
            return run()
        finally:
            for handle in handles:
                handle.remove()
            for node in graph.nodes:
                if type(node).__name__ == "AccumulateGrad":
                    leaf = node.variable
                    self.accumulated[id(leaf)] = (leaf, self.accumulated.get(id(leaf), (leaf, 0))[1] + 1)
                    self.grads[id(leaf)] = (leaf, leaf.grad)

    def _install(self, graph: Graph) -> list[Any]:
        mutation = self.mutation
        if mutation is None:
            return []
        if mutation.kind == PROBE:
            if mutation.signature != graph.signature:
                return []
            return [graph.nodes[0].register_prehook(_poisoning)]
        if mutation.kind == ACCUMULATION_OFF:
            leaves = [node for node in graph.nodes if type(node).__name__ == "AccumulateGrad"]
            return [leaf.register_prehook(self._accumulation(leaf, mutation.variant)) for leaf in leaves]
        if mutation.signature != graph.signature:
            return []
        if mutation.kind == ONE_BRANCH:
            edges = dict(forks(graph))[mutation.node]
            dropped: dict[int, list[int]] = {}
            for index, (parent, slot) in enumerate(edges):
                if index != mutation.slot:
                    dropped.setdefault(parent, []).append(slot)
            return [graph.nodes[parent].register_hook(_zeroing(slots)) for parent, slots in dropped.items()]
        node = graph.nodes[mutation.node]
        return [node.register_hook(self._edge(node, graph, mutation))]

    def _value(self, node: Any) -> Any:
        """A node's forward value: a leaf's own, else as recorded when it was computed, else the result torch saved
        for its backward (a node made inside one call, as `1 / t` makes its reciprocal); None if none of these."""
        if node is None:
            return None
        if type(node).__name__ == "AccumulateGrad":
            return node.variable.detach()
        found = self.forwards.get(id(node))
        if found is not None:
            return found[1]
        try:
            saved = getattr(node, "_saved_result", None)
        except RuntimeError:  # freed by an earlier backward
            return None
        return saved.detach() if saved is not None and hasattr(saved, "detach") else None

    def _edge(self, node: Any, graph: Graph, mutation: Mutation) -> Callable[..., Any]:
        slot, kind = mutation.slot, mutation.kind
        forward = None
        if kind == FORWARD_FOR_SLOPE:  # read now: backward frees what the nodes saved as it goes
            forward = self._value(node if mutation.variant == "output" else node.next_functions[slot][0])

        def changed(sent: Any, received: Any) -> Any:
            if kind in (DROPPED_LOCAL, GATE_IGNORED):
                return _fit(received, sent)
            if kind == SIGN_FLIPPED:
                return -sent
            if kind == SUM_FOR_MEAN:
                operation = graph.kinds[mutation.node]
                if operation == "Div":
                    return sent * graph.divisors.get(mutation.node, 1.0)
                count = sent.numel() / max(received.numel(), 1)
                return sent * count if operation == "Mean" else sent / count
            return None if forward is None else _fit(received * forward, sent)

        def hook(grad_inputs: tuple[Any, ...], grad_outputs: tuple[Any, ...]) -> tuple[Any, ...] | None:
            sent = grad_inputs[slot] if slot < len(grad_inputs) else None
            received = grad_outputs[0] if grad_outputs else None
            if sent is None or received is None:
                return None
            new = changed(sent, received)
            if new is None:
                return None
            return tuple(new if index == slot else grad for index, grad in enumerate(grad_inputs))

        return hook

    def _accumulation(self, node: Any, variant: str) -> Callable[..., Any]:
        leaf = node.variable

        def prehook(grad_outputs: tuple[Any, ...]) -> tuple[Any, ...] | None:
            first = id(leaf) not in self.seen
            self.seen[id(leaf)] = leaf  # held, so that no later leaf takes its id
            if variant == "overwrite":
                leaf.grad = None
            elif variant == "zeroing_ignored" and leaf.grad is None and id(leaf) in self.grads:
                leaf.grad = self.grads[id(leaf)][1]  # what zero_grad() set to None, kept
            elif variant == "one_more" and first:
                return tuple(None if grad is None else grad * 2 for grad in grad_outputs)
            elif variant == "one_fewer" and first:
                return tuple(None if grad is None else grad * 0 for grad in grad_outputs)
            return None

        return prehook

    def skip_zeroing(self, tensor: Any) -> bool:
        """`zero_()` on a leaf's .grad, under the mutation that ignores zeroing."""
        mutation = self.mutation
        return mutation is not None and mutation.variant == "zeroing_ignored" and self.is_grad(tensor)


def _poisoning(grad_outputs: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(None if grad is None else grad * float("nan") for grad in grad_outputs)


def _zeroing(slots: list[int]) -> Callable[..., Any]:
    def hook(grad_inputs: tuple[Any, ...], grad_outputs: tuple[Any, ...]) -> tuple[Any, ...]:
        return tuple(
            grad * 0 if index in slots and grad is not None else grad for index, grad in enumerate(grad_inputs)
        )

    return hook


def mutating(run: MutatedRun) -> Any:
    """A torch function mode (thread-local) that records forward values and routes backward() through `run`."""
    import torch
    from torch.overrides import TorchFunctionMode

    class Mutating(TorchFunctionMode):
        def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            kwargs = dict(kwargs or {})
            if func is torch.Tensor.backward and args:
                return run.backward(args[0], lambda: func(*args, **kwargs))  # type: ignore[no-untyped-call]
            if func in (torch.autograd.backward, torch.autograd.grad) and args:
                outputs = args[0] if isinstance(args[0], list | tuple) and len(args[0]) == 1 else (args[0],)
                if isinstance(outputs[0], torch.Tensor) and outputs[0].grad_fn is not None:
                    return run.backward(outputs[0], lambda: func(*args, **kwargs))
            if func is torch.Tensor.zero_ and args and run.skip_zeroing(args[0]):
                return args[0]
            result = func(*args, **kwargs)
            if isinstance(result, torch.Tensor):
                run.record(result)
            return result

    return Mutating()

"""The slip search: which one mistake in a backward pass turns torch's value into a wrong one (issue 43).

The grader re-runs a question's own torch computation with ONE mutation of the backward pass installed at a time,
and names the first mutation whose result matches the wrong value within the grading tolerance. The computation
is the question's `GRAPHS` build (course/pipeline/graph_chain.py; the authoring kit's builds are there through
`kit_graphs`) for the gradients it names, else the question's hidden-test cell itself, run as the judge records
it (`judge.recorded_references`), with every `backward()` it calls intercepted. No exercise needs code of its own.

The mutations and the order they are tried in (the first match names the slip): course/pipeline/mutations.py.
Where a cell's backward passes have graphs of several shapes, a probe per shape (NaN sent into its passes) says
which answers each reaches, and an answer is searched with its own shapes' mutations only.

A value that matches torch's unmutated result is never a slip, nor is a mutation whose result is torch's. Bounded
per explain call by `max_mutations` (the tail of the order is left out) and a time budget on the mutations' runs (a
safety net: the course's exercises take milliseconds a mutation; a search stopped by it says "unexplained" and
resumes where it stopped on the next call); the mutations' results are cached per (question, numbers). A build or
cell that raises costs only its explanation. Everything runs in the trusted grader, on grader-chosen numbers; a
student's value is only compared.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from course.core.answers import PlainValue
from course.forms import matches
from course.pipeline.assignment import Assignment, Question
from course.pipeline.mutations import (
    ACCUMULATIONS,
    PROBE,
    Graph,
    MutatedRun,
    Mutation,
    forks,
    graph_of,
    mutating,
    mutations_of,
)
from course.pipeline.slips import (
    ACCUMULATION_OFF,
    DROPPED_LOCAL,
    FORWARD_FOR_SLOPE,
    GATE_IGNORED,
    ONE_BRANCH,
    SIGN_FLIPPED,
    SLIP_KINDS,
    SUM_FOR_MEAN,
    Slip,
)

MAX_MUTATIONS = 400  # per (question, numbers): micrograd's expression, the largest graph of the course, needs ~150
BUDGET_SECONDS = 5.0  # per explain call; the course's tables take well under a second even on a loaded machine
CACHE_SIZE = 256  # (question, numbers) tables kept, least recently used dropped first

MAX_EXPRESSION = 48  # characters of an unnamed node's expression in a sentence; past them, its operation's name
WORDS = {"Add": "+", "Sub": "−", "Rsub": "−", "Mul": "×", "Div": "÷", "Pow": "power", "Neg": "negation"}


@dataclass(frozen=True)
class Found:
    """A slip the search found: the slip, the mutation that made it and the value it gives the answer."""

    slip: Slip
    mutation: Mutation
    value: PlainValue


@dataclass
class SearchStats:
    """What the search has cost so far: explain calls, those explained, mutations run (each one re-run of the
    computation), tables built, seconds spent, calls stopped by the time budget, computations that raised."""

    calls: int = 0
    explained: int = 0
    mutations_run: int = 0
    tables: int = 0
    seconds: float = 0.0
    budget_stops: int = 0
    errors: int = 0


# ----------------------------------------------------------------------------- the two computations


class NoGraph(Exception):
    """A `GRAPHS` build that gives no graph to search (None, or no gradient among its answers)."""


class _Computation:
    """A question's computation, run under one mutation at a time: `run(mutation)` -> {answer: value}."""

    graphs: list[Graph]
    names: dict[int, str]  # id(node or tensor) -> the symbol of the value it makes
    accumulating: bool = False

    def run(self, mutation: Mutation | None) -> dict[str, PlainValue]:
        raise NotImplementedError


class GraphBuild(_Computation):
    """A `GRAPHS` build: built once; each mutation is one more `torch.autograd.grad` over its kept graph, for the
    gradients it names as answers (and its forward values, the same under every mutation)."""

    def __init__(self, build: Callable[[dict[str, Any]], Any], numbers: dict[str, Any]) -> None:
        self.recording = MutatedRun(None)
        with mutating(self.recording):
            computation = build(dict(numbers))
        if computation is None or not getattr(computation, "gradients", None):
            raise NoGraph("the build gives no graph to search (a kit build calling backward() other than once)")
        self.computation = computation
        self.graphs = [graph_of(computation.output)]
        self.names = _names(computation.names)
        from course.pipeline.judge import to_plain

        # Its forward values, which no mutation of the backward pass changes: a draft rule may name them.
        self.forwards_seen = {
            answer: to_plain(computation.names[symbol])
            for symbol, answer in computation.forwards.items()
            if symbol in computation.names
        }

    def run(self, mutation: Mutation | None) -> dict[str, PlainValue]:
        import torch

        from course.pipeline.judge import to_plain

        symbols = list(self.computation.gradients)
        inputs = [self.computation.names[symbol] for symbol in symbols]
        run = MutatedRun(mutation)
        run.forwards = self.recording.forwards
        output = self.computation.output
        grads = run.backward(output, lambda: torch.autograd.grad(output, inputs, retain_graph=True, allow_unused=True))
        gradients = {
            self.computation.gradients[symbol]: to_plain(grad)
            for symbol, grad in zip(symbols, grads, strict=True)
            if grad is not None
        }
        return {**self.forwards_seen, **gradients}


class _HiddenCell(_Computation):
    """A question's hidden-test cell, run whole under each mutation (every backward() it calls intercepted); its
    answers are what it hands `marks.value`."""

    def __init__(self, question: Question, numbers: dict[str, Any]) -> None:
        self.question, self.numbers = question, numbers
        run = MutatedRun(None)
        references, error, namespace = self._execute(run)
        if error is not None:
            raise RuntimeError(error)
        self.reference = references
        self.graphs = run.graphs
        self.accumulating = run.accumulating
        self.names = _names(namespace)
        self.kept = [value for value in namespace.values() if id(value) in self.names]  # their ids stay theirs

    def _execute(self, run: MutatedRun) -> tuple[dict[str, PlainValue], str | None, dict[str, Any]]:
        from course.pipeline.judge import recorded_references

        with mutating(run):
            return recorded_references(self.question, dict(self.numbers))

    def run(self, mutation: Mutation | None) -> dict[str, PlainValue]:
        if mutation is None:
            return self.reference
        references, error, _ = self._execute(MutatedRun(mutation))
        return {} if error is not None else references


def _names(named: Mapping[str, Any]) -> dict[int, str]:
    """id -> symbol, for the tensors a build or cell binds by name: each tensor by its own id (a leaf is found
    by its AccumulateGrad's variable, a constant operand by the tensor torch saved) and a computed one by its
    node's too."""
    import torch

    found: dict[int, str] = {}
    for symbol, value in named.items():
        if isinstance(value, torch.Tensor) and not symbol.startswith("_"):
            found.setdefault(id(value), symbol)
            if value.grad_fn is not None:
                found.setdefault(id(value.grad_fn), symbol)
    return found


# ----------------------------------------------------------------------------- words


def _symbol(node: Any, names: dict[int, str]) -> str | None:
    if type(node).__name__ == "AccumulateGrad":
        return names.get(id(node.variable))
    return names.get(id(node))


def _operation_words(kind: str) -> str:
    if kind.endswith("Relu"):
        return kind.removesuffix("Relu") + "ReLU"
    return {"Sigmoid": "σ"}.get(kind, WORDS.get(kind, kind.lower()))


def _node_text(graph: Graph, position: int, names: dict[int, str]) -> str:
    """A node as the sentence names it: its symbol, else its expression (graph_chain writes it as the walk does,
    `w·x`, in brackets when it has spaces), else its operation ("the × node")."""
    from course.pipeline.graph_chain import node_expression

    symbol = _symbol(graph.nodes[position], names)
    if symbol:
        return symbol
    named = {id(node): found for node in graph.nodes if (found := _symbol(node, names))}
    try:
        text = node_expression(graph.nodes[position], named, names)
    except Exception:  # words only: whatever stops the expression leaves the operation's name
        text = ""
    if text and len(text) <= MAX_EXPRESSION:
        return text if _one_term(text) else f"({text})"
    return f"the {_operation_words(graph.kinds[position])} node"


def _one_term(text: str) -> bool:
    """A name, or a call whose brackets close at its end (`ReLU(b + a)`): no brackets needed around it."""
    if re.fullmatch(r"\w+", text):  # not str.isidentifier: "w·x" is one (the middle dot may continue a name)
        return True
    opening = text.find("(")
    if opening <= 0 or not re.fullmatch(r"\w+", text[:opening]) or not text.endswith(")"):
        return False
    depth = 0
    for index, character in enumerate(text[opening:], opening):
        depth += {"(": 1, ")": -1}.get(character, 0)
        if depth == 0:
            return index == len(text) - 1
    return False


def _times(count: int) -> str:
    return {2: "twice", 3: "three times"}.get(count, f"{count} times")


def _mean_words(graph: Graph, position: int, node_text: str) -> str:
    operation = graph.kinds[position]
    if operation == "Div":
        count = f"{graph.divisors.get(position, 0):g}"
        return f"the division by {count} (a mean over {count}) left out at {node_text}"
    if operation == "Mean":
        return f"the mean's division by its count left out at {node_text}"
    return f"a sum's gradient divided by its count at {node_text} (a mean taken for a sum)"


def describe(mutation: Mutation, computation: _Computation) -> Slip:
    """The mutation as a Slip: where (∂h/∂w, the values by their names or expressions), and the sentence a summary
    shows."""
    if mutation.kind == ACCUMULATION_OFF:
        return Slip(mutation.kind, ".grad", f"{SLIP_KINDS[mutation.kind]}: {ACCUMULATIONS[mutation.variant]}")
    graph = next(graph for graph in computation.graphs if graph.signature == mutation.signature)
    names = computation.names
    node_text = _node_text(graph, mutation.node, names)
    if mutation.kind == ONE_BRANCH:
        edges = dict(forks(graph))[mutation.node]
        kept = _node_text(graph, edges[mutation.slot][0], names)
        detail = f"{node_text} is used {_times(len(edges))}, and only the gradient back from {kept} was kept"
        return Slip(mutation.kind, f"the fork at {node_text}", f"{SLIP_KINDS[mutation.kind]}: {detail} (they add up)")
    child = graph.children[mutation.node][mutation.slot]
    input_text = _node_text(graph, child, names) if child is not None else f"input {mutation.slot + 1}"
    worded = any(text.startswith(("the ", "input ")) for text in (node_text, input_text))
    where = f"{node_text}'s slope towards {input_text}" if worded else f"∂{node_text}/∂{input_text}"
    operation = graph.kinds[mutation.node]
    if mutation.kind == SUM_FOR_MEAN:
        count = f"{graph.divisors.get(mutation.node, 0):g}"
        where = {"Div": f"the division by {count}", "Mean": "the mean"}.get(operation, "the sum")
    gate = f"{node_text} = {_operation_words(operation)}({input_text})" if node_text.isidentifier() else node_text
    details = {
        GATE_IGNORED: f"at {gate}, its slope taken as 1",
        DROPPED_LOCAL: f"{where} taken as 1",
        SIGN_FLIPPED: f"{where} taken with the wrong sign",
        SUM_FOR_MEAN: _mean_words(graph, mutation.node, node_text),
        FORWARD_FOR_SLOPE: (
            f"{node_text}'s forward value used for {where}"
            if mutation.variant == "output"
            else f"{input_text}'s own value used for {where}"
        ),
    }
    return Slip(mutation.kind, where, f"{SLIP_KINDS[mutation.kind]}, {details[mutation.kind]}")


# ----------------------------------------------------------------------------- the search


@dataclass
class Table:
    """One computation of a question at one set of numbers: torch's values, the mutations to try (capped) and the
    results of those tried so far. `error`: why the computation could not run (then nothing is tried). Where the
    computation has several graphs (a cell's backward passes of different shapes), `reaches` says which answers
    each graph's backward passes reach (a probe run: NaN arriving at its output), so that an answer is searched
    with the mutations of its own graphs only (None: unknown, every answer)."""

    computation: _Computation | None
    reference: dict[str, PlainValue] = field(default_factory=dict)
    mutations: list[Mutation] = field(default_factory=list)
    results: dict[int, dict[str, PlainValue]] = field(default_factory=dict)  # by the mutation's index
    reaches: dict[Any, frozenset[str] | None] = field(default_factory=dict)  # signature -> answers it reaches
    error: str | None = None

    @property
    def signatures(self) -> set[Any]:
        return {mutation.signature for mutation in self.mutations if mutation.signature is not None}


ORIGINS = ("graph", "cell")  # a question's GRAPHS build first (its gradients), then its hidden-test cell


class SlipSearch:
    """An Explainer (course/term/item_analysis.py) for one assignment: `search(question, answer, numbers, value)`
    is the Slip that turns torch's value of `answer` at `numbers` into `value`, or None (unexplained: a right
    value, no match among the mutations tried, a computation that raised, or the time budget spent). `find` says
    the same with the mutation and the value it gives; `stats` what the search has cost."""

    def __init__(
        self,
        assignment: Assignment,
        *,
        tolerance: float,
        max_mutations: int = MAX_MUTATIONS,
        budget_seconds: float = BUDGET_SECONDS,
        cache_size: int = CACHE_SIZE,
    ) -> None:
        self.assignment, self.tolerance = assignment, tolerance
        self.max_mutations, self.budget_seconds, self.cache_size = max_mutations, budget_seconds, cache_size
        self.questions = {question.id: question for question in assignment.questions}
        self.stats = SearchStats()
        self._sources: OrderedDict[tuple[str, str, str], Table] = OrderedDict()
        self._lock = threading.Lock()  # the service may ask from several threads; one search runs at a time

    def __call__(self, question: str, answer: str, numbers: Mapping[str, Any], value: PlainValue) -> Slip | None:
        found = self.find(question, answer, numbers, value)
        return None if found is None else found.slip

    def find(self, question: str, answer: str, numbers: Mapping[str, Any], value: PlainValue) -> Found | None:
        with self._lock:
            started = time.monotonic()
            self.stats.calls += 1
            try:
                found = self._find(question, answer, dict(numbers), value)
            finally:
                self.stats.seconds += time.monotonic() - started
            self.stats.explained += found is not None
            return found

    def source(self, question: str, answer: str, numbers: Mapping[str, Any]) -> Table | None:
        """The computation whose values hold `answer` at `numbers` (with torch's `reference`), None if none."""
        with self._lock:
            for origin in ORIGINS:
                found = self._source(question, origin, dict(numbers))
                if found is not None and found.error is None and answer in found.reference:
                    return found
            return None

    def result(self, source: Table, mutation: Mutation) -> dict[str, PlainValue]:
        """What `mutation` gives each answer of `source`'s computation (run now when it was not tried yet)."""
        with self._lock:
            if mutation in source.mutations:
                index = source.mutations.index(mutation)
                if index not in source.results:
                    source.results[index] = self._run(source, mutation)
                return source.results[index]
            return self._run(source, mutation)

    def _find(self, question: str, answer: str, numbers: dict[str, Any], value: PlainValue) -> Found | None:
        deadline: float | None = None  # the budget bounds the mutations' runs, not the one run grading makes too
        for origin in ORIGINS:
            source = self._source(question, origin, numbers)
            if source is None or source.error is not None or answer not in source.reference:
                continue
            reference = source.reference[answer]
            if _same(value, reference, self.tolerance):
                return None  # a right answer is never a slip
            several = len(source.signatures) > 1
            for index, mutation in enumerate(source.mutations):
                if index not in source.results or (several and mutation.signature not in source.reaches):
                    deadline = deadline or time.monotonic() + self.budget_seconds
                    if time.monotonic() > deadline:
                        self.stats.budget_stops += 1
                        return None
                if several and not self._reaches(source, mutation.signature, answer):
                    continue  # a backward pass that does not reach this answer
                if index not in source.results:
                    source.results[index] = self._run(source, mutation)
                results = source.results[index]
                if answer not in results or matches(results[answer], reference, self.tolerance):
                    continue  # this mutation leaves the answer as torch has it
                if _same(value, results[answer], self.tolerance) and source.computation is not None:
                    return Found(describe(mutation, source.computation), mutation, results[answer])
            return None
        return None

    def _reaches(self, source: Table, signature: Any, answer: str) -> bool:
        """Whether the backward passes of the graph `signature` reach `answer` (None, for .grad's accumulation: yes)."""
        if signature is None:
            return True
        if signature not in source.reaches:
            results = self._run(source, Mutation(PROBE, signature))
            reached = {name for name, value in source.reference.items() if name in results}
            source.reaches[signature] = (
                frozenset(name for name in reached if not _same(results[name], source.reference[name], 0.0))
                if results and reached == set(source.reference)
                else None  # the probe run failed, or lost answers: every answer, to be safe
            )
        found = source.reaches[signature]
        return found is None or answer in found

    def _run(self, source: Table, mutation: Mutation) -> dict[str, PlainValue]:
        import warnings

        self.stats.mutations_run += 1
        if source.computation is None:
            return {}
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return source.computation.run(mutation)
        except Exception:  # the instructor's build under a mutation it was not written for: this mutation only
            return {}

    def _source(self, question: str, origin: str, numbers: dict[str, Any]) -> Table | None:
        found = self.questions.get(question)
        if found is None or (origin == "graph" and question not in self.assignment.content.graphs):
            return None
        try:
            key: tuple[str, str, str] | None = (question, origin, json.dumps(numbers, sort_keys=True))
        except (TypeError, ValueError):
            key = None  # numbers that are no plain data are not cached
        if key is not None and key in self._sources:
            self._sources.move_to_end(key)
            return self._sources[key]
        source = self._build(found, origin, numbers)
        if key is not None:
            self._sources[key] = source
            while len(self._sources) > self.cache_size:
                self._sources.popitem(last=False)
        return source

    def _build(self, question: Question, origin: str, numbers: dict[str, Any]) -> Table:
        import warnings

        self.stats.tables += 1
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                computation: _Computation = (
                    GraphBuild(self.assignment.content.graphs[question.id], numbers)
                    if origin == "graph"
                    else _HiddenCell(question, numbers)
                )
                reference = computation.run(None)
            mutations = mutations_of(computation.graphs, computation.accumulating)[: self.max_mutations]
        except NoGraph as error:  # the question's hidden-test cell is searched instead
            return Table(None, error=str(error))
        except Exception as error:  # a build that raises costs only its explanation
            self.stats.errors += 1
            return Table(None, error=f"{type(error).__name__}: {error}")
        return Table(computation, reference, mutations)


def _same(value: PlainValue, target: PlainValue, tolerance: float) -> bool:
    """The course's one comparison, for a value only compared with: whatever it is (an integer too large for a
    float, say), it is no match rather than an error."""
    try:
        return matches(value, target, tolerance)
    except (ArithmeticError, TypeError, ValueError, RecursionError):
        return False


def explainer(
    assignment: Assignment,
    *,
    tolerance: float,
    max_mutations: int = MAX_MUTATIONS,
    budget_seconds: float = BUDGET_SECONDS,
) -> SlipSearch:
    """The Explainer of an assignment for the item analysis (course/term/item_analysis.py): its questions' `GRAPHS`
    builds and hidden-test cells, compared within the grading `tolerance`."""
    return SlipSearch(assignment, tolerance=tolerance, max_mutations=max_mutations, budget_seconds=budget_seconds)

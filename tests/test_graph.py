"""A workflow's graph checked before anything is written (no database): ``rules/graph.py``.

Proves: ``check_graph`` keeps the declared order and parents (by index or by name, a name may
point forward, a repeated parent counts once), and refuses, naming the node at fault, an
unknown operation, an unknown parent, a job waiting for itself, a duplicate name, a bad
``on_upstream_failure``, a payload that is no JSON, no jobs, too many jobs, and a cycle (its
path named in edge order); ``find_cycle`` finds no cycle in any random DAG and finds (and
names) the one a back edge adds; the graph's hash changes with each thing a repeat must match.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from django_durable_jobs.rules.errors import InputInvalid
from django_durable_jobs.rules.graph import Graph, Node, NodeDeclaration, check_graph, find_cycle

KNOWN = {"op.a", "op.b"}


def check(declarations, *, max_jobs: int = 100, name: str = "wf") -> Graph:
    return check_graph(name, declarations, max_jobs=max_jobs, registered=KNOWN.__contains__)


def refused(declarations, *, max_jobs: int = 100) -> str:
    with pytest.raises(InputInvalid) as caught:
        check(declarations, max_jobs=max_jobs)
    assert caught.value.code == "E_JOB_INPUT_INVALID"
    return caught.value.message


def decl(after=(), name=None, operation="op.a", payload=None, **options) -> NodeDeclaration:
    return NodeDeclaration(
        operation, {} if payload is None else payload, tuple(after), name, **options
    )


def test_a_graph_keeps_order_and_parents_by_index_or_by_name():
    graph = check(
        [
            decl(name="fetch"),
            decl(after=[0], name="parse"),
            decl(after=["fetch", "late", 1, 1], name="merge", operation="op.b"),
            decl(name="late", queue="q2", priority=5, on_upstream_failure="run"),
        ]
    )
    assert [node.name for node in graph.nodes] == ["fetch", "parse", "merge", "late"]
    assert [node.parents for node in graph.nodes] == [(), (0,), (0, 3, 1), ()]
    assert graph.children() == {0: [1, 2], 1: [2], 2: [], 3: [2]}
    late = graph.nodes[3]
    assert (late.queue, late.priority, late.on_upstream_failure) == ("q2", 5, "run")
    assert graph.nodes[0].queue == "default" and graph.nodes[0].on_upstream_failure == "cancel"
    assert graph.nodes[2].operation == "op.b" and graph.nodes[0].proposal == "{}"


def test_unnamed_nodes_have_an_empty_name_and_a_label_with_their_place():
    graph = check([decl(), decl(after=[0])])
    assert [node.name for node in graph.nodes] == ["", ""]
    assert graph.nodes[1].label == "#1 (op.a)"


@pytest.mark.parametrize(
    ("declarations", "named"),
    [
        ([decl(operation="op.nope")], "'op.nope'"),
        ([decl(name="x"), decl(after=["y"])], "'y', which is no job of this workflow"),
        ([decl(), decl(after=[7])], "job #7, which does not exist"),
        ([decl(after=[0], name="me")], "waits for itself"),
        ([decl(name="dup"), decl(name="dup")], "named 'dup' (#0 and #1)"),
        ([decl(on_upstream_failure="ignore")], "on_upstream_failure of workflow job #0"),
        ([decl(payload={"x": {1, 2}})], "payload of workflow job #0"),
        ([decl(after=[object()])], "after= of workflow job #0"),
        ([decl(after=[True])], "after= of workflow job #0"),
        ([decl(), "not a declaration"], "#1 is not a NodeDeclaration"),
        ([], "has no jobs"),
    ],
)
def test_a_bad_graph_is_refused_naming_what_is_wrong(declarations, named):
    assert named in refused(declarations)


def test_too_many_jobs_are_refused_naming_the_setting():
    message = refused([decl() for _ in range(4)], max_jobs=3)
    assert "4 jobs; the most is 3" in message and "WORKFLOW_MAX_JOBS" in message
    assert len(check([decl() for _ in range(3)], max_jobs=3).nodes) == 3


def test_a_cycle_is_refused_with_its_path_in_edge_order():
    # a → b → c → a (each waits for the one before it), d hangs off the side.
    message = refused(
        [
            decl(name="a", after=["c"]),
            decl(name="b", after=["a"]),
            decl(name="c", after=["b"]),
            decl(name="d", after=["a"]),
        ]
    )
    assert "has a cycle" in message
    path = message.split("has a cycle: ")[1].split(".")[0]
    names = path.split(" → ")
    assert names[0] == names[-1] and len(names) == 4
    assert {n.strip("'") for n in names} == {"a", "b", "c"}
    order = [n.strip("'") for n in names]
    for parent, child in zip(order, order[1:], strict=False):
        assert {"a": "b", "b": "c", "c": "a"}[parent] == child  # read along the edges


def test_the_hash_changes_with_each_thing_a_repeat_must_match():
    base = [decl(name="a"), decl(name="b", after=["a"])]
    digests = {
        check(base).sha256(),
        check(base, name="other").sha256(),
        check([decl(name="a", payload={"x": 1}), decl(name="b", after=["a"])]).sha256(),
        check([decl(name="a"), decl(name="b")]).sha256(),
        check([decl(name="a"), decl(name="b", after=["a"], operation="op.b")]).sha256(),
        check([decl(name="a"), decl(name="b", after=["a"], priority=1)]).sha256(),
        check([decl(name="a"), decl(name="b", after=["a"], queue="q")]).sha256(),
        check([decl(name="a"), decl(name="b", after=["a"], on_upstream_failure="run")]).sha256(),
        check([decl(name="a"), decl(name="c", after=["a"])]).sha256(),
    }
    assert len(digests) == 9
    assert check(base).sha256() == check(list(base)).sha256()


# -- find_cycle ----------------------------------------------------------------------------------


def nodes_of(parents: list[list[int]]) -> list[Node]:
    return [
        Node(i, f"n{i}", "op.a", "{}", "", "default", 0, tuple(ps), "cancel")
        for i, ps in enumerate(parents)
    ]


@st.composite
def dags(draw) -> list[list[int]]:
    """A random DAG: each node's parents are earlier nodes, then the indexes are shuffled."""
    size = draw(st.integers(min_value=1, max_value=25))
    parents = [
        sorted(draw(st.sets(st.integers(0, i - 1), max_size=4))) if i else [] for i in range(size)
    ]
    order = draw(st.permutations(range(size)))  # node i becomes order[i]
    shuffled: list[list[int]] = [[] for _ in range(size)]
    for i, ps in enumerate(parents):
        shuffled[order[i]] = [order[p] for p in ps]
    return shuffled


def is_cycle(parents: list[list[int]], cycle: list[int]) -> bool:
    """True when ``cycle`` is a closed walk along edges parent → child."""
    if len(cycle) < 2 or cycle[0] != cycle[-1]:
        return False
    return all(parent in parents[child] for parent, child in zip(cycle, cycle[1:], strict=False))


def descendants(parents: list[list[int]], start: int) -> set[int]:
    children: dict[int, list[int]] = {i: [] for i in range(len(parents))}
    for child, ps in enumerate(parents):
        for p in ps:
            children[p].append(child)
    seen, todo = set(), [start]
    while todo:
        for child in children[todo.pop()]:
            if child not in seen:
                seen.add(child)
                todo.append(child)
    return seen


@settings(max_examples=200, deadline=None)
@given(dags())
def test_a_random_dag_has_no_cycle(parents):
    assert find_cycle(nodes_of(parents)) == []


@settings(max_examples=200, deadline=None)
@given(dags(), st.data())
def test_a_back_edge_makes_a_cycle_that_is_found_and_named(parents, data):
    pairs = [(a, d) for a in range(len(parents)) for d in descendants(parents, a)]
    if not pairs:
        parents = [[], [0]]
        pairs = [(0, 1)]
    ancestor, descendant = data.draw(st.sampled_from(pairs))
    parents[ancestor] = [*parents[ancestor], descendant]  # the ancestor now waits for it
    cycle = find_cycle(nodes_of(parents))
    assert is_cycle(parents, cycle), cycle
    declarations = [decl(name=f"n{i}", after=[f"n{p}" for p in ps]) for i, ps in enumerate(parents)]
    message = refused(declarations)
    assert " → ".join(f"'n{i}'" for i in cycle) in message


def test_a_self_loop_and_a_two_cycle_are_found():
    assert find_cycle(nodes_of([[0]])) == [0, 0]
    assert is_cycle([[1], [0]], find_cycle(nodes_of([[1], [0]])))

"""Celery-style canvas on every database: ``chain``, ``group`` and ``chord`` build plain graphs.

Proves: ``chain(a, b, c)`` makes each part wait for the one before it; ``group`` runs its parts
side by side after the same parents; ``chord(group, callback)`` makes the callback wait for every
part; nesting composes (a chain of a group waits for the whole group, a chord inside a chain);
``(operation, payload)`` tuples and ``Signature`` options (name, queue, priority,
``on_upstream_failure``) reach the jobs; ``Workflow.add`` appends a canvas after given nodes;
what is not a job is refused; a canvas submitted through the store writes the edges it built,
and its callback reads every part's result with ``upstream()``.
"""

from __future__ import annotations

import pytest

from django_durable_jobs import Workflow, chain, chord, group
from django_durable_jobs.models import JobDependency
from django_durable_jobs.rules.errors import InputInvalid
from django_durable_jobs.workflows import Signature

ECHO = "tests.wf.echo"


def s(tag: str, **options) -> Signature:
    return Signature(ECHO, {"tag": tag}, name=tag, **options)


def parents_of(wf: Workflow) -> dict[str, set[str]]:
    """Return each job's parents by name, from the checked graph."""
    graph = wf.graph()
    return {node.name: {graph.nodes[p].name for p in node.parents} for node in graph.nodes}


def test_a_chain_makes_each_part_wait_for_the_one_before():
    wf = chain(s("a"), s("b"), s("c")).workflow("canvas.chain")
    assert parents_of(wf) == {"a": set(), "b": {"a"}, "c": {"b"}}


def test_a_group_runs_side_by_side_and_a_chain_after_it_waits_for_all():
    wf = chain(s("first"), group(s("x"), s("y"), s("z")), s("last")).workflow("canvas.group")
    assert parents_of(wf) == {
        "first": set(),
        "x": {"first"},
        "y": {"first"},
        "z": {"first"},
        "last": {"x", "y", "z"},
    }


def test_a_group_takes_a_list_and_tuples():
    wf = group([(ECHO, {"n": 1}), (ECHO, {"n": 2})]).workflow("canvas.list")
    graph = wf.graph()
    assert [node.parents for node in graph.nodes] == [(), ()]
    assert [node.proposal for node in graph.nodes] == ['{"n":1}', '{"n":2}']


def test_a_chord_waits_for_every_part_of_its_header():
    wf = chord([s("p1"), s("p2"), chain(s("q1"), s("q2"))], s("callback")).workflow("canvas.chord")
    assert parents_of(wf) == {
        "p1": set(),
        "p2": set(),
        "q1": set(),
        "q2": {"q1"},
        "callback": {"p1", "p2", "q2"},
    }


def test_a_chord_inside_a_chain():
    flow = chain(s("a"), chord(group(s("b"), s("c")), s("d")), s("e"))
    assert parents_of(flow.workflow("canvas.nested")) == {
        "a": set(),
        "b": {"a"},
        "c": {"a"},
        "d": {"b", "c"},
        "e": {"d"},
    }


def test_signature_options_reach_the_jobs():
    wf = chain(
        s("a", queue="q1", priority=3),
        s("b", on_upstream_failure="run"),
    ).workflow("canvas.options")
    a, b = wf.graph().nodes
    assert (a.queue, a.priority, b.on_upstream_failure) == ("q1", 3, "run")


def test_workflow_add_appends_a_canvas_after_given_nodes():
    wf = Workflow("canvas.add")
    top = wf.job(ECHO, {}, name="top")
    ends = wf.add(group(s("l"), s("r")), after=[top])
    wf.add(s("merge"), after=ends)
    assert parents_of(wf) == {"top": set(), "l": {"top"}, "r": {"top"}, "merge": {"l", "r"}}


@pytest.mark.parametrize("bad", ["tests.wf.echo", 3, None, (), (3, {}), Workflow("w")])
def test_what_is_not_a_job_is_refused(bad):
    with pytest.raises(InputInvalid) as caught:
        chain(s("a"), bad)
    assert caught.value.code == "E_JOB_INPUT_INVALID"
    assert "is not a job" in caught.value.message


def test_an_empty_canvas_is_refused_at_submit():
    with pytest.raises(InputInvalid) as caught:
        chain().workflow("canvas.empty").graph()
    assert "has no jobs" in caught.value.message


def test_the_same_signature_named_twice_is_refused():
    with pytest.raises(InputInvalid) as caught:
        chain(s("a"), s("a")).workflow("canvas.dup").graph()
    assert "named 'a'" in caught.value.message


@pytest.mark.django_db(transaction=True)
def test_a_submitted_chord_writes_its_edges_and_its_callback_reads_every_part(store):
    wf = chord(group(s("p0"), s("p1"), s("p2")), s("sum")).workflow("canvas.run")
    submitted = store.workflows.submit(wf.graph(), idempotency_key="chord-1")
    jobs = {job.node: job for job in submitted.jobs}
    edges = set(JobDependency.objects.values_list("parent_id", "child_id"))
    assert edges == {(jobs[f"p{i}"].pk, jobs["sum"].pk) for i in range(3)}
    for claim in store.claim_batch(limit=10, resume_expired=[]):
        store.complete(claim.lease, {"from": claim.job.node})
    [callback] = store.claim_batch(limit=10, resume_expired=[])
    assert callback.job_id == jobs["sum"].pk
    assert store.upstream(callback.job_id) == {f"p{i}": {"from": f"p{i}"} for i in range(3)}

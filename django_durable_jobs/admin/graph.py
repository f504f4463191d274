"""A workflow drawn as an SVG graph on the server: layered left to right, coloured by status.

Pure functions: :func:`layout` places the jobs, :func:`svg` draws them. A job's layer is one
more than the deepest of its parents' layers (the roots are layer 0), so every edge points to
the right. Within a layer the jobs are stacked top to bottom, ordered by the mean position of
their parents, which keeps the lines of a fan-out and its fan-in from crossing.

A layer of more than ``COLLAPSE_OVER`` jobs (a fan-out of 100 parsers) would be a column taller
than any screen: its jobs of one operation are drawn as one node, ``parse × 100``, with their
statuses counted and shown as a bar, linking to the job list of that operation in the workflow.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.utils.html import escape, format_html
from django.utils.safestring import SafeString, mark_safe

from ..rules.vocabulary import JobStatus
from .format import STATUS_COLOURS

# A layer of more jobs than this draws those of one operation as one node.
COLLAPSE_OVER = 30
NODE_W, NODE_H = 184, 40
GROUP_TOP, LINE_H, GROUP_BAR = 24, 14, 16  # a collapsed node: its title, a line a status, a bar
GAP_X, GAP_Y = 56, 10
PAD = 12
LABEL_CHARS = 24  # characters of a node's name drawn in its box; the whole name is on hover
EDGE_COLOUR = "#8a949e"
# The order statuses are counted in a collapsed node's bar and the legend: the work still to do
# first, then how it ended.
STATUS_ORDER = (
    JobStatus.FAILED,
    JobStatus.RUNNING,
    JobStatus.SLEEPING,
    JobStatus.PENDING,
    JobStatus.WAITING,
    JobStatus.CANCELLED,
    JobStatus.ORPHANED,
    JobStatus.COMPLETE,
)


@dataclass(frozen=True)
class GraphJob:
    """One job of the workflow, as the graph needs it."""

    id: Any
    name: str
    operation: str
    status: str
    attempts: int
    parents: tuple[Any, ...]
    waiting_on: int = 0  # of a waiting job: how many parents it still waits for


@dataclass
class Box:
    """One node of the drawing: a job, or a collapsed group of jobs of one operation."""

    key: str
    label: str
    sub: str
    operation: str
    statuses: Counter
    url: str
    title: str
    layer: int
    jobs: list[Any] = field(default_factory=list)
    x: int = 0
    y: int = 0

    @property
    def collapsed(self) -> bool:
        return len(self.jobs) > 1

    @property
    def height(self) -> int:
        """Return the box's height: a collapsed one has a line per status, then its bar."""
        if not self.collapsed:
            return NODE_H
        return GROUP_TOP + LINE_H * sum(1 for s in self.statuses.values() if s) + GROUP_BAR

    @property
    def status(self) -> str:
        """Return the status of the one job, or of the group's most pressing job."""
        return next((s for s in STATUS_ORDER if self.statuses[s]), JobStatus.COMPLETE)


@dataclass
class Drawing:
    boxes: list[Box]
    edges: list[tuple[Box, Box]]
    width: int
    height: int


def layers(jobs: Sequence[GraphJob]) -> dict[Any, int]:
    """Return each job's layer: 0 for a root, else 1 + the deepest of its parents' layers.

    Jobs whose parents are not all among ``jobs`` (or that sit in a cycle, which a checked
    graph never has) are placed after the deepest parent known.
    """
    known = {job.id for job in jobs}
    children: dict[Any, list[Any]] = defaultdict(list)
    missing = {job.id: sum(1 for p in job.parents if p in known) for job in jobs}
    for job in jobs:
        for parent in job.parents:
            if parent in known:
                children[parent].append(job.id)
    layer = {job.id: 0 for job in jobs}
    ready = [job.id for job in jobs if missing[job.id] == 0]
    while ready:
        current = ready.pop()
        for child in children[current]:
            layer[child] = max(layer[child], layer[current] + 1)
            missing[child] -= 1
            if missing[child] == 0:
                ready.append(child)
    return layer


def layout(
    jobs: Sequence[GraphJob],
    job_url: Callable[[Any], str],
    group_url: Callable[[str], str],
) -> Drawing:
    """Place ``jobs`` (in declaration order) in layers, collapsing the layers too tall to read."""
    depth = layers(jobs)
    by_layer: dict[int, list[GraphJob]] = defaultdict(list)
    for job in jobs:
        by_layer[depth[job.id]].append(job)
    box_of: dict[Any, Box] = {}
    columns: list[list[Box]] = []
    for number in sorted(by_layer):
        column = _boxes(by_layer[number], number, job_url, group_url)
        for box in column:
            for job_id in box.jobs:
                box_of[job_id] = box
        columns.append(column)
    edges: dict[tuple[str, str], tuple[Box, Box]] = {}
    for job in jobs:
        child = box_of[job.id]
        for parent_id in job.parents:
            parent = box_of.get(parent_id)
            if parent is not None and parent is not child:
                edges.setdefault((parent.key, child.key), (parent, child))
    _order(columns, edges.values())

    def used(column: list[Box]) -> int:
        return sum(box.height for box in column) + max(len(column) - 1, 0) * GAP_Y

    height = 2 * PAD + max((used(column) for column in columns), default=0)
    for index, column in enumerate(columns):
        top = PAD + (height - 2 * PAD - used(column)) // 2
        for box in column:
            box.x, box.y = PAD + index * (NODE_W + GAP_X), top
            top += box.height + GAP_Y
    width = 2 * PAD + len(columns) * NODE_W + max(len(columns) - 1, 0) * GAP_X
    boxes = [box for column in columns for box in column]
    return Drawing(boxes, list(edges.values()), width, height)


def _boxes(
    layer: list[GraphJob],
    number: int,
    job_url: Callable[[Any], str],
    group_url: Callable[[str], str],
) -> list[Box]:
    """Return the boxes of one layer: one per job, or per operation when the layer is tall."""
    if len(layer) <= COLLAPSE_OVER:
        return [_single(job, number, job_url) for job in layer]
    by_operation: dict[str, list[GraphJob]] = defaultdict(list)
    for job in layer:
        by_operation[job.operation].append(job)
    if len(by_operation) > COLLAPSE_OVER:  # too many operations to list: one node for all
        return [_group(layer, number, "", group_url)]
    return [
        _single(group[0], number, job_url)
        if len(group) == 1
        else _group(group, number, operation, group_url)
        for operation, group in by_operation.items()
    ]


def _single(job: GraphJob, number: int, job_url: Callable[[Any], str]) -> Box:
    name = job.name or job.operation
    tries = f", attempt {job.attempts}" if job.attempts > 1 else ""
    title = f"{name} ({job.operation}): {job.status}{tries}; job {job.id}"
    sub = job.status
    if job.status == JobStatus.WAITING and job.waiting_on:
        sub += f" for {job.waiting_on}"
    if job.attempts > 1:
        sub += f" · attempt {job.attempts}"
    return Box(
        key=str(job.id),
        label=name,
        sub=sub,
        operation=job.operation,
        statuses=Counter({job.status: 1}),
        url=job_url(job.id),
        title=title,
        layer=number,
        jobs=[job.id],
    )


def _group(group: list[GraphJob], number: int, operation: str, group_url) -> Box:
    statuses = Counter(job.status for job in group)
    what = operation or "jobs of several operations"
    return Box(
        key=f"group:{number}:{operation}",
        sub="",
        label=_cut(operation or "jobs", LABEL_CHARS - len(f" × {len(group)}")) + f" × {len(group)}",
        operation=operation,
        statuses=statuses,
        url=group_url(operation),
        title=f"{len(group)} {what}: {counted(statuses)}",
        layer=number,
        jobs=[job.id for job in group],
    )


def counted(statuses: Counter) -> str:
    """Return ``97 complete, 3 failed``: the statuses present, in ``STATUS_ORDER``."""
    return ", ".join(f"{statuses[s]} {s}" for s in STATUS_ORDER if statuses[s])


def _order(columns: list[list[Box]], edges) -> None:
    """Sort each layer by the mean row of its boxes' parents (stable: declaration order)."""
    parents: dict[str, list[Box]] = defaultdict(list)
    for parent, child in edges:
        parents[child.key].append(parent)
    row: dict[str, float] = {}
    for column in columns:
        for index, box in enumerate(column):
            above = [row[p.key] for p in parents[box.key] if p.key in row]
            box.y = index  # declaration order, the tie-breaker
            row[box.key] = sum(above) / len(above) if above else float(index)
        column.sort(key=lambda box: (row[box.key], box.y))
        for index, box in enumerate(column):
            row[box.key] = float(index)


# -- drawing --------------------------------------------------------------------------------------

WAITING_FILL = "#fbf5e2"  # a waiting job is drawn hollow: nothing happened to it yet


def _cut(text: str, limit: int = LABEL_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _edge(parent: Box, child: Box) -> SafeString:
    x1, y1 = parent.x + NODE_W, parent.y + parent.height // 2
    x2, y2 = child.x - 2, child.y + child.height // 2
    bend = GAP_X // 2
    return format_html(
        '<path class="dj-wf-edge" d="M{} {} C{} {} {} {} {} {}" fill="none" stroke="{}" '
        'stroke-width="1.3" marker-end="url(#dj-wf-arrow)"/>',
        x1,
        y1,
        x1 + bend,
        y1,
        x2 - bend,
        y2,
        x2,
        y2,
        EDGE_COLOUR,
    )


def _bar(box: Box) -> SafeString:
    """Return a collapsed node's status bar: one segment per status, as wide as its share."""
    total = sum(box.statuses.values())
    x, parts = box.x + 6, []
    inner = NODE_W - 12
    for status in STATUS_ORDER:
        count = box.statuses[status]
        if not count:
            continue
        wide = max(1.0, inner * count / total)
        parts.append(
            format_html(
                '<rect class="dj-wf-bar dj-wf-{}" x="{}" y="{}" width="{}" height="6" fill="{}"/>',
                status,
                f"{x:.1f}",
                box.y + box.height - 11,
                f"{wide:.1f}",
                STATUS_COLOURS.get(status, "#333"),
            )
        )
        x += wide
    return mark_safe("".join(parts))


def _lines(box: Box) -> SafeString:
    """Return a collapsed node's count of each status, one line each, after a swatch."""
    lines = []
    for row, status in enumerate(s for s in STATUS_ORDER if box.statuses[s]):
        y = box.y + GROUP_TOP + row * LINE_H
        lines.append(
            format_html(
                '<rect x="{}" y="{}" width="8" height="8" rx="2" fill="{}"/>'
                '<text x="{}" y="{}" fill="#1f2328" font-size="11">{} {}</text>',
                box.x + 8,
                y + 3,
                STATUS_COLOURS.get(status, "#333"),
                box.x + 21,
                y + 11,
                box.statuses[status],
                status,
            )
        )
    return mark_safe("".join(lines))


def _node(box: Box) -> SafeString:
    status = box.status
    colour = STATUS_COLOURS.get(status, "#333")
    if box.collapsed:
        fill, stroke, ink, dash, width = "#ffffff", "#5a6268", "#1f2328", "", 2
        extra = mark_safe(_lines(box) + _bar(box))
    elif status == JobStatus.WAITING:
        fill, stroke, ink, dash, width = (
            WAITING_FILL,
            colour,
            "#4d3a00",
            ' stroke-dasharray="5 3"',
            2,
        )
        extra = ""
    else:
        fill, stroke, ink, dash, width = colour, colour, "#ffffff", "", 1
        extra = ""
    return format_html(
        '<a href="{}" class="dj-wf-node dj-wf-{}" data-jobs="{}"><title>{}</title>'
        '<rect x="{}" y="{}" width="{}" height="{}" rx="5" fill="{}" stroke="{}" '
        'stroke-width="{}"{}/>'
        '<text x="{}" y="{}" fill="{}" font-size="12" font-weight="bold">{}</text>'
        '<text x="{}" y="{}" fill="{}" font-size="11">{}</text>{}</a>',
        box.url,
        "group" if box.collapsed else status,
        len(box.jobs),
        box.title,
        box.x,
        box.y,
        NODE_W,
        box.height,
        fill,
        stroke,
        width,
        mark_safe(dash),
        box.x + 8,
        box.y + 16,
        ink,
        _cut(box.label),
        box.x + 8,
        box.y + 31,
        ink,
        box.sub,
        extra,
    )


def svg(drawing: Drawing) -> SafeString:
    """Return the drawing as an inline ``<svg>``: edges under nodes, each node a link."""
    edges = mark_safe("".join(_edge(parent, child) for parent, child in drawing.edges))
    nodes = mark_safe("".join(_node(box) for box in drawing.boxes))
    return format_html(
        '<svg class="dj-wf-graph" xmlns="http://www.w3.org/2000/svg" width="{}" height="{}" '
        'viewBox="0 0 {} {}" role="img" aria-label="{}" font-family="system-ui, sans-serif">'
        '<defs><marker id="dj-wf-arrow" viewBox="0 0 8 8" refX="7" refY="4" markerWidth="7" '
        'markerHeight="7" orient="auto"><path d="M0 0 L8 4 L0 8 z" fill="{}"/></marker></defs>'
        "{}{}</svg>",
        drawing.width,
        drawing.height,
        drawing.width,
        drawing.height,
        escape(f"The workflow's {len(drawing.boxes)} nodes, coloured by status"),
        EDGE_COLOUR,
        edges,
        nodes,
    )

"""The side-by-side benchmark's printed tables, ratios and chart (parent process only)."""

from __future__ import annotations

import os
import platform
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

PACKAGES = ("django", "django-durable-jobs", "django-tasks-db", "procrastinate", "psycopg")


def machine() -> dict[str, Any]:
    """Describe the machine and the installed versions of everything measured."""
    versions = {}
    for package in PACKAGES:
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = None
    return {
        "cpus": os.cpu_count(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "load_average": list(os.getloadavg()),
        "packages": versions,
    }


def _drain(entry: dict[str, Any], series: str) -> dict[str, Any]:
    return entry.get("drain", {}).get(series, {})


def _div(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _per_processes(ours: dict, theirs: dict, key: str) -> dict[str, float | None]:
    """Return ours ÷ theirs of one drain figure, per process count both ran."""
    return {p: _div(ours[p].get(key), theirs[p].get(key)) for p in ours if p in theirs}


def ratios(data: dict[str, Any]) -> dict[str, Any]:
    """Return ours ÷ theirs for every competitor series, per database, from one run."""
    result: dict[str, Any] = {}
    for db, systems in data["results"].items():
        ours = systems.get("ours")
        if not ours or ours["status"] != "ok":
            continue
        per_db = result[db] = {}
        ours_drain = _drain(ours, "default")
        for name, entry in systems.items():
            if name == "ours" or "series" not in entry:
                continue
            enqueue, ours_enqueue = entry.get("enqueue", {}), ours.get("enqueue", {})
            latency, ours_latency = entry.get("latency", {}), ours.get("latency", {})
            for series, label in entry["series"].items():
                theirs = _drain(entry, series)
                per_db[label] = {
                    "drain_jobs_per_s": _per_processes(ours_drain, theirs, "jobs_per_s"),
                    "drain_from_spawn": _per_processes(ours_drain, theirs, "jobs_per_s_from_spawn"),
                    "cpu_us_per_job": _per_processes(ours_drain, theirs, "cpu_us_per_job"),
                    "cpu_us_per_job_net": _per_processes(ours_drain, theirs, "cpu_us_per_job_net"),
                    "enqueue_jobs_per_s": _div(
                        ours_enqueue.get("single", {}).get("jobs_per_s"),
                        enqueue.get("single", {}).get("jobs_per_s"),
                    ),
                    "bulk_jobs_per_s": _div(
                        ours_enqueue.get("bulk", {}).get("jobs_per_s"),
                        enqueue.get("bulk", {}).get("jobs_per_s"),
                    ),
                    "latency_p50": _div(
                        ours_latency.get("start_ms", {}).get("p50"),
                        latency.get("start_ms", {}).get("p50"),
                    ),
                    "latency_p99": _div(
                        ours_latency.get("start_ms", {}).get("p99"),
                        latency.get("start_ms", {}).get("p99"),
                    ),
                }
    return result


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _n(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _jobs_per_s_and_wall(run: dict[str, Any]) -> str:
    return f"{_n(run['jobs_per_s'])} ({run['wall_seconds']:.1f})"


def _drain_rows(
    rows: list[tuple[str, dict[str, Any], str]],
    ratio_rows: dict[str, Any],
    counts: list[str],
    width: int,
    cell: Any,
    ratio_key: str,
) -> list[str]:
    """Return one drain table's lines: ``cell(run)`` per system and process count, then each
    competitor's ours ÷ theirs from ``ratio_rows[label][ratio_key]``."""
    lines = []
    for label, entry, series in rows:
        runs = _drain(entry, series)
        cells = [cell(runs[p]) if p in runs else "-" for p in counts]
        lines.append(f"{label:<{width}}" + "".join(f"{c:>16}" for c in cells))
    for label, r in ratio_rows.items():
        cells = [_x(r.get(ratio_key, {}).get(p)) for p in counts]
        lines.append(f"{'ours ÷ ' + label:<{width}}" + "".join(f"{c:>16}" for c in cells))
    return lines


def _series_rows(systems: dict[str, Any]) -> list[tuple[str, dict[str, Any], str]]:
    rows = []
    for entry in systems.values():
        for series, label in entry.get("series", {}).items():
            rows.append((label, entry, series))
    return rows


def format_report(data: dict[str, Any]) -> str:
    """Return the printed report: per database, drain, CPU, enqueue and latency tables."""
    options, m = data["options"], data["machine"]
    out = [
        "",
        f"Side by side, {data['started']} ({data['seconds']:.0f} s): "
        + ", ".join(f"{k} {v}" for k, v in m["packages"].items() if v),
        f"{m['cpus']} CPU(s), {m['processor']}, Python {m['python']}, {m['platform']}; "
        f"load average at the end {m['load_average'][0]:.1f}",
        "Ratios are ours ÷ theirs: above 1 ours is higher (jobs/s), below 1 ours is lower "
        "(CPU, ms).",
    ]
    counts = [str(p) for p in options["process_counts"]]
    for db, systems in data["results"].items():
        ours = systems.get("ours", {})
        server = next((e["server"] for e in systems.values() if e.get("server")), "")
        out += ["", f"==== {db} ({server}) ===="]
        for entry in systems.values():
            if entry["status"] == "not installed" or entry["status"] == "failed":
                out.append(f"NOT BENCHMARKED: {entry['label']}: {entry['reason']}")
            elif entry["status"] == "n/a":
                out.append(f"n/a: {entry['label']} {entry['reason']}")
        rows = _series_rows(systems)
        ratio_rows = data["ratios"].get(db, {})
        width = max([len(label) for label, _, _ in rows] + [len(f"ours ÷ {r}") for r in ratio_rows])
        width = max(width, 20) + 2
        head = "".join(f"{p + (' proc' if p == '1' else ' procs'):>16}" for p in counts)
        out += [
            "",
            f"drain of {options['drain_jobs']:,} no-op jobs by N worker processes (jobs at a time "
            "each: ours and Procrastinate 4, dj-queue 3, django-tasks-db 1),",
            "counted from the first job's start: jobs/s (wall s)",
            f"{'':<{width}}{head}",
        ]
        out += _drain_rows(
            rows, ratio_rows, counts, width, _jobs_per_s_and_wall, "drain_jobs_per_s"
        )
        out += [
            "",
            "the same drains counted from the spawn of the worker processes (start-up "
            "included): jobs/s",
            f"{'':<{width}}{head}",
        ]
        out += _drain_rows(
            rows,
            ratio_rows,
            counts,
            width,
            lambda run: _n(run.get("jobs_per_s_from_spawn")),
            "drain_from_spawn",
        )
        out += [
            "",
            "seconds from the spawn of the worker processes to the first job's start",
            f"{'':<{width}}{head}",
        ]
        for label, entry, series in rows:
            runs = _drain(entry, series)
            cells = [_n(runs[p].get("first_start_s"), 2) if p in runs else "-" for p in counts]
            out.append(f"{label:<{width}}" + "".join(f"{c:>16}" for c in cells))
        out += [
            "",
            "worker CPU per job, µs: user + system of the worker processes ÷ jobs (net: less "
            "the CPU of the",
            "same N starting and stopping on an empty queue; start-up: that CPU s for one process)",
            f"{'':<{width}}{head}{'start-up':>12}",
        ]
        for label, entry, series in rows:
            runs = _drain(entry, series)
            cells = [
                f"{_n(runs[p]['cpu_us_per_job'])} ({_n(runs[p].get('cpu_us_per_job_net'))})"
                if p in runs
                else "-"
                for p in counts
            ]
            idle = entry.get("idle", {}).get(series, {}).get("cpu_seconds")
            out.append(
                f"{label:<{width}}" + "".join(f"{c:>16}" for c in cells) + f"{_n(idle, 2):>12}"
            )
        for label, r in ratio_rows.items():
            cells = [
                f"{_x(r['cpu_us_per_job'].get(p))} ({_x(r['cpu_us_per_job_net'].get(p))})"
                for p in counts
            ]
            out.append(f"{'ours ÷ ' + label:<{width}}" + "".join(f"{c:>16}" for c in cells))
        out += ["", _enqueue_table(systems, ratio_rows, width, options)]
        out += ["", _latency_table(systems, ratio_rows, width)]
        bad = [v for runs in _drain(ours, "default").values() for v in runs["violations"]]
        if ours.get("status") == "ok" and "drain" in ours:
            out.append("")
            out.append(
                "ours, after every drain: "
                + (
                    "; ".join(f"VIOLATION {v}" for v in bad)
                    if bad
                    else "every job complete, "
                    "attempts = 1, fencing_epoch = 1, one JobAttempt row each"
                )
            )
    return "\n".join(out)


def _enqueue_table(systems: dict[str, Any], ratio_rows: dict, width: int, options: dict) -> str:
    size = options["bulk_size"]
    lines = [
        f"enqueue: {options['enqueue_jobs']:,} single calls; {options['bulk_jobs']:,} jobs in "
        f"bulk calls of {size:,} (~50-byte payloads)",
        f"{'':<{width}}{'jobs/s':>10}{'mean ms':>10}{'p99 ms':>10}{'bulk jobs/s':>14}"
        f"{'ms per call':>13}",
    ]
    for entry in systems.values():
        figures = entry.get("enqueue")
        if not figures:
            continue
        single, bulk = figures["single"], figures["bulk"]
        tail = (
            f"{_n(bulk['jobs_per_s']):>14}{_n(bulk['ms_per_call'], 1):>13}"
            if "jobs_per_s" in bulk
            else f"   n/a ({bulk['unavailable']})"
        )
        lines.append(
            f"{entry['label']:<{width}}{_n(single['jobs_per_s']):>10}"
            f"{single['ms']['mean']:>10.2f}{single['ms']['p99']:>10.2f}{tail}"
        )
    seen = set()
    for label, r in ratio_rows.items():
        key = (r["enqueue_jobs_per_s"], r["bulk_jobs_per_s"])
        if key in seen:  # the CONN_MAX_AGE series share their system's enqueue figures
            continue
        seen.add(key)
        lines.append(
            f"{'ours ÷ ' + label.split(',')[0]:<{width}}{_x(r['enqueue_jobs_per_s']):>10}"
            f"{'':>20}{_x(r['bulk_jobs_per_s']) if r['bulk_jobs_per_s'] else 'n/a':>14}"
        )
    return "\n".join(lines)


def _latency_table(systems: dict[str, Any], ratio_rows: dict, width: int) -> str:
    lines = [
        "enqueue→start latency with one idle worker, ms (the task's start - just before enqueue)",
        f"{'':<{width}}{'wake-up':>12}{'jobs':>6}{'p50':>9}{'p90':>9}{'p99':>9}{'max':>9}",
    ]
    for entry in systems.values():
        figures = entry.get("latency")
        if not figures:
            continue
        s = figures["start_ms"]
        lines.append(
            f"{entry['label']:<{width}}{figures['wakeup']:>12}{figures['jobs']:>6}"
            f"{s['p50']:>9.1f}{s['p90']:>9.1f}{s['p99']:>9.1f}{s['max']:>9.1f}"
        )
    seen = set()
    for label, r in ratio_rows.items():
        key = (r["latency_p50"], r["latency_p99"])
        if key in seen:
            continue
        seen.add(key)
        lines.append(
            f"{'ours ÷ ' + label.split(',')[0]:<{width}}{'':>18}"
            f"{_x(r['latency_p50']):>9}{'':>9}{_x(r['latency_p99']):>9}"
        )
    return "\n".join(lines)


def write_chart(data: dict[str, Any], path: Path) -> Path | None:
    """Draw drain jobs/s per process count, one panel per database; None without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("chart skipped: matplotlib is not installed (it is in the bench extra)")
        return None
    panels = [
        (db, _series_rows(systems))
        for db, systems in data["results"].items()
        if any(entry.get("drain") for entry in systems.values())
    ]
    if not panels:
        print("chart skipped: no drain figures")
        return None
    counts = [str(p) for p in data["options"]["process_counts"]]
    labels = list(dict.fromkeys(label for _, rows in panels for label, _, _ in rows))
    colours = {label: f"C{i}" for i, label in enumerate(labels)}  # the same in every panel
    fig, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), 4.8), squeeze=False)
    for ax, (db, rows) in zip(axes[0], panels, strict=True):
        width = 0.8 / max(1, len(rows))
        for i, (label, entry, series) in enumerate(rows):
            runs = _drain(entry, series)
            xs = [j + (i - (len(rows) - 1) / 2) * width for j in range(len(counts))]
            ys = [runs[p]["jobs_per_s"] if p in runs else 0 for p in counts]
            bars = ax.bar(xs, ys, width, label=label, color=colours[label])
            ax.bar_label(bars, fmt="%.0f", fontsize=6, padding=1)
        ax.set_xticks(range(len(counts)), counts)
        ax.set_xlabel("worker processes")
        ax.set_ylabel("no-op jobs drained per second")
        ax.set_title(f"{db}: {data['results'][db].get('ours', {}).get('server', '')}", fontsize=9)
        ax.grid(axis="y", alpha=0.3)
    handles = [plt.Rectangle((0, 0), 1, 1, color=colours[label]) for label in labels]
    fig.legend(handles, labels, loc="lower center", ncol=min(4, len(labels)), fontsize=8)
    m = data["machine"]
    fig.suptitle(
        f"Drain of {data['options']['drain_jobs']:,} no-op jobs "
        "(jobs / (last finished - first started)), "
        f"{data['started'][:10]}, {m['cpus']} CPUs, Python {m['python']}",
        fontsize=10,
    )
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    print(f"chart: {path}")
    return path

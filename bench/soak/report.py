"""The soak's report: tables on stdout, the verdict line, and JSON."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from bench.load.stats import dist
from bench.soak.run import Options, Outcome
from bench.soak.verdict import verdict


def build(options: Options, outcome: Outcome, machine: dict[str, Any]) -> dict[str, Any]:
    tally = outcome.tally
    judged = verdict(outcome.rss, options.duration_s, options.tolerance_mb_per_min)
    return {
        "machine": machine,
        "options": {k: v for k, v in dataclasses.asdict(options).items() if k != "api_key"},
        "duration_s": round(outcome.duration_s, 1),
        "rss": [dataclasses.asdict(s) for s in outcome.rss],
        "rss_after_close_mb": outcome.rss_after_close_mb,
        "verdict": {**dataclasses.asdict(judged), "line": judged.line()},
        "errors_by_code": dict(tally.errors.most_common()),
        "error_examples": tally.error_examples,
        "close_codes": dict(tally.closes.most_common()),
        "latency_ms": {k: dist(v) for k, v in sorted(tally.latency_ms.items())},
        "actions": dict(tally.actions.most_common()),
        "timeouts": dict(tally.timeouts.most_common()),
        "timeout_examples": tally.timeout_examples,
        "response_statuses": dict(tally.statuses.most_common()),
        "barge_ins": dict(tally.barge_ins),
        "resumes": dict(tally.resumes.most_common()),
        "connections": tally.connections,
        "connect_failures": tally.connect_failures,
        "connect_failure_example": tally.connect_failure_example,
        "unfinished_users": outcome.unfinished_users,
        "server_log": outcome.server_log,
    }


def problems(report: dict[str, Any]) -> list[str]:
    """What makes a soak fail: memory that grows, an internal error, a crashed
    client, a server traceback."""
    out = []
    if report["verdict"]["flat"] is False:
        out.append("RSS grows")
    for code in ("internal_error", "soak_client_crash"):
        if report["errors_by_code"].get(code):
            out.append(f"{report['errors_by_code'][code]} x {code}")
    if report["server_log"].get("tracebacks"):
        out.append(f"{report['server_log']['tracebacks']} tracebacks in the server log")
    return out


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def text(report: dict[str, Any]) -> str:
    opts = report["options"]
    lines = [
        f"soak: {opts['sessions']} sessions for {opts['minutes']} min against "
        f"{opts['url'] or 'parley serve --executor ' + opts['executor']} (seed {opts['seed']}); "
        f"{report['connections']} connections, {report['connect_failures']} failed",
        "",
        "RSS over time",
        f"{'t (s)':>8}  {'RSS MB':>8}  {'sessions':>8}",
    ]
    for s in report["rss"]:
        sessions = "-" if s["sessions"] is None else str(s["sessions"])
        lines.append(f"{s['t_s']:>8.0f}  {s['rss_mb']:>8.1f}  {sessions:>8}")
    if report["rss_after_close_mb"] is not None:
        lines.append(f"{'closed':>8}  {report['rss_after_close_mb']:>8.1f}  {'0':>8}")
    lines += ["", "latency (ms)", f"{'':28}{'n':>7}{'p50':>7}{'p95':>7}{'p99':>7}{'max':>7}"]
    for name, d in report["latency_ms"].items():
        figures = "".join(f"{_fmt(d[k]):>7}" for k in ("p50", "p95", "p99", "max"))
        lines.append(f"{name:28}{d['n']:>7}{figures}")
    for title, key in (
        ("errors by code", "errors_by_code"),
        ("close codes", "close_codes"),
        ("response statuses", "response_statuses"),
        ("actions", "actions"),
        ("timeouts (no answer within the action's wait)", "timeouts"),
        ("drops of resumable sessions", "resumes"),
    ):
        lines += ["", title]
        counts = report[key]
        lines += [f"  {k:40} {v:>7}" for k, v in counts.items()] or ["  none"]
    if report["barge_ins"]:
        lines += ["", "barge-ins: " + ", ".join(f"{k} {v}" for k, v in report["barge_ins"].items())]
    log = report["server_log"]
    if log:
        lines += [
            "",
            f"server log: {log['tracebacks']} tracebacks, {log['error_lines']} ERROR lines",
        ]
        lines += [f"  {line}" for line in log["first_errors"]]
    lines += ["", report["verdict"]["line"]]
    if found := problems(report):
        lines.append("PROBLEMS: " + "; ".join(found))
    return "\n".join(lines)


def write(report: dict[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=1) + "\n")

"""`session.tracing`: echoed as sent, and applied as a label on the session's log
lines (server/logs.py). OpenAI writes traces to its dashboard; Parley has none, so
the workflow name and group id name the session in its logs instead.

The names come from the client, so the label is made safe for a log line: control
characters (newlines above all, which would forge lines) become `?`, and each name is
cut to `MAX_NAME` characters. It is never a metric label (its values are unbounded).
`metadata` is echoed only.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

MAX_NAME = 64


@dataclass(frozen=True)
class TraceNames:
    workflow_name: str | None = None
    group_id: str | None = None
    metadata: str | None = None  # JSON text (keeps the dataclass frozen)

    def wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.workflow_name is not None:
            out["workflow_name"] = self.workflow_name
        if self.group_id is not None:
            out["group_id"] = self.group_id
        if self.metadata is not None:
            out["metadata"] = json.loads(self.metadata)
        return out


Tracing = Literal["auto"] | TraceNames | None


def safe_name(text: str) -> str:
    """`text` fit for a log line: printable, single-line, at most MAX_NAME characters."""
    cut = text[:MAX_NAME]
    return "".join(c if c.isprintable() and c not in "[]" else "?" for c in cut)


def trace_label(tracing: Tracing) -> str | None:
    """The label the session's log lines carry (None: tracing off)."""
    if tracing is None:
        return None
    if tracing == "auto":
        return "trace=auto"
    parts = [
        f"{name}={safe_name(value)}"
        for name, value in (("workflow", tracing.workflow_name), ("group", tracing.group_id))
        if value
    ]
    return " ".join(parts) or "trace=auto"

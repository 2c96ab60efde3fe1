"""What the server logs, and how: ids on every line, never audio or keys.

- `LogObserver` (an engine observer) logs each session's life with its ids: opened,
  closed with its close code, every error sent with its code, every response done
  with its status.
- A session's `tracing` (its workflow name and group id, made safe by
  engine/tracing.py) goes beside its id on those lines (`trace_labels`).
- `session_var` holds the session id of the connection a task serves
  (server/realtime.py sets it; the session's tasks inherit it), and `SessionFilter`
  puts it on every record, so lines from the engine and the models name their
  session too.
- `configure_logging` sets up `parley serve` (and each `--workers` process).

Nothing here logs a payload: events are logged by type and code only. The
WebSocket library logs frames (audio) and handshake headers (keys) at DEBUG, and
uvicorn the connection's scope (a browser's key subprotocol) at TRACE:
`RedactFilter` drops the frames and hides every key, at every level.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from contextvars import ContextVar

from engine.observer import Observer, ResponseStatus
from models.stage_timing import StageTiming

log = logging.getLogger("parley.sessions")

session_var: ContextVar[str | None] = ContextVar("parley_session", default=None)
# A session's `tracing` label (engine/tracing.py made it safe for a line), by session
# id: LogObserver keeps it, SessionFilter puts it beside the id.
trace_labels: dict[str, str] = {}

FORMAT = "%(levelname)s %(name)s%(session_tag)s: %(message)s"


class SessionFilter(logging.Filter):
    """Adds `session_tag` (" [sess_…]" or "") to every record of a handler."""

    def filter(self, record: logging.LogRecord) -> bool:
        session_id = session_var.get()
        label = trace_labels.get(session_id) if session_id else None
        tag = f"{session_id} {label}" if label else session_id
        record.session_tag = f" [{tag}]" if tag else ""
        return True


# Under uvicorn, the websockets library logs to "uvicorn.error" at DEBUG: every
# frame (an append's is audio) and every handshake header (the key travels in
# `Authorization` or, from a browser, in `Sec-WebSocket-Protocol`). At TRACE uvicorn
# logs each connection's ASGI scope to "uvicorn.asgi", its subprotocols (a browser's
# key) in clear.
FRAME_FORMATS = frozenset({"< %s", "> %s"})
HEADER_FORMATS = frozenset({"< %s: %s", "> %s: %s"})
SECRET_HEADERS = frozenset({"authorization", "sec-websocket-protocol", "cookie", "set-cookie"})
REDACTED = "[redacted]"
# Keys wherever they appear in a line: the browser's key subprotocol, ephemeral keys,
# bearer credentials (API keys are matched as configured, RedactFilter.secrets).
SECRET_PATTERN = re.compile(
    r"(?P<keep>openai-insecure-api-key\.|\bbearer\s+)[^\s'\",\]]+|\bek_[\w\-.~+/=]+",
    re.IGNORECASE,
)


def _hide(match: re.Match[str]) -> str:
    return (match.group("keep") or "") + REDACTED


class RedactFilter(logging.Filter):
    """Drops the WebSocket library's frame lines; hides secret header values, and
    every key (API keys in `secrets`, ephemeral keys, bearer credentials) in any line
    or traceback."""

    def __init__(self) -> None:
        super().__init__()
        self.secrets: set[str] = set()

    def scrub(self, text: str) -> str:
        text = SECRET_PATTERN.sub(_hide, text)
        for secret in self.secrets:
            text = text.replace(secret, REDACTED)
        return text

    def filter(self, record: logging.LogRecord) -> bool:
        if record.msg in FRAME_FORMATS:
            return False
        if record.msg in HEADER_FORMATS and isinstance(record.args, tuple) and record.args:
            name = str(record.args[0])
            if name.lower() in SECRET_HEADERS:
                record.args = (name, REDACTED)
        try:
            message = record.getMessage()
        except Exception:  # a malformed call: logging reports it when it formats
            return True
        if (scrubbed := self.scrub(message)) != message:
            record.msg, record.args = scrubbed, None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = self.scrub(record.exc_text)
        return True


# One filter for the process, on the loggers of uvicorn and the WebSocket library (a
# logger's filters see only its own records) and on the handlers `parley serve` sets
# up (which see every record).
REDACTION = RedactFilter()
LIBRARY_LOGGERS = (
    "uvicorn",
    "uvicorn.error",
    "uvicorn.access",
    "uvicorn.asgi",
    "websockets.server",
    "websockets.protocol",
)


def install_redaction(api_keys: Iterable[str] = ()) -> None:
    """Idempotent; every app does it (server/app.py) with its API keys, whoever set
    up logging."""
    REDACTION.secrets.update(key for key in api_keys if key)
    for name in LIBRARY_LOGGERS:
        logger = logging.getLogger(name)
        if REDACTION not in logger.filters:
            logger.addFilter(REDACTION)


def configure_logging(level: str) -> None:
    """The root handler of a `parley serve` process, with session ids on its lines."""
    # uvicorn's "trace" is below DEBUG; the standard library does not know it.
    level = "DEBUG" if level.lower() == "trace" else level.upper()
    logging.basicConfig(level=level, format=FORMAT)
    for handler in logging.getLogger().handlers:
        if not any(isinstance(f, SessionFilter) for f in handler.filters):
            handler.addFilter(SessionFilter())
        if REDACTION not in handler.filters:
            handler.addFilter(REDACTION)
    install_redaction()


class LogObserver(Observer):
    """Each session's life in the log, by id and code (never a payload)."""

    def session_opened(self, session_id: str) -> None:
        log.info("session %s opened", session_id)

    def session_closed(self, session_id: str) -> None:
        trace_labels.pop(session_id, None)

    def tracing_set(self, session_id: str, label: str | None) -> None:
        if label is None:
            trace_labels.pop(session_id, None)
        else:
            trace_labels[session_id] = label
        log.info("session %s: tracing %s", session_id, label or "off")

    def connection_closed(self, session_id: str | None, code: int) -> None:
        if session_id is None:
            log.info("connection refused: close code %d", code)
        else:
            log.info("session %s closed: close code %d", session_id, code)

    def error_sent(self, session_id: str, code: str) -> None:
        log.info("session %s: error %s", session_id, code)

    def barge_in(self, session_id: str, response_id: str) -> None:
        log.debug("session %s: response %s interrupted by speech", session_id, response_id)

    def response_created(self, session_id: str, response_id: str, item_id: str) -> None:
        log.debug("session %s: response %s created (item %s)", session_id, response_id, item_id)

    def stage_timed(self, session_id: str, response_id: str, timing: StageTiming) -> None:
        log.debug(
            "session %s: response %s: %s (%s) %s %.3f s%s",
            session_id,
            response_id,
            timing.stage,
            timing.where,
            timing.phase,
            timing.seconds,
            ", speculative" if timing.speculative else "",
        )

    def response_done(self, session_id: str, response_id: str, status: ResponseStatus) -> None:
        # Ordinary endings at DEBUG (one per turn); the others say something went wrong.
        level = logging.DEBUG if status in ("completed", "cancelled") else logging.INFO
        log.log(level, "session %s: response %s done: %s", session_id, response_id, status)

"""Imports run one way: server → engine → models, with the wire protocol under the
engine and the benchmarks beside everything (docs/design/fullduplex.md).

Every import statement is read from the source, including those inside functions
and under `TYPE_CHECKING`: a lazy import is still a dependency.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Rule:
    """Modules under `source` may not import modules under any of `forbidden`."""

    source: str
    forbidden: tuple[str, ...]
    why: str


# The executors: what runs a model for a session's responses.
EXECUTORS = (
    "models.cascade",
    "models.vllm_engine",
    "models.openai_compat",
    "models.scripted",
    "models.text_then_speech",
    "models.hosted",
)

# The two transports, WebSocket (server/realtime.py) and WebRTC (these), share the
# session hub (server/sessions.py) and the resume extension (server/resume.py).
WEBRTC = ("server.calls", "server.webrtc", "server.playout", "server.resumable_call")
SIBLINGS = "the transports are siblings over the session hub"

RULES = (
    Rule(
        "engine.protocol",
        ("engine", "models", "server", "bench", "tests"),
        "the wire vocabulary imports nothing else of Parley",
    ),
    Rule("engine", ("server", "bench", "tests"), "engine → server would run the layers both ways"),
    Rule("models", ("engine", "server", "bench", "tests"), "executors know nothing of sessions"),
    Rule(
        "models.speech",
        ("models.cascade", "models.vllm_engine", "models.openai_compat", "models.scripted"),
        "speech stages are shared by every executor, so they belong to none",
    ),
    Rule("models.speech", ("models.listening",), "the executors' stages do not listen"),
    *(
        Rule(executor, ("models.listening",), "what hears the microphone is the engine's")
        for executor in EXECUTORS
    ),
    Rule(
        "models.listening",
        ("models",),
        "what listens needs no executor nor a stage that speaks, only the shared helpers",
    ),
    Rule("server", ("bench", "tests"), "the shipped server needs no source checkout"),
    Rule("server.realtime", WEBRTC, SIBLINGS),
    *(Rule(module, ("server.realtime",), SIBLINGS) for module in WEBRTC),
    Rule("server.sessions", ("server.realtime", *WEBRTC), "the hub sits under both transports"),
    Rule("server.resume", ("server.realtime", *WEBRTC), "resume sits under both transports"),
    Rule("bench", ("tests",), "benchmarks share fixtures through bench/, never tests/"),
)

# `engine.protocol` is inside `engine`: its own imports are allowed. What listens may
# import itself, the executor interface and the helpers both sides share.
ALLOWED_WITHIN = {
    "engine.protocol": ("engine.protocol",),
    "models.listening": (
        "models.listening",
        "models.base",
        "models.errors",
        "models.speech.audio",
        "models.speech.device",
        "models.speech.files",
        "models.speech.whisper_files",
        "models.speech.whisper_window",
    ),
}


def _under(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported_modules(path: Path, root: Path) -> set[str]:
    """Absolute names of every module `path` imports (relative imports resolved)."""
    tree = ast.parse(path.read_text(), str(path))
    package = module_name(path, root).split(".")
    if path.name != "__init__.py":
        package.pop()
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, node.module] if node.module else base)
            # `from engine import protocol` imports engine.protocol: the name is a
            # submodule or an attribute of `module`, and either way lies under it.
            found.update(
                module if alias.name == "*" else f"{module}.{alias.name}" for alias in node.names
            )
    return found


def violations(root: Path, rules: tuple[Rule, ...] = RULES) -> list[str]:
    """Every import in `root` that breaks a rule, as `module → imported (why)`."""
    found = []
    for path in sorted(root.rglob("*.py")):
        if any(part.startswith(".") for part in path.relative_to(root).parts):
            continue  # virtual environments and caches
        source = module_name(path, root)
        for rule in rules:
            if not _under(source, rule.source):
                continue
            allowed = ALLOWED_WITHIN.get(rule.source, ())
            for imported in sorted(imported_modules(path, root)):
                if any(_under(imported, a) for a in allowed):
                    continue
                if any(_under(imported, f) for f in rule.forbidden):
                    found.append(f"{source} → {imported} ({rule.why})")
    return found


def test_imports_run_one_way() -> None:
    assert violations(ROOT) == []


# (file, its source, the start of the one violation expected; None: allowed)
CASES = [
    ("engine/session.py", "from server.config import Settings\n", "engine.session → server"),
    ("engine/protocol/events.py", "import engine.limits\n", "engine.protocol.events → engine"),
    ("models/scripted.py", "def f():\n    from engine import gates\n", "models.scripted →"),
    ("models/speech/asr.py", "from models.cascade import llm\n", "models.speech.asr → models"),
    ("bench/load.py", "from tests.audio import clip\n", "bench.load → tests"),
    ("server/app.py", "from bench import load\n", "server.app → bench"),
    ("engine/protocol/beta.py", "from ..session import Session\n", "engine.protocol.beta →"),
    ("server/realtime.py", "from server.webrtc import Call\n", "server.realtime → server.webrtc"),
    ("server/calls.py", "from server.realtime import Ending\n", "server.calls → server.realtime"),
    ("server/sessions.py", "from server import playout\n", "server.sessions → server.playout"),
    ("server/webrtc.py", "from server.sessions import SessionHub\n", None),
    ("server/app.py", "from engine.session import Session\n", None),
    ("engine/session.py", "from engine.protocol import errors\nfrom models import base\n", None),
    ("engine/protocol/parse.py", "from engine.protocol.errors import ProtocolError\n", None),
    ("engine/protocol/parse.py", "from .errors import ProtocolError\n", None),
    ("models/cascade/pipeline.py", "from models.speech.tts import Synthesizer\n", None),
    ("tests/test_x.py", "from bench.speech import load_wav\nfrom server import app\n", None),
    (
        "models/listening/hearing.py",
        "from models.speech.tts import Synthesizer\n",
        "models.listening.hearing → models.speech.tts",
    ),
    (
        "models/listening/echo.py",
        "from models.cascade import pipeline\n",
        "models.listening.echo → models.cascade",
    ),
    (
        "models/listening/vad.py",
        "from models.scripted import ScriptedExecutor\n",
        "models.listening.vad → models.scripted",
    ),
    (
        "models/text_then_speech.py",
        "from models.listening.echo import FarEnd\n",
        "models.text_then_speech → models.listening",
    ),
    (
        "models/cascade/pipeline.py",
        "def f():\n    from models.listening import hearing\n",
        "models.cascade.pipeline → models.listening",
    ),
    (
        "models/speech/asr.py",
        "from models.listening.hearing import Hearing\n",
        "models.speech.asr → models.listening",
    ),
    (
        "models/listening/hearing.py",
        "from models.base import PCM_RATE\nfrom models.errors import ModelMissing\n"
        "from models.speech.audio import resample_int16\n"
        "from models.speech.files import cache_dir\n"
        "from models.speech.whisper_files import WHISPER_RATE\nfrom .frame_stage import RATE\n",
        None,
    ),
    ("engine/session.py", "from models.listening.echo import FarEnd\n", None),
    ("server/app.py", "from models.listening.hearing import WhisperHearing\n", None),
]


@pytest.mark.parametrize(("where", "source", "expected"), CASES)
def test_each_rule_finds_what_it_forbids(
    tmp_path: Path, where: str, source: str, expected: str | None
) -> None:
    path = tmp_path / where
    path.parent.mkdir(parents=True)
    path.write_text(source)
    found = violations(tmp_path)
    if expected is None:
        assert found == []
    else:
        assert len(found) == 1 and found[0].startswith(expected), found


def test_modules_import_no_test_module() -> None:
    """Shared test code lives in helper modules, never in another test module."""
    found = []
    for path in sorted((ROOT / "tests").rglob("*.py")):
        for imported in imported_modules(path, ROOT):
            if any(part.startswith("test_") for part in imported.split(".")):
                found.append(f"{module_name(path, ROOT)} → {imported}")
    assert found == []

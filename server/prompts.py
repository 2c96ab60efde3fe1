"""The operator's prompt templates, read once at start from PARLEY_PROMPTS_DIR.

Each `ID.txt` in the directory is the prompt `ID`; `ID@VERSION.txt` is one version of
it (a client naming `version` gets that file, one naming none gets `ID.txt`). Only
files directly in the directory whose names are plain (engine/prompts.py) are read;
subdirectories, links and any other file are skipped. Sessions then look ids up in
memory: no client string ever becomes a path.
"""

from __future__ import annotations

import logging
from pathlib import Path

from engine.prompts import PROMPT_ID, PROMPT_VERSION, PromptLibrary, key

log = logging.getLogger(__name__)

MAX_PROMPT_BYTES = 256 * 1024


def template_key(name: str) -> str | None:
    """The library key of a file named `name`, or None: not a prompt file."""
    if not name.endswith(".txt"):
        return None
    stem = name[: -len(".txt")]
    prompt_id, sep, version = stem.partition("@")
    if PROMPT_ID.fullmatch(prompt_id) is None:
        return None
    if sep and PROMPT_VERSION.fullmatch(version) is None:
        return None
    return key(prompt_id, version if sep else None)


def load_prompts(directory: Path) -> PromptLibrary:
    """The templates in `directory`; raises ValueError if it is no directory (the
    server stops at start rather than refuse every prompt) or a template is too big."""
    if not directory.is_dir():
        raise ValueError(f"PARLEY_PROMPTS_DIR {directory} is not a directory")
    templates: dict[str, str] = {}
    for path in sorted(directory.iterdir()):
        name = template_key(path.name)
        if name is None or path.is_symlink() or not path.is_file():
            continue
        if path.stat().st_size > MAX_PROMPT_BYTES:
            raise ValueError(f"prompt {path} is over {MAX_PROMPT_BYTES} bytes")
        templates[name] = path.read_text(encoding="utf-8").strip()
    log.info("%d prompts from %s", len(templates), directory)
    return PromptLibrary(templates)

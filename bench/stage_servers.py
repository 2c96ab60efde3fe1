"""Remote stages on loopback for bench/remote_stages.py: a speech server (ASR and TTS)
and a chat completions server, the test fakes that speak the real wire formats
(bench/fakes/speech.py, openai.py) paced like real servers, in a process
of their own so that they share neither a loop nor a GIL with Parley or the client.

  python -m bench.stage_servers [--asr-ms 100] [--llm-first-token-ms 150]
      [--tokens-per-s 30] [--tts-first-byte-ms 80] [--tts-speed 1.0]

It prints one JSON line, the two ports; then for each line read on stdin it prints the
stamps of every step the servers took since the last such line (time.monotonic(): one
clock for every process on the machine), and it ends when stdin closes.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import subprocess
import sys
from dataclasses import dataclass
from typing import IO

from bench.fakes.openai import running_fake_openai
from bench.fakes.speech import running_fake_speech

# What the language model answers every turn: three sentences whose first clause
# ("The weather today looks mild,") is five words long, so it is cut at its comma.
REPLY = (
    "The weather today looks mild, with sunshine most of the afternoon. "
    "Expect a light breeze from the west and clear skies tonight. "
    "Is there anything else you would like to know?"
)
SECONDS_PER_WORD = 0.3  # of speech: about Piper's (models/speech/first_clause.py)
CHUNK_S = 0.1  # of audio per chunk the fake speech server sends


@dataclass(frozen=True)
class Pacing:
    """How long each stage takes, as a real server's would."""

    asr_ms: float = 100.0  # the transcription's answer after its request
    llm_first_token_ms: float = 150.0  # the first word after the request
    tokens_per_s: float = 30.0  # then one word every 1/tokens_per_s
    tts_first_byte_ms: float = 80.0  # the first bytes of audio after the request
    tts_speed: float = 1.0  # then audio at this many times real time

    def args(self) -> list[str]:
        return [f"--{k.replace('_', '-')}={v}" for k, v in vars(self).items()]


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.stage_servers")
    for name, default in vars(Pacing()).items():
        p.add_argument(f"--{name.replace('_', '-')}", type=float, default=default)
    return p


async def serve(pacing: Pacing) -> None:
    speech_pacing = {
        "transcribe_s": pacing.asr_ms / 1000,
        "first_byte_s": pacing.tts_first_byte_ms / 1000,
        "chunk_s": CHUNK_S / pacing.tts_speed,
        "seconds_per_word": SECONDS_PER_WORD,
    }
    llm_pacing = {
        "first_token_s": pacing.llm_first_token_ms / 1000,
        "token_s": 1 / pacing.tokens_per_s,
        "reply": REPLY,
    }
    async with (
        running_fake_speech(**speech_pacing) as speech,
        running_fake_openai(**llm_pacing) as llm,
    ):
        print(json.dumps({"speech_port": speech.port, "llm_port": llm.port}), flush=True)
        while await asyncio.to_thread(sys.stdin.readline):
            stamps = speech.stamps + llm.stamps
            speech.stamps.clear()
            llm.stamps.clear()
            print(json.dumps(sorted(stamps, key=lambda s: s[1])), flush=True)


class StageServers:
    """bench.stage_servers in its own process, with the URLs Parley is given."""

    def __init__(self, pacing: Pacing) -> None:
        self.pacing = pacing
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bench.stage_servers", *pacing.args()],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        ports = json.loads(self._line())
        self.speech_url = f"http://127.0.0.1:{ports['speech_port']}"
        self.llm_url = f"http://127.0.0.1:{ports['llm_port']}"

    def _line(self) -> str:
        out: IO[str] | None = self.proc.stdout
        assert out is not None
        line = out.readline()
        if not line:
            raise RuntimeError(f"bench.stage_servers exited ({self.proc.wait()})")
        return line

    def env(self) -> dict[str, str]:
        """Parley's settings for all three stages on these servers."""
        return {
            "PARLEY_ASR_URL": f"{self.speech_url}/asr",
            "PARLEY_TTS_URL": f"{self.speech_url}/tts",
            "PARLEY_LLM_URL": f"{self.llm_url}/llm",
        }

    def stamps(self) -> list[tuple[str, float, str]]:
        """Every step the servers took since the last call, in time order."""
        assert self.proc.stdin is not None
        self.proc.stdin.write("\n")
        self.proc.stdin.flush()
        return [(step, t, text) for step, t, text in json.loads(self._line())]

    def stop(self) -> None:
        if self.proc.stdin is not None:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def main() -> None:
    asyncio.run(serve(Pacing(**vars(parser().parse_args()))))


if __name__ == "__main__":
    main()

"""Model servers that speak the real wire formats on 127.0.0.1, for the tests and
the benchmarks (bench/stage_servers.py): an OpenAI-compatible chat completions server
(openai.py), a speech server (speech.py), their pacing (throttle.py) and how they are
served (serving.py)."""

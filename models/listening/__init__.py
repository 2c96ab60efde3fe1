"""What hears the microphone: the VAD backends and their batcher (vad.py,
vad_batch.py), the end-of-turn model (smart_turn.py on turn_features.py), the
hearing recognizer of held speech (hearing.py), the echo guard (echo.py), the noise
suppressor (denoise.py, both on frame_stage.py) and the voice count (crowd.py).

The engine keeps the interfaces of those it is handed (engine/vad.py,
engine/end_of_turn.py, engine/interruption.py) and drives the rest itself. No executor
imports this package, and it imports no executor nor a stage that speaks: only
models.base, models.errors and the shared helpers of models/speech/ (audio.py,
files.py, whisper_files.py); tests/test_layers.py keeps it so."""

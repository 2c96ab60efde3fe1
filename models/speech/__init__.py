"""The speech stages every executor may use: recognition (asr.py), synthesis
(tts.py), sentence splitting (sentences.py), the transcript cache (transcripts.py),
speaking a streamed reply (speaker.py), model files (files.py, whisper_files.py) and
the voice options (voice.py). Nothing here imports one executor, nor what listens
(models/listening/)."""

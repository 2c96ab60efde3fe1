"""End-of-turn detection: the Smart Turn v3.2 model and its Whisper log-mel features."""

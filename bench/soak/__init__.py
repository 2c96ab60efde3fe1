"""The soak: many sessions of random client behaviour against one server for minutes,
watching its memory, errors, close codes and turn latency (`make soak`)."""

"""`parley serve`: run the realtime server."""

from __future__ import annotations

import argparse
import logging
import sys

import uvicorn

from server.app import create_app
from server.config import Settings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="parley", description="Parley realtime voice server")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="serve /v1/realtime over HTTP and WebSocket")
    serve.add_argument("--host", help="address to bind (PARLEY_HOST)")
    serve.add_argument("--port", type=int, help="port (PARLEY_PORT)")
    serve.add_argument("--executor", choices=["scripted"], help="model executor (PARLEY_EXECUTOR)")
    serve.add_argument("--model", help="model name reported to clients (PARLEY_MODEL)")
    serve.add_argument("--log-level", help="debug, info, warning (PARLEY_LOG_LEVEL)")
    args = parser.parse_args(argv)

    overrides = {k: v for k, v in vars(args).items() if k != "command" and v is not None}
    settings = Settings(**overrides)
    logging.basicConfig(
        level=settings.log_level.upper(), format="%(levelname)s %(name)s: %(message)s"
    )
    uvicorn.run(
        create_app(settings),
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level,
        ws_max_size=2 * settings.max_message_bytes,
        ws_per_message_deflate=False,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

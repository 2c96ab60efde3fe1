"""How the load and soak clients open a WebSocket: no compression, no proxy, no size
limit and no pings, so each frame costs the server what it costs a lean client."""

from __future__ import annotations

from websockets.asyncio.client import ClientConnection, connect


async def connect_lean(
    url: str, close_timeout: float, headers: dict[str, str] | None = None
) -> ClientConnection:
    return await connect(
        url,
        additional_headers=headers,
        compression=None,
        proxy=None,
        max_size=None,
        ping_interval=None,
        open_timeout=20,
        close_timeout=close_timeout,
    )

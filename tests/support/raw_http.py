"""Raw HTTP/1.1 on an asyncio stream, for servers that misbehave on purpose (closing without an answer,
answering something other than what was asked)."""

from __future__ import annotations

import asyncio


async def read_request(reader: asyncio.StreamReader) -> bytes:
    """Read one whole request (its body by its content-length); its head: the request line and headers."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    length = next(
        (int(line.split(b":")[1]) for line in lines if line.lower().startswith(b"content-length")), 0
    )
    await reader.readexactly(length)
    return head

"""A raw HTTP/1.1 client: sends exactly the request line, headers and body it is given.

Ordinary clients normalise what the fuzzer must control (the request target, header spelling,
repeated headers, framing), so one request is written byte for byte on a fresh connection and the
answer is read back with a small parser (Content-Length, chunked, or until close).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

#: Longest wait for one answer; a hung gateway becomes a failed case, not a hung run.
TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Reply:
    """One answer: status, reason phrase, headers in arrival order, the de-chunked body."""

    status: int
    reason: str
    headers: tuple[tuple[str, str], ...]
    body: bytes
    raw_head: bytes = field(repr=False, default=b"")

    def header(self, name: str) -> str | None:
        """First value of a header (case-insensitive), or None."""
        lowered = name.lower()
        return next((v for k, v in self.headers if k.lower() == lowered), None)

    def header_all(self, name: str) -> list[str]:
        """Every value of a header (case-insensitive)."""
        lowered = name.lower()
        return [v for k, v in self.headers if k.lower() == lowered]


class WireError(Exception):
    """No parseable answer arrived (connection closed early, timeout, malformed framing)."""


def encode_request(method: str, target: bytes, headers: list[tuple[str, str]], body: bytes, host: str) -> bytes:
    """The exact bytes of one request; ``Host`` and ``Content-Length`` are added unless given."""
    names = {k.lower() for k, _ in headers}
    lines = [method.encode("latin-1") + b" " + target + b" HTTP/1.1"]
    if "host" not in names:
        lines.append(b"Host: " + host.encode())
    lines.extend(k.encode("latin-1") + b": " + v.encode("utf-8") for k, v in headers)
    if "content-length" not in names and "transfer-encoding" not in names and (body or method in ("POST", "PUT")):
        lines.append(b"Content-Length: " + str(len(body)).encode())
    lines.append(b"Connection: close")
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    out = bytearray()
    while True:
        size_line = await reader.readline()
        if not size_line:
            raise WireError("chunked body ended early")
        size = int(size_line.split(b";", 1)[0].strip() or b"0", 16)
        if size == 0:
            while (await reader.readline()).strip():  # trailers
                pass
            return bytes(out)
        out += await reader.readexactly(size)
        await reader.readexactly(2)


def parse_head(head: bytes) -> tuple[int, str, tuple[tuple[str, str], ...]]:
    """Status, reason phrase and headers of a response head (without the blank line)."""
    first, *rest = head.split(b"\r\n")
    parts = first.split(b" ", 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
        raise WireError("malformed status line")
    headers = []
    for line in rest:
        name, sep, value = line.partition(b":")
        if not sep:
            raise WireError("malformed header line")
        headers.append((name.decode("latin-1").strip(), value.decode("latin-1").strip()))
    return int(parts[1]), parts[2].decode("latin-1") if len(parts) > 2 else "", tuple(headers)


async def _exchange(host: str, port: int, raw: bytes, method: str) -> Reply:
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(raw)
        await writer.drain()
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError:
            raise WireError("connection closed before an answer") from None
        status, reason, headers = parse_head(head[:-4])
        lowered = {k.lower(): v for k, v in headers}
        if method == "HEAD" or status in (204, 304) or 100 <= status < 200:
            body = b""
        elif "chunked" in lowered.get("transfer-encoding", "").lower():
            body = await _read_chunked(reader)
        elif (length := lowered.get("content-length", "")).isdigit():
            body = await reader.readexactly(int(length))
        else:
            body = await reader.read()
        return Reply(status, reason, headers, body, head)
    except (asyncio.IncompleteReadError, ValueError) as exc:
        raise WireError(type(exc).__name__) from None
    finally:
        writer.close()
        try:
            await writer.wait_closed()
        except (ConnectionError, OSError):
            pass


async def send(
    base_url: str,
    method: str,
    target: bytes,
    headers: list[tuple[str, str]],
    body: bytes = b"",
    *,
    timeout_s: float = TIMEOUT_S,
) -> Reply:
    """Send one request to ``http://host:port`` and read its answer."""
    hostport = base_url.removeprefix("http://").rstrip("/")
    host, _, port = hostport.rpartition(":")
    raw = encode_request(method, target, headers, body, hostport)
    try:
        return await asyncio.wait_for(_exchange(host, int(port), raw, method), timeout_s)
    except (TimeoutError, ConnectionError, OSError) as exc:
        raise WireError(type(exc).__name__) from None

"""One fuzz case: the request to send, the state to build first, the upstream fault to arm.

Cases are plain frozen data drawn by hypothesis. They never hold a secret or a sentinel value,
only placeholders, so a failing case prints as a content-free reproducer and can be replayed
against a fresh stack.
"""

from __future__ import annotations

import gzip
import zlib
from dataclasses import dataclass, field
from typing import Literal
from urllib.parse import quote

from sidecar.dev.fuzz.chaos import Fault
from sidecar.dev.fuzz.jsondoc import Doc, Env, Ph, Str, display, placeholders, to_bytes

Value = str | Ph | Str
Encoding = Literal["identity", "gzip", "deflate"]


@dataclass(frozen=True)
class Request:
    """A request exactly as it will be written: method, target parts, headers, body."""

    method: str
    target: tuple[Value, ...]
    headers: tuple[tuple[str, Value], ...] = ()
    body: Doc | bytes | None = None
    encoding: Encoding = "identity"  # how the body bytes are compressed (the header says what it claims)
    chunked: bool = False

    def names(self) -> set[str]:
        """Every placeholder the request uses."""
        out: set[str] = set()
        for value in (*self.target, *(v for _, v in self.headers)):
            out |= _names(value)
        if isinstance(self.body, Doc):
            out |= placeholders(self.body.value)
        return out

    def wire(self, env: Env) -> tuple[bytes, list[tuple[str, str]], bytes]:
        """Target, headers and body bytes with every placeholder filled in."""
        target = "".join(quote(_plain(p, env), safe="") if not isinstance(p, str) else p for p in self.target)
        headers = [(k, _plain(v, env)) for k, v in self.headers]
        body = self.plain_body(env)
        if self.encoding == "gzip":
            body = gzip.compress(body, mtime=0)
        elif self.encoding == "deflate":
            body = zlib.compress(body)
        if self.chunked:
            headers.append(("Transfer-Encoding", "chunked"))
            body = b"".join(f"{len(c):x}\r\n".encode() + c + b"\r\n" for c in _chunks(body)) + b"0\r\n\r\n"
        return target.encode("utf-8", "surrogateescape"), headers, body

    def plain_body(self, env: Env) -> bytes:
        """The body before compression and framing."""
        if self.body is None:
            return b""
        return to_bytes(self.body, env) if isinstance(self.body, Doc) else self.body

    def show(self) -> list[str]:
        """Content-free lines describing the request."""
        target = "".join(p if isinstance(p, str) else f"«{_show(p)}»" for p in self.target)
        lines = [f"{self.method} {target}"]
        lines += [f"{k}: {_show(v)}" for k, v in self.headers]
        if self.chunked:
            lines.append("Transfer-Encoding: chunked")
        if self.body is not None:
            body = display(self.body) if isinstance(self.body, Doc) else _bytes(self.body)
            lines.append(("" if self.encoding == "identity" else f"[{self.encoding}-compressed] ") + body)
        return lines


@dataclass(frozen=True)
class Setup:
    """State built before the request: a consented scope and what it already holds."""

    scope: bool = False
    new_conversation: bool = True
    preseed: int = 0
    regrant: bool = False
    consent: bool = True
    confirm: Literal["", "forget_all", "off"] = ""  # control: first call already made
    erasure: bool = False  # control: one verified erasure already recorded


@dataclass(frozen=True)
class Case:
    """One fuzz case on either plane."""

    plane: Literal["data", "control"]
    route: str  # data: the contract family; control: the operationId
    request: Request
    setup: Setup = field(default_factory=Setup)
    fault: Fault | None = None
    epilogue: bool = False  # data: withdraw consent afterwards and check the evidence
    caller: str = ""  # control: the credential class of the Authorization header

    def show(self) -> str:
        """The content-free reproducer text."""
        lines = [f"plane={self.plane} route={self.route}" + (f" caller={self.caller}" if self.caller else "")]
        lines.append(f"setup: {self.setup}")
        if self.fault is not None:
            f = self.fault
            lines.append(f"upstream fault: {f.upstream} {f.kind} prefix={f.prefix} status={f.status} text=«S:fault»")
        if self.epilogue:
            lines.append("epilogue: withdraw consent, then compare the evidence with kagent's table")
        return "\n".join(lines + ["  " + line for line in self.request.show()])


def _names(value: Value) -> set[str]:
    if isinstance(value, Ph):
        return {value.name}
    if isinstance(value, Str):
        return {p.name for p in value.parts if isinstance(p, Ph)}
    return set()


def _plain(value: Value, env: Env) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, Ph):
        return env[value.name]
    return "".join(p if isinstance(p, str) else env[p.name] for p in value.parts) + value.pad * value.pad_n


def _show(value: Value) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, Ph):
        return value.name
    text = "".join(p if isinstance(p, str) else f"«{p.name}»" for p in value.parts)
    return text + (f"«{value.pad!r}×{value.pad_n}»" if value.pad_n else "")


def _bytes(body: bytes) -> str:
    """Raw bytes as a repr, long ones cut (they are repetitive: deep nesting, fillers)."""
    return repr(body) if len(body) <= 120 else f"{body[:60]!r}«… {len(body)} bytes in all»"


def _chunks(body: bytes) -> list[bytes]:
    size = max(1, len(body) // 3)
    return [body[i : i + size] for i in range(0, len(body), size)] or []

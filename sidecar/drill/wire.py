"""The drill's one HTTP session: every answer is recorded for the sentinel scan.

A client middleware keeps the status, headers and body of every response the drill receives,
from the data plane, the control API, the operations listener and kagent alike. Answers that
legitimately carry memory text (the subject's own inspect pages, the owning runtime's search
results, agent replies) are marked as a content channel: their headers are still scanned, their
bodies are not. Nothing recorded here is written to the evidence bundle.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import aiohttp

_CHANNEL: contextvars.ContextVar[bool] = contextvars.ContextVar("drill_content_channel", default=False)
#: How long one drill request may take; a hung gateway fails the check instead of the whole run.
TIMEOUT = aiohttp.ClientTimeout(total=60, connect=5)


@dataclass(frozen=True)
class Exchange:
    """One answer as the drill received it."""

    method: str
    status: int
    headers: tuple[tuple[str, str], ...]
    body: bytes
    content_channel: bool

    def scannable(self) -> str:
        """Status, headers and (outside a content channel) the body; the drill's own URL is not a sink."""
        head = f"{self.method} {self.status}\n" + "\n".join(f"{k}: {v}" for k, v in self.headers)
        return head if self.content_channel else head + "\n" + self.body.decode("utf-8", "replace")


class Recorder:
    """Collects every exchange of one session."""

    def __init__(self) -> None:
        self.exchanges: list[Exchange] = []

    @staticmethod
    @contextmanager
    def content_channel() -> Iterator[None]:
        """Mark the answers received inside the block as legitimate carriers of memory text."""
        token = _CHANNEL.set(True)
        try:
            yield
        finally:
            _CHANNEL.reset(token)

    async def middleware(
        self, request: aiohttp.ClientRequest, handler: aiohttp.ClientHandlerType
    ) -> aiohttp.ClientResponse:
        """Read and keep the answer; the body stays cached for the caller."""
        resp = await handler(request)
        body = await resp.read()
        self.exchanges.append(Exchange(request.method, resp.status, tuple(resp.headers.items()), body, _CHANNEL.get()))
        return resp

    def texts(self, since: int = 0) -> list[str]:
        """Everything scannable, from exchange number ``since`` on."""
        return [e.scannable() for e in self.exchanges[since:]]


def open_session(recorder: Recorder) -> aiohttp.ClientSession:
    """The session every drill request goes through."""
    return aiohttp.ClientSession(timeout=TIMEOUT, middlewares=(recorder.middleware,))


@dataclass(frozen=True)
class Decision:
    """The parsed ``X-Memgov-Decision`` header (empty when the answer carried none)."""

    action: str
    reason: str
    decision_id: str

    @classmethod
    def parse(cls, value: str | None) -> Decision:
        """``<action>; reason=<code>; id=<decision_id>``."""
        if not value:
            return cls("", "", "")
        action, *params = [p.strip() for p in value.split(";")]
        fields = dict(p.partition("=")[::2] for p in params)
        return cls(action, fields.get("reason", ""), fields.get("id", ""))

    def brief(self) -> dict[str, str]:
        """Evidence form: action, reason code and decision id."""
        return {"action": self.action, "reason": self.reason, "decision_id": self.decision_id}


@dataclass(frozen=True)
class Answer:
    """A data-plane answer: status, parsed JSON (or None) and the decision."""

    status: int
    body: object
    decision: Decision

    @property
    def reason(self) -> str:
        """The refusal code of an error body, else the decision's reason."""
        if isinstance(self.body, dict) and isinstance(self.body.get("error"), str):
            return str(self.body["error"])
        return self.decision.reason

    def brief(self) -> dict[str, int | str]:
        """Evidence form: status, action, reason code, decision id."""
        return {"status": self.status, **self.decision.brief(), "reason": self.reason}

    def ids(self) -> list[str]:
        """Entry ids of a search or list answer."""
        rows = self.body if isinstance(self.body, list) else []
        return [str(r["id"]) for r in rows if isinstance(r, dict) and "id" in r]


async def call(
    http: aiohttp.ClientSession, method: str, url: str, *, json: object = None, headers: dict[str, str] | None = None
) -> Answer:
    """One request; the answer is parsed leniently (non-JSON bodies become None)."""
    async with http.request(method, url, json=json, headers=headers) as resp:
        try:
            body: object = await resp.json(content_type=None)
        except ValueError:
            body = None
        return Answer(resp.status, body, Decision.parse(resp.headers.get("X-Memgov-Decision")))

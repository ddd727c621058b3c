"""The parts the drill plays: the bridge, the subjects, an operator, and the agent runtime.

:class:`DrillRun` holds one run's session, clock and bookkeeping (the throwaway identities,
rooms and scopes it created, the sentinels it planted) and offers the few moves every check is
made of: create and consent a scope, invoke an agent with a signed context, save and search as
the runtime with a computed session key, inspect as the subject.
"""

from __future__ import annotations

import functools
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol, TypedDict
from urllib.parse import urlencode

import aiohttp

from sidecar.control.client import ControlClient, ControlError, JsonAnswers, Token
from sidecar.drill.result import CheckFailed
from sidecar.drill.sentinels import make_sentinel
from sidecar.drill.target import Agent, Target
from sidecar.drill.wire import Answer, Recorder, call
from sidecar.identity.keys import SessionKeys, new_salt, storage_key
from sidecar.identity.tokens import control_room, mint_context, mint_operator, mint_subject

#: Every fact and query the drill sends has this vector: search then ranks nothing out by similarity.
VECTOR: tuple[float, ...] = (0.036,) * 768
PURPOSE, POLICY_VERSION = "memgov drill: throwaway acceptance proof", "drill-1"
#: A JSON-RPC call that gets a governed decision without running a model turn.
PROBE_RPC = {"jsonrpc": "2.0", "id": 1, "method": "tasks/get", "params": {"id": "memgov-drill-probe"}}


class LocalView(Protocol):
    """What the in-process devstack lets the drill see beyond the deployment's own interfaces."""

    @property
    def clock(self) -> Callable[[], datetime]:
        """The test clock the gateway and the stand-ins share."""

    def advance(self, seconds: float) -> None:
        """Move the shared test clock forward."""

    async def kagent_rows(self, scope_id: str) -> int:
        """Rows kagent holds in any namespace of the scope."""

    async def kagent_ttl_days(self, entry_id: str) -> float | None:
        """The lifetime kagent gave a row (expires_at - created_at), in days."""

    async def sink_texts(self) -> dict[str, str]:
        """Captured logs and audit rows, by sink name."""


@dataclass
class Scope:
    """A throwaway scope the run created."""

    scope_id: str
    subject: str
    agent: Agent
    room: str
    generation: int


class DrillRun:
    """One drill run against one target."""

    def __init__(
        self,
        target: Target,
        http: aiohttp.ClientSession,
        recorder: Recorder,
        *,
        clock: Callable[[], datetime] | None = None,
        local: LocalView | None = None,
    ) -> None:
        self.target, self.http, self.recorder, self.local = target, http, recorder, local
        self.clock = clock or (lambda: datetime.now(UTC))
        self.run_id = secrets.token_hex(3)
        self.keys = SessionKeys(target.session_secret)
        self.subjects: list[str] = []
        self.sentinels: list[str] = []
        self._rooms = 0

    # --- identities ---------------------------------------------------------------------------
    def subject(self, tag: str, server: str | None = None) -> str:
        """A throwaway MXID derived from the target's subject, one per check and role."""
        local = self.target.subject[1:].split(":", 1)[0]
        mxid = f"@{local}-{self.run_id}-{tag}:{server or self.target.server_name}"
        if mxid not in self.subjects:
            self.subjects.append(mxid)
        return mxid

    def room(self) -> str:
        """A fresh room id on the target room's server."""
        self._rooms += 1
        opaque, server = self.target.room[1:].split(":", 1)
        return f"!{opaque}-{self.run_id}-{self._rooms}:{server}"

    def fact(self, tag: str) -> str:
        """A fact text carrying a fresh sentinel (kept only in memory, never in evidence)."""
        sentinel = make_sentinel(tag)
        self.sentinels.append(sentinel)
        return f"memgov drill fact {sentinel}"

    # --- the bridge and the operator ----------------------------------------------------------
    def _now(self) -> int:
        return int(self.clock().timestamp())

    def context(
        self,
        subject: str,
        agent: Agent,
        room: str,
        *,
        origin: str = "native",
        servers: list[str] | None = None,
        members: list[str] | None = None,
        acl_allow: list[str] | None = None,
        classification: str | None = None,
    ) -> str:
        """A signed delegation context; by default it attests a correct control room."""
        t = self.target
        state = control_room(members if members is not None else [subject, t.bridge_bot, agent.ghost], t.server_name)
        if acl_allow is not None and isinstance(acl := state["server_acl"], dict):
            state["server_acl"] = {**acl, "allow": acl_allow}
        return mint_context(
            t.bridge_key.material,
            t.bridge_key.alg,
            sub=subject,
            origin=origin,
            agent=agent.ref,
            room_id=room,
            room=state,
            servers=servers or [t.server_name],
            classification=classification or t.classification,
            now=self._now(),
        )

    def subject_token(self, subject: str) -> str:
        """The bridge's bearer token for ``subject`` acting for itself (single-use for state changes)."""
        return mint_subject(subject, self.target.bridge_key.material, self.target.bridge_key.alg, now=self._now())

    def operator_token(self) -> str:
        return mint_operator(
            "memgov-drill", self.target.operator_key.material, self.target.operator_key.alg, now=self._now()
        )

    def control(self, subject: str | None = None, *, operator: bool = False) -> JsonAnswers:
        """A control client on the run's session, as ``subject``, as an operator, or anonymous.

        Each call carries a freshly minted token, as a bridge would send.
        """
        token: Token = None
        if operator:
            token = self.operator_token
        elif subject:
            token = functools.partial(self.subject_token, subject)
        return JsonAnswers(ControlClient(self.target.control_url, token, session=self.http))

    # --- scopes -------------------------------------------------------------------------------
    async def new_scope(
        self, subject: str, agent: Agent | None = None, *, consent: bool = True, origin: str = "native"
    ) -> Scope:
        """Create a scope in a fresh room and, unless told otherwise, consent to it."""
        agent = agent or self.target.agents[0]
        room = self.room()
        control = self.control(subject)
        created = await control.create_scope(subject, agent.ref, room, origin=origin)
        scope = Scope(created["scope_id"], subject, agent, room, int(created["generation"]))
        if consent:
            granted = await control.grant(scope.scope_id, PURPOSE, POLICY_VERSION)
            scope.generation = int(granted["generation"])
        return scope

    async def status(self, scope: Scope) -> dict[str, Any]:
        """The scope's status as its subject sees it; keeps the known generation current."""
        answer: dict[str, Any] = await self.control(scope.subject).status(scope.scope_id)
        scope.generation = int(answer["generation"])
        return answer

    def key(self, scope: Scope, generation: int | None = None) -> str:
        """The session key the gateway hands the runtime for this scope."""
        return self.keys.session_key(scope.scope_id, scope.generation if generation is None else generation)

    @staticmethod
    def guessed_storage_keys(scope: Scope) -> list[str]:
        """What someone holding the scope's session key could try as its kagent ``user_id``.

        The real storage key carries a random salt only memgov's state knows (SPEC D2); these are
        the unsalted form derived from the session key and the real shape with a guessed salt.
        """
        return [
            storage_key(scope.scope_id, scope.generation, ""),
            storage_key(scope.scope_id, scope.generation, new_salt()),
        ]

    async def inspect_all(self, scope: Scope) -> list[dict[str, Any]]:
        """Every entry, as the subject, with a fresh attested context per page."""

        async def contexts() -> AsyncIterator[str]:
            while True:
                yield self.context(scope.subject, scope.agent, scope.room)

        with Recorder.content_channel():
            entries: list[dict[str, Any]] = await self.control(scope.subject).inspect_all(scope.scope_id, contexts())
        return entries

    # --- the data plane -----------------------------------------------------------------------
    async def invoke(self, agent: Agent, context: str | None, *, user: str, text: str | None = None) -> Answer:
        """Invoke ``agent`` as the bridge; without ``text`` a probe call that runs no model turn."""
        ns, name = agent.ref.split("/", 1)
        body: dict[str, object] = PROBE_RPC
        if text is not None:
            message = {"role": "user", "messageId": secrets.token_hex(6), "parts": [{"kind": "text", "text": text}]}
            body = {"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {"message": message}}
        headers = {"X-User-Id": user, **self.target.kagent_auth()}
        if context is not None:
            headers["X-Memgov-Context"] = context
        with Recorder.content_channel():  # an agent's reply is its own output
            return await call(
                self.http, "POST", f"{self.target.data_url}/api/a2a/{ns}/{name}/", json=body, headers=headers
            )

    def _item(self, key: str, app: str, content: str, ttl_days: int | None) -> dict[str, object]:
        item: dict[str, object] = {"agent_name": app, "user_id": key, "content": content, "vector": list(VECTOR)}
        if ttl_days is not None:
            item["ttl_days"] = ttl_days
        return item

    async def save(
        self,
        key: str,
        content: str,
        *,
        app: str,
        ttl_days: int | None = None,
        header_app: str | None = None,
        url: str | None = None,
    ) -> Answer:
        """One ``save_memory`` call as the runtime."""
        headers = {"X-Agent-Name": header_app or app, "X-User-Id": key, **self.target.kagent_auth()}
        return await call(
            self.http,
            "POST",
            f"{url or self.target.data_url}/api/memories/sessions",
            json=self._item(key, app, content, ttl_days),
            headers=headers,
        )

    async def save_batch(self, key: str, contents: list[str], *, app: str) -> Answer:
        """One auto-save batch as the runtime (charged to the hourly budget, not the sender rate)."""
        body = {"items": [self._item(key, app, c, None) for c in contents]}
        return await call(
            self.http,
            "POST",
            f"{self.target.data_url}/api/memories/sessions/batch",
            json=body,
            headers={"X-Agent-Name": app, "X-User-Id": key, **self.target.kagent_auth()},
        )

    async def remember(self, scope: Scope, count: int, tag: str) -> list[str]:
        """Save ``count`` sentinel facts into the scope in one batch; returns their texts."""
        facts = [self.fact(f"{tag}{i}") for i in range(count)]
        answer = await self.save_batch(self.key(scope), facts, app=scope.agent.app)
        if answer.status != 201 or not isinstance(answer.body, dict) or answer.body.get("count") != count:
            raise CheckFailed("consented_save_refused", save=answer.brief())
        return facts

    async def search(
        self, key: str, *, app: str, header_app: str | None = None, owner: bool = False, url: str | None = None
    ) -> Answer:
        """One memory search as the runtime; ``owner`` marks the answer as the key holder's own."""
        body = {"agent_name": app, "user_id": key, "vector": list(VECTOR), "limit": 10, "min_score": 0.0}
        headers = {"X-Agent-Name": header_app or app, "X-User-Id": key, **self.target.kagent_auth()}
        if owner:
            with Recorder.content_channel():
                return await call(
                    self.http, "POST", f"{self.target.data_url}/api/memories/search", json=body, headers=headers
                )
        return await call(
            self.http, "POST", f"{url or self.target.data_url}/api/memories/search", json=body, headers=headers
        )

    async def list_route(self, user_id: str, *, app: str, url: str | None = None) -> Answer:
        """kagent's whole-namespace list (its UI route) with a chosen user id."""
        query = urlencode({"agent_name": app, "user_id": user_id})
        return await call(
            self.http,
            "GET",
            f"{url or self.target.data_url}/api/memories?{query}",
            headers={"X-User-Id": user_id, **self.target.kagent_auth()},
        )


class RefusalSeen(TypedDict):
    """How the control API answered a call that should be refused (status 200 when it was not)."""

    status: int
    reason: str | None
    decision_id: str | None


async def refusal(pending: Awaitable[object]) -> RefusalSeen:
    """Await a control call that should be refused; its status, reason code and decision id."""
    try:
        await pending
    except ControlError as exc:
        return {"status": exc.status, "reason": exc.reason, "decision_id": exc.decision_id}
    return {"status": 200, "reason": None, "decision_id": None}

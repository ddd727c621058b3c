"""``memgov drill --devstack``: a throwaway deployment in this process to run the drill against.

The kagent and embedding stand-ins and a gateway run on loopback with a shared test clock, fresh
keys in a temporary folder, and a copy of the packaged policy pack whose only change is a small
entry cap, so the cap can be reached within the packaged hourly budget. Beyond the deployment's
own interfaces the drill may look at three things here: the clock (to reach a hard expiry), the
stand-in's memory table (row counts and lifetimes, never content) and the gateway's captured
logs, audit rows and the controller's log (scanned for sentinels).
"""

from __future__ import annotations

import io
import tempfile
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp

from sidecar.dev.devstack import definitions
from sidecar.dev.devstack.clock import DevClock
from sidecar.dev.devstack.deployment import devstack_config, memory_agents, pack_with_limits, serving, write_keys
from sidecar.dev.devstack.stack import Devstack, start_devstack
from sidecar.drill.target import Agent, Target, load_signing_key
from sidecar.logs import configure_logging
from sidecar.policy.pack import load_federation, load_limits
from sidecar.server import Gateway

SERVER = "drill.example"
SUBJECT = f"@drill:{SERVER}"
BOT = f"@bridge:{SERVER}"
ROOM = f"!drill:{SERVER}"
AGENTS = (("drill/helper", f"@drill-helper:{SERVER}"), ("drill/notes", f"@drill-notes:{SERVER}"))
#: The devstack's entry cap: small, so filling a scope fits in the packaged hourly budget.
CAP = 5
#: The model the drill's agents embed with (the stand-in provider answers for any name).
EMBEDDING_MODEL = "devstack-embedding"


class LocalStack:
    """The devstack's extra views for the drill (see :class:`sidecar.drill.actors.LocalView`)."""

    def __init__(self, clock: DevClock, dev: Devstack, gw: Gateway, logs: io.StringIO) -> None:
        self.clock, self.dev, self.gw, self.logs = clock, dev, gw, logs

    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)

    async def kagent_rows(self, scope_id: str) -> int:
        return sum(1 for r in await self.dev.store.rows() if (r.user_id or "").startswith(f"mgs1.{scope_id}."))

    async def kagent_ttl_days(self, entry_id: str) -> float | None:
        row = next((r for r in await self.dev.store.rows() if r.id == entry_id), None)
        if row is None or row.created_at is None or row.expires_at is None:
            return None
        return (row.expires_at - row.created_at).total_seconds() / 86400

    async def sink_texts(self) -> dict[str, str]:
        gov = self.gw.parts
        audit = repr(await gov.store.audit_log.audit_rows(limit=1_000_000)) if gov is not None else ""
        return {"logs": self.logs.getvalue(), "audit_rows": audit, "kagent_log": self.dev.kagent_log()}


@asynccontextmanager
async def devstack_target(
    dev: Devstack | None = None,
    *,
    erasure: Mapping[str, Any] | None = None,
    kagent_token: str | None = None,
    agents: Mapping[str, Mapping[str, Any]] | None = None,
    declare: bool = False,
) -> AsyncIterator[tuple[Target, LocalStack]]:
    """Start the stand-ins and a gateway; yield the drill's target and the local views; stop all.

    A caller may bring its own ``dev`` (e.g. with kagent v0.9.11 itself attached, whose clock must be
    a DevClock), the gateway's erasure settings, ``kagent_token`` for kagent's trusted-proxy mode,
    and the agents' settings (for :data:`AGENTS`; by default each with the stand-in's model pinned).
    With ``declare``, each drill agent's definition (an Agent whose memory names a ModelConfig of the
    stand-in's model) is created in kagent before the gateway starts, as a cluster holds it.
    """
    own = dev is None
    clock, logs = dev.clock if dev is not None else DevClock(), io.StringIO()
    assert isinstance(clock, DevClock), "the drill moves the shared clock"
    configure_logging("debug", logs)  # every level, so the sentinel scan sees everything logged
    try:
        with tempfile.TemporaryDirectory(prefix="memgov-drill-") as tmp:
            folder = Path(tmp)
            keys, pack = write_keys(folder), pack_with_limits(folder, {"max_entries": CAP})
            dev = dev if dev is not None else await start_devstack(clock=clock)
            try:
                if declare:
                    auth = {"Authorization": f"Bearer {kagent_token}"} if kagent_token else {}
                    async with aiohttp.ClientSession() as http:
                        await definitions.declare(
                            http, dev.kagent_url, {ref: EMBEDDING_MODEL for ref, _ in AGENTS}, headers=auth
                        )
                config = devstack_config(
                    dev,
                    keys,
                    server=SERVER,
                    bridge_bot=BOT,
                    pack=pack,
                    # The stand-in provider serves any model; pinning one lets forget-one rotate (exact over REST).
                    agents=agents if agents is not None else memory_agents(AGENTS, model=EMBEDDING_MODEL),
                    upstream={"kagent_auth_mode": "trusted-proxy" if kagent_token else "unsecure"},
                    erasure=dict(erasure or {}),
                )
                async with serving(config, clock) as gw:
                    target = Target(
                        mode="devstack",
                        data_url=gw.data_url,
                        control_url=gw.control_url,
                        ops_url=gw.ops_url,
                        kagent_url=None,
                        bridge_key=load_signing_key(keys.bridge_file, "bridge key"),
                        operator_key=load_signing_key(keys.operator_file, "operator key"),
                        session_secret=keys.session,
                        server_name=SERVER,
                        bridge_bot=BOT,
                        subject=SUBJECT,
                        room=ROOM,
                        agents=tuple(Agent.of(ref, ghost) for ref, ghost in AGENTS),
                        classification=load_federation(pack).classification,
                        limits=load_limits(pack),
                        kagent_token=kagent_token,
                    )
                    yield target, LocalStack(clock, dev, gw, logs)
            finally:
                if own:
                    await dev.stop()
    finally:
        configure_logging("info")

"""``memgov demo``: the whole story against the stand-ins, printed step by step.

Everything runs in this process on loopback: the kagent v0.9.11 stand-in (with a simulated Python
runtime that makes the memory and embedding calls a real agent makes), the embedding stand-in,
and a gateway in front of both. The demo plays the bridge: it mints delegation contexts and
subject tokens with a throwaway key. Nothing is kept when it ends.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import secrets
from typing import Any

import aiohttp

from sidecar.contentstore.reembed import TARGET_DIM
from sidecar.control.client import ControlClient, ControlError
from sidecar.dev.devstack.clock import DevClock
from sidecar.dev.devstack.deployment import local_gateway, memory_agents
from sidecar.dev.devstack.runtime import RuntimeConfig
from sidecar.identity.tokens import control_room, mint_context, mint_subject
from sidecar.logs import configure_logging
from sidecar.policy import load_federation
from sidecar.settings import PACKAGED_POLICY_DIR

SERVER = "demo.example"
ALICE = f"@alice:{SERVER}"
BOT = f"@bridge:{SERVER}"
GHOST = f"@k8s-agent:{SERVER}"
AGENT = "kagent/k8s-agent"
ROOM = f"!alice-control:{SERVER}"
RECALL = "Tell me what my favourite tea is, please. I would like a cup this afternoon."


class Story:
    """Prints numbered steps and what memgov decided."""

    def __init__(self) -> None:
        self.step = 0

    def say(self, title: str) -> None:
        self.step += 1
        print(f"\n[{self.step}] {title}")

    @staticmethod
    def note(text: str) -> None:
        print(f"    {text}")


class Bridge:
    """The demo's stand-in for the Matrix bridge: signs contexts and subject tokens."""

    def __init__(self, key: bytes, clock: DevClock, classification: str) -> None:
        self.key, self.clock, self.classification = key, clock, classification

    def context(self) -> str:
        now = int(self.clock().timestamp())
        return mint_context(
            self.key,
            "HS256",
            sub=ALICE,
            agent=AGENT,
            room_id=ROOM,
            room=control_room([ALICE, BOT, GHOST], SERVER),
            servers=[SERVER],
            classification=self.classification,
            now=now,
        )

    def subject_token(self) -> str:
        """A fresh, single-use bearer token for Alice (consent changes and erasures spend it)."""
        return mint_subject(ALICE, self.key, "HS256", now=int(self.clock().timestamp()))


async def _say_to_agent(
    http: aiohttp.ClientSession, data_url: str, text: str, *, context: str | None, conversation: str | None = None
) -> tuple[str, str]:
    message: dict[str, Any] = {
        "role": "user",
        "messageId": secrets.token_hex(4),
        "parts": [{"kind": "text", "text": text}],
    }
    if conversation:
        message["contextId"] = conversation
    headers = {"X-User-Id": ALICE}
    if context:
        headers["X-Memgov-Context"] = context
    body = {"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {"message": message}}
    async with http.post(f"{data_url}/api/a2a/{AGENT}/", json=body, headers=headers) as resp:
        answer = await resp.json(content_type=None)
        decision = resp.headers.get("X-Memgov-Decision", "")
    parts = answer.get("result", {}).get("parts", []) if isinstance(answer, dict) else []
    reply = " ".join(p.get("text", "") for p in parts if isinstance(p, dict))
    return decision, reply


async def run_demo() -> int:
    story = Story()
    clock = DevClock()
    async with local_gateway(
        "memgov-demo-",
        clock,
        server=SERVER,
        bridge_bot=BOT,
        # The stand-in runtime's model, declared as the chart renders an Agent's memory ModelConfig.
        agents=memory_agents([(AGENT, GHOST)], model=RuntimeConfig.embedding_model, dimensions=TARGET_DIM),
    ) as local:
        bridge = Bridge(local.keys.bridge, clock, load_federation(PACKAGED_POLICY_DIR).classification)
        dev, gw = local.dev, local.gw
        dev.set_runtime(
            RuntimeConfig(
                memory_base_url=gw.data_url,
                embedding_base_url=f"{gw.data_url}/embeddings/{AGENT}/v1",
                memory_agents=frozenset({AGENT}),
            )
        )
        async with ControlClient(gw.control_url, bridge.subject_token) as control:
            await _story(story, dev, gw, local.http, control, bridge, clock)
    print("\nDone: every step above was decided by memgov; nothing was remembered without consent.")
    return 0


async def _story(
    story: Story,
    dev: Any,
    gw: Any,
    http: aiohttp.ClientSession,
    control: ControlClient,
    bridge: Bridge,
    clock: DevClock,
) -> None:
    story.say("Alice talks to k8s-agent before consenting to memory")
    decision, reply = await _say_to_agent(
        http, gw.data_url, "remember: my favourite tea is sencha", context=bridge.context()
    )
    story.note(f"memgov: {decision}")
    story.note(f"answered by: {dev.recorder.of_kind('a2a')[-1].agent} (no memory tools at all)")
    story.note(f"rows in kagent's memory table: {len(await dev.store.rows())}")

    story.say("Alice creates her scope and gives explicit, versioned consent (control API)")
    scope = await control.create_scope(ALICE, AGENT, ROOM)
    receipt = await control.grant(scope.scope_id, "remember my preferences", "privacy-v1")
    story.note(f"scope {scope.scope_id}: enabled={receipt.enabled} generation={receipt.generation}")

    story.say("Alice asks the agent to remember something")
    decision, reply = await _say_to_agent(
        http, gw.data_url, "remember: my favourite tea is sencha", context=bridge.context()
    )
    story.note(f"memgov: {decision}")
    story.note(f"X-User-Id kagent received: {dev.recorder.of_kind('a2a')[-1].user_id_header[:24]}… (session key)")
    story.note(_last_line(reply, "memory calls"))
    rows = await dev.store.rows()
    story.note(f"kagent stored {len(rows)} row(s) under user_id {rows[0].user_id if rows else '-'} (never the MXID)")

    story.say("A new conversation: the agent prefetches what it knows about Alice")
    decision, reply = await _say_to_agent(http, gw.data_url, RECALL, context=bridge.context())
    story.note(f"memgov: {decision}")
    story.note(_last_line(reply, "memory calls"))
    story.note(_last_line(reply, "recalled"))

    story.say("Alice inspects her memory (needs a fresh attested control-room context)")
    page = await control.inspect(scope.scope_id, bridge.context())
    for entry in page.entries:
        story.note(f'entry {entry.id[:8]}…  "{entry.text}"  hard expiry {entry.expires_at}')

    story.say("Alice forgets that one entry")
    record = await control.forget(scope.scope_id, page.entries[0].id)
    story.note(f"erasure {record.erasure_id}: state={record.state} physical_deletion={record.physical_deletion}")
    # With an embedding provider the REST adapter is exact: the scope's namespace was rotated.
    story.note(f"rows kagent holds for Alice after the forget: {len(await dev.store.rows())}")
    decision, reply = await _say_to_agent(http, gw.data_url, RECALL, context=bridge.context())
    story.note(_last_line(reply, "recalled") or "recalled: nothing (the forgotten entry is unreadable)")

    story.say("A hard expiry: a new fact, then the clock moves 7 days and 1 second")
    await _say_to_agent(http, gw.data_url, "remember: my cat is called Miso", context=bridge.context())
    clock.advance(7 * 86400 + 1)
    decision, reply = await _say_to_agent(
        http, gw.data_url, "What is the name of my cat, do you still know it?", context=bridge.context()
    )
    story.note(_last_line(reply, "recalled") or "recalled: nothing (expired entries are unreadable)")
    story.note(f"rows kagent still holds: {len(await dev.store.rows())} (its own TTL would even extend popular ones)")

    story.say("Alice withdraws consent while a background auto-save is still on its way")
    key = dev.recorder.of_kind("a2a")[-1].user_id_header
    withdrawn = await control.withdraw(scope.scope_id)
    story.note(f"consent withdrawn: enabled={withdrawn.enabled} generation={withdrawn.generation}")
    late = {
        "items": [
            {
                "agent_name": "kagent__NS__k8s_agent",
                "user_id": key,
                "content": "likes jasmine too",
                "vector": [0.01] * 768,
            }
        ]
    }
    async with http.post(
        f"{gw.data_url}/api/memories/sessions/batch", json=late, headers={"X-Agent-Name": "kagent__NS__k8s_agent"}
    ) as resp:
        body = await resp.json(content_type=None)
        story.note(f"late auto-save with the old session key: HTTP {resp.status} {body.get('error')}")

    story.note(f"rows kagent holds for Alice after the withdrawal's erasure: {len(await dev.store.rows())}")

    story.say("Off: disable first, then clear everything, with a confirmation")
    await control.grant(scope.scope_id, "remember my preferences", "privacy-v1")
    await _say_to_agent(http, gw.data_url, "remember: I live in Lyon", context=bridge.context())
    story.note(f"after re-consent a new fact is stored: {len(await dev.store.rows())} row(s)")
    issued = await control.confirmed(scope.scope_id, "off")
    story.note(f"confirmation required, token expires {issued.expires_at}")
    record = await control.confirmed(scope.scope_id, "off", issued.confirm_token)
    evidence = await control.erasure_document(record.erasure_id)
    story.note("erasure evidence (content-free):")
    for line in json.dumps(evidence, indent=2, sort_keys=True).splitlines():
        story.note("  " + line)
    story.note(f"rows kagent holds for Alice now: {len(await dev.store.rows())}")
    try:
        await control.as_caller(None).status(scope.scope_id)
    except ControlError as exc:
        story.note(f"status without a token: HTTP {exc.status} {exc.reason}")


def _last_line(reply: str, prefix: str) -> str:
    return next((line for line in reply.splitlines() if line.startswith(prefix)), "")


def _cmd_demo(args: argparse.Namespace) -> int:
    configure_logging("error")
    return asyncio.run(run_demo())


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("demo", help="Walk the consent → save → inspect → forget → withdraw story on stand-ins.")
    p.set_defaults(func=_cmd_demo)

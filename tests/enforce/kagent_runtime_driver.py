"""Drive kagent's own Python runtime memory code (kagent-adk 0.9.11 or 0.10.4) from a test, in its own venv.

Runs under a venv built by ``conformance/kagent/build.sh client <release>``, never under memgov's. It
wires what kagent's A2A app wires for a memory-enabled agent: an ``httpx.AsyncClient`` on
KAGENT_URL with ``KAgentTokenService``'s hooks, ``KagentMemoryService`` with an OpenAI-provider
``EmbeddingConfig``, and an ADK agent given kagent's memory configuration (prefetch, load and save
tools, the every-fifth-turn auto-save callback). The model is scripted, not a model: it calls a
tool when the user text says so and answers the summarisation prompt with fixed facts.

Protocol: a configuration line starts a session; then one JSON object per stdin line (``op`` plus
arguments), one JSON answer per stdout line, until ``{"op": "end"}`` (answered ``{"ended": true}``),
after which the next configuration line starts a fresh session. Logs of kagent's runtime during the
session are captured and returned by ``{"op": "logs"}``.

``add_memory`` differs between the releases: 0.9.11 takes one ``content`` and swallows a refusal
(it only logs it); 0.10.4 takes several ``MemoryEntry``s, posts once per entry and raises at the
first refusal. The op takes ``content`` or ``contents`` and answers with the error it raised, if any.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import os
import sys
from collections.abc import AsyncGenerator
from typing import Any

import httpx
from google.adk.agents import LlmAgent
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.genai import types
from kagent.adk import _token
from kagent.adk._memory_service import KagentMemoryService
from kagent.adk._token import KAgentTokenService
from kagent.adk.types import AgentConfig, EmbeddingConfig, MemoryConfig
from kagent.core.a2a import set_request_user_id

SUMMARY_MARKER = "Summary (JSON List):"


class ScriptedLlm(BaseLlm):
    """Stands where the model would: ``remember: X`` calls save_memory, ``recall: Q`` calls load_memory.

    Every other turn answers with the memories the prefetch tool put into the instructions, so the
    test sees what kagent's prefetch recalled. The summarisation prompt gets ``facts`` as a JSON
    list, after ``hold`` (if set) is released.
    """

    facts: list[str] = []  # noqa: RUF012 - a pydantic field (BaseLlm is a model): copied per instance
    hold: Any = None

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        last = llm_request.contents[-1]
        text = "".join(p.text or "" for p in last.parts or [])
        if SUMMARY_MARKER in text:
            if self.hold is not None:
                await self.hold.wait()
            yield _text(json.dumps(self.facts))
            return
        responses = [p.function_response for p in last.parts or [] if p.function_response]
        if responses:
            yield _text("tool said: " + json.dumps(responses[0].response, default=str))
            return
        command, _, rest = text.partition(":")
        if command.strip() == "remember":
            yield _call("save_memory", {"content": rest.strip()})
        elif command.strip() == "recall":
            yield _call("load_memory", {"query": rest.strip()})
        else:
            instruction = str(llm_request.config.system_instruction or "") if llm_request.config else ""
            recalled = (
                instruction.split("<PAST_CONVERSATIONS>\n", 1)[1].split("\n</PAST_CONVERSATIONS>")[0]
                if "<PAST_CONVERSATIONS>" in instruction
                else ""
            )
            yield _text("recalled: " + recalled)


def _text(text: str) -> LlmResponse:
    return LlmResponse(content=types.Content(role="model", parts=[types.Part(text=text)]))


def _call(name: str, args: dict[str, Any]) -> LlmResponse:
    return LlmResponse(
        content=types.Content(role="model", parts=[types.Part(function_call=types.FunctionCall(name=name, args=args))])
    )


class Captured(logging.Handler):
    """Everything kagent's runtime logs (its loggers, every level)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(f"{record.levelname} {record.name} {record.getMessage()}")


class Driver:
    """One agent runtime process: one app, one user (the session key memgov handed it)."""

    def __init__(self, cfg: dict[str, Any]) -> None:
        self.app_name, self.user_id = cfg["app_name"], cfg["user_id"]
        self.tokens = KAgentTokenService(self.app_name)
        self.http = httpx.AsyncClient(base_url=cfg["kagent_url"], event_hooks=self.tokens.event_hooks())
        embedding = EmbeddingConfig(model="text-embedding-3-small", provider="openai", base_url=cfg["embedding_url"])
        self.memory = KagentMemoryService(
            agent_name=self.app_name, http_client=self.http, embedding_config=embedding, ttl_days=cfg.get("ttl_days", 0)
        )
        self.model = ScriptedLlm(model="scripted")
        self.model.facts = cfg.get("facts", [])
        self.model.hold = asyncio.Event() if cfg.get("hold_autosave") else None
        agent = LlmAgent(name=cfg["agent"], model=self.model, instruction="You are a test agent.", tools=[])
        config = AgentConfig.model_construct(memory=MemoryConfig(ttl_days=cfg.get("ttl_days", 0), embedding=embedding))
        config._configure_memory(agent)  # kagent's own: prefetch/load/save tools and the auto-save callback
        self.sessions = InMemorySessionService()
        self.runner = Runner(
            app_name=self.app_name, agent=agent, session_service=self.sessions, memory_service=self.memory
        )

    async def turn(self, session_id: str, text: str) -> dict[str, Any]:
        """One user turn through ADK's runner, as kagent's A2A executor runs it."""
        if await self.sessions.get_session(app_name=self.app_name, user_id=self.user_id, session_id=session_id) is None:
            await self.sessions.create_session(app_name=self.app_name, user_id=self.user_id, session_id=session_id)
        replies = []
        message = types.Content(role="user", parts=[types.Part(text=text)])
        async for event in self.runner.run_async(user_id=self.user_id, session_id=session_id, new_message=message):
            if event.content and event.content.parts:
                replies += [p.text for p in event.content.parts if p.text]
        return {"replies": replies}

    async def add_memory(self, contents: list[str]) -> None:
        """kagent's explicit save of ``contents``, in the release's own signature."""
        if "memories" in inspect.signature(self.memory.add_memory).parameters:  # 0.10: several entries
            from google.adk.memory.memory_entry import MemoryEntry

            entries = [MemoryEntry(content=types.Content(role="user", parts=[types.Part(text=c)])) for c in contents]
            await self.memory.add_memory(app_name=self.app_name, user_id=self.user_id, memories=entries)
            return
        if len(contents) != 1:
            raise ValueError("kagent-adk 0.9.11 saves one content per call")
        await self.memory.add_memory(app_name=self.app_name, user_id=self.user_id, content=contents[0])

    async def run(self, op: dict[str, Any]) -> dict[str, Any]:
        name = op["op"]
        if name == "turn":
            return await self.turn(op["session"], op["text"])
        if name == "add_memory":
            try:
                await self.add_memory(op.get("contents") or [op["content"]])
            except httpx.HTTPStatusError as exc:
                return {"error": type(exc).__name__, "status": exc.response.status_code}
            return {}
        if name == "search_memory":
            found = await self.memory.search_memory(app_name=self.app_name, user_id=self.user_id, query=op["query"])
            return {
                "memories": [
                    {"id": m.id, "text": "".join(p.text or "" for p in m.content.parts or [])} for m in found.memories
                ]
            }
        if name == "release":
            assert self.model.hold is not None
            self.model.hold.set()
            return {}
        if name == "drain":
            pending = [
                t
                for t in asyncio.all_tasks()
                if t is not asyncio.current_task()
                and not t.done()
                and t.get_coro().__qualname__.endswith("_add_session_to_memory_background")
            ]
            await asyncio.gather(*pending)
            return {"drained": len(pending)}
        raise ValueError(f"unknown op {name!r}")


async def session(cfg: dict[str, Any], captured: Captured) -> bool:
    """One runtime of one app and user, until ``end`` (True) or the end of stdin (False).

    Runs in its own task, so the request user id it sets (a context variable) ends with it."""
    captured.lines.clear()
    before = asyncio.all_tasks()
    _token.KAGENT_TOKEN_PATH = cfg["token_path"]  # where the projected service-account token is mounted
    driver = Driver(cfg)
    set_request_user_id(driver.user_id)  # what kagent's A2A request handler does with X-User-Id
    loop = asyncio.get_running_loop()
    async with driver.http, driver.tokens.lifespan()(None):
        while line := await loop.run_in_executor(None, sys.stdin.readline):
            op = json.loads(line)
            if op["op"] == "end":
                # Nothing of this session may run on into the next: background saves included.
                rest = [t for t in asyncio.all_tasks() - before if t is not asyncio.current_task()]
                for task in rest:
                    task.cancel()
                await asyncio.gather(*rest, return_exceptions=True)
                return True
            if op["op"] == "logs":
                answer: dict[str, Any] = {"lines": captured.lines}
            else:
                answer = await driver.run(op)
            _answer(answer)
    return False


def _answer(answer: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(answer) + "\n")
    sys.stdout.flush()


async def main() -> None:
    """Sessions one after another (importing kagent-adk takes seconds, so a process serves many tests)."""
    captured = Captured()
    logging.getLogger().addHandler(captured)
    logging.getLogger().setLevel(logging.DEBUG)
    os.environ.setdefault("OPENAI_API_KEY", "test-provider-key")
    loop = asyncio.get_running_loop()
    while line := await loop.run_in_executor(None, sys.stdin.readline):
        if not await asyncio.create_task(session(json.loads(line), captured)):
            return
        _answer({"ended": True})


if __name__ == "__main__":
    asyncio.run(main())

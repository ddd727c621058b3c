"""Shared state of the kagent stand-in app and the keys it hangs on."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

import aiohttp
from aiohttp import web

from sidecar.dev.devstack.ctrllog import ControllerLog
from sidecar.dev.devstack.recorder import Recorder
from sidecar.dev.devstack.releases import DEFAULT, KagentRelease
from sidecar.dev.devstack.runtime import RuntimeConfig
from sidecar.dev.devstack.store import MemoryStore

if TYPE_CHECKING:
    from sidecar.dev.devstack.sessions import SessionBook


@dataclass
class KagentState:
    """What the handlers share: the memory store, the controller clock, the agent registry, the
    release modelled and (0.10) its sessions, tasks and share links."""

    store: MemoryStore
    clock: Callable[[], datetime]
    agents: frozenset[str] | None
    stream_delay_s: float
    runtime: RuntimeConfig | None = None
    http: aiohttp.ClientSession | None = None
    seen_contexts: set[tuple[str, str]] = field(default_factory=set)
    log: ControllerLog = field(default_factory=ControllerLog)
    release: KagentRelease = DEFAULT
    sessions: SessionBook | None = None


STATE = web.AppKey("devstack_kagent", KagentState)
RECORDER = web.AppKey("devstack_recorder", Recorder)
#: Path variables of the matched route (``namespace``, ``name``, ...).
PARAMS = web.RequestKey("devstack_params", dict)

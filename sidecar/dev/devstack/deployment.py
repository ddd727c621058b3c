"""One way to assemble a throwaway deployment: keys on disk, a policy pack, settings, a serving gateway.

The demo, the drill's devstack, the fuzzer and every test stack build their gateway here, so a
setting added to memgov is added to all of them at once. What differs between them (which
agents, which limits, which erasure timings) is passed in as settings sections, which are
merged over the defaults one section at a time.
"""

from __future__ import annotations

import secrets
import shutil
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from aiohttp.typedefs import Middleware

from sidecar.control.http import SWEEPERS
from sidecar.dev.devstack.clock import DevClock
from sidecar.dev.devstack.stack import Devstack, start_devstack
from sidecar.server import Gateway, running_gateway
from sidecar.settings import PACKAGED_POLICY_DIR, Settings, load_settings

LOOPBACK = {"data": "127.0.0.1:0", "control": "127.0.0.1:0", "ops": "127.0.0.1:0"}


@dataclass(frozen=True)
class Keys:
    """The secret files of a throwaway deployment, and the secrets the bridge and operator sign with."""

    folder: Path
    bridge: bytes
    operator: bytes

    @property
    def bridge_file(self) -> Path:
        return self.folder / "bridge.key"

    @property
    def operator_file(self) -> Path:
        return self.folder / "operator.key"

    @property
    def session_file(self) -> Path:
        return self.folder / "session.key"

    @property
    def session(self) -> bytes:
        return self.session_file.read_bytes().strip()


def write_keys(folder: Path) -> Keys:
    """Fresh random bridge, operator and session secrets as private files in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    keys = Keys(folder, secrets.token_hex(32).encode(), secrets.token_hex(32).encode())
    for path, secret in (
        (keys.bridge_file, keys.bridge),
        (keys.operator_file, keys.operator),
        (keys.session_file, secrets.token_hex(32).encode()),
    ):
        path.write_bytes(secret)
        path.chmod(0o600)
    return keys


def pack_with_limits(folder: Path, limits: Mapping[str, int]) -> Path:
    """A copy of the packaged policy pack in ``folder`` whose ``limits.yaml`` has ``limits`` changed."""
    target = folder / "policies"
    if not target.exists():
        shutil.copytree(PACKAGED_POLICY_DIR, target)
    path = target / "data" / "limits.yaml"
    data = yaml.safe_load(path.read_text())
    data.update(limits)
    path.write_text(yaml.safe_dump(data))
    return target


def memory_agents(
    agents: Iterable[tuple[str, str]], *, model: str | None = None, dimensions: int = 768
) -> dict[str, dict[str, Any]]:
    """Agent settings for (ref, ghost MXID) pairs: the ``-nomem`` variant, and the embedding model when given."""
    out: dict[str, dict[str, Any]] = {}
    for ref, ghost in agents:
        agent: dict[str, Any] = {"disabled_variant": ref.split("/", 1)[1] + "-nomem", "ghost": ghost}
        if model is not None:
            agent.update(embedding_model=model, embedding_dimensions=dimensions)
        out[ref] = agent
    return out


def gateway_config(
    keys: Keys,
    *,
    kagent_url: str,
    state_url: str,
    server: str,
    bridge_bot: str,
    agents: Mapping[str, Mapping[str, Any]],
    embedding_url: str | None = None,
    pack: Path | None = None,
    **sections: Mapping[str, Any],
) -> dict[str, Any]:
    """The settings of a throwaway gateway, as the dict ``load_settings`` takes.

    Every listener is on a free loopback port, the pack does not reload on its own, and each of
    ``sections`` is merged over the default of that section (``upstream={"read_timeout_s": 2}``
    keeps the controller URL).
    """
    upstream: dict[str, Any] = {"controller_url": kagent_url}
    if embedding_url is not None:
        upstream["embedding_url"] = embedding_url
    policy: dict[str, Any] = {"reload_interval_s": 0}
    if pack is not None:
        policy["dir"] = str(pack)
    config: dict[str, Any] = {
        "upstream": upstream,
        "listen": dict(LOOPBACK),
        "state": {"url": state_url},
        "policy": policy,
        "secrets": {"session_key_file": str(keys.session_file)},
        "trust": {"bridge_key_file": str(keys.bridge_file), "operator_key_file": str(keys.operator_file)},
        "matrix": {"server_name": server, "bridge_bot": bridge_bot},
        "agents": {ref: dict(agent) for ref, agent in agents.items()},
    }
    for name, section in sections.items():
        config[name] = {**config.get(name, {}), **section}
    return config


def devstack_config(
    dev: Devstack,
    keys: Keys,
    *,
    server: str,
    bridge_bot: str,
    agents: Mapping[str, Mapping[str, Any]],
    **sections: Any,
) -> dict[str, Any]:
    """:func:`gateway_config` in front of ``dev``'s stand-ins, with SQLite state beside the key files."""
    return gateway_config(
        keys,
        kagent_url=dev.kagent_url,
        embedding_url=dev.embedding_url,
        state_url=f"sqlite:///{keys.folder}/state.db",
        server=server,
        bridge_bot=bridge_bot,
        agents=agents,
        **sections,
    )


@asynccontextmanager
async def serving(config: Mapping[str, Any] | Settings, clock: DevClock | None = None) -> AsyncIterator[Gateway]:
    """Run a gateway in this process until the block ends.

    It is yielded once its start-up sweep pass has finished, so nothing that pass does (spans, log
    lines, audit rows, deletions) lands inside what the caller then observes.
    """
    settings = config if isinstance(config, Settings) else load_settings(**config)
    async with running_gateway(settings, clock=clock) as gw:
        assert gw.parts is not None
        await gw.parts.store.wait_connected()
        sweepers = next((r.app[SWEEPERS] for r in gw.runners if SWEEPERS in r.app), None)
        if sweepers is not None:
            await sweepers.swept.wait()
        yield gw


@dataclass(frozen=True)
class LocalGateway:
    """A gateway in this process in front of the stand-ins, its key files' folder and an HTTP session."""

    folder: Path
    keys: Keys
    dev: Devstack
    gw: Gateway
    http: aiohttp.ClientSession


@asynccontextmanager
async def local_gateway(
    prefix: str,
    clock: DevClock,
    *,
    server: str,
    bridge_bot: str,
    agents: Mapping[str, Mapping[str, Any]],
    middlewares: Iterable[Middleware] = (),
    before_stop: Callable[[], Awaitable[None]] | None = None,
    **sections: Any,
) -> AsyncIterator[LocalGateway]:
    """Fresh keys in a temporary folder, the stand-ins, a gateway in front of them (:func:`devstack_config`
    with ``sections``) and an HTTP session, until the block ends; ``before_stop`` runs before the
    stand-ins stop (to let what they still hold settle)."""
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        folder = Path(tmp)
        keys = write_keys(folder)
        dev = await start_devstack(clock=clock, middlewares=middlewares)
        try:
            config = devstack_config(dev, keys, server=server, bridge_bot=bridge_bot, agents=agents, **sections)
            async with serving(config, clock) as gw, aiohttp.ClientSession() as http:
                yield LocalGateway(folder, keys, dev, gw, http)
        finally:
            if before_stop is not None:
                await before_stop()
            await dev.stop()

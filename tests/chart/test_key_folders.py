"""Verification-key folders as the chart mounts them: memgov started with the rendered command, config and
mounts, its bridge and operator keys each a whole Secret, and those Secrets edited the way the kubelet
updates a mounted Secret. A key id added to the Secret verifies without a restart; removed, it verifies
nothing (the rotation of docs/deploy.md, "Bridge and operator keys").

The substitutions: volumes are local folders, loopback ports are free ones, kagent is the stand-in, and
keys are re-read every 0.2 s instead of the default 10 s.
"""

from __future__ import annotations

import secrets
import sys
import time
from collections.abc import Callable
from pathlib import Path

import aiohttp
import yaml

from sidecar.dev.devstack.pg import free_port
from sidecar.dev.devstack.stack import start_devstack
from sidecar.identity.keys import new_scope_id
from sidecar.identity.tokens import TokenType, mint_operator, mint_token
from tests.chart.helm import config_file, pod_spec, render
from tests.chart.pod import PodDisk
from tests.support.smoke import serving, wait_ready
from tests.support.wait import until

MEMGOV = str(Path(sys.executable).parent / "memgov")
FOLDERS = {"bridgeKeys": {"existingSecret": "memgov-bridge-keys"}, "operatorKeys": {"existingSecret": "memgov-op-keys"}}


def _subject(key: bytes, kid: str) -> str:
    now = int(time.time())
    claims = {"sub": "@alice:example.org", "iat": now, "exp": now + 60, "jti": secrets.token_hex(16)}
    return mint_token(claims, key, "HS256", typ=TokenType.SUBJECT, kid=kid)


def _operator(key: bytes, kid: str) -> str:
    return mint_operator("ops-oncall", key, "HS256", now=int(time.time()), kid=kid)


async def _status(http: aiohttp.ClientSession, url: str, token: str) -> int:
    async with http.get(url, headers={"Authorization": f"Bearer {token}"}) as resp:
        return resp.status


async def _rotate(
    http: aiohttp.ClientSession,
    pod: PodDisk,
    volume: str,
    call: tuple[str, Callable[[bytes, str], str], int],
    old: bytes,
    new: bytes,
) -> None:
    """The documented rotation of one purpose's keys, each step an edit of the mounted Secret."""
    url, mint, accepted = call

    async def answer(key: bytes, kid: str) -> int:
        return await _status(http, url, mint(key, kid))

    async def answers(key: bytes, kid: str, expected: int) -> None:
        async def now() -> bool:
            return await answer(key, kid) == expected

        await until(now)

    assert await answer(old, "2026-a") == accepted
    assert await answer(new, "2026-b") == 401
    # Step 1: the new id joins the Secret; both verify.
    pod.edit_secret(volume, {"2026-a": old, "2026-b": new})
    await answers(new, "2026-b", accepted)
    assert await answer(old, "2026-a") == accepted
    # Step 3: the old id leaves the Secret; only the new one verifies.
    pod.edit_secret(volume, {"2026-b": new})
    await answers(old, "2026-a", 401)
    assert await answer(new, "2026-b") == accepted
    # A token naming the new id but signed with the old key is refused.
    assert await answer(old, "2026-b") == 401


async def test_a_key_id_added_to_the_mounted_secret_verifies_and_a_removed_one_stops(tmp_path: Path) -> None:
    manifests = render({"trust": FOLDERS})
    old = {"bridge": secrets.token_hex(32).encode(), "operator": secrets.token_hex(32).encode()}
    new = {"bridge": secrets.token_hex(32).encode(), "operator": secrets.token_hex(32).encode()}
    existing = {"memgov-bridge-keys": {"2026-a": old["bridge"]}, "memgov-op-keys": {"2026-a": old["operator"]}}
    pod = PodDisk(tmp_path / "pod", manifests, pod_spec(manifests), existing)
    volumes = {"bridge": "memgov-bridge-keys", "operator": "memgov-operator-keys"}
    ports = {port: free_port() for port in (8080, 8081, 9090)}
    dev = await start_devstack()
    try:
        config = pod.rewrite_tree("memgov", config_file(manifests), ports)
        config["upstream"]["controller_url"] = dev.kagent_url
        config["secrets"]["reload_interval_s"] = 0.2
        (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
        memgov = pod.container("memgov")
        argv = [pod.rewrite("memgov", a, ports) for a in [*memgov.get("command", []), *memgov.get("args", [])]]
        argv[argv.index("--config") + 1] = str(tmp_path / "config.yaml")
        control = f"http://127.0.0.1:{ports[8081]}"
        # An authenticated subject asking for a scope that does not exist gets 404; an unverified one 401.
        calls = {
            "bridge": (f"{control}/v1/scopes/{new_scope_id()}", _subject, 404),
            "operator": (f"{control}/v1/erasures", _operator, 200),
        }
        with serving([MEMGOV, *argv[1:]], log=tmp_path / "memgov.log") as proc:
            await wait_ready(proc, f"http://127.0.0.1:{ports[9090]}", tmp_path / "memgov.log")
            async with aiohttp.ClientSession() as http:
                for purpose, call in calls.items():
                    await _rotate(http, pod, volumes[purpose], call, old[purpose], new[purpose])
            assert proc.poll() is None
        log = (tmp_path / "memgov.log").read_text()
        for key in (*old.values(), *new.values()):
            assert key.decode() not in log
    finally:
        await dev.stop()

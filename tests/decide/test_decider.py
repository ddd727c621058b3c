"""One decider for both planes: every decision is recorded exactly once, the no-pack path included."""

from __future__ import annotations

import shutil
from pathlib import Path

from prometheus_client import REGISTRY

from sidecar.settings import PACKAGED_POLICY_DIR
from tests.support.harness import Harness, harness


def _decisions(operation: str, reason: str) -> float:
    labels = {"operation": operation, "action": "deny", "reason": reason}
    return REGISTRY.get_sample_value("memgov_governed_decisions_total", labels) or 0.0


def _unloadable_pack(folder: Path) -> Path:
    """The packaged pack with one Cedar file that does not parse: no pack goes live, its limits still read."""
    pack = folder / "broken-pack"
    shutil.copytree(PACKAGED_POLICY_DIR, pack)
    with (pack / "cedar" / "routes.cedar").open("a") as f:
        f.write("\npermit (principal, action, resource) when { ;\n")
    return pack


async def _audited(h: Harness, scope_id: str, reason: str) -> int:
    return sum(1 for r in await h.parts.store.audit_log.audit_rows(scope_id) if r["reason"] == reason)


class TestRecordedOnce:
    async def test_a_save_with_no_live_pack_is_refused_and_recorded_once(self, tmp_path: Path) -> None:
        """Data plane, no pack loaded: one audit row and one decision count for one refused save."""
        async with harness(tmp_path, store_url=None, policy={"dir": str(_unloadable_pack(tmp_path))}) as h:
            assert h.parts.policy.pack is None
            scope_id = await h.scope()
            before = _decisions("memory.save", "policy_unavailable")
            status, body = await h.save(scope_id, "remember this")
            assert (status, body["error"]) == (403, "policy_unavailable")
            assert _decisions("memory.save", "policy_unavailable") - before == 1
            assert await _audited(h, scope_id, "policy_unavailable") == 1

    async def test_an_inspect_with_no_live_pack_is_refused_and_recorded_once(self, tmp_path: Path) -> None:
        """Control plane, no pack loaded: an inspect page is refused with one audit row and one count."""
        async with harness(tmp_path, store_url=None, policy={"dir": str(_unloadable_pack(tmp_path))}) as h:
            scope_id = await h.scope()
            before = _decisions("control.inspect", "policy_unavailable")
            url = f"{h.gw.control_url}/v1/scopes/{scope_id}/entries"
            headers = {"Authorization": f"Bearer {h.subject_token()}", "X-Memgov-Context": h.context()}
            async with h.http.get(url, headers=headers) as resp:
                assert (resp.status, (await resp.json())["error"]) == (403, "policy_unavailable")
            assert _decisions("control.inspect", "policy_unavailable") - before == 1
            assert await _audited(h, scope_id, "policy_unavailable") == 1

    async def test_a_live_pack_refusal_is_recorded_once_too(self, tmp_path: Path) -> None:
        """With a pack live, a save the policy refuses leaves one row and one count (the usual path)."""
        async with harness(tmp_path, store_url=None) as h:
            scope_id = await h.scope()
            before = _decisions("memory.save", "fact_too_large")
            status, body = await h.save(scope_id, "x" * 513)
            assert (status, body["error"]) == (403, "fact_too_large")
            assert _decisions("memory.save", "fact_too_large") - before == 1
            assert await _audited(h, scope_id, "fact_too_large") == 1

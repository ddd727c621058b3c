"""Pack folders: data files are validated, revisions are content hashes, partner completeness."""

from __future__ import annotations

from pathlib import Path

import pytest

from sidecar.identity.mxid import Origin
from sidecar.policy.model import PartnerRecord
from sidecar.policy.pack import PackError, fingerprint, is_complete, load_federation, load_limits, read_pack
from tests.support.policy import PACK_DIR

COMPLETE = PartnerRecord(
    server_name="partner.example",
    origins=[Origin.REMOTE],
    controller="A",
    processor="B",
    purpose="p",
    classification="private",
    residency="eu",
    retention_days=7,
    erasure_owner="A",
    principal_binding="mxid",
)


class TestLimits:
    def test_reference_limits_are_the_adr_numbers(self) -> None:
        """limits.yaml holds the candidate values of R-9 to R-11."""
        lim = load_limits(PACK_DIR)
        assert (lim.max_days, lim.max_entries, lim.max_fact_bytes, lim.max_batch_facts) == (7, 100, 512, 10)
        assert (lim.rate_per_minute, lim.rate_burst, lim.hourly_operations) == (6, 3, 60)
        assert (lim.prefetch_searches, lim.prefetch_query_bytes, lim.embedding_item_bytes) == (8, 512, 512)

    @pytest.mark.parametrize(
        "text",
        ["max_days: [", "max_days: 7\n", "max_days: 0\n", "- 1\n- 2\n"],
        ids=["not-yaml", "incomplete", "zero", "not-a-mapping"],
    )
    def test_invalid_limits_are_refused(self, pack_copy: Path, text: str) -> None:
        """A broken limits.yaml makes the pack unusable instead of loosening a limit."""
        (pack_copy / "data" / "limits.yaml").write_text(text)
        with pytest.raises(PackError, match="limits.yaml"):
            read_pack(pack_copy)

    def test_burst_above_rate_is_refused(self, pack_copy: Path) -> None:
        """A burst larger than the per-minute rate is a contradiction, not a limit."""
        path = pack_copy / "data" / "limits.yaml"
        path.write_text(path.read_text().replace("rate_burst: 3", "rate_burst: 9"))
        with pytest.raises(PackError, match="rate_burst"):
            load_limits(pack_copy)


class TestFederation:
    def test_reference_federation_has_no_partners(self) -> None:
        """Federation is denied by default: the shipped file names no partner."""
        fed = load_federation(PACK_DIR)
        assert (fed.classification, fed.partners) == ("private", [])

    def test_unknown_partner_field_is_refused(self, pack_copy: Path) -> None:
        """A misspelled partner field is an error, not a silently ignored key."""
        (pack_copy / "data" / "federation.yaml").write_text(
            "classification: private\npartners:\n  - server_name: p.example\n    controler: A\n"
        )
        with pytest.raises(PackError, match="federation.yaml"):
            load_federation(pack_copy)


class TestCompleteness:
    @pytest.mark.parametrize(
        ("change", "complete"),
        [
            ({}, True),
            ({"controller": None}, False),
            ({"processor": ""}, False),
            ({"residency": None}, False),
            ({"retention_days": 0}, False),
            ({"retention_days": None}, False),
            ({"erasure_owner": None}, False),
            ({"principal_binding": ""}, False),
        ],
    )
    def test_a_record_admits_only_when_every_field_is_named(self, change: dict[str, object], complete: bool) -> None:
        """Controller, processor, purpose, classification, residency, retention, erasure owner, binding."""
        assert is_complete(COMPLETE.model_copy(update=change)) is complete


class TestRevision:
    def test_revision_is_stable_for_the_same_bytes(self, pack_copy: Path) -> None:
        """Two reads of unchanged files report the same revision."""
        assert read_pack(pack_copy).revision == read_pack(pack_copy).revision == fingerprint(pack_copy)

    @pytest.mark.parametrize("rel", ["cedar/limits.cedar", "rego/memgov/decision/limits.rego", "data/limits.yaml"])
    def test_any_file_change_changes_the_revision(self, pack_copy: Path, rel: str) -> None:
        """Editing a policy or data file of either language gives a new revision."""
        before = fingerprint(pack_copy)
        path = pack_copy / rel
        path.write_text(path.read_text() + "\n")
        assert fingerprint(pack_copy) != before

    def test_missing_folder_is_refused(self, tmp_path: Path) -> None:
        """A pack folder that does not exist cannot be loaded."""
        with pytest.raises(PackError):
            read_pack(tmp_path / "nowhere")

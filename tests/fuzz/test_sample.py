"""A bounded, seeded sample of ``memgov fuzz`` in every test run: it must break no contract.

The full runs (``make fuzz``, ``memgov fuzz --cases N``) draw from the same strategies; this sample
keeps every family of case and every check exercised on each change. On failure the assertion
message is the fuzzer's own summary with a content-free example per failure class.
"""

from __future__ import annotations

from sidecar.dev.fuzz.cli import fuzz, summary

SAMPLE_CASES = 400
SAMPLE_SEED = 20261201


async def test_seeded_sample_breaks_no_contract() -> None:
    """Four hundred seeded cases over both planes, each judged against every contract."""
    report, examples = await fuzz(SAMPLE_CASES, SAMPLE_SEED, "all", shrink=False, progress=lambda _: None)
    assert report.total == SAMPLE_CASES
    assert not report.failures, summary(report, examples, SAMPLE_SEED)

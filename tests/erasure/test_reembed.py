"""Re-embedding for rotation: the runtime's vector processing and a provider's answer, checked without servers."""

from __future__ import annotations

import base64
import json
import math
import struct
from datetime import UTC, datetime, timedelta

import pytest

from sidecar.contentstore.adapters import AdapterError
from sidecar.contentstore.reembed import TARGET_DIM, _vectors, runtime_vector
from sidecar.erasure.rotation import ttl_days
from sidecar.reasons import Reason


def _b64(vector: list[float]) -> str:
    return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()


class TestRuntimeVector:
    def test_a_768_vector_is_kept_exactly_as_the_runtime_keeps_it(self) -> None:
        """kagent's runtimes do not normalise a vector that already has 768 dimensions."""
        raw = [0.5] * TARGET_DIM
        assert runtime_vector(raw) == raw

    def test_a_longer_vector_is_cut_to_768_and_l2_normalised(self) -> None:
        """As KAgentEmbedding and go/adk do: the first 768 values, scaled to unit length."""
        raw = [3.0] * 1024
        vector = runtime_vector(raw)
        assert vector is not None and len(vector) == TARGET_DIM
        assert math.isclose(sum(x * x for x in vector), 1.0) and vector[0] == pytest.approx(1 / math.sqrt(768))

    @pytest.mark.parametrize(
        "raw",
        [[0.1] * 512, [0.0] * 768, [float("nan")] * 768, [1e39] * 768],
        ids=["shorter", "all-zero", "nan", "float32-overflow"],
    )
    def test_what_the_runtime_or_kagent_would_refuse_is_refused(self, raw: list[float]) -> None:
        """Shorter vectors are refused by the runtime; zero and non-finite ones would poison kagent's search."""
        assert runtime_vector(raw) is None


class TestProviderAnswer:
    def test_float_and_base64_embeddings_are_read_in_index_order(self) -> None:
        """OpenAI's answer may list items in any order and in either encoding."""
        first, second = [0.25] * TARGET_DIM, [-0.5] * TARGET_DIM
        answer = {"data": [{"index": 1, "embedding": _b64(second)}, {"index": 0, "embedding": first}]}
        assert _vectors(json.dumps(answer).encode(), 2) == [first, second]

    @pytest.mark.parametrize(
        "answer",
        [
            b"not json",
            b'{"data": []}',
            b'{"data": [{"index": 0, "embedding": "!!"}]}',
            json.dumps({"data": [{"index": 0, "embedding": [0.1] * 3}]}).encode(),
            json.dumps({"data": [{"index": 1, "embedding": [0.1] * 768}]}).encode(),
            json.dumps({"data": [{"index": True, "embedding": [0.1] * 768}]}).encode(),
        ],
        ids=["not-json", "missing-items", "bad-base64", "too-short", "wrong-index", "bool-index"],
    )
    def test_a_malformed_answer_is_an_upstream_error(self, answer: bytes) -> None:
        """Nothing half-understood is ever saved: the rotation fails with a code."""
        with pytest.raises(AdapterError) as err:
            _vectors(answer, 1)
        assert err.value.reason is Reason.UPSTREAM_ERROR


class TestTtl:
    @pytest.mark.parametrize(("left_s", "days"), [(7 * 86400, 7), (3 * 86400 + 1, 4), (3600, 1), (1, 1)])
    def test_kagent_keeps_a_copy_no_shorter_than_its_hard_expiry(self, left_s: int, days: int) -> None:
        """Whole days left, rounded up, at least one and never more than max_days."""
        now = datetime(2026, 3, 1, tzinfo=UTC)
        assert ttl_days(now + timedelta(seconds=left_s), now, 7) == days

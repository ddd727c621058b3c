"""Records read from rows whose column lists are derived from the records' fields (``codec.Columns``)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

import pytest

from sidecar.state import StateStore, ledger, namespaces, scopes
from sidecar.state.codec import Columns, from_us, to_us
from tests.state.test_schema import columns
from tests.support.state import NOW


class Colour(StrEnum):
    RED = "red"


@dataclass(frozen=True, slots=True)
class Sample:
    sample_id: str
    count: int
    on: bool
    colour: Colour
    created_at: datetime
    at: datetime
    gone_at: datetime | None
    until: datetime | None
    note: str | None
    kept: str = "default"


def test_columns_follow_the_fields_with_times_in_microseconds() -> None:
    cols = Columns(Sample, omit=("kept",), renamed={"gone_at": "deleted_us"})
    assert cols.names == ("sample_id", "count", "on", "colour", "created_us", "at_us", "deleted_us", "until_us", "note")
    assert (
        cols.select("x.")
        == "x.sample_id, x.count, x.on, x.colour, x.created_us, x.at_us, x.deleted_us, x.until_us, x.note"
    )
    assert len(cols) == 9


def test_a_row_is_decoded_by_each_fields_type() -> None:
    cols = Columns(Sample, omit=("kept",))
    at = to_us(NOW)
    row = ("pad", "s1", "2", 1, "red", at, at + 1, None, at + 2, None)
    got = cols.read(row, 1, kept="given")
    assert got == Sample("s1", 2, True, Colour.RED, NOW, from_us(at + 1), None, from_us(at + 2), None, "given")
    assert type(got.count) is int and type(got.on) is bool and type(got.colour) is Colour
    assert Columns(Sample, omit=("kept",)).read(row[1:]).kept == "default"


@pytest.mark.parametrize(
    ("reader", "table"),
    [
        (scopes._SCOPE, "scopes"),
        (scopes._RECEIPT, "receipts"),
        (scopes._LIVE_NAMESPACE, "namespaces"),
        (namespaces._NAMESPACE, "namespaces"),
        (ledger._ENTRY, "ledger"),
    ],
)
async def test_every_derived_column_is_one_of_its_table(store: StateStore, reader: Columns[object], table: str) -> None:
    have = {name for (t, name) in await columns(store) if t == table}
    assert set(reader.names) <= have, sorted(set(reader.names) - have)

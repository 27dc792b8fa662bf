"""Layout: validation, compose/parse round trips, time helpers, capacity and presets."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from snowshard import (
    FieldOutOfRange,
    IdTypeError,
    InvalidId,
    Layout,
    LayoutError,
    LayoutExpired,
    SnowshardError,
)
from snowshard.layout import is_decimal, parse_decimal

UTC = timezone.utc


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"timestamp_bits": 0}, "timestamp_bits must be >= 1, got 0"),
        ({"worker_bits": -1}, "worker_bits must be >= 0, got -1"),
        ({"timestamp_bits": 42, "worker_bits": 10}, "add up to 64 bits"),
        ({"gene_bits": 2.5}, "gene_bits must be an int"),
        ({"tick_ms": 0}, "tick_ms must be an int >= 1"),
        ({"epoch": datetime(2020, 1, 1)}, "naive datetime"),
        ({"epoch": -5}, "must not precede 1970"),
        ({"timestamp_bits": 40, "tick_ms": 1000}, "past year 9999"),
    ],
)
def test_bad_layouts_are_refused(kwargs: dict[str, object], message: str) -> None:
    """Each invalid setting raises LayoutError with a message naming it."""
    with pytest.raises(LayoutError, match=message):
        Layout(**kwargs)  # type: ignore[arg-type]


def test_layout_error_is_a_value_error() -> None:
    """LayoutError is both a SnowshardError and a ValueError."""
    with pytest.raises(ValueError) as info:
        Layout(timestamp_bits=64)
    assert isinstance(info.value, SnowshardError)


def test_default_layout_is_41_10_12_since_2020() -> None:
    """The default layout is the classic 41/10/12 split with epoch 2020-01-01 UTC."""
    layout = Layout()
    assert (layout.timestamp_bits, layout.worker_bits, layout.sequence_bits) == (41, 10, 12)
    assert layout.epoch == datetime(2020, 1, 1, tzinfo=UTC)
    assert layout.timestamp_shift == 22


def test_epoch_accepts_aware_datetime_in_any_zone() -> None:
    """An epoch of 08:00 at UTC+8 is the same instant as midnight UTC."""
    tz8 = timezone(timedelta(hours=8))
    assert Layout(epoch=datetime(2019, 5, 5, 8, tzinfo=tz8)).epoch_ms == 1557014400000


@pytest.mark.parametrize(
    ("field", "value", "limit"),
    [("worker", 1024, 1023), ("sequence", 4096, 4095), ("datacenter", 1, 0), ("gene", 1, 0)],
)
def test_compose_rejects_out_of_range_fields(field: str, value: int, limit: int) -> None:
    """A field that does not fit raises FieldOutOfRange naming field, value and range."""
    with pytest.raises(FieldOutOfRange, match=rf"{field} must be in 0\.\.{limit} .*got {value}"):
        Layout().compose(Layout().epoch_ms, **{field: value})


def test_compose_rejects_time_before_epoch() -> None:
    """A time before the epoch is refused rather than wrapped."""
    with pytest.raises(FieldOutOfRange, match="precedes the layout's epoch"):
        Layout().compose(datetime(2019, 12, 31, 23, 59, tzinfo=UTC))


def test_compose_rejects_time_past_the_end() -> None:
    """A time past the layout's last tick raises LayoutExpired."""
    layout = Layout(timestamp_bits=3, epoch=0)
    assert layout.compose(7) == 7 << 22
    with pytest.raises(LayoutExpired, match="past this layout's end"):
        layout.compose(8)


def test_compose_refuses_naive_datetime() -> None:
    """compose() will not guess the zone of a naive datetime."""
    with pytest.raises(LayoutError, match="naive"):
        Layout().compose(datetime(2024, 1, 1))


@pytest.mark.parametrize(
    ("bad", "error", "message"),
    [
        (-1, InvalidId, "negative"),
        (2**63, InvalidId, "wider than this layout's 63 bits"),
        ("12a", InvalidId, "not a decimal ID"),
        ("-5", InvalidId, "not a decimal ID"),
        ("", InvalidId, "not a decimal ID"),
        ("١٢", InvalidId, "not a decimal ID"),
        (True, IdTypeError, "got bool"),
        (1.0, IdTypeError, "got float"),
        (None, IdTypeError, "got NoneType"),
        (b"12", IdTypeError, "got bytes"),
    ],
)
def test_parse_rejects_bad_ids(bad: object, error: type[Exception], message: str) -> None:
    """Bad IDs raise InvalidId (a ValueError) or IdTypeError (a TypeError), never parse."""
    with pytest.raises(error, match=message):
        Layout().parse(bad)  # type: ignore[arg-type]


def test_parse_rejects_ids_wider_than_a_narrow_layout() -> None:
    """An ID beyond a 53-bit layout's range is refused, not truncated."""
    with pytest.raises(InvalidId, match="52 bits"):
        Layout.js_safe().parse(2**52)


def test_parse_accepts_decimal_strings() -> None:
    """A decimal string parses like the int it spells (IDs arrive as JSON strings)."""
    assert Layout().parse("152075078181383514") == Layout().parse(152075078181383514)


def test_parse_refuses_a_string_of_too_many_digits() -> None:
    """A 5000-digit string is an InvalidId naming the limit, not Python's int() ValueError."""
    with pytest.raises(InvalidId, match="has 5000 digits, more than the 4300"):
        Layout().parse("7" * 5000)


@pytest.mark.parametrize(
    ("text", "expected"),
    [("0", 0), ("42", 42), (" 42\n", 42), ("007", 7), ("9223372036854775807", 2**63 - 1)],
)
def test_parse_decimal_reads_ascii_digits(text: str, expected: int) -> None:
    """Digits 0-9, surrounding whitespace ignored, leading zeros allowed, read as an int."""
    assert parse_decimal(text) == expected


@pytest.mark.parametrize(
    "text", ["", " ", "-5", "+5", "1_000", "1 000", "1e3", "0x10", "12a", "\u0661\u0662", "\u00b2"]
)
def test_parse_decimal_refuses_anything_else(text: str) -> None:
    """Signs, separators, exponents, hex and other scripts' digits raise the one message."""
    with pytest.raises(InvalidId) as caught:
        parse_decimal(text, what="ID")
    assert str(caught.value) == f"{text!r} is not a decimal ID: expected digits 0-9 only"


def test_parse_decimal_raises_the_callers_error_class() -> None:
    """error= picks the class (from the caller's error tree); the message stays the same."""

    class ConfigProblem(SnowshardError):
        pass

    with pytest.raises(ConfigProblem, match="^'x' is not a decimal port: expected digits"):
        parse_decimal("x", what="port", error=ConfigProblem)


def test_parse_decimal_refuses_non_strings() -> None:
    """Only str is decimal text: bytes and ints raise IdTypeError naming the type."""
    with pytest.raises(IdTypeError, match="must be a str, got bytes"):
        parse_decimal(b"12")  # type: ignore[arg-type]


def test_parse_decimal_shortens_long_text_in_messages() -> None:
    """A long bad value is quoted cut short, so a message never carries megabytes."""
    with pytest.raises(InvalidId) as caught:
        parse_decimal("x" * 100_000)
    assert len(str(caught.value)) < 200


def test_is_decimal_is_strict() -> None:
    """is_decimal accepts bare ASCII digits only: no whitespace, sign or other scripts."""
    assert is_decimal("0123")
    assert not any(is_decimal(t) for t in ("", " 1", "-1", "\u0661", "1.0"))


@st.composite
def layouts_and_fields(draw: st.DrawFn) -> tuple[Layout, dict[str, int]]:
    ts = draw(st.integers(1, 45))
    rest = 63 - ts
    widths = {}
    for name in ("datacenter_bits", "worker_bits", "sequence_bits", "gene_bits"):
        widths[name] = draw(st.integers(0, min(rest, 12)))
        rest -= widths[name]
    epoch = draw(st.integers(0, 2_000_000_000_000))
    tick = draw(st.sampled_from([1, 10, 1000]))
    assume(epoch + (2**ts) * tick <= 253402300800000)  # layouts must end before year 10000
    layout = Layout(timestamp_bits=ts, epoch=epoch, tick_ms=tick, **widths)
    fields = {
        "ticks": draw(st.integers(0, layout.max_ticks)),
        "datacenter": draw(st.integers(0, layout.max_datacenter)),
        "worker": draw(st.integers(0, layout.max_worker)),
        "sequence": draw(st.integers(0, layout.max_sequence)),
        "gene": draw(st.integers(0, layout.max_gene)),
    }
    return layout, fields


@given(layouts_and_fields())
def test_compose_parse_round_trip(case: tuple[Layout, dict[str, int]]) -> None:
    """parse(compose(fields)) gives back every field, for random layouts."""
    layout, fields = case
    unix_ms = layout.epoch_ms + fields["ticks"] * layout.tick_ms
    composed = layout.compose(
        unix_ms,
        datacenter=fields["datacenter"],
        worker=fields["worker"],
        sequence=fields["sequence"],
        gene=fields["gene"],
    )
    parts = layout.parse(composed)
    assert parts.ticks == fields["ticks"]
    assert parts.unix_ms == unix_ms
    assert (parts.datacenter, parts.worker, parts.sequence, parts.gene) == (
        fields["datacenter"],
        fields["worker"],
        fields["sequence"],
        fields["gene"],
    )
    assert 0 <= composed < 2**63


def test_min_and_max_id_bound_one_tick() -> None:
    """min_id/max_id are the first and last IDs of a tick; the next tick starts right after."""
    layout = Layout()
    t = datetime(2024, 5, 1, 12, tzinfo=UTC)
    assert layout.max_id(t) - layout.min_id(t) == 2**22 - 1
    assert layout.min_id(t + timedelta(milliseconds=1)) == layout.max_id(t) + 1
    assert layout.parse(layout.max_id(t)).sequence == 4095


def test_min_id_selects_a_time_range() -> None:
    """IDs issued in [a, b) satisfy min_id(a) <= id < min_id(b); one at b does not."""
    layout = Layout()
    a = datetime(2024, 5, 1, tzinfo=UTC)
    b = a + timedelta(hours=1)
    inside = layout.compose(b - timedelta(milliseconds=1), worker=1023, sequence=4095)
    at_b = layout.compose(b)
    assert layout.min_id(a) <= inside < layout.min_id(b) <= at_b


def test_time_of_returns_aware_utc() -> None:
    """time_of gives the ID's tick start as an aware UTC datetime."""
    t = datetime(2030, 7, 4, 1, 2, 3, 4000, tzinfo=UTC)
    assert Layout().time_of(Layout().compose(t, worker=5)) == t


def test_ticks_are_rounded_down_for_coarse_ticks() -> None:
    """With 10 ms ticks a time 7 ms into a tick maps to the tick's start."""
    layout = Layout.sonyflake()
    composed = layout.compose(layout.epoch_ms + 12_347)
    assert layout.parse(composed).unix_ms == layout.epoch_ms + 12_340


def test_explain_shows_each_field_in_binary() -> None:
    """explain() prints the bits of every non-empty field with its value."""
    text = Layout().explain(152075078181383514)
    assert "worker     10 bits  1100001110  = 782" in text
    assert "sequence   12 bits  110101011010  = 3418" in text
    assert "2021-02-23T15:32:04.056000+00:00" in text
    assert "datacenter" not in text


def test_capacity_of_default_layout() -> None:
    """41 bits of ms last 2**41 ms; IDs pass 2**53 after 2**31 ms (about 24.9 days)."""
    layout = Layout()
    epoch = datetime(2020, 1, 1, tzinfo=UTC)
    assert layout.expires_at == epoch + timedelta(milliseconds=2**41)
    assert layout.expires_at.year == 2089
    assert layout.js_unsafe_at == epoch + timedelta(milliseconds=2**31)
    assert (layout.max_worker, layout.max_sequence, layout.ids_per_tick) == (1023, 4095, 4096)


def test_js_safe_layout_never_passes_2_53() -> None:
    """The 53-bit preset's largest ID stays below 2**53, so js_unsafe_at is None."""
    layout = Layout.js_safe()
    assert layout.max_value < 2**53
    assert layout.js_unsafe_at is None
    assert layout.expires_at == layout.epoch + timedelta(seconds=2**32)


def test_discord_preset_parses_discord_documented_id() -> None:
    """Discord's documented snowflake 175928847299117063 is 2016-04-30 11:18:25.796 UTC."""
    parts = Layout.discord().parse(175928847299117063)
    assert parts.time == datetime(2016, 4, 30, 11, 18, 25, 796000, tzinfo=UTC)
    assert (parts.datacenter, parts.worker, parts.sequence) == (1, 0, 7)


def test_twitter_preset_uses_twitter_epoch() -> None:
    """Twitter's epoch is 1288834974657 ms, with 5 datacenter and 5 worker bits."""
    layout = Layout.twitter()
    assert layout.epoch_ms == 1288834974657
    assert (layout.datacenter_bits, layout.worker_bits, layout.total_bits) == (5, 5, 63)


def test_layouts_are_hashable_values() -> None:
    """Equal settings give equal, equally hashed layouts (usable as cache keys)."""
    assert Layout(gene_bits=4, worker_bits=6) == Layout(worker_bits=6, gene_bits=4)
    assert len({Layout(), Layout(), Layout.twitter()}) == 2

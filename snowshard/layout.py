"""Bit layouts of snowflake IDs: compose, parse and explain them.

A layout splits a 63-bit non-negative integer into fields, high to low::

    63 62                                                                    0
    +--+-----------------+--------------+----------+------------+----------+
    | 0|    timestamp    |  datacenter  |  worker  |  sequence  |   gene   |
    +--+-----------------+--------------+----------+------------+----------+
         ticks since        which site     which      n-th ID      low bits of
         the epoch                         process    in the tick  a parent key

The sign bit stays 0 so every ID is a positive signed ``BIGINT``. Any field but the
timestamp may have width 0. The gene sits lowest so ``id % 2**k`` equals
``parent % 2**k`` for every ``k <= gene_bits`` (see :func:`snowshard.gene_of`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import NamedTuple, Union

from snowshard.errors import (
    FieldOutOfRange,
    IdTypeError,
    InvalidId,
    LayoutError,
    LayoutExpired,
    SnowshardError,
)
from snowshard.genes import gene_of

__all__ = [
    "DEFAULT_EPOCH",
    "MAX_DECIMAL_DIGITS",
    "Layout",
    "Parts",
    "TimeLike",
    "check_layout",
    "is_decimal",
    "parse_decimal",
    "to_unix_ms",
]

TimeLike = Union[datetime, int]
"""A point in time: an aware :class:`~datetime.datetime` or Unix milliseconds."""

DEFAULT_EPOCH = datetime(2020, 1, 1, tzinfo=timezone.utc)
"""2020-01-01 UTC: predates any data a new project stores, lasts (41 bits of ms) to 2089,
and is a common snowflake epoch, so IDs of that scheme parse with the default layout."""

_UNIX = datetime(1970, 1, 1, tzinfo=timezone.utc)
_JS_SAFE = 2**53
_MAX_DATETIME_MS = 253402300800000  # 10000-01-01T00:00:00Z


def to_unix_ms(value: TimeLike, *, what: str = "time") -> int:
    """Unix milliseconds of an aware datetime or an ``int``; naive datetimes are refused."""
    if isinstance(value, bool) or not isinstance(value, (int, datetime)):
        raise IdTypeError(
            f"{what} must be an aware datetime or Unix milliseconds (int), "
            f"got {type(value).__name__} {value!r}"
        )
    if isinstance(value, int):
        return value
    if value.tzinfo is None or value.utcoffset() is None:
        raise LayoutError(
            f"{what} {value.isoformat()} is a naive datetime; give it a timezone "
            "(e.g. tzinfo=timezone.utc) so it names one instant"
        )
    delta = value - _UNIX
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000


MAX_DECIMAL_DIGITS = 4300
"""The most digits :func:`parse_decimal` reads (Python's own limit for ``int(str)``)."""


def is_decimal(text: str) -> bool:
    """Whether ``text`` is one or more ASCII digits 0-9 and nothing else.

    No sign, no spaces, no ``_`` separators, no other scripts' digits (``int()`` reads
    ``"١٢"`` as 12; an ID never is).
    """
    return text.isascii() and text.isdigit()


def parse_decimal(
    text: str, *, what: str = "number", error: type[SnowshardError] = InvalidId
) -> int:
    """The non-negative ``int`` that ``text`` spells in decimal: the one parser of IDs and keys.

    Surrounding whitespace is ignored; otherwise ``text`` must pass :func:`is_decimal`.
    Anything else raises ``error`` (default :class:`~snowshard.InvalidId`) with the message
    ``'<text>' is not a decimal <what>: expected digits 0-9 only``, so the same bad text
    reads the same wherever it is parsed; ``what`` names what was expected (``"ID"``,
    ``"worker ID in 0..1023 ($SNOWSHARD_WORKER_ID)"``). Text longer than
    :data:`MAX_DECIMAL_DIGITS` digits raises ``error`` too. Ranges are the caller's to
    check, with its own advice.
    """
    if not isinstance(text, str):
        raise IdTypeError(
            f"a decimal {what} must be a str, got {type(text).__name__} {text!r}"
        )
    digits = text.strip()
    if not is_decimal(digits):
        raise error(f"{_shown(text)} is not a decimal {what}: expected digits 0-9 only")
    if len(digits) > MAX_DECIMAL_DIGITS:
        raise error(
            f"{_shown(digits)} has {len(digits)} digits, more than the "
            f"{MAX_DECIMAL_DIGITS} a decimal {what} may have; give a smaller number"
        )
    return int(digits)


def _shown(text: str) -> str:
    """``repr(text)``, cut short when long (a message must not quote megabytes)."""
    shown = repr(text)
    return shown if len(shown) <= 64 else f"{shown[:48]}...{shown[-8:]}"


def _from_unix_ms(ms: int) -> datetime:
    return _UNIX + timedelta(milliseconds=ms)


class Parts(NamedTuple):
    """The fields of a parsed ID."""

    time: datetime
    """Start of the ID's tick, as an aware UTC datetime."""
    unix_ms: int
    ticks: int
    """Ticks since the layout's epoch (the raw timestamp field)."""
    datacenter: int
    worker: int
    sequence: int
    gene: int


@dataclass(frozen=True, init=False)
class Layout:
    """Widths, epoch and tick of a snowflake ID; see the module docstring for the diagram.

    Layouts are immutable and hashable, so they can key caches and SQLAlchemy types.
    """

    timestamp_bits: int
    datacenter_bits: int
    worker_bits: int
    sequence_bits: int
    gene_bits: int
    epoch_ms: int
    tick_ms: int

    def __init__(
        self,
        *,
        timestamp_bits: int = 41,
        datacenter_bits: int = 0,
        worker_bits: int = 10,
        sequence_bits: int = 12,
        gene_bits: int = 0,
        epoch: TimeLike = DEFAULT_EPOCH,
        tick_ms: int = 1,
    ) -> None:
        widths = {
            "timestamp_bits": timestamp_bits,
            "datacenter_bits": datacenter_bits,
            "worker_bits": worker_bits,
            "sequence_bits": sequence_bits,
            "gene_bits": gene_bits,
        }
        for name, width in widths.items():
            if isinstance(width, bool) or not isinstance(width, int):
                raise LayoutError(f"{name} must be an int, got {width!r}")
            if width < 0:
                raise LayoutError(f"{name} must be >= 0, got {width}")
        total = sum(widths.values())
        shown = ", ".join(f"{k}={v}" for k, v in widths.items())
        if timestamp_bits < 1:
            raise LayoutError(f"timestamp_bits must be >= 1, got {timestamp_bits} ({shown})")
        if total > 63:
            raise LayoutError(
                f"widths add up to {total} bits ({shown}); at most 63 fit a signed BIGINT: "
                "narrow a field"
            )
        if isinstance(tick_ms, bool) or not isinstance(tick_ms, int) or tick_ms < 1:
            raise LayoutError(f"tick_ms must be an int >= 1, got {tick_ms!r}")
        epoch_ms = to_unix_ms(epoch, what="epoch")
        if epoch_ms < 0:
            raise LayoutError(f"epoch must not precede 1970-01-01, got {epoch_ms} ms")
        end_ms = epoch_ms + (1 << timestamp_bits) * tick_ms
        if end_ms > _MAX_DATETIME_MS:
            raise LayoutError(
                f"timestamp_bits={timestamp_bits} with tick_ms={tick_ms} runs past year 9999, "
                "which Python datetimes cannot show; use fewer timestamp bits or a shorter tick"
            )
        for name, width in widths.items():
            object.__setattr__(self, name, width)
        object.__setattr__(self, "epoch_ms", epoch_ms)
        object.__setattr__(self, "tick_ms", tick_ms)

    # -- presets ---------------------------------------------------------------------

    @classmethod
    def twitter(cls) -> Layout:
        """Twitter's original: 41-bit ms since 2010-11-04, 5+5 machine bits, 12-bit seq."""
        return cls(datacenter_bits=5, worker_bits=5, epoch=1288834974657)

    @classmethod
    def discord(cls) -> Layout:
        """Discord's: epoch 2015-01-01, 5-bit worker, 5-bit process, 12-bit increment.

        Discord's timestamp is 42 bits of an unsigned 64; capped here at 41 bits so IDs stay a
        signed BIGINT (valid until 2084). Worker is ``datacenter``, process is ``worker``.
        """
        return cls(datacenter_bits=5, worker_bits=5, epoch=1420070400000)

    @classmethod
    def sonyflake(cls) -> Layout:
        """Sonyflake-like: 39 bits of 10 ms ticks since 2014-09-01, 16-bit machine, 8-bit seq.

        Sonyflake puts the sequence above the machine ID; here the order is fixed, so the IDs
        differ from sonyflake's own but have the same capacity (174 years, 25,600 IDs/s).
        """
        return cls(
            timestamp_bits=39, worker_bits=16, sequence_bits=8, tick_ms=10, epoch=1409529600000
        )

    @classmethod
    def js_safe(cls) -> Layout:
        """A JavaScript-safe layout: 32-bit seconds, 8-bit worker, 12-bit sequence.

        Every ID stays below 2**53, so a JavaScript ``Number`` holds it exactly.
        """
        return cls(timestamp_bits=32, worker_bits=8, sequence_bits=12, tick_ms=1000)

    # -- geometry --------------------------------------------------------------------

    @property
    def total_bits(self) -> int:
        """Bits the fields use (at most 63)."""
        return (
            self.timestamp_bits
            + self.datacenter_bits
            + self.worker_bits
            + self.sequence_bits
            + self.gene_bits
        )

    @property
    def sequence_shift(self) -> int:
        return self.gene_bits

    @property
    def worker_shift(self) -> int:
        return self.gene_bits + self.sequence_bits

    @property
    def datacenter_shift(self) -> int:
        return self.worker_shift + self.worker_bits

    @property
    def timestamp_shift(self) -> int:
        return self.datacenter_shift + self.datacenter_bits

    @property
    def max_value(self) -> int:
        """The largest value an ID of this layout can take."""
        return (1 << self.total_bits) - 1

    @property
    def max_ticks(self) -> int:
        return (1 << self.timestamp_bits) - 1

    @property
    def max_datacenter(self) -> int:
        return (1 << self.datacenter_bits) - 1

    @property
    def max_worker(self) -> int:
        return (1 << self.worker_bits) - 1

    @property
    def max_sequence(self) -> int:
        return (1 << self.sequence_bits) - 1

    @property
    def max_gene(self) -> int:
        return (1 << self.gene_bits) - 1

    @property
    def ids_per_tick(self) -> int:
        """IDs one (datacenter, worker, gene) can issue in one tick."""
        return 1 << self.sequence_bits

    @property
    def epoch(self) -> datetime:
        return _from_unix_ms(self.epoch_ms)

    @property
    def expires_at(self) -> datetime:
        """The first instant whose tick no longer fits the timestamp field."""
        return _from_unix_ms(self.epoch_ms + (self.max_ticks + 1) * self.tick_ms)

    @property
    def js_unsafe_at(self) -> datetime | None:
        """When IDs first exceed 2**53 - 1 (JavaScript's largest exact integer), or None."""
        if self.total_bits <= 53:
            return None
        first_tick = -(-_JS_SAFE // (1 << self.timestamp_shift))
        return _from_unix_ms(self.epoch_ms + first_tick * self.tick_ms)

    # -- time ------------------------------------------------------------------------

    def ticks_of(self, time: TimeLike) -> int:
        """Ticks since the epoch of ``time``, checked against the timestamp field."""
        ms = to_unix_ms(time)
        if ms < self.epoch_ms:
            raise FieldOutOfRange(
                f"time {_from_unix_ms(ms).isoformat()} precedes the layout's epoch "
                f"{self.epoch.isoformat()}; choose an earlier epoch"
            )
        ticks = (ms - self.epoch_ms) // self.tick_ms
        if ticks > self.max_ticks:
            raise LayoutExpired(
                f"time {_from_unix_ms(ms).isoformat()} is past this layout's end "
                f"{self.expires_at.isoformat()}; use a later epoch or more timestamp_bits"
            )
        return ticks

    def gene_for(self, key: object) -> int:
        """The gene a child of parent ``key`` carries; refused when ``gene_bits`` is 0."""
        if self.gene_bits == 0:
            raise LayoutError(
                f"gene={key!r} given, but this layout has gene_bits=0; build the Layout "
                "with gene_bits=n to carry a parent key's low bits"
            )
        return gene_of(key, self.gene_bits)

    def expired(self, tick: int) -> LayoutExpired:
        """The error for a tick past the end of the timestamp field."""
        return LayoutExpired(
            f"tick {tick} does not fit the layout's {self.timestamp_bits}-bit timestamp "
            f"(it ended at {self.expires_at.isoformat()}); move to a layout with a later "
            "epoch or more timestamp bits"
        )

    def unix_ms_of_ticks(self, ticks: int) -> int:
        return self.epoch_ms + ticks * self.tick_ms

    # -- compose / parse -------------------------------------------------------------

    def check_field(self, field: str, value: object) -> int:
        """``value`` if it fits ``field`` ("datacenter", "worker", ...); raise otherwise."""
        limit = {
            "timestamp": self.max_ticks,
            "datacenter": self.max_datacenter,
            "worker": self.max_worker,
            "sequence": self.max_sequence,
            "gene": self.max_gene,
        }[field]
        return self._check(field, value, limit)

    def _check(self, field: str, value: object, limit: int) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise IdTypeError(f"{field} must be an int, got {type(value).__name__} {value!r}")
        if not 0 <= value <= limit:
            raise FieldOutOfRange(
                f"{field} must be in 0..{limit} for this layout, got {value}; "
                f"widen {field}_bits or pass a smaller {field}"
            )
        return value

    def check_started(self, now_ms: int, *, clock: str = "the clock") -> None:
        """Refuse to issue from a layout whose epoch is after ``now_ms`` (Unix ms).

        Issuers call it when they are built, so a future epoch fails there, naming both
        times, rather than as :class:`ClockMovedBackwards` at the first ID.
        """
        if now_ms < self.epoch_ms:
            raise LayoutError(
                f"epoch {self.epoch.isoformat()} is later than now "
                f"({_from_unix_ms(now_ms).isoformat()}, read from {clock}): no ID can be "
                "issued before the epoch; "
                "choose an epoch in the past"
            )

    def compose_ticks(
        self, ticks: int, *, datacenter: int = 0, worker: int = 0, sequence: int = 0, gene: int = 0
    ) -> int:
        """Assemble an ID from raw field values (``ticks`` since the epoch)."""
        return (
            (self._check("timestamp", ticks, self.max_ticks) << self.timestamp_shift)
            | (self._check("datacenter", datacenter, self.max_datacenter) << self.datacenter_shift)
            | (self._check("worker", worker, self.max_worker) << self.worker_shift)
            | (self._check("sequence", sequence, self.max_sequence) << self.sequence_shift)
            | self._check("gene", gene, self.max_gene)
        )

    def compose(
        self,
        time: TimeLike,
        *,
        datacenter: int = 0,
        worker: int = 0,
        sequence: int = 0,
        gene: int = 0,
    ) -> int:
        """Assemble the ID of ``time`` (aware datetime or Unix ms) and the given fields."""
        return self.compose_ticks(
            self.ticks_of(time),
            datacenter=datacenter,
            worker=worker,
            sequence=sequence,
            gene=gene,
        )

    def validate(self, id: object) -> int:
        """Return ``id`` as an int if it is an ID of this layout; raise otherwise.

        Accepts ``int`` and decimal ``str`` (IDs reach JSON clients as strings).
        """
        if isinstance(id, bool) or not isinstance(id, (int, str)):
            raise IdTypeError(
                f"an ID must be an int or a decimal str, got {type(id).__name__} {id!r}"
            )
        value = parse_decimal(id, what="ID") if isinstance(id, str) else id
        if value < 0:
            raise InvalidId(f"ID {value} is negative; IDs are in 0..{self.max_value}")
        if value > self.max_value:
            raise InvalidId(
                f"ID {value} is wider than this layout's {self.total_bits} bits "
                f"(0..{self.max_value}); was it made with another layout?"
            )
        return value

    def parse(self, id: int | str) -> Parts:
        """Split an ID into its fields (the inverse of :meth:`compose`)."""
        value = self.validate(id)
        ticks = value >> self.timestamp_shift
        unix_ms = self.unix_ms_of_ticks(ticks)
        return Parts(
            time=_from_unix_ms(unix_ms),
            unix_ms=unix_ms,
            ticks=ticks,
            datacenter=(value >> self.datacenter_shift) & self.max_datacenter,
            worker=(value >> self.worker_shift) & self.max_worker,
            sequence=(value >> self.sequence_shift) & self.max_sequence,
            gene=value & self.max_gene,
        )

    def time_of(self, id: int | str) -> datetime:
        """The start of the tick ``id`` was issued in (aware UTC)."""
        return self.parse(id).time

    def min_id(self, time: TimeLike) -> int:
        """The lowest ID of ``time``'s tick: ``min_id(a) <= id < min_id(b)`` selects [a, b)."""
        return self.ticks_of(time) << self.timestamp_shift

    def max_id(self, time: TimeLike) -> int:
        """The highest ID of ``time``'s tick."""
        return self.min_id(time) | ((1 << self.timestamp_shift) - 1)

    def explain(self, id: int | str) -> str:
        """A binary breakdown of ``id``, one field per line (for debugging by eye)."""
        value = self.validate(id)
        parts = self.parse(value)
        rows = [
            ("timestamp", self.timestamp_bits, parts.ticks, f"{parts.time.isoformat()}"),
            ("datacenter", self.datacenter_bits, parts.datacenter, ""),
            ("worker", self.worker_bits, parts.worker, ""),
            ("sequence", self.sequence_bits, parts.sequence, ""),
            ("gene", self.gene_bits, parts.gene, ""),
        ]
        lines = [f"id {value} = 0b{value:0{self.total_bits + 1}b}"]
        lines.append(f"  {'sign':<10}  1 bit   0")
        for name, width, field, note in rows:
            if width == 0:
                continue
            bits = format(field, f"0{width}b")
            tail = f"  ({note})" if note else ""
            lines.append(f"  {name:<10} {width:>2} bits  {bits}  = {field}{tail}")
        return "\n".join(lines)

    def describe(self) -> str:
        """A one-line summary, e.g. ``41t|0d|10w|12s|0g tick=1ms epoch=2020-01-01``."""
        return (
            f"{self.timestamp_bits}t|{self.datacenter_bits}d|{self.worker_bits}w|"
            f"{self.sequence_bits}s|{self.gene_bits}g tick={self.tick_ms}ms "
            f"epoch={self.epoch.isoformat()}"
        )


def check_layout(value: object, what: str = "layout") -> Layout:
    """``value`` if it is a :class:`Layout`; otherwise :class:`LayoutError` naming it."""
    if not isinstance(value, Layout):
        raise LayoutError(
            f"{what} must be a snowshard.Layout, got {type(value).__name__} {value!r}; "
            "build one with Layout(...) or a preset such as Layout.twitter()"
        )
    return value

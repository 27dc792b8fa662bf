"""Layout generations: new rows go to a new layout, old rows never move.

A sharded model may declare, after its own layout (``Shards(count, ...)``, generation 0),
more layouts, each effective from a UTC instant::

    __shards__ = Shards(16, key=("id", "user_id"), generations=[
        Generation("2027-01-01T00:00:00Z", 64, databases={"a": range(32), "b": range(32, 64)}),
    ])

A row belongs to the generation of its **ID's time**: the snowflake timestamp keeps its
position in every generation, so any ID parses and its generation is known. Rows issued
before the switch stay in generation 0's tables (``orders_00`` .. ``orders_15``); rows
issued at or after it go to generation 1's (``orders_g1_00`` .. ``orders_g1_63`` by
default). Nothing is moved.

**One global index space.** Generation ``g`` owns the table indices ``offset_g ..
offset_g + count_g - 1`` (:class:`Period`), so ``ShardedModel.count``, ``tables``,
``classes`` and ``database_of(index)`` keep describing every physical table and the
executor, merges, keyset pages, updates/deletes and ``explain`` work unchanged. The
:class:`Timeline` is the model's ``spec`` and ``strategy`` when it has several
generations: it knows the global ``databases`` map and the names of the tables.

**Routing.** An ID names one table (its generation, then that generation's strategy). A
parent key (the column the ID takes its gene from) names one table *per generation*
(``ShardedModel.shards_of``); ``ShardedModel.shard_of`` of such a key raises
:class:`AmbiguousShard`. Range terms on the ID (``id >= x``, ``id < y``, ``BETWEEN``, what
:func:`~snowshard.orm.timerange.id_between` builds) narrow a statement to the generations
whose IDs they can match.

**Refusals.** A model with several generations binds with no other model: a join on a
parent key pairs rows of different generations (an order issued after the switch, of a
user issued before it), which a shard-by-shard join cannot see, so such joins raise
:class:`~snowshard.sharding.errors.UnsupportedShardQuery`.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from snowshard.errors import ShardConfigError
from snowshard.layout import Layout, to_unix_ms
from snowshard.sharding.errors import ShardingError
from snowshard.spec import ShardSpec
from snowshard.strategies import Gene, Mod, ShardStrategy, check_strategy

__all__ = [
    "AmbiguousShard",
    "Generation",
    "Period",
    "Timeline",
    "build_timeline",
    "default_strategy",
    "generation_pattern",
    "parse_since",
]


class AmbiguousShard(ShardingError, ValueError):
    """A key value names one table per generation where exactly one table was asked for."""


SinceLike = str | datetime


def parse_since(value: object, what: str = "Generation(since=...)") -> int:
    """Unix milliseconds of ``since``: an ISO 8601 string with a UTC offset, or an aware datetime."""
    if isinstance(value, str):
        text = value.strip()
        if text[-1:] in ("Z", "z"):  # Python 3.10's fromisoformat has no "Z"
            text = text[:-1] + "+00:00"
        try:
            parsed = datetime.fromisoformat(text)
        except ValueError:
            raise ShardConfigError(
                f"{what} = {value!r} is not an ISO 8601 time; write it as '2027-01-01T00:00:00Z'"
            ) from None
        if parsed.tzinfo is None or parsed.utcoffset() is None:
            raise ShardConfigError(
                f"{what} = {value!r} has no UTC offset, so it names no single instant; "
                f"write '{parsed.isoformat()}Z' (UTC) or give an offset"
            )
        return to_unix_ms(parsed, what=what)
    if isinstance(value, datetime):
        if value.tzinfo is None or value.utcoffset() is None:
            raise ShardConfigError(
                f"{what} = {value.isoformat()} is a naive datetime; give it a timezone "
                "(e.g. tzinfo=timezone.utc) so it names one instant"
            )
        return to_unix_ms(value, what=what)
    raise ShardConfigError(
        f"{what} must be an ISO 8601 str with a UTC offset ('2027-01-01T00:00:00Z') or an "
        f"aware datetime, got {type(value).__name__} {value!r}"
    )


def _utc_text(ms: int) -> str:
    moment = datetime.fromtimestamp(ms / 1000, tz=timezone.utc)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def generation_pattern(number: int) -> str:
    """The default table name pattern of generation ``number`` (>= 1): ``{name}_g1_{index:02d}``.

    Generation 0 keeps ``Shards(pattern=...)`` (``{name}_{index:02d}`` by default), whose
    names are the logical name, ``_`` and digits only, so they never meet a ``_g`` name.
    """
    return f"{{name}}_g{number}_{{index:02d}}"


def default_strategy(count: int) -> ShardStrategy:
    """``Gene(count)`` for a power of two, else ``Mod(count)`` (as for ``Shards``)."""
    return Gene(count) if count & (count - 1) == 0 else Mod(count)


@dataclass(frozen=True)
class Generation:
    """A layout effective for rows whose ID time is at or after ``since``.

    :param since: the switch instant: an ISO 8601 str with a UTC offset
        (``"2027-01-01T00:00:00Z"``) or an aware datetime.
    :param count: number of physical tables of this generation.
    :param strategy: as for ``Shards``; default ``Gene(count)`` for a power of two, else
        ``Mod(count)``.
    :param pattern: table names; default ``"{name}_g<N>_{index:02d}"`` for generation N.
    :param databases: database key -> this generation's *own* table indices
        (``0..count-1``); default: all in ``"default"``.
    """

    since: SinceLike
    count: int
    strategy: Any = None
    pattern: str | None = None
    databases: Mapping[str, Iterable[int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        parse_since(self.since)
        if isinstance(self.count, bool) or not isinstance(self.count, int) or self.count < 1:
            raise ShardConfigError(
                f"Generation(count=...) must be an int >= 1 (tables of the generation), got "
                f"{self.count!r}"
            )
        if self.strategy is not None:
            check_strategy(self.strategy, "Generation(strategy=...)")
        if self.pattern is not None and not isinstance(self.pattern, str):
            raise ShardConfigError(
                f"Generation(pattern=...) must be a str such as '{{name}}_g1_{{index:02d}}' "
                f"or None, got {type(self.pattern).__name__} {self.pattern!r}"
            )

    @property
    def since_ms(self) -> int:
        """The switch instant in Unix milliseconds."""
        return parse_since(self.since)


@dataclass(frozen=True)
class Period:
    """One generation as a model uses it: its tables, strategy and place in the index space.

    ``first_id`` is the lowest ID whose time is at or after ``since_ms`` (0 for the first
    generation, whose ``since_ms`` is None); IDs from ``first_id`` up to the next
    generation's ``first_id`` belong here. Global index ``offset + i`` is table
    ``spec.table_name(i)``.
    """

    number: int
    since_ms: int | None
    first_id: int
    offset: int
    spec: ShardSpec
    strategy: Any

    @property
    def count(self) -> int:
        return self.spec.count

    @property
    def indices(self) -> range:
        """The global table indices of this generation."""
        return range(self.offset, self.offset + self.spec.count)

    @property
    def since(self) -> str | None:
        """``since_ms`` as UTC ISO 8601 text (None for the first generation)."""
        return None if self.since_ms is None else _utc_text(self.since_ms)


class Timeline:
    """A model's generations over one global index space (module docstring).

    Stands in for a :class:`~snowshard.spec.ShardSpec` (``name``, ``count``, ``databases``,
    ``database_of``, ``tables_in``, ``table_name``, ``table_names``) over the global
    indices, so code reading a model's ``spec`` sees every table of every generation.
    """

    def __init__(self, periods: Sequence[Period], layout: Layout) -> None:
        self.periods = tuple(periods)
        self.layout = layout
        self.name = self.periods[0].spec.name
        self.count = sum(p.count for p in self.periods)
        self._firsts = [p.first_id for p in self.periods[1:]]
        self._located: list[tuple[Period, int]] = [
            (p, i) for p in self.periods for i in range(p.count)
        ]
        databases: dict[str, list[int]] = {}
        for period in self.periods:
            for key, indices in period.spec.databases.items():
                databases.setdefault(key, []).extend(period.offset + i for i in indices)
        self.databases: Mapping[str, tuple[int, ...]] = {
            key: tuple(sorted(indices)) for key, indices in databases.items()
        }

    def __repr__(self) -> str:
        parts = []
        for p in self.periods:
            when = "from the start" if p.since is None else f"since {p.since}"
            parts.append(f"{p.strategy!r} over {p.spec.table_name(0)}.. {when}")
        return f"Generations({'; '.join(parts)})"

    # -- the ShardSpec view ------------------------------------------------------------

    def locate(self, index: int) -> tuple[Period, int]:
        """(generation, its own table index) of global ``index``."""
        return self._located[index]

    def table_name(self, index: int) -> str:
        period, local = self._located[index]
        return period.spec.table_name(local)

    @property
    def table_names(self) -> list[str]:
        return [self.table_name(i) for i in range(self.count)]

    def database_of(self, index: int) -> str:
        period, local = self._located[index]
        return period.spec.database_of(local)

    def tables_in(self, database: str) -> list[int]:
        """Global indices of the tables held by ``database`` (empty if it holds none)."""
        return list(self.databases.get(database, ()))

    # -- time --------------------------------------------------------------------------

    def period_of_id(self, value: int) -> Period:
        """The generation of an ID (a non-negative int): the one its time falls in."""
        return self.periods[bisect_right(self._firsts, value)]

    def shards_from(self, lowest: int) -> frozenset[int]:
        """Global indices of the generations that can hold an ID ``>= lowest``."""
        start = self.period_of_id(max(lowest, 0)).number
        return frozenset(i for p in self.periods[start:] for i in p.indices)

    def shards_to(self, highest: int) -> frozenset[int]:
        """Global indices of the generations that can hold an ID ``<= highest``."""
        if highest < 0:
            return frozenset()
        stop = self.period_of_id(highest).number
        return frozenset(i for p in self.periods[: stop + 1] for i in p.indices)


def _first_id(layout: Layout, since_ms: int, what: str) -> int:
    """The lowest ID whose tick starts at or after ``since_ms``."""
    if since_ms < layout.epoch_ms:
        raise ShardConfigError(
            f"{what} = {_utc_text(since_ms)} precedes the ID layout's epoch "
            f"{_utc_text(layout.epoch_ms)}; no ID has that time: choose a later switch"
        )
    ticks = -(-(since_ms - layout.epoch_ms) // layout.tick_ms)
    if ticks > layout.max_ticks:
        raise ShardConfigError(
            f"{what} = {_utc_text(since_ms)} is past the ID layout's end "
            f"{layout.expires_at.isoformat()}; choose an earlier switch"
        )
    return ticks << layout.timestamp_shift


def build_timeline(
    model: str,
    first: tuple[ShardSpec, Any],
    declared: Sequence[Generation],
    layout: Layout,
    strategy_of: Any,
) -> Timeline:
    """The :class:`Timeline` of ``model``: generation 0 is ``first`` (spec, strategy).

    ``strategy_of(count, strategy, what)`` resolves and checks a generation's strategy.
    Raises :class:`ShardConfigError` for switch times that do not strictly increase or
    fall outside the layout, and for table names used twice.
    """
    spec0, strategy0 = first
    periods = [Period(0, None, 0, 0, spec0, strategy0)]
    seen = {name: 0 for name in spec0.table_names}
    offset = spec0.count
    for number, generation in enumerate(declared, start=1):
        what = f"{model}: generation {number} Generation(since=...)"
        since_ms = generation.since_ms
        previous = periods[-1].since_ms
        if previous is not None and since_ms <= previous:
            raise ShardConfigError(
                f"{what} = {_utc_text(since_ms)} is not after generation {number - 1}'s "
                f"{_utc_text(previous)}; list generations in strictly increasing time"
            )
        first_id = _first_id(layout, since_ms, what)
        if first_id <= periods[-1].first_id:
            raise ShardConfigError(
                f"{what} = {_utc_text(since_ms)} falls in the same ID tick "
                f"({layout.tick_ms} ms) as generation {number - 1}'s switch; space them "
                "at least a tick apart"
            )
        spec = ShardSpec(
            spec0.name,
            generation.count,
            generation.pattern or generation_pattern(number),
            {key: tuple(indices) for key, indices in generation.databases.items()},
        )
        for name in spec.table_names:
            if name in seen:
                raise ShardConfigError(
                    f"{model}: table {name!r} would belong to generations {seen[name]} and "
                    f"{number}; give generation {number} another pattern= (the default is "
                    f"{generation_pattern(number)!r})"
                )
            seen[name] = number
        strategy = strategy_of(generation.count, generation.strategy, f"generation {number}")
        periods.append(Period(number, since_ms, first_id, offset, spec, strategy))
        offset += spec.count
    return Timeline(periods, layout)

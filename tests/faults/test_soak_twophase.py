"""Two-phase commit under load while one database's connections are killed every few seconds.

On PostgreSQL and on MariaDB, a shop's ``Order`` is spread over databases "a" and "b" and
``User`` (unsharded) lives in "a". Sixteen threads write *groups* with ``twophase=True``: a
user alone ("a"), an order alone ("b"), or rows in both databases; each group's rows carry
its tag, and every attempt is recorded with its outcome. A killer terminates every
connection of database "b" every few seconds. A failed commit is retried only when its
error says ``retry_safe``; any other error raised by ``commit()`` means the commit never
began (a flush or a ``BEGIN`` failed), so it is retried too. After the run and recovery:
no branch of the run is left prepared, no group is half committed, no thread hung, and
every group a thread saw commit is stored exactly once.
"""

from __future__ import annotations

import random
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
import sqlalchemy as sa

from snowshard.operations import recover
from snowshard.sharding import ShardedSession, create_all, sharded_model
from snowshard.sharding.commit_errors import CommitError
from snowshard.sharding.errors import ShardingError
from snowshard.sharding.twophase import group_created_ms
from tests.backends import DatabaseFactory
from tests.faults.twophase_support import SERVERS, branches
from tests.worlds import Shop, declare_shop

pytestmark = pytest.mark.slow

THREADS = 16
RUN_S = 16.0  # writing time; kills at 2, 7, 12 s
KILL_EVERY_S = 5.0
FIRST_KILL_S = 2.0
LOCK_TIMEOUT_S = 2
ATTEMPTS = 4  # per group, when the failures are retry-safe
JOIN_TIMEOUT_S = 30.0
GRACE_S = 1.0  # recovery's grace: past it for every group of the run, short for others'
VICTIM = "b"

COMMITTED = "committed"
RETRY_SAFE = "failed-retry-safe"
UNKNOWN = "failed-unknown"

PLANS: list[tuple[str, ...]] = [("a",), ("b",), ("a", "b"), ("a", "a", "b")]
"""Where a group writes, a row per entry: a leading "a" is a user, every other entry an
order in that database."""


@dataclass
class Group:
    """One logical write: its tag, the rows it puts in each database, its attempts."""

    tag: str
    rows: Counter[str]
    outcomes: list[str] = field(default_factory=list)
    xids: list[str] = field(default_factory=list)
    """The two-phase group ID of each attempt."""


@dataclass
class Run:
    """What the threads and the killer did."""

    groups: list[Group] = field(default_factory=list)
    thread_errors: list[str] = field(default_factory=list)
    kills: int = 0
    killed: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


def _engines(factory: DatabaseFactory, backend: str) -> dict[str, sa.Engine]:
    """Databases "a" and "b" with pools for every thread and a short lock timeout."""
    if backend == "postgresql":
        connect_args: dict[str, Any] = {
            "options": f"-c lock_timeout={LOCK_TIMEOUT_S * 1000} -c statement_timeout=20000"
        }
    else:
        connect_args = {
            "init_command": f"SET SESSION innodb_lock_wait_timeout = {LOCK_TIMEOUT_S}",
            "read_timeout": 20,
            "write_timeout": 20,
        }
    urls = factory(backend, 2)
    return {
        key: factory.engine(
            url, pool_size=THREADS, max_overflow=THREADS, pool_timeout=10,
            connect_args=connect_args,
        )
        for key, url in zip(("a", "b"), urls)
    }


def _user_ids(shop: Shop) -> dict[str, Callable[[random.Random], int]]:
    """database -> a function drawing a user ID whose orders live in that database."""
    model = sharded_model(shop.Order)

    def drawer(database: str) -> Callable[[random.Random], int]:
        def draw(rng: random.Random) -> int:
            while True:
                user_id = rng.randrange(1, 2**40)
                if model.database_of(model.shard_of("user_id", user_id)) == database:
                    return user_id
        return draw

    return {key: drawer(key) for key in ("a", "b")}


def _rows(shop: Shop, plan: tuple[str, ...], tag: str, rng: random.Random,
          draw: dict[str, Callable[[random.Random], int]]) -> list[Any]:
    """Fresh objects for one attempt of a group (new primary keys every attempt)."""
    rows: list[Any] = []
    for index, database in enumerate(plan):
        if index == 0 and database == "a":
            rows.append(shop.User(id=rng.randrange(1, 2**62), name=tag))
        else:
            rows.append(shop.Order(user_id=draw[database](rng), amount=1, note=tag))
    return rows


def _attempt(shop: Shop, engines: dict[str, sa.Engine], rows: list[Any]) -> tuple[str, str]:
    """Commit ``rows`` in one two-phase session: (outcome, group ID)."""
    with ShardedSession(engines["a"], databases=engines, twophase=True) as session:
        session.add_all(rows)
        try:
            session.commit()
            outcome = COMMITTED
        except CommitError as exc:
            outcome = RETRY_SAFE if exc.retry_safe else UNKNOWN
        except (sa.exc.DBAPIError, ShardingError):
            outcome = RETRY_SAFE  # raised before the databases were asked to commit
        return outcome, session.commits.group


def _writer(shop: Shop, engines: dict[str, sa.Engine], index: int, stop_at: float,
            run: Run) -> None:
    rng = random.Random(index)
    draw = _user_ids(shop)
    number = 0
    try:
        while time.monotonic() < stop_at:
            number += 1
            plan = rng.choice(PLANS)
            wanted = Counter(plan)
            group = Group(f"w{index:02d}-{number:05d}", wanted)
            for _ in range(ATTEMPTS):
                outcome, xid = _attempt(shop, engines, _rows(shop, plan, group.tag, rng, draw))
                group.outcomes.append(outcome)
                group.xids.append(xid)
                if outcome != RETRY_SAFE:
                    break
                time.sleep(0.05)
            with run.lock:
                run.groups.append(group)
    except Exception as exc:  # noqa: BLE001 - reported by the test
        with run.lock:
            run.thread_errors.append(f"writer {index}: {type(exc).__name__}: {exc}\n"
                                     + traceback.format_exc())


def _kill_all(admin: sa.Connection, backend: str, database: str) -> int:
    """Terminate every connection to ``database`` but ``admin``'s own; how many."""
    if backend == "postgresql":
        return len(admin.execute(sa.text(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = :db AND pid <> pg_backend_pid()"
        ), {"db": database}).all())
    victims = admin.execute(sa.text(
        "SELECT ID FROM information_schema.PROCESSLIST WHERE DB = :db AND ID <> CONNECTION_ID()"
    ), {"db": database}).scalars().all()
    killed = 0
    for victim in victims:
        try:
            admin.exec_driver_sql(f"KILL CONNECTION {int(victim)}")
            killed += 1
        except sa.exc.DBAPIError:
            pass  # it ended meanwhile
    return killed


def _killer(url: sa.URL, backend: str, victim: str, stop: threading.Event, run: Run) -> None:
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    try:
        wait = FIRST_KILL_S
        while not stop.wait(wait):
            with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as admin:
                killed = _kill_all(admin, backend, victim)
            run.kills += 1
            run.killed += killed
            wait = KILL_EVERY_S
    except Exception as exc:  # noqa: BLE001 - reported by the test
        run.thread_errors.append(f"killer: {type(exc).__name__}: {exc}")
    finally:
        engine.dispose()


def _stored(shop: Shop, engines: dict[str, sa.Engine]) -> Counter[tuple[str, str]]:
    """(tag, database) -> rows stored, users and orders alike."""
    found: Counter[tuple[str, str]] = Counter()
    with engines["a"].connect() as conn:
        for name in conn.execute(sa.select(shop.User.__table__.c.name)).scalars():
            found[(name, "a")] += 1
    model = sharded_model(shop.Order)
    for shard, table in enumerate(model.tables):
        database = model.database_of(shard)
        with engines[database].connect() as conn:
            for note in conn.execute(sa.select(table.c.note)).scalars():
                found[(note, database)] += 1
    return found


def _problems(groups: list[Group], stored: Counter[tuple[str, str]]) -> dict[str, list[str]]:
    """Half-committed groups, and committed groups missing or stored more than once."""
    half: list[str] = []
    lost: list[str] = []
    for group in groups:
        counts = {db: stored[(group.tag, db)] for db in group.rows}
        copies = {counts[db] / group.rows[db] for db in group.rows}
        if len(copies) > 1:
            half.append(f"{group.tag} {group.outcomes}: rows {counts}, wanted {dict(group.rows)}")
            continue
        [stored_copies] = copies
        wanted = 1 if COMMITTED in group.outcomes else None  # None: 0 or 1 (in doubt)
        if UNKNOWN not in group.outcomes and COMMITTED not in group.outcomes:
            wanted = 0
        if stored_copies not in ((0, 1) if wanted is None else (wanted,)):
            lost.append(f"{group.tag} {group.outcomes}: {stored_copies:g} copies stored")
    return {"half-committed": half, "lost or duplicated": lost}


@pytest.mark.parametrize("backend", SERVERS)
def test_twophase_soak_with_killed_connections_ends_clean(
    backend: str, database_factory: DatabaseFactory
) -> None:
    """16 writers, "b"'s connections killed every 5 s, then recovery: all-or-nothing, once."""
    shop = declare_shop(4, databases=2)
    engines = _engines(database_factory, backend)
    create_all(shop.metadata, bind=engines["a"], databases=engines)
    run = Run()
    started = time.monotonic()
    stop_at = started + RUN_S
    writers = [
        threading.Thread(target=_writer, args=(shop, engines, i, stop_at, run), daemon=True)
        for i in range(THREADS)
    ]
    stop_killing = threading.Event()
    killer = threading.Thread(
        target=_killer,
        args=(engines[VICTIM].url, backend, engines[VICTIM].url.database, stop_killing, run),
        daemon=True,
    )
    killer.start()
    for writer in writers:
        writer.start()
    join_by = stop_at + JOIN_TIMEOUT_S
    for writer in writers:
        writer.join(max(0.0, join_by - time.monotonic()))
    stop_killing.set()
    killer.join(JOIN_TIMEOUT_S)
    hung = [w.name for w in writers + [killer] if w.is_alive()]
    written = time.monotonic() - started

    with run.lock:
        groups = list(run.groups)
    ours = {xid for group in groups for xid in group.xids if xid}
    newest = max((group_created_ms(x) or 0 for x in ours), default=0) / 1000
    time.sleep(max(0.0, newest + GRACE_S + 0.1 - time.time()))
    report = recover(engines, grace=GRACE_S)
    actions = Counter(a.outcome for a in report.actions if a.group in ours)
    left = [str(x) for e in engines.values() for x in branches(e) if x.group in ours]
    if backend == "postgresql":
        left += [str(x) for e in engines.values() for x in branches(e)]
    problems = _problems(groups, _stored(shop, engines))

    outcomes = Counter(o for group in groups for o in group.outcomes)
    final = Counter(group.outcomes[-1] for group in groups)
    print(
        f"\n{backend}: {len(groups)} groups, {sum(outcomes.values())} attempts "
        f"{dict(outcomes)}; groups ended {dict(final)}; {run.kills} kills "
        f"({run.killed} connections); recovery {dict(actions)}; "
        f"written in {written:.1f} s, {time.monotonic() - started:.1f} s in all"
    )
    assert not run.thread_errors, "\n".join(run.thread_errors)
    assert hung == []
    assert run.kills >= 2 and run.killed > 0 and final[COMMITTED] > 0
    assert not report.unresolved, str(report)
    assert left == []
    assert problems == {"half-committed": [], "lost or duplicated": []}

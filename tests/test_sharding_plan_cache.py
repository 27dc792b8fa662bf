"""Plans cached per statement shape: new bound values reuse the plan and are routed anew."""

from __future__ import annotations

import inspect
from typing import Any

import pytest
from sqlalchemy import bindparam, event, select
from sqlalchemy.orm import ORMExecuteState, Session

from snowshard._compat import RoutingSession
from snowshard.sharding import ShardedSession, UnsupportedShardQuery, shard_hint
from snowshard.sharding.plan_cache import PlanCache, plan_cache_of
from tests.forking import in_forked_child, needs_fork
from tests.worlds import SqlLog, World, WorldFactory, declare_shop

SHOP = declare_shop(4)
SPREAD = declare_shop(4, databases=2)


def _fill(world: World) -> World:
    """Two orders for each user 0..7: amounts 10*user and 10*user + 1."""
    with world.session() as session:
        session.add_all(
            world.Order(user_id=u, amount=10 * u + k) for u in range(8) for k in range(2)
        )
        session.add_all(world.User(id=u, name=f"u{u}") for u in range(8))
        session.commit()
    world.log.clear()
    return world


@pytest.fixture
def world(sharded_world: WorldFactory) -> World:
    return _fill(sharded_world(SHOP))


@pytest.fixture
def spread(sharded_world: WorldFactory) -> World:
    return _fill(sharded_world(SPREAD))


def _amounts(session: ShardedSession, user: int, **options: Any) -> list[int]:
    query = select(SHOP.Order.amount).where(SHOP.Order.user_id == user).order_by("amount")
    return list(session.scalars(query, execution_options=options))


def test_same_shape_routes_each_key_to_its_own_shard(
    sql_backend: str, sharded_world: WorldFactory, sql_log: SqlLog
) -> None:
    """Statements of one shape with keys of different shards read each its own table."""
    world = _fill(sharded_world(SHOP, sql_backend))
    with world.session() as session:
        assert [_amounts(session, u) for u in (1, 2, 3)] == [[10, 11], [20, 21], [30, 31]]
    assert [set(t) for t in sql_log.tables()] == [{"orders_01"}, {"orders_02"}, {"orders_03"}]


def test_new_value_in_the_same_shard_reuses_the_plan_and_compiled_form(world: World) -> None:
    """Users 1 and 5 share shard 1: one cached plan, one compiled statement, right rows."""
    cache: dict[Any, Any] = {}
    with world.session() as session:
        first = _amounts(session, 1, compiled_cache=cache)
        shapes = plan_cache_of(select(SHOP.Order.amount))
        assert shapes is not None
        hits = shapes.hits
        second = _amounts(session, 5, compiled_cache=cache)
        assert shapes.hits > hits
    assert (first, second) == ([10, 11], [50, 51])
    assert len(cache) == 1


def test_new_values_are_bound_without_a_compiled_cache(world: World) -> None:
    """With the compiled cache disabled, a reused plan still sends the new value."""
    with world.session() as session:
        found = [_amounts(session, u, compiled_cache=None) for u in (1, 5, 1)]
    assert found == [[10, 11], [50, 51], [10, 11]]


def test_limit_is_rebound_in_a_fan_out(world: World) -> None:
    """A new LIMIT value on a cached UNION ALL plan returns that many rows."""
    with world.session() as session:
        counts = [
            len(session.scalars(select(SHOP.Order).order_by(SHOP.Order.amount).limit(n)).all())
            for n in (2, 5, 3)
        ]
    assert counts == [2, 5, 3]


def test_a_top_n_in_one_database_reuses_its_compiled_form_for_a_new_limit(
    world: World,
) -> None:
    """A UNION ALL top-n on one database binds a new LIMIT into the compiled SQL it has."""
    cache: dict[Any, Any] = {}
    query = select(SHOP.Order.amount).order_by("amount")
    options = {"compiled_cache": cache}
    with world.session() as session:
        first = list(session.scalars(query.limit(2), execution_options=options))
        size = len(cache)
        second = list(session.scalars(query.limit(3), execution_options=options))
    assert (first, second) == ([0, 1], [0, 1, 10])
    assert len(cache) == size


def test_a_merged_top_n_compiles_with_its_limit(
    sql_backend: str, sharded_world: WorldFactory
) -> None:
    """A top-n merged across databases has its LIMIT in each compiled SQL, none left to
    render per execution (its plan is kept per LIMIT value)."""
    world = _fill(sharded_world(SPREAD, sql_backend))
    compiled: list[str] = []

    def record(*args: Any) -> None:
        compiled.append(args[4].compiled.string)  # the execution context's compiled form

    for engine in world.engines.values():
        event.listen(engine, "before_cursor_execute", record)
    with world.session() as session:
        top = list(session.scalars(select(SPREAD.Order.amount).order_by("amount").limit(3)))
    assert top == [0, 1, 10]
    assert len(compiled) == 2
    assert all("LIMIT 3" in sql and "POSTCOMPILE" not in sql for sql in compiled)


@pytest.mark.parametrize("shop", [SHOP, SPREAD], ids=["one-database", "two-databases"])
def test_offset_pages_across_tables_share_one_compiled_form(
    sql_backend: str, sharded_world: WorldFactory, shop: Any
) -> None:
    """Pages at new OFFSETs reuse the compiled statements of the first page."""
    world = _fill(sharded_world(shop, sql_backend))
    cache: dict[Any, Any] = {}
    query = select(shop.Order.amount).order_by("amount").limit(3)
    pages, sizes = [], []
    with world.session() as session:
        for offset in (3, 6, 9):
            options = {"compiled_cache": cache}
            pages.append(list(session.scalars(query.offset(offset), execution_options=options)))
            sizes.append(len(cache))
    assert pages == [[11, 20, 21], [30, 31, 40], [41, 50, 51]]
    assert sizes[0] == sizes[1] == sizes[2]


def test_in_list_values_are_rebound(world: World) -> None:
    """An IN list naming one shard is rebound to the new list of each statement."""
    with world.session() as session:
        found = [
            sorted(session.scalars(select(SHOP.Order.amount).where(SHOP.Order.user_id.in_(us))))
            for us in ([1, 5], [5], [1])
        ]
    assert found == [[10, 11, 50, 51], [50, 51], [10, 11]]


@pytest.mark.parametrize("inner_user", [2, 1], ids=["other-shard", "same-shard"])
def test_a_query_run_by_an_autoflush_hook_never_lends_its_values(
    sql_backend: str, sharded_world: WorldFactory, inner_user: int
) -> None:
    """A keyed read whose autoflush runs a hook that queries gets its own user's rows."""
    world = _fill(sharded_world(SHOP, sql_backend))
    with world.session() as session:
        assert _amounts(session, 1) == [10, 11]  # the shape's plan, made for user 1
        seen: list[list[int]] = []

        @event.listens_for(session, "before_flush")
        def query_in_hook(*args: Any) -> None:
            seen.append(_amounts(session, inner_user))

        order = session.scalars(select(SHOP.Order).where(SHOP.Order.user_id == 7)).first()
        assert order is not None
        order.amount += 100  # dirty: the next query autoflushes after routing
        found = _amounts(session, 5)  # user 5 shares user 1's table
    assert (found, seen) == ([50, 51], [[10 * inner_user, 10 * inner_user + 1]])


def test_execution_parameters_win_over_a_templates_values(world: World) -> None:
    """A named parameter given at execution routes and binds the given value each time."""
    query = select(SHOP.Order.amount).where(SHOP.Order.user_id == bindparam("user"))
    with world.session() as session:
        found = [sorted(session.scalars(query, {"user": u})) for u in (1, 5, 2)]
    assert found == [[10, 11], [50, 51], [20, 21]]


def test_merged_plan_is_reused_only_for_equal_values(spread: World) -> None:
    """Across databases a merged top-n keeps its own LIMIT for each statement."""
    with spread.session() as session:
        tops = [
            list(
                session.scalars(
                    select(SPREAD.Order.amount).order_by(SPREAD.Order.amount.desc()).limit(n)
                )
            )
            for n in (2, 3, 2)
        ]
    assert tops == [[71, 70], [71, 70, 61], [71, 70]]


def test_a_plan_never_leaks_across_sessions_with_different_database_maps(spread: World) -> None:
    """A join with an unsharded table is re-checked against each session's databases."""
    user = SPREAD.User
    order = SPREAD.Order

    def query() -> Any:  # a new statement of the same shape each time
        return select(order.amount).join(user, user.id == order.user_id).where(order.user_id == 1)

    with spread.session() as session:
        assert sorted(session.scalars(query())) == [10, 11]
    engines = spread.databases
    swapped = {"a": engines["b"], "b": engines["a"]}
    with ShardedSession(spread.bind, databases=swapped) as session:
        with pytest.raises(UnsupportedShardQuery, match="users is not sharded"):
            session.scalars(query()).all()


def test_a_refusal_is_raised_for_every_statement_of_the_shape(spread: World) -> None:
    """Refusals are never cached: each statement of a refused shape raises again."""
    user = SPREAD.User
    order = SPREAD.Order
    with spread.session() as session:
        for key in (2, 3):
            query = select(order.amount).join(user, user.id == order.user_id)
            with pytest.raises(UnsupportedShardQuery):
                session.scalars(query.where(order.user_id == key)).all()


def test_the_cache_is_bounded_least_recently_used_first() -> None:
    """A full cache drops the entry used longest ago."""
    cache = PlanCache(size=2)
    for key in ("a", "b"):
        cache.put(key, object())  # type: ignore[arg-type]
    assert cache.get("a") is not None
    cache.put("c", object())  # type: ignore[arg-type]
    assert (cache.get("a") is not None, cache.get("b"), len(cache)) == (True, None, 2)


def test_a_refresh_is_never_routed_even_inside_a_database_hint(spread: World) -> None:
    """An expired object reloads from the database it lives in, inside a shard_hint naming
    another (a refresh is decided once per shape, as SQLAlchemy keys its SQL on it)."""
    with spread.session() as session:
        user = session.get(SPREAD.User, 3)
        order = session.scalars(select(SPREAD.Order).where(SPREAD.Order.user_id == 3)).first()
        assert user is not None and order is not None
        session.expire_all()
        with shard_hint(session, database="b"):
            assert (user.name, order.user_id) == ("u3", 3)
        session.expire_all()
        assert (user.name, order.amount) == ("u3", 30)


def _hook_calls(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The statements the session's ``do_orm_execute`` routing hook is called for."""
    from snowshard.sharding import session as session_module

    seen: list[Any] = []
    route = session_module.route_execute

    def counting(state: Any) -> Any:
        seen.append(state.statement)
        return route(state)

    monkeypatch.setattr(session_module, "route_execute", counting)
    return seen


def test_a_keyed_read_of_a_known_shape_skips_the_orm_hook(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once a shape's plan is known, keyed reads of it are routed before the hook runs."""
    with world.session() as session:
        assert _amounts(session, 3) == [30, 31]  # the shape's plan, through the hook
        seen = _hook_calls(monkeypatch)
        found = [_amounts(session, u) for u in (1, 2, 5)]
    assert (found, seen) == ([[10, 11], [20, 21], [50, 51]], [])


def test_get_by_id_skips_the_orm_hook(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    """``get`` loads its one physical class without passing through the routing hook."""
    with world.session() as session:
        ids = [o.id for o in session.scalars(select(SHOP.Order).order_by(SHOP.Order.amount))]
    seen = _hook_calls(monkeypatch)
    with world.session() as session:
        amounts = [session.get(SHOP.Order, i).amount for i in ids[:4]]  # type: ignore[union-attr]
    assert (amounts, seen) == ([0, 1, 10, 11], [])


def test_another_orm_hook_still_sees_every_logical_statement(world: World) -> None:
    """A do_orm_execute listener of the user's sees every keyed read, as routed by the
    session's own hook (which runs first), a known shape included."""
    seen: list[str] = []
    with world.session() as session:
        event.listen(
            session,
            "do_orm_execute",
            lambda state: seen.extend(t.name for t in state.statement.get_final_froms()),
        )
        found = [_amounts(session, u) for u in (1, 2, 1)]
    routed = ["orders_01", "orders_02", "orders_01"]
    assert (found, seen) == ([[10, 11], [20, 21], [10, 11]], routed)


def test_a_repeated_fan_out_in_one_database_is_capped_each_time(world: World) -> None:
    """max_fanout sees the plan of a known shape too: a keyless read fails every time."""
    from snowshard.sharding import FanOutExceeded
    from snowshard.testing import max_fanout

    query = select(SHOP.Order.amount).order_by(SHOP.Order.amount).limit(1)
    with world.session() as session:
        assert list(session.scalars(query)) == [0]
        for _ in range(2):
            with pytest.raises(FanOutExceeded), max_fanout(session, tables=1):
                session.scalars(query).all()


def test_routing_session_overrides_what_session_execute_calls() -> None:
    """Session.execute, scalars and scalar all call _execute_internal, which takes the
    parameters RoutingSession reads and runs only a parent state's remaining hooks."""
    names = set(inspect.signature(Session._execute_internal).parameters)
    assert {"_parent_execute_state", "_add_event", "_scalar_result"} <= names
    for method in (Session.execute, Session.scalars, Session.scalar):
        assert "_execute_internal" in inspect.getsource(method)
    assert callable(ORMExecuteState._remaining_events)
    assert RoutingSession._execute_internal is not Session._execute_internal


@needs_fork
def test_a_forked_child_can_fill_a_cache_whose_lock_a_thread_held() -> None:
    """A fork while another thread fills the cache leaves the child a lock of its own."""
    cache = PlanCache()
    with cache._lock:  # as a thread inside put() holds it at the moment of the fork
        stored = in_forked_child(lambda: len(cache) if cache.put("key", "shape") else 0)
    assert stored == 1

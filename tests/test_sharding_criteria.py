"""``with_loader_criteria()`` on a sharded model filters its rows as on one plain table;
what cannot be applied to its physical tables is refused before any SQL."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from sqlalchemy import BigInteger, Integer, delete, event, func, select, update
from sqlalchemy.orm import (
    DeclarativeBase,
    aliased,
    Mapped,
    mapped_column,
    selectinload,
    with_loader_criteria,
)

from snowshard._compat import ALIASES_TAKE_CRITERIA
from snowshard.orm import snowflake_pk
from snowshard.sharding import Sharded, Shards, UnsupportedShardQuery
from tests.worlds import (
    IDS,
    Models,
    PlainOrder,
    SqlLog,
    World,
    WorldFactory,
    copy_orders_to_plain,
    declare_shop,
    open_world,
    split_databases,
)
from tests.backends import DatabaseFactory
from tests.twin_setups import TWIN_BACKENDS, Filled, both_rows

USERS = range(6)
"""Users 0..5 (user 2 named "hidden"), each with two orders of amounts 10u and 10u+1;
odd users' orders have the note "gone", even users' none."""


def _world(sharded_world: WorldFactory, backend: str = "sqlite", databases: int = 2) -> World:
    return _filled(sharded_world(declare_shop(4, databases=databases), backend))


def _filled(world: World) -> World:
    """``world`` with the users and orders of :data:`USERS`, its orders also in a plain table."""
    with world.session() as session:
        session.add_all([world.User(id=u, name="hidden" if u == 2 else f"u{u}") for u in USERS])
        session.add_all(
            [
                world.Order(user_id=u, amount=10 * u + k, note="gone" if u % 2 else None)
                for u in USERS
                for k in range(2)
            ]
        )
        session.commit()
    copy_orders_to_plain(world)
    world.log.clear()
    return world


@pytest.fixture
def world(sharded_world: WorldFactory, sql_backend: str) -> World:
    """The shop over two databases of each backend, its orders also in a plain table."""
    return _world(sharded_world, sql_backend)


@pytest.fixture(scope="module")
def read_worlds(module_databases: DatabaseFactory) -> Iterator[Callable[[str], World]]:
    """``read_worlds(backend)``: a filled shop of that backend, made once per module, for
    tests that only read."""
    made: dict[str, World] = {}

    def get(backend: str) -> World:
        if backend not in made:
            shop = declare_shop(4, databases=2)
            made[backend] = _filled(open_world(module_databases, shop, backend))
        return made[backend]

    try:
        yield get
    finally:
        for world in made.values():
            world.log.close()
    logical = [line for world in made.values() for line in world.log.logical]
    assert not logical, f"SQL naming a logical table was sent: {logical[:3]}"


CRITERIA: dict[str, Callable[[Any], Any]] = {
    "expression": lambda m: with_loader_criteria(m, m.note.is_(None)),
    "lambda": lambda m: with_loader_criteria(m, lambda cls: cls.note.is_(None)),
    "expression, aliases too": lambda m: with_loader_criteria(
        m, m.note.is_(None), include_aliases=True
    ),
    "lambda, aliases too": lambda m: with_loader_criteria(
        m, lambda cls: cls.note.is_(None), include_aliases=True
    ),
    "on the key": lambda m: with_loader_criteria(m, lambda cls: cls.user_id.not_in([3, 5])),
}

STATEMENTS: dict[str, Callable[[Any], Any]] = {
    "keyless": lambda m: select(m.id, m.user_id, m.amount),
    "entities": lambda m: select(m),
    "top 3": lambda m: select(m.amount).order_by(m.amount.desc()).limit(3),
    "keyed IN": lambda m: select(m.amount).where(m.user_id.in_([1, 2, 3])),
    "one key": lambda m: select(m.amount).where(m.user_id == 3),
    "count": lambda m: select(func.count()).select_from(m),
    "sum per user": lambda m: select(m.user_id, func.sum(m.amount)).group_by(m.user_id),
    "subquery": lambda m: select(m.amount).where(
        m.user_id.in_(select(m.user_id).where(m.amount > 15))
    ),
}


def _amounts(found: list[Any]) -> list[Any]:
    """Rows as sortable tuples (an entity row by its amount and user)."""
    out = []
    for row in found:
        value = row[0]
        if hasattr(value, "amount"):
            out.append((value.user_id, value.amount))
        else:
            out.append(tuple(row))
    return sorted(out)


@pytest.mark.parametrize("statement", list(STATEMENTS))
@pytest.mark.parametrize("criteria", list(CRITERIA))
def test_criteria_on_a_sharded_model_filter_as_on_one_table(
    read_worlds: Callable[[str], World], sql_backend: str, criteria: str, statement: str
) -> None:
    """Each statement with each form of criteria returns the plain table's rows."""
    world = read_worlds(sql_backend)
    with world.session() as session:

        def rows(model: Any, *options: Any) -> list[Any]:
            return _amounts(list(session.execute(STATEMENTS[statement](model).options(*options))))

        sharded = rows(world.Order, CRITERIA[criteria](world.Order))
        plain = rows(PlainOrder, CRITERIA[criteria](PlainOrder))
        unfiltered = rows(PlainOrder)
    assert sharded == plain
    assert plain != unfiltered  # the criteria filter something here


LEGACY_COUNTS: dict[str, Callable[[Any, Any], Any]] = {
    "all": lambda q, m: q,
    "filtered": lambda q, m: q.filter(m.amount > 15),
    "one key": lambda q, m: q.filter(m.user_id == 3),
}


@pytest.mark.parametrize("shape", list(LEGACY_COUNTS))
@pytest.mark.parametrize("criteria", list(CRITERIA))
def test_legacy_query_count_honours_criteria(
    read_worlds: Callable[[str], World], sql_backend: str, criteria: str, shape: str
) -> None:
    """``Query.count()`` with criteria (on its subquery and its count) counts as on one table."""
    world = read_worlds(sql_backend)
    with world.session() as session:

        def count(model: Any, *options: Any) -> int:
            return int(LEGACY_COUNTS[shape](session.query(model).options(*options), model).count())

        sharded = count(world.Order, CRITERIA[criteria](world.Order))
        plain = count(PlainOrder, CRITERIA[criteria](PlainOrder))
        unfiltered = count(PlainOrder)
    assert sharded == plain
    assert plain != unfiltered  # the criteria filter something here


@pytest.mark.parametrize("criteria", ["expression", "lambda"])
@pytest.mark.parametrize("write", ["update", "delete"])
def test_update_and_delete_touch_only_rows_the_criteria_let_through(
    world: World, criteria: str, write: str
) -> None:
    """UPDATE and DELETE with criteria change exactly the plain table's rows."""

    def statement(m: Any) -> Any:
        built = update(m).values(amount=m.amount + 100) if write == "update" else delete(m)
        return built.where(m.amount > 15).options(CRITERIA[criteria](m))

    with world.session() as session:
        changed = session.execute(statement(world.Order)).rowcount
        expected = session.execute(statement(PlainOrder)).rowcount
        session.commit()
        sharded = sorted(session.execute(select(world.Order.user_id, world.Order.amount)))
        plain = sorted(session.execute(select(PlainOrder.user_id, PlainOrder.amount)))
    assert (changed, sharded) == (expected, plain)
    assert expected == 4  # amounts over 15: users 2 to 5; NULL notes: users 2 and 4


@pytest.mark.parametrize("criteria", ["expression", "lambda", "expression, aliases too"])
def test_get_honours_criteria_on_the_model(world: World, criteria: str) -> None:
    """Session.get() with criteria finds a row they let through, not one they exclude."""
    with world.session() as session:
        kept, excluded = (
            session.scalars(select(world.Order.id).where(world.Order.user_id == u)).first()
            for u in (4, 3)
        )
    with world.session() as session:
        option = CRITERIA[criteria](world.Order)
        assert session.get(world.Order, excluded, options=[option]) is None
        found = session.get(world.Order, kept, options=[option])
        assert found is not None and found.user_id == 4
        assert session.get(PlainOrder, excluded, options=[CRITERIA[criteria](PlainOrder)]) is None


def test_criteria_reach_lazy_loads_of_the_loaded_objects(world: World) -> None:
    """Users loaded with criteria on Order lazy-load only the orders the criteria keep."""
    with world.session() as session:
        users = session.scalars(
            select(world.User).order_by(world.User.id).options(CRITERIA["lambda"](world.Order))
        ).all()
        loaded = {u.id: sorted(o.amount for o in u.orders) for u in users}
    assert loaded == {u: [] if u % 2 else [10 * u, 10 * u + 1] for u in USERS}


@pytest.mark.parametrize("criteria", ["expression", "lambda"])
def test_criteria_reach_selectin_loads(world: World, criteria: str) -> None:
    """selectinload(User.orders) with criteria on Order loads only the orders they keep."""
    with world.session() as session:
        users = session.scalars(
            select(world.User)
            .order_by(world.User.id)
            .options(selectinload(world.User.orders), CRITERIA[criteria](world.Order))
        ).all()
        loaded = {u.id: sorted(o.amount for o in u.orders) for u in users}
    assert loaded == {u: [] if u % 2 else [10 * u, 10 * u + 1] for u in USERS}


class Visible:
    """A mixin of the models whose rows a filter-everything hook hides."""

    hidden: Mapped[bool] = mapped_column(default=False)


@dataclass
class Posts:
    """A world holding a sharded ``Post`` and its plain twin."""

    world: World
    Post: Any
    PlainPost: Any


@pytest.fixture
def posts(sharded_world: WorldFactory, sql_backend: str) -> Posts:
    """Posts 0..11 of users 0..5 (every third hidden) in a sharded model and a plain twin,
    both with the :class:`Visible` mixin."""

    class Base(DeclarativeBase):
        pass

    class Post(Visible, Sharded, Base):
        __tablename__ = "posts"
        __shards__ = Shards(4, key=("id", "user_id"), databases=split_databases(4, 2))
        id: Mapped[int] = snowflake_pk(IDS, gene_from="user_id")
        user_id: Mapped[int] = mapped_column(BigInteger)
        n: Mapped[int] = mapped_column(Integer)

    class PlainPost(Visible, Base):
        __tablename__ = "plain_posts"
        id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
        user_id: Mapped[int] = mapped_column(BigInteger)
        n: Mapped[int] = mapped_column(Integer)

    world = sharded_world(Base, sql_backend)
    with world.session() as session:
        made = [Post(user_id=n % 6, n=n, hidden=n % 3 == 0) for n in range(12)]
        session.add_all(made)
        session.flush()
        session.add_all(
            [PlainPost(id=p.id, user_id=p.user_id, n=p.n, hidden=p.hidden) for p in made]
        )
        session.commit()
    return Posts(world, Post, PlainPost)


def _visible_only() -> Any:
    return with_loader_criteria(Visible, lambda cls: cls.hidden.is_(False), include_aliases=True)


VISIBLE = [n for n in range(12) if n % 3]


NEEDS_ALIAS_CRITERIA = pytest.mark.skipif(
    not ALIASES_TAKE_CRITERIA,
    reason="before SQLAlchemy 2.0.4 the ORM cannot apply criteria to a UNION ALL entity",
)
"""For tests of criteria a hook adds, which reach a UNION ALL entity from 2.0.4 on."""


def _hide_hidden(session: Any) -> None:
    """SQLAlchemy's recipe on ``session``: a hook adding :func:`_visible_only` to every SELECT."""

    @event.listens_for(session, "do_orm_execute")
    def add_criteria(state: Any) -> None:
        if state.is_select and not state.is_column_load and not state.is_relationship_load:
            state.statement = state.statement.options(_visible_only())


def _plain(row: Any) -> tuple[Any, ...]:
    """A row as a tuple (a post by its number and user)."""
    value = row[0]
    return (value.n, value.user_id) if hasattr(value, "n") else tuple(row)


@pytest.mark.parametrize(
    "statement",
    [
        lambda m: select(m.n).order_by(m.n),
        lambda m: select(m).order_by(m.n.desc()).limit(5),
        lambda m: select(m.user_id, func.count()).group_by(m.user_id).order_by(m.user_id),
    ],
    ids=["rows", "entities, top 5", "count per user"],
)
def test_criteria_for_a_mixin_filter_every_model_that_has_it(
    posts: Posts, statement: Callable[[Any], Any]
) -> None:
    """A lambda for a mixin, aliases included (SQLAlchemy's recipe), reaches a sharded model."""
    with posts.world.session() as session:

        def rows(model: Any, *options: Any) -> list[tuple[Any, ...]]:
            return [_plain(r) for r in session.execute(statement(model).options(*options))]

        sharded = rows(posts.Post, _visible_only())
        plain = rows(posts.PlainPost, _visible_only())
        unfiltered = rows(posts.PlainPost)
    assert sharded == plain
    assert plain != unfiltered


@NEEDS_ALIAS_CRITERIA
def test_criteria_added_by_a_do_orm_execute_hook_apply(posts: Posts) -> None:
    """SQLAlchemy's recipe: a session hook adds criteria for a mixin to every SELECT."""
    with posts.world.session() as session:
        _hide_hidden(session)
        sharded = sorted(session.scalars(select(posts.Post.n)))
        plain = sorted(session.scalars(select(posts.PlainPost.n)))
        counted = session.scalar(select(func.count()).select_from(posts.Post))
    assert sharded == plain == VISIBLE
    assert counted == len(VISIBLE)


@NEEDS_ALIAS_CRITERIA
def test_a_hooks_criteria_reach_a_subquery_run_first(posts: Posts) -> None:
    """The recipe's criteria filter a subquery run first (subqueries_first) as a subquery's."""
    with posts.world.session() as session:
        _hide_hidden(session)

        def below_count(m: Any) -> list[int]:
            counted = select(func.count()).select_from(m).scalar_subquery()
            statement = select(m.n).where(m.n < counted).execution_options(subqueries_first=True)
            return sorted(session.scalars(statement))

        sharded, plain = below_count(posts.Post), below_count(posts.PlainPost)
    # the subquery counts the 8 visible posts, not all 12
    assert sharded == plain == [n for n in VISIBLE if n < len(VISIBLE)] != VISIBLE


@pytest.mark.parametrize(
    "option",
    [
        lambda m: with_loader_criteria(m, m.note.is_(None)),
        lambda m: with_loader_criteria(m, lambda cls: cls.note.is_(None)),
    ],
    ids=["expression", "lambda without aliases"],
)
def test_criteria_a_hook_adds_that_would_not_reach_the_tables_are_stopped(
    world: World, sql_log: SqlLog, option: Callable[[Any], Any]
) -> None:
    """A do_orm_execute hook sees routed statements: an option it adds there that
    SQLAlchemy would not apply to the physical classes raises instead of being left out."""
    with world.session() as session:

        @event.listens_for(session, "do_orm_execute")
        def add_criteria(state: Any) -> None:
            if state.is_select:
                state.statement = state.statement.options(option(world.Order))

        with pytest.raises(UnsupportedShardQuery, match="do_orm_execute hook") as raised:
            session.scalars(select(world.Order.amount)).all()
    assert "with_loader_criteria(Order, ...) for the sharded model Order" in str(raised.value)


@pytest.mark.parametrize("criteria", ["expression", "lambda", "on the key"])
def test_objects_loaded_with_criteria_refresh(world: World, criteria: str) -> None:
    """Expired objects loaded with criteria load their attributes again (the ORM applies
    no criteria to a refresh, and the guard lets it through)."""
    with world.session() as session:
        statement = select(world.Order).options(CRITERIA[criteria](world.Order))
        orders = session.scalars(statement).all()
        loaded = sorted((o.user_id, o.amount) for o in orders)
        session.expire_all()
        again = sorted((o.user_id, o.amount) for o in orders)
    assert again == loaded and loaded


def test_a_changed_closure_value_is_honoured_in_each_run(world: World) -> None:
    """Statements of one shape whose lambda reads another value each run filter by it."""
    for least in (5, 12, 5, 40, 31, 31):
        with world.session() as session:
            found = sorted(
                session.scalars(
                    select(world.Order.amount).options(
                        with_loader_criteria(world.Order, lambda cls: cls.amount >= least)
                    )
                )
            )
        assert found == [a for u in USERS for a in (10 * u, 10 * u + 1) if a >= least], least


@pytest.mark.parametrize("grouped", [False, True], ids=["rows", "grouped"])
def test_criteria_on_an_unsharded_model_joined_in_apply(
    sharded_world: WorldFactory, sql_backend: str, grouped: bool
) -> None:
    """Orders joined with their users, criteria on the users: rows as from a plain table."""
    world = _world(sharded_world, sql_backend, databases=1)
    User = world.User

    def statement(model: Any) -> Any:
        columns = (
            [model.user_id, func.sum(model.amount)]
            if grouped
            else [model.user_id, model.amount, User.name]
        )
        built = (
            select(*columns)
            .join(User, User.id == model.user_id)
            .options(with_loader_criteria(User, User.name != "hidden"))
        )
        return built.group_by(model.user_id) if grouped else built

    with world.session() as session:
        sharded = sorted(tuple(r) for r in session.execute(statement(world.Order)))
        plain = sorted(tuple(r) for r in session.execute(statement(PlainOrder)))
    assert sharded == plain and plain  # (SQLAlchemy 2.0.2 leaves criteria out of such a join)


def test_criteria_with_aliases_on_an_unsharded_model_reach_its_alias(
    sharded_world: WorldFactory, sql_backend: str
) -> None:
    """Criteria with include_aliases=True for users reach aliased(User) beside Order as
    beside the plain table."""
    world = _world(sharded_world, sql_backend, databases=1)
    User = world.User
    buyer = aliased(User)
    option = with_loader_criteria(User, lambda cls: cls.name != "hidden", include_aliases=True)

    def statement(model: Any) -> Any:
        return select(model.amount, buyer.name).join(buyer, buyer.id == model.user_id)

    with world.session() as session:
        sharded = sorted(tuple(r) for r in session.execute(statement(world.Order).options(option)))
        plain = sorted(tuple(r) for r in session.execute(statement(PlainOrder).options(option)))
    assert sharded == plain and plain  # (SQLAlchemy 2.0.2 leaves criteria out of such a join)


REFUSED: dict[str, tuple[Callable[[World], Any], str]] = {
    "a physical class": (
        lambda w: with_loader_criteria(w.Order.__subclasses__()[0], lambda cls: cls.amount > 1),
        "names a physical class of the sharded model Order",
    ),
    "an expression for a base class": (
        lambda w: with_loader_criteria(w.base, w.Order.amount > 1),
        "gives an expression for a base class of the sharded model Order",
    ),
    "another sharded model": (
        lambda w: with_loader_criteria(
            w.Order, lambda cls: cls.amount > w.Item.qty, track_closure_variables=False
        ),
        "reads the sharded model Item",
    ),
    "a subquery of the model": (
        lambda w: with_loader_criteria(
            w.Order,
            lambda cls: cls.id.in_(select(w.Order.id).where(w.Order.amount > 3)),
            track_closure_variables=False,
        ),
        "reads a sharded model in a subquery",
    ),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_criteria_that_cannot_reach_the_tables_are_refused_before_any_sql(
    sharded_world: WorldFactory, sql_log: SqlLog, case: str
) -> None:
    """Each refusal names what is wrong and sends nothing."""
    world = _world(sharded_world)
    option, message = REFUSED[case]
    with world.session() as session, pytest.raises(UnsupportedShardQuery) as raised:
        session.execute(select(world.Order).options(option(world)))
    assert sql_log.statements() == []
    assert message in str(raised.value)


def test_criteria_given_to_a_subquery_are_refused(
    sharded_world: WorldFactory, sql_log: SqlLog
) -> None:
    """An option on a subquery rather than the statement is refused, naming where to put it."""
    world = _world(sharded_world)
    Order = world.Order
    inner = select(Order.user_id).options(CRITERIA["lambda"](Order)).scalar_subquery()
    with world.session() as session, pytest.raises(UnsupportedShardQuery, match="subquery"):
        session.execute(select(Order.amount).where(Order.user_id.in_(inner)))
    assert sql_log.statements() == []


@pytest.mark.parametrize("backend", TWIN_BACKENDS)
@pytest.mark.parametrize("entity", ["model", "column"])
def test_criteria_given_before_with_only_columns_apply(
    filled: Filled, backend: str, entity: str
) -> None:
    """Loader criteria given before with_only_columns() replaced the columns (which
    SQLAlchemy keeps aside with the old columns, and still applies) filter as on one table."""
    shop, world = filled(backend, 2)

    def build(w: Models, criteria: bool = True) -> Any:
        statement = select(w.Order if entity == "model" else w.Order.id)
        if criteria:
            statement = statement.options(with_loader_criteria(w.Order, lambda c: c.amount > 5))
        return statement.with_only_columns(func.count(), func.sum(w.Order.amount))

    got, twin = both_rows(world, shop, build)
    everything, _ = both_rows(world, shop, lambda w: build(w, criteria=False))
    assert got == twin and twin != everything


@pytest.mark.parametrize("before", [False, True], ids=["criteria after", "criteria before"])
def test_criteria_beside_joins_made_before_with_only_columns_are_refused(
    filled: Filled, before: bool
) -> None:
    """Loader criteria in a statement whose joins were made before with_only_columns()
    are refused before any SQL (the ORM gives such joins criteria by rules of its own)."""
    shop, world = filled("sqlite", 2)
    w = shop.sharded
    option = with_loader_criteria(w.Order, lambda c: c.amount > 5)
    statement = select(w.Order).join(w.Order.items)
    statement = statement.options(option) if before else statement
    statement = statement.with_only_columns(func.count())
    statement = statement if before else statement.options(option)
    with world.session() as session:
        world.log.clear()
        with pytest.raises(UnsupportedShardQuery, match="with_only_columns"):
            session.execute(statement)
    assert len(world.log) == 0

"""IDs per second: snowshard's generator against pure-Python peers, in one run.

    python -m pip install -e ".[bench]" && python benchmarks/bench_ids.py

Measures ``next_id`` on one thread and on four threads sharing one generator, and
``next_ids`` in batches, against ``itertools.count`` (the floor: no clock, no lock) and the
peers ``flakeid``, ``snowflake-id-toolkit`` and ``tsidpy`` when installed. Each figure is the
best of ``--repeat`` interleaved rounds, since a shared machine only ever makes a run
slower. Targets: next_ids >= 0.95 x the layout ceiling (4.096M/s, all a 12-bit sequence
allows), next_id >= 1.5 x the fastest peer, 4 threads >= 0.8 x one thread (sharing a
generator must not collapse its throughput).
"""

from __future__ import annotations

import argparse
import itertools
import platform
import threading
import time
from collections.abc import Callable
from datetime import date

from snowshard import Layout, Snowflake

Factory = Callable[[], Callable[[], object]]


def one_thread(make: Factory, n: int) -> float:
    fn = make()
    start = time.perf_counter()
    for _ in range(n):
        fn()
    return n / (time.perf_counter() - start)


def four_threads(make: Factory, n: int) -> float:
    fn = make()
    barrier = threading.Barrier(5)

    def work() -> None:
        barrier.wait()
        for _ in range(n // 4):
            fn()

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    barrier.wait()
    start = time.perf_counter()
    for thread in threads:
        thread.join()
    return (n // 4) * 4 / (time.perf_counter() - start)


def batched(n: int, batch: int) -> float:
    generator = Snowflake(worker=1)
    start = time.perf_counter()
    done = 0
    while done < n:
        done += len(generator.next_ids(batch))
    return done / (time.perf_counter() - start)


def peers() -> dict[str, Factory]:
    found: dict[str, Factory] = {}
    try:
        import flakeid

        found["flakeid"] = lambda: flakeid.SnowflakeGenerator().next_id
    except ImportError:
        pass
    try:
        import snowflake_id_toolkit as sit

        found["snowflake-id-toolkit"] = lambda: sit.TwitterSnowflakeIDGenerator(1).generate_next_id
    except ImportError:
        pass
    try:
        import tsidpy

        found["tsidpy"] = lambda: tsidpy.TSIDGenerator(1).create
    except ImportError:
        pass
    return found


def best(fn: Callable[[], float], repeat: int) -> float:
    return max(fn() for _ in range(repeat))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=400_000, help="IDs per measurement")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    n, repeat = args.n, args.repeat

    contenders: dict[str, Factory] = {
        "itertools.count (floor)": lambda: itertools.count().__next__,
        "snowshard next_id": lambda: Snowflake(worker=1).next_id,
    }
    contenders.update(peers())
    # Rounds interleave the contenders, so a burst of load elsewhere hits them alike.
    singles = dict.fromkeys(contenders, 0.0)
    multis = dict.fromkeys(contenders, 0.0)
    for _ in range(repeat):
        for name, make in contenders.items():
            singles[name] = max(singles[name], one_thread(make, n))
            multis[name] = max(multis[name], four_threads(make, n))
    rows = [(name, singles[name], multis[name]) for name in contenders]
    ceiling = Layout().ids_per_tick * 1000
    bulk = best(lambda: batched(4 * ceiling // 4, 4096), repeat)
    bulk_big = best(lambda: batched(ceiling, 1_000_000), max(1, repeat // 2))

    ours = rows[1][1]
    fastest_peer = max((r for r in rows[2:]), key=lambda r: r[1], default=None)
    print(f"snowshard ID benchmark, {date.today()}, {platform.python_implementation()} "
          f"{platform.python_version()}, {platform.machine()}, best of {repeat}")
    print(f"{'generator':<26} {'1 thread/s':>12} {'4 threads/s':>12} {'4t/1t':>6} {'vs snowshard':>12}")
    for name, single, multi in rows:
        print(f"{name:<26} {single:>12,.0f} {multi:>12,.0f} {multi / single:>6.2f} {single / ours:>12.2f}")
    print(f"{'snowshard next_ids(4096)':<26} {bulk:>12,.0f} {'':>12} {'':>6} {bulk / ours:>12.2f}")
    print(f"{'snowshard next_ids(1M)':<26} {bulk_big:>12,.0f}")
    print()
    print("targets:")
    print(f"  next_ids / ceiling {ceiling:,}/s   = {max(bulk, bulk_big) / ceiling:.3f}  (>= 0.95)")
    if fastest_peer is not None:
        print(f"  next_id / fastest peer ({fastest_peer[0]}) = {ours / fastest_peer[1]:.2f}  (>= 1.5)")
    print(f"  next_id 4 threads / 1 thread       = {rows[1][2] / ours:.2f}  (>= 0.8)")


if __name__ == "__main__":
    main()

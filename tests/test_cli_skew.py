"""snowshard skew: seed 002's scenario simulated with the real generator, charts and PNGs."""

from __future__ import annotations

import json
import sys
from datetime import timezone
from pathlib import Path
from typing import Any

import pytest

from snowshard import Layout
from snowshard.cli import main
from snowshard.cli.config import STRATEGIES
from snowshard.cli.plot import bar_chart
from snowshard.cli.simulate import DEFAULT_START_MS, Scenario, simulate, stream, summarise
from snowshard.skew import skew
from snowshard.strategies import Mod
from tests.cli_support import isolated  # noqa: F401 (fixture)

GENE_LAYOUT = "worker_bits=7,sequence_bits=5,gene_bits=10"  # 100 workers, 1024 genes



def skew_json(capsys: pytest.CaptureFixture[str], *args: str) -> Any:
    code = main(["skew", "--json", *args])
    out, err = capsys.readouterr()
    assert code == 0, err
    report = json.loads(out)
    assert isinstance(report, dict)
    return report


def ratio(report: Any, name: str) -> float:
    value = report["strategies"][name]["max_over_mean"]
    assert isinstance(value, float)
    return value


def test_seed_002_reset_trap_piles_mod_into_shard_zero(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """100 workers x 1000 IDs/s, reset sequence: mod puts every row in shard 0; shift is even."""
    report = skew_json(capsys, "--sequence-start", "reset")
    scenario, mod = report["scenario"], report["strategies"]["mod"]
    assert (scenario["workers"], scenario["rate"], scenario["shards"]) == (100, 1000.0, 1024)
    assert scenario["ids"] == 204_800
    assert ratio(report, "mod") == 1024.0
    assert mod["counts"][0] == mod["total"] == 204_800
    assert mod["p_value"] == 0.0 and mod["empty_shards"] == 1023
    assert ratio(report, "shift") < 1.05
    assert report["strategies"]["shift"]["empty_shards"] == 0
    # Gene on a layout without gene bits reads the sequence, so it falls into the same trap
    assert ratio(report, "gene") == 1024.0
    assert any("gene_bits >= 10" in w for w in report["warnings"])
    # Mix folds in bits 16+: with reset sequences those are 7 worker values x 16 tick values,
    # so it reaches only 112 of the 1024 shards (the seed's two-ID example hides this)
    assert ratio(report, "mix") == pytest.approx(10.24)
    assert report["strategies"]["mix"]["empty_shards"] == 912


def test_seed_002_genes_spread_evenly(capsys: pytest.CaptureFixture[str]) -> None:
    """IDs carrying random users' genes spread over 1024 shards near-evenly, even with reset."""
    report = skew_json(
        capsys, "-L", GENE_LAYOUT, "--sequence-start", "reset", "-s", "gene", "-s", "mix"
    )
    assert set(report["strategies"]) == {"gene", "mix"}
    assert ratio(report, "gene") < 1.5
    assert report["strategies"]["gene"]["p_value"] > 0.001
    assert ratio(report, "mix") < 1.5


def test_default_continue_sequence_makes_mod_even(capsys: pytest.CaptureFixture[str]) -> None:
    """With the generator's default 'continue' policy, mod spreads seed 002's stream evenly."""
    report = skew_json(capsys, "-s", "mod")
    assert ratio(report, "mod") < 1.05
    assert report["strategies"]["mod"]["empty_shards"] == 0


def test_text_report_has_table_and_histogram(capsys: pytest.CaptureFixture[str]) -> None:
    """The text report lists max/mean per strategy and a histogram of shard loads."""
    code = main(
        [
            "skew",
            "-s",
            "mod",
            "--sequence-start",
            "reset",
            "--workers",
            "10",
            "--duration",
            "0.2",
            "--shards",
            "64",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert "x % 64" in out and "64.00" in out
    assert "empty 63" in out
    assert "2,000 rows (×64.00)  1" in out


def test_gene_strategy_needs_power_of_two_shards(capsys: pytest.CaptureFixture[str]) -> None:
    """Asking for gene with 1000 shards fails; 'all' skips gene with a note instead."""
    assert main(["skew", "-s", "gene", "--shards", "1000", "--workers", "2"]) == 1
    assert "power-of-two" in capsys.readouterr().err
    report = skew_json(capsys, "--shards", "1000", "--workers", "2", "--duration", "0.1")
    assert "gene" not in report["strategies"]
    assert report["notes"] == ["gene skipped: 1000 shards is not a power of two"]


def test_too_many_workers_for_the_layout_fails(capsys: pytest.CaptureFixture[str]) -> None:
    """More workers than the layout has worker IDs exits 1 with the allowed range."""
    assert main(["skew", "-L", "js_safe", "--workers", "300"]) == 1
    assert "workers must be in 1..256" in capsys.readouterr().err


def test_rate_above_capacity_warns_and_workers_wait(capsys: pytest.CaptureFixture[str]) -> None:
    """A rate beyond IDs-per-tick is simulated (the generator waits) and flagged."""
    report = skew_json(
        capsys, "-L", "js_safe", "--workers", "1", "--rate", "5000", "--duration", "2", "-s", "mod"
    )
    assert report["strategies"]["mod"]["total"] == 10_000
    assert any("exceeds the layout's 4,096" in w for w in report["warnings"])


def test_plot_without_matplotlib_says_how_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """--plot with matplotlib missing exits 1 telling to install snowshard[plot], no file."""
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    target = tmp_path / "skew.png"
    assert main(["skew", "--plot", str(target)]) == 1
    assert capsys.readouterr().err == (
        'Error: --plot needs matplotlib; install it with: pip install "snowshard[plot]"\n'
    )
    assert not target.exists()


def test_plot_writes_a_png(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """--plot FILE writes a PNG of the per-shard counts."""
    monkeypatch.setenv("MPLCONFIGDIR", str(tmp_path / "mpl"))
    pytest.importorskip("matplotlib")
    target = tmp_path / "skew.png"
    report = skew_json(
        capsys,
        "--plot",
        str(target),
        "--workers",
        "5",
        "--duration",
        "0.1",
        "-s",
        "mod",
        "-s",
        "shift",
        "--shards",
        "64",
    )
    assert report["plot"] == str(target)
    assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_forced_progress_bar_does_not_change_the_report(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """--progress draws on stderr only; stdout is the same as without it."""
    args = ["skew", "-s", "mix", "--workers", "3", "--duration", "0.5", "--no-chart"]
    assert main([*args, "--no-progress"]) == 0
    plain = capsys.readouterr().out
    assert main([*args, "--progress"]) == 0
    assert capsys.readouterr().out == plain


# -- the simulation and the chart, directly ---------------------------------------------


def test_sparse_stream_issues_exactly_rate_times_duration() -> None:
    """4 workers at 3 IDs/s for 10 s issue 120 unique IDs, all within the 10 s window."""
    layout = Layout()
    scenario = Scenario(workers=4, rate=3, duration=10, seed=1)
    ids = [i for chunk in stream(layout, scenario) for i in chunk]
    assert len(ids) == len(set(ids)) == 120
    times = [layout.parse(i).unix_ms - DEFAULT_START_MS for i in ids]
    assert min(times) >= 0 and max(times) < 10_000
    assert sorted({layout.parse(i).worker for i in ids}) == [0, 1, 2, 3]


def test_stream_is_repeatable_and_respects_the_start() -> None:
    """The same scenario gives the same IDs; a later epoch moves the default start."""
    layout = Layout(epoch=1_800_000_000_000)
    scenario = Scenario(workers=2, rate=50, duration=0.1, seed=3)
    first = [list(c) for c in stream(layout, scenario)]
    assert first == [list(c) for c in stream(layout, scenario)]
    assert layout.parse(first[0][0]).time.astimezone(timezone.utc).year == 2027


def test_random_sequence_policy_is_seeded() -> None:
    """simulate seeds the generator's random sequence starts: same seed, same counts."""
    layout = Layout()
    scenario = Scenario(workers=3, rate=1000, duration=0.05, sequence_start="random", seed=9)
    runs = [simulate(layout, scenario, {"mod": Mod(64)})["mod"].counts for _ in range(2)]
    assert runs[0] == runs[1]
    other = Scenario(workers=3, rate=1000, duration=0.05, sequence_start="random", seed=10)
    assert simulate(layout, other, {"mod": Mod(64)})["mod"].counts != runs[0]


def test_simulate_matches_the_library_skew() -> None:
    """simulate's numbers equal snowshard.skew() on the same IDs."""
    layout = Layout()
    scenario = Scenario(workers=3, rate=2000, duration=0.05, sequence_start="reset")
    ids = [i for chunk in stream(layout, scenario) for i in chunk]
    assert simulate(layout, scenario, {"mod": Mod(8)})["mod"] == skew(Mod(8), ids)
    assert summarise([0, 0]).p_value == 1.0


def test_bar_chart_counts_empty_and_loaded_shards() -> None:
    """The histogram's first line counts empty shards; the rest group loaded ones by rows."""
    lines = bar_chart([0, 0, 0, 12, 10, 10], bins=3, width=10)
    assert lines[0].split()[:2] == ["empty", "3"]
    assert lines[1].split()[:2] == ["10", "rows"] and lines[1].split()[3] == "2"
    assert lines[-1].split()[:2] == ["12", "rows"] and lines[-1].split()[3] == "1"
    assert lines[0].endswith(" " + "█" * 10)  # the largest group fills the width


def test_all_measures_every_strategy_route_offers(capsys: pytest.CaptureFixture[str]) -> None:
    """skew's default 'all' measures gene, mod, mix, hash and shift, the route choices."""
    report = skew_json(capsys, "--workers", "2", "--duration", "0.1")
    assert set(report["strategies"]) == set(STRATEGIES)
    assert report["strategies"]["hash"]["rule"] == "fmix64(x) % 1024"

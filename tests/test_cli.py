"""The snowshard command, run in-process through main(argv): inspect, gen, route, layout."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from snowshard import Layout, gene_of
from snowshard.cli import entrypoint
from snowshard.strategies import Gene
from tests.cli_support import isolated, run  # noqa: F401 (isolated: fixture)

SEED_001_ID = "152075078181383514"  # NewLife: 2021-02-23 15:32:04.056, worker 782, seq 3418
SEED_000 = "epoch=0,worker_bits=6,gene_bits=4"  # 41-bit ms since 1970 | 6 worker | 12 seq | 4 gene
SEED_000_ORDER_1820 = "6593741087309889548"  # uid 1820 -> table 12 of 16
SEED_000_ORDER_5177331 = "6593741087309889539"  # uid 5177331 -> table 3 of 16



def run_json(capsys: pytest.CaptureFixture[str], *args: str) -> Any:
    code, out, err = run(capsys, *args, "--json")
    assert code == 0, err
    return json.loads(out)


# -- inspect ----------------------------------------------------------------------------


def test_inspect_decodes_seed_001_in_text(capsys: pytest.CaptureFixture[str]) -> None:
    """inspect prints NewLife's ID as 2021-02-23T15:32:04.056 UTC, worker 782, sequence 3418."""
    code, out, _ = run(capsys, "inspect", SEED_001_ID)
    assert code == 0
    assert "time UTC    2021-02-23T15:32:04.056 UTC" in out
    assert "worker      782" in out
    assert "sequence    3418" in out
    assert "worker     10 bits  1100001110  = 782" in out  # the binary breakdown


def test_inspect_json_has_every_field(capsys: pytest.CaptureFixture[str]) -> None:
    """inspect --json reports time, ticks, every field, widths and the bits of seed 001's ID."""
    [info] = run_json(capsys, "inspect", SEED_001_ID, "--tz", "+08:00")
    assert info["id"] == SEED_001_ID
    assert info["time_utc"] == "2021-02-23T15:32:04.056+00:00"
    assert info["time_local"] == "2021-02-23T23:32:04.056+08:00"
    assert info["unix_ms"] == 1614094324056
    assert (info["datacenter"], info["worker"], info["sequence"], info["gene"]) == (0, 782, 3418, 0)
    assert info["bits"] == {
        "timestamp": 41,
        "datacenter": 0,
        "worker": 10,
        "sequence": 12,
        "gene": 0,
    }
    assert int(info["binary"], 2) == int(SEED_001_ID)
    assert "shard" not in info


def test_inspect_local_time_uses_named_zone(capsys: pytest.CaptureFixture[str]) -> None:
    """--tz with an IANA name shows the local time with that zone's offset and name."""
    code, out, _ = run(capsys, "inspect", SEED_001_ID, "--tz", "Asia/Shanghai")
    assert code == 0
    assert "time local  2021-02-23T23:32:04.056+08:00 (CST)" in out


def test_inspect_reads_ids_from_stdin(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no ID arguments, inspect decodes every word on stdin (spaces, commas, lines)."""
    monkeypatch.setattr(sys, "stdin", io.StringIO(f"{SEED_001_ID}, 4194304\n\n0x1\n"))
    infos = run_json(capsys, "inspect")
    assert [i["id"] for i in infos] == [SEED_001_ID, "4194304", "1"]
    assert infos[1]["unix_ms"] == Layout().epoch_ms + 1


def test_inspect_with_strategy_shows_the_shard_of_seed_000_orders(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Seed 000's order IDs carry their user's gene: gene routing gives tables 12 and 3."""
    infos = run_json(
        capsys,
        "inspect",
        "-L",
        SEED_000,
        "-s",
        "gene",
        "--shards",
        "16",
        SEED_000_ORDER_1820,
        SEED_000_ORDER_5177331,
    )
    first, second = infos
    assert (first["unix_ms"], first["worker"], first["sequence"]) == (1572070381000, 1, 0)
    assert (first["gene"], first["shard"]) == (12, 12)
    assert (second["gene"], second["shard"]) == (3, 3)
    assert first["rule"] == "x & 15"


def test_inspect_reads_seed_004_datacenter_and_worker(capsys: pytest.CaptureFixture[str]) -> None:
    """Seed 004's PHP ID decodes to diffTime 326570168, server 1, business 2, sequence 1."""
    [info] = run_json(
        capsys,
        "inspect",
        "1369734562062337",
        "-L",
        "datacenter_bits=5,worker_bits=5,epoch=2019-05-05",
    )
    assert (info["ticks"], info["datacenter"], info["worker"], info["sequence"]) == (
        326570168,
        1,
        2,
        1,
    )


# -- gen ---------------------------------------------------------------------------------


def test_gen_at_a_fixed_time_is_deterministic(capsys: pytest.CaptureFixture[str]) -> None:
    """gen --at --worker prints consecutive IDs of that time and worker, sequences 0, 1, 2."""
    code, out, _ = run(capsys, "gen", "-n", "3", "--worker", "7", "--at", "2024-01-01T00:00:00Z")
    assert code == 0
    first = Layout().compose(datetime(2024, 1, 1, tzinfo=timezone.utc), worker=7)
    assert out.split() == [str(first), str(first + 1), str(first + 2)]


def test_gen_with_gene_puts_ids_on_the_parents_shard(capsys: pytest.CaptureFixture[str]) -> None:
    """Every ID made with --gene 1820 ends in 1820's low 4 bits, so lands in table 12 of 16."""
    ids = run_json(
        capsys,
        "gen",
        "-n",
        "5",
        "--gene",
        "1820",
        "-L",
        SEED_000,
        "--worker",
        "1",
        "--at",
        "1572070381000",
    )
    assert isinstance(ids, list) and len(ids) == 5
    assert all(isinstance(i, str) and int(i) % 16 == 12 for i in ids)
    assert ids[0] == SEED_000_ORDER_1820  # seed 000's vector, issued by the real generator


def test_gen_string_gene_matches_library_hash(capsys: pytest.CaptureFixture[str]) -> None:
    """A non-numeric --gene is hashed like the library's gene_of(str)."""
    ids = run_json(
        capsys,
        "gen",
        "-n",
        "2",
        "--gene",
        "alice",
        "-L",
        SEED_000,
        "--worker",
        "1",
        "--at",
        "2024-01-01",
    )
    assert {int(i) & 15 for i in ids} == {gene_of("alice", 4)}


def test_gen_with_gene_on_a_layout_without_genes_fails_cleanly(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A gene on a layout with gene_bits=0 exits 1 with one Error line and no traceback."""
    code, out, err = run(capsys, "gen", "--gene", "5")
    assert code == 1
    assert out == ""
    assert err.startswith("Error: gene=5 given, but this layout has gene_bits=0")
    assert err.count("\n") == 1 and "Traceback" not in err


# -- route -------------------------------------------------------------------------------


def test_route_gene_matches_seed_000(capsys: pytest.CaptureFixture[str]) -> None:
    """route 1820 --strategy gene --shards 16 is table 12, and 5177331 table 3 (seed 000)."""
    code, out, _ = run(
        capsys, "route", "1820", "5177331", "--strategy", "gene", "--shards", "16", "--quiet"
    )
    assert code == 0
    assert out.split() == ["12", "3"]


def test_route_mix_and_mod_match_seed_002(capsys: pytest.CaptureFixture[str]) -> None:
    """Seed 002's IDs both go to table 0 by mod 1024, and to 320 and 384 after mixing."""
    ids = ("793292040770158592", "793292040774352896")
    mixed = run_json(capsys, "route", *ids, "-s", "mix", "--shards", "1024")
    modded = run_json(capsys, "route", *ids, "-s", "mod", "--shards", "1024")
    assert [r["shard"] for r in mixed["routes"]] == [320, 384]
    assert [r["shard"] for r in modded["routes"]] == [0, 0]
    assert mixed["rule"] == "(x ^ (x >> 16)) % 1024"


def test_route_shift_by_time_and_worker(capsys: pytest.CaptureFixture[str]) -> None:
    """Shift drops everything below the timestamp (default) or below the worker."""
    value = 1572057648000 << 22 | 5 << 12 | 3  # seed 000's time, worker 5, sequence 3
    by_time = run_json(
        capsys, "route", str(value), "-s", "shift", "--shards", "1024", "-L", "epoch=0"
    )
    by_worker = run_json(
        capsys, "route", str(value), "-s", "shift", "--shards", "1024", "--shift-by", "worker"
    )
    by_bits = run_json(
        capsys, "route", str(value), "-s", "shift", "--shards", "8", "--shift-bits", "1"
    )
    assert by_time["routes"][0]["shard"] == 1572057648000 % 1024
    assert by_worker["routes"][0]["shard"] == (value >> 12) % 1024
    assert by_bits["routes"][0]["shard"] == 1  # (3 >> 1) % 8


def test_route_reads_text_keys_and_stdin(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Keys from stdin route like the library: text keys are hashed, digits are ints."""
    monkeypatch.setattr(sys, "stdin", io.StringIO("alice\n1820\n"))
    code, out, _ = run(capsys, "route", "-s", "gene", "--shards", "16", "-q")
    assert code == 0
    assert out.split() == [str(Gene(16).shard_of("alice")), "12"]


def test_route_warns_when_gene_shards_exceed_the_layout(capsys: pytest.CaptureFixture[str]) -> None:
    """Gene routing with more shards than 2**gene_bits warns on stderr but still routes."""
    code, out, err = run(capsys, "route", "1820", "-s", "gene", "--shards", "32", "-L", SEED_000)
    assert code == 0
    assert out.strip() == "1820 -> shard 28 of 32  (x & 31)"
    assert "Gene(32) needs gene_bits >= 5 but the layout has gene_bits=4" in err


def test_route_without_a_strategy_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    """route with no --strategy (and nothing configured) exits 2 naming the missing option."""
    code, out, err = run(capsys, "route", "5", "--shards", "4")
    assert code == 2
    assert "Error: --strategy is needed" in err and out == ""


# -- layout ------------------------------------------------------------------------------


def test_layout_reports_capacity_of_the_default_layout(capsys: pytest.CaptureFixture[str]) -> None:
    """layout --json gives 2^41 ms of life, 4096 IDs per tick, 1024 workers, 2^53 after 2^31 ms."""
    facts = run_json(capsys, "layout", "--now", "2024-01-01")
    assert isinstance(facts, dict)
    epoch = 1577836800000
    expires = datetime.fromtimestamp((epoch + 2**41) / 1000, timezone.utc)
    unsafe = datetime.fromtimestamp((epoch + 2**31) / 1000, timezone.utc)
    assert facts["expires_at"] == expires.isoformat(timespec="milliseconds")
    assert facts["js_unsafe_at"] == unsafe.isoformat(timespec="milliseconds")
    assert facts["lifetime_years"] == 69.68
    assert facts["years_left"] == 65.68
    assert (facts["ids_per_tick_per_worker"], facts["max_worker"], facts["workers_total"]) == (
        4096,
        1023,
        1024,
    )
    assert any("2^53" in w for w in facts["warnings"])


def test_layout_js_safe_has_no_2_53_warning(capsys: pytest.CaptureFixture[str]) -> None:
    """The 53-bit js_safe preset never passes 2^53, so there is no JavaScript warning."""
    facts = run_json(capsys, "layout", "-L", "js_safe", "--now", "2024-01-01")
    assert facts["js_unsafe_at"] is None
    assert facts["ids_per_second_per_worker"] == 4096
    assert not any("2^53" in w for w in facts["warnings"])


def test_layout_warns_about_gene_shards_beyond_gene_bits(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """layout with --strategy gene --shards 32 on a 4-gene-bit layout prints that warning."""
    code, out, _ = run(
        capsys, "layout", "-L", SEED_000, "-s", "gene", "--shards", "32", "--now", "2024-01-01"
    )
    assert code == 0
    assert "4,096 per worker" in out
    assert "Gene(32) needs gene_bits >= 5" in out
    ok_code, ok_out, _ = run(capsys, "layout", "-L", SEED_000, "-s", "gene", "--shards", "16")
    assert ok_code == 0 and "needs gene_bits" not in ok_out


def test_layout_width_flags_override_the_preset(capsys: pytest.CaptureFixture[str]) -> None:
    """--worker-bits applies on top of --layout twitter whatever their order."""
    facts = run_json(capsys, "layout", "--worker-bits", "3", "-L", "twitter")
    assert facts["describe"].startswith("41t|5d|3w|12s|0g")


# -- errors, help, entry points --------------------------------------------------------


def test_bad_id_is_one_error_line_and_debug_adds_the_traceback(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A malformed ID exits 1 with 'Error: ...' only; --debug also prints the traceback."""
    code, _, err = run(capsys, "inspect", "12x")
    assert code == 1
    assert err == "Error: '12x' is not a decimal ID: expected digits 0-9 only\n"
    code, _, err = run(capsys, "--debug", "inspect", "12x")
    assert code == 1
    assert "Traceback" in err and err.rstrip().endswith("expected digits 0-9 only")


def test_unknown_option_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    """Usage errors (unknown options, bad values) exit 2."""
    assert run(capsys, "inspect", "--bogus")[0] == 2
    code, _, err = run(capsys, "gen", "--at", "yesterday")
    assert code == 2 and "'yesterday' is not a time" in err


@pytest.mark.parametrize("command", ["", "inspect", "gen", "route", "layout", "skew", "demo"])
def test_every_command_has_help(capsys: pytest.CaptureFixture[str], command: str) -> None:
    """--help works on the group and every command and exits 0."""
    code, out, _ = run(capsys, *([command] if command else []), "--help")
    assert code == 0
    assert out.startswith(f"Usage: snowshard {command}".rstrip())


def test_demo_calls_the_demo_module(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """snowshard demo runs snowshard.demo.main()."""
    import snowshard.demo

    calls: list[bool] = []
    monkeypatch.setattr(snowshard.demo, "main", lambda: calls.append(True))
    assert run(capsys, "demo")[0] == 0
    assert calls == [True]


def test_entrypoint_exits_with_mains_code(monkeypatch: pytest.MonkeyPatch) -> None:
    """The console script exits with main's code (2 for a usage error)."""
    monkeypatch.setattr(sys, "argv", ["snowshard", "route"])
    with pytest.raises(SystemExit) as exit_info:
        entrypoint()
    assert exit_info.value.code == 2


def test_python_dash_m_snowshard_runs_in_a_subprocess(tmp_path: Path) -> None:
    """python -m snowshard inspect works as a real process and exits 0."""
    env = {k: v for k, v in os.environ.items() if k not in ("SNOWSHARD_LAYOUT", "SNOWSHARD_DEBUG")}
    done = subprocess.run(
        [sys.executable, "-m", "snowshard", "inspect", SEED_001_ID, "--json"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)[0]["worker"] == 782

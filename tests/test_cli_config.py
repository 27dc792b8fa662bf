"""Where the CLI's layout comes from: pyproject.toml, $SNOWSHARD_LAYOUT, options, presets."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from snowshard import Layout
from snowshard.cli import main
from snowshard.cli.config import ConfigError, parse_spec, parse_time, resolve
from tests.cli_support import isolated  # noqa: F401 (fixture)

SEED_000_ORDER_1820 = "6593741087309889548"



def inspect_json(capsys: pytest.CaptureFixture[str], *args: str) -> Any:
    code = main(["inspect", SEED_000_ORDER_1820, "--json", *args])
    out, err = capsys.readouterr()
    assert code == 0, err
    [info] = json.loads(out)
    assert isinstance(info, dict)
    return info


def write_pyproject(directory: Path, table: str) -> None:
    (directory / "pyproject.toml").write_text(
        f'[project]\nname = "app"\n\n[tool.snowshard]\n{table}\n', encoding="utf-8"
    )


def test_pyproject_table_is_found_from_a_subdirectory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """[tool.snowshard] of the nearest pyproject.toml above the cwd sets the layout."""
    write_pyproject(tmp_path, "epoch = 1970-01-01\nworker_bits = 6\ngene_bits = 4")
    deep = tmp_path / "src" / "app"
    deep.mkdir(parents=True)
    monkeypatch.chdir(deep)
    info = inspect_json(capsys)
    assert (info["unix_ms"], info["worker"], info["gene"]) == (1572070381000, 1, 12)


def test_pyproject_routing_defaults_let_route_run_without_options(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """strategy and shards in [tool.snowshard] make 'snowshard route 1820' print table 12."""
    write_pyproject(tmp_path, 'strategy = "gene"\nshards = 16')
    assert main(["route", "1820", "-q"]) == 0
    assert capsys.readouterr().out.split() == ["12"]


def test_partial_routing_config_does_not_break_inspect(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A configured strategy without a shard count only applies once --shards is given."""
    write_pyproject(tmp_path, 'strategy = "mod"')
    assert "shard" not in inspect_json(capsys)
    assert inspect_json(capsys, "--shards", "16")["shard"] == 6593741087309889548 % 16


def test_environment_overrides_pyproject_and_options_override_both(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """$SNOWSHARD_LAYOUT beats pyproject key by key; --gene-bits beats the variable."""
    write_pyproject(tmp_path, "epoch = 1970-01-01\nworker_bits = 6\ngene_bits = 9")
    monkeypatch.setenv("SNOWSHARD_LAYOUT", "gene_bits=4")
    info = inspect_json(capsys)
    assert info["bits"] == {
        "timestamp": 41,
        "datacenter": 0,
        "worker": 6,
        "sequence": 12,
        "gene": 4,
    }
    assert (info["unix_ms"], info["gene"]) == (1572070381000, 12)  # epoch from pyproject
    info = inspect_json(capsys, "--gene-bits", "2", "--sequence-bits", "14")
    assert info["bits"]["gene"] == 2
    assert (info["sequence"], info["gene"]) == (3, 0)  # 6593741087309889548 & 3


def test_a_preset_layer_starts_over(monkeypatch: pytest.MonkeyPatch) -> None:
    """A layer naming a preset drops earlier layers' widths."""
    monkeypatch.setenv("SNOWSHARD_LAYOUT", "gene_bits=4,worker_bits=6")
    resolved = resolve([("--layout", parse_spec("sonyflake", "--layout"))], cwd=Path.cwd())
    assert resolved.layout == Layout.sonyflake()
    assert resolved.sources == ["$SNOWSHARD_LAYOUT", "--layout"]


def test_json_and_key_value_specs_agree() -> None:
    """A JSON spec and a key=value spec give the same layer."""
    assert parse_spec('{"worker_bits": 6, "epoch": "2020-01-01"}', "x") == parse_spec(
        "worker-bits=6; epoch=2020-01-01", "x"
    )


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("worker_bit=3", "unknown key 'worker_bit'"),
        ("snowflake", "unknown layout preset 'snowflake'"),
        ("gene_bits=four", "gene_bits must be an integer"),
        ("strategy=crc", "strategy must be one of gene, mod, mix, hash, shift"),
        ("timestamp_bits=41,worker_bits=20", "widths add up to 73 bits"),
    ],
)
def test_bad_environment_spec_is_one_error_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], spec: str, message: str
) -> None:
    """A bad $SNOWSHARD_LAYOUT exits 1 with one 'Error: $SNOWSHARD_LAYOUT: ...' line."""
    monkeypatch.setenv("SNOWSHARD_LAYOUT", spec)
    assert main(["layout"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("Error: $SNOWSHARD_LAYOUT") and message in err
    assert err.count("\n") == 1


def test_bad_pyproject_key_names_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An unknown key in [tool.snowshard] is reported with the file it is in."""
    write_pyproject(tmp_path, "gene_bitz = 4")
    assert main(["layout"]) == 1
    err = capsys.readouterr().err
    assert f"{tmp_path / 'pyproject.toml'} [tool.snowshard]: unknown key 'gene_bitz'" in err


def test_bad_layout_option_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    """An invalid --layout spec is a usage error (exit 2)."""
    assert main(["layout", "--layout", "nosuch"]) == 2
    assert "unknown layout preset 'nosuch'" in capsys.readouterr().err


def test_pyproject_without_a_snowshard_table_is_ignored(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A pyproject.toml with no [tool.snowshard] leaves the default layout."""
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n', encoding="utf-8")
    assert resolve(cwd=tmp_path, environ={}).layout == Layout()


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("1614094324056", 1614094324056),
        ("2021-02-23T15:32:04.056Z", 1614094324056),
        ("2021-02-23T23:32:04.056+08:00", 1614094324056),
        ("2021-02-23 15:32:04.056", 1614094324056),
        ("2020-01-01", 1577836800000),
    ],
)
def test_parse_time_accepts_iso_and_unix_ms(text: str, ms: int) -> None:
    """Times are Unix ms or ISO 8601; dates and naive times are UTC."""
    assert parse_time(text) == ms


def test_parse_time_rejects_words() -> None:
    """A word is not a time."""
    with pytest.raises(ValueError, match="is not a time"):
        parse_time("tomorrow")


def test_config_error_is_a_snowshard_error() -> None:
    """ConfigError is a LayoutError, so main reports it as 'Error: ...' with exit 1."""
    with pytest.raises(ConfigError):
        parse_spec("preset=twitter,tick_ms=x", "--layout")

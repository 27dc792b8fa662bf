"""snowshard route and gen --gene read keys as the library does: every key type, every strategy."""

from __future__ import annotations

import hashlib
import io
import json
import sys
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import pytest

from snowshard import Layout, SnowshardError, gene_of, strategies
from snowshard.cli.cmd_route import route_command
from snowshard.cli.config import STRATEGIES
from snowshard.errors import FieldOutOfRange
from snowshard.strategies import Gene, Hash, Mix, Mod, ShardStrategy, Shift
from tests.cli_support import isolated, run  # noqa: F401 (isolated: fixture)

UUID_TEXT = "12345678-1234-5678-1234-56781234567f"
GENE_LAYOUT = "worker_bits=6,gene_bits=4"  # 16 genes
MASK64 = (1 << 64) - 1


@dataclass(frozen=True)
class KeyCase:
    """A key as typed on the command line, and the same key as the library takes it."""

    text: str
    key_type: str
    key: object


@dataclass(frozen=True)
class StrategyCase:
    """A strategy's command-line options and the same strategy built with the library."""

    args: tuple[str, ...]
    build: Callable[[], ShardStrategy]


KEYS: dict[str, KeyCase] = {
    "int": KeyCase("1820", "auto", 1820),
    "int-id": KeyCase("793292040770158592", "auto", 793292040770158592),
    "int-explicit": KeyCase("1820", "int", 1820),
    "negative-int": KeyCase("-1820", "auto", -1820),
    "negative-int-explicit": KeyCase("-1820", "int", -1820),
    "str": KeyCase("alice", "auto", "alice"),
    "str-of-digits": KeyCase("1820", "str", "1820"),
    "str-of-negative": KeyCase("-1820", "str", "-1820"),
    "bytes": KeyCase("0a1b", "bytes", b"\x0a\x1b"),
    "bytes-0x": KeyCase("0x0a1b", "bytes", b"\x0a\x1b"),
    "uuid": KeyCase(UUID_TEXT, "auto", uuid.UUID(UUID_TEXT)),
    "uuid-upper": KeyCase(UUID_TEXT.upper(), "auto", uuid.UUID(UUID_TEXT)),
    "uuid-explicit": KeyCase(UUID_TEXT.replace("-", ""), "uuid", uuid.UUID(UUID_TEXT)),
}

ROUTERS: dict[str, StrategyCase] = {
    "gene": StrategyCase(("-s", "gene", "--shards", "16"), lambda: Gene(16)),
    "mod": StrategyCase(("-s", "mod", "--shards", "1000"), lambda: Mod(1000)),
    "mix": StrategyCase(("-s", "mix", "--shards", "1024"), lambda: Mix(1024)),
    "hash": StrategyCase(("-s", "hash", "--shards", "1024"), lambda: Hash(1024)),
    "shift-bits": StrategyCase(
        ("-s", "shift", "--shards", "8", "--shift-bits", "3"), lambda: Shift(8, 3)
    ),
    "shift-by-time": StrategyCase(
        ("-s", "shift", "--shards", "1024"), lambda: Shift.by_time(1024, Layout())
    ),
    "shift-by-worker": StrategyCase(
        ("-s", "shift", "--shards", "64", "--shift-by", "worker"),
        lambda: Shift.by_worker(64, Layout()),
    ),
}



def library(call: Callable[[object], int], key: object) -> int | SnowshardError:
    """What the library answers for ``key``: a number, or the named error it raises."""
    try:
        return call(key)
    except SnowshardError as exc:
        return exc


def route_json(
    capsys: pytest.CaptureFixture[str], case: KeyCase, *args: str
) -> tuple[int, Any, str]:
    code, out, err = run(
        capsys, "route", *args, "--key-type", case.key_type, "--json", "--", case.text
    )
    return code, json.loads(out) if code == 0 else None, err


def assert_same_error(code: int, err: str, expected: SnowshardError) -> None:
    """The command exits 2 (usage error) naming the library's error and its message."""
    assert code == 2
    assert f"Error: Invalid value for 'KEY': {type(expected).__name__}: {expected}." in err
    assert "Traceback" not in err


def fmix64(x: int) -> int:
    """MurmurHash3's 64-bit finalizer, written out from its published constants."""
    x ^= x >> 33
    x = x * 0xFF51AFD7ED558CCD & MASK64
    x ^= x >> 33
    x = x * 0xC4CEB9FE1A85EC53 & MASK64
    return x ^ x >> 33


# -- the CLI and the library agree ------------------------------------------------------


@pytest.mark.parametrize("router", ROUTERS.values(), ids=ROUTERS.keys())
@pytest.mark.parametrize("case", KEYS.values(), ids=KEYS.keys())
def test_route_agrees_with_the_library(
    capsys: pytest.CaptureFixture[str], case: KeyCase, router: StrategyCase
) -> None:
    """route --json gives the library's shard_of(key), or exits 2 with the library's error."""
    strategy = router.build()
    expected = library(strategy.shard_of, case.key)
    code, report, err = route_json(capsys, case, *router.args)
    if isinstance(expected, SnowshardError):
        assert_same_error(code, err, expected)
    else:
        assert code == 0, err
        assert report["strategy"] == repr(strategy)
        assert report["routes"] == [
            {"key": case.text, "key_type": type(case.key).__name__.lower(), "shard": expected}
        ]


@pytest.mark.parametrize("case", KEYS.values(), ids=KEYS.keys())
def test_route_gene_agrees_with_gene_of(capsys: pytest.CaptureFixture[str], case: KeyCase) -> None:
    """route --strategy gene --shards 16 gives gene_of(key, 4), or gene_of's error."""
    expected = library(lambda key: gene_of(key, 4), case.key)
    code, report, err = route_json(capsys, case, "-s", "gene", "--shards", "16")
    if isinstance(expected, SnowshardError):
        assert_same_error(code, err, expected)
    else:
        assert code == 0, err
        assert report["routes"][0]["shard"] == expected


@pytest.mark.parametrize("case", KEYS.values(), ids=KEYS.keys())
def test_gen_gene_agrees_with_gene_of(capsys: pytest.CaptureFixture[str], case: KeyCase) -> None:
    """gen --gene KEY issues IDs ending in gene_of(key, 4), or exits 2 with gene_of's error."""
    expected = library(lambda key: gene_of(key, 4), case.key)
    code, out, err = run(
        capsys,
        "gen",
        "-n",
        "3",
        "--gene",
        case.text,
        "--key-type",
        case.key_type,
        "-L",
        GENE_LAYOUT,
        "--worker",
        "1",
        "--at",
        "2024-01-01",
        "--json",
    )
    if isinstance(expected, SnowshardError):
        assert code == 2 and out == ""
        assert f"Invalid value for '--gene': {type(expected).__name__}: {expected}." in err
    else:
        assert code == 0, err
        assert {int(i) & 15 for i in json.loads(out)} == {expected}


# -- hand-computed vectors ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "args", "shard"),
    [
        ("1820", ("-s", "gene", "--shards", "16"), 12),  # 0x71C & 0xF
        (UUID_TEXT, ("-s", "gene", "--shards", "16"), 15),  # the UUID's last hex digit
        ("1820", ("-s", "mod", "--shards", "1000"), 820),
        ("1820", ("-s", "mix", "--shards", "1024"), 796),  # 1820 >> 16 is 0; 1820 - 1024
        ("1820", ("-s", "shift", "--shards", "8", "--shift-bits", "3"), 3),  # 227 % 8
        ("0", ("-s", "hash", "--shards", "1024"), 0),  # fmix64(0) == 0
    ],
)
def test_route_matches_hand_computed_vectors(
    capsys: pytest.CaptureFixture[str], key: str, args: tuple[str, ...], shard: int
) -> None:
    """route -q prints shards worked out by hand from each strategy's formula."""
    code, out, err = run(capsys, "route", *args, "-q", key)
    assert code == 0, err
    assert out.split() == [str(shard)]


def test_route_hash_is_fmix64_modulo_the_shard_count(capsys: pytest.CaptureFixture[str]) -> None:
    """route --strategy hash sends an ID to fmix64(id) % n, fmix64 written out in the test."""
    value = 793292040770158592
    code, out, err = run(capsys, "route", "-s", "hash", "--shards", "1024", "-q", str(value))
    assert code == 0, err
    assert out.split() == [str(fmix64(value) % 1024)]


def test_route_bytes_key_is_blake2b_64_of_the_bytes(capsys: pytest.CaptureFixture[str]) -> None:
    """--key-type bytes hashes the decoded bytes with BLAKE2b-64, read big-endian."""
    digest = hashlib.blake2b(b"\x0a\x1b", digest_size=8).digest()
    code, out, err = run(
        capsys, "route", "-s", "gene", "--shards", "16", "--key-type", "bytes", "-q", "0a1b"
    )
    assert code == 0, err
    assert out.split() == [str(int.from_bytes(digest, "big") & 15)]


# -- how keys are read ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("1820", "int"),
        ("007", "int"),
        ("alice", "str"),
        ("+1820", "str"),
        ("18.5", "str"),
        (UUID_TEXT, "uuid"),
        (UUID_TEXT.upper(), "uuid"),
        (UUID_TEXT.replace("-", ""), "str"),  # only the 8-4-4-4-12 form is a UUID
    ],
)
def test_auto_key_type_reads_ints_uuids_and_falls_back_to_str(
    capsys: pytest.CaptureFixture[str], text: str, kind: str
) -> None:
    """--key-type auto reads integers as int, 8-4-4-4-12 UUIDs as UUID, the rest as str."""
    code, out, err = run(capsys, "route", "-s", "mod", "--shards", "7", "--json", text)
    assert code == 0, err
    assert json.loads(out)["routes"][0]["key_type"] == kind


def test_negative_key_on_stdin_is_the_librarys_error(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A negative key read from stdin exits 2 with FieldOutOfRange and prints no shard."""
    monkeypatch.setattr(sys, "stdin", io.StringIO("1820\n-1820\n"))
    with pytest.raises(FieldOutOfRange) as refused:
        Gene(16).shard_of(-1820)
    code, out, err = run(capsys, "route", "-s", "gene", "--shards", "16", "-q")
    assert out == ""
    assert_same_error(code, err, refused.value)


def test_negative_key_error_says_how_to_route_the_text(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The negative-key error names the value and points to --key-type str."""
    code, _, err = run(capsys, "route", "-s", "gene", "--shards", "16", "--", "-1820")
    assert code == 2
    assert "got -1820" in err and ">= 0" in err
    assert "pass --key-type str" in err


@pytest.mark.parametrize(
    ("key_type", "text", "message"),
    [
        ("int", "alice", "'alice' is not an integer"),
        ("int", "18.5", "'18.5' is not an integer"),
        ("bytes", "zz", "'zz' is not hexadecimal bytes"),
        ("bytes", "abc", "'abc' is not hexadecimal bytes"),
        ("uuid", "1820", "'1820' is not a UUID"),
    ],
)
def test_unreadable_key_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], key_type: str, text: str, message: str
) -> None:
    """A key that is not of the given --key-type exits 2 naming the value."""
    code, out, err = run(
        capsys, "route", "-s", "mod", "--shards", "7", "--key-type", key_type, text
    )
    assert code == 2 and out == ""
    assert f"Error: Invalid value for 'KEY': {message}" in err


def test_text_output_names_the_key_type_of_non_int_keys(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """route's text output marks UUID and str keys, so a UUID read as text is visible."""
    code, out, err = run(capsys, "route", "-s", "mod", "--shards", "7", UUID_TEXT, "alice")
    assert code == 0, err
    assert out.splitlines() == [
        f"{UUID_TEXT} -> shard {Mod(7).shard_of(uuid.UUID(UUID_TEXT))} of 7  (x % 7; uuid key)",
        f"alice -> shard {Mod(7).shard_of('alice')} of 7  (x % 7; str key)",
    ]


# -- every strategy is offered ----------------------------------------------------------------


def test_every_library_strategy_is_a_route_choice() -> None:
    """Each strategy class snowshard.strategies exports can be picked with route --strategy."""
    exported = {
        name.lower()
        for name in strategies.__all__
        if isinstance(obj := getattr(strategies, name), type)
        and not issubclass(obj, Exception)
        and obj is not ShardStrategy
    }
    [option] = [p for p in route_command.params if p.name == "strategy"]
    assert isinstance(option.type, click.Choice)
    assert exported  # the introspection found the classes
    assert exported <= set(option.type.choices)


def test_every_route_choice_is_tested_against_the_library() -> None:
    """The agreement table above covers every strategy route offers."""
    assert {case.args[1] for case in ROUTERS.values()} == set(STRATEGIES)


def test_hash_route_reports_its_rule(capsys: pytest.CaptureFixture[str]) -> None:
    """route --strategy hash names Hash(n) and its formula in the JSON report."""
    code, out, err = run(capsys, "route", "-s", "hash", "--shards", "1024", "--json", "1820")
    assert code == 0, err
    report = json.loads(out)
    assert (report["strategy"], report["rule"]) == ("Hash(1024)", "fmix64(x) % 1024")


def test_pyproject_can_name_the_hash_strategy(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """strategy = "hash" in [tool.snowshard] makes route use Hash(shards)."""
    (tmp_path / "pyproject.toml").write_text(
        '[tool.snowshard]\nstrategy = "hash"\nshards = 1024\n', encoding="utf-8"
    )
    code, out, err = run(capsys, "route", "-q", "1820")
    assert code == 0, err
    assert out.split() == [str(Hash(1024).shard_of(1820))]

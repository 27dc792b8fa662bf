"""gene_of and key_to_int: stable low bits of parent keys."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import uuid

import pytest

from snowshard import FieldOutOfRange, IdTypeError, gene_of, key_to_int


def test_int_gene_is_low_bits() -> None:
    """An int key's gene is key & (2**bits - 1)."""
    assert gene_of(1820, 4) == 12
    assert gene_of(5177331, 4) == 3
    assert gene_of(0b1011_0110, 3) == 0b110


def test_uuid_gene_uses_its_integer() -> None:
    """A UUID key's gene is the low bits of UUID.int."""
    key = uuid.UUID("12345678-1234-5678-1234-56781234567f")
    assert gene_of(key, 8) == 0x7F


def test_str_gene_is_blake2b_64() -> None:
    """A str key hashes as BLAKE2b with an 8-byte digest of its UTF-8 bytes, big-endian."""
    expected = int.from_bytes(hashlib.blake2b("Zoë".encode(), digest_size=8).digest(), "big")
    assert key_to_int("Zoë") == expected
    assert gene_of("Zoë", 10) == expected & 1023
    assert key_to_int(b"abc") == key_to_int("abc")


def test_str_gene_is_stable_across_processes() -> None:
    """Another interpreter (with its own hash salt) computes the same gene."""
    code = "from snowshard import gene_of; print(gene_of('alice', 16))"
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONHASHSEED": "12345", "PATH": ""},
    )
    assert int(out.stdout) == gene_of("alice", 16)


@pytest.mark.parametrize("bad", [True, 1.5, None, [1], object()])
def test_unsupported_key_types_raise_type_error(bad: object) -> None:
    """bool, float, None and other types raise IdTypeError, a TypeError."""
    with pytest.raises(TypeError):
        gene_of(bad, 4)
    with pytest.raises(IdTypeError):
        key_to_int(bad)


def test_negative_int_keys_are_refused() -> None:
    """A negative key is refused rather than given a two's-complement gene."""
    with pytest.raises(FieldOutOfRange, match=">= 0, got -3"):
        gene_of(-3, 4)


def test_negative_bits_are_refused() -> None:
    """gene_of needs bits >= 0."""
    with pytest.raises(ValueError, match="gene bits"):
        gene_of(5, -1)

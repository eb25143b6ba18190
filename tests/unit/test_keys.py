"""Order preservation and bounds of the key encoding (rangetable.keys)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rangetable.entity import validate_key
from rangetable.keys import META_PREFIX, decode_key, encode_key, partition_bounds, range_bounds

# Valid key text: no control characters, no / \ # ?, no surrogates; includes non-ASCII and astral.
_FORBIDDEN = "/\\#?"
key_text = st.text(
    alphabet=st.characters(
        exclude_categories=("Cs",),
        exclude_characters=_FORBIDDEN + "".join(map(chr, [*range(0x20), *range(0x7F, 0xA0)])),
    ),
    max_size=12,
)
# A small alphabet makes shared prefixes and equal partitions likely.
small_text = st.text(
    alphabet=st.sampled_from(["a", "b", "é", "\u00a0", "\uffff", "😀", " ", "~"]), max_size=4
)
keys = st.one_of(key_text, small_text)
pairs = st.tuples(keys, keys)


@given(pairs)
def test_generated_keys_are_valid(pair: tuple[str, str]) -> None:
    validate_key("PartitionKey", pair[0])
    validate_key("RowKey", pair[1])


@settings(max_examples=400)
@given(pairs, pairs)
def test_encoding_preserves_tuple_order(a: tuple[str, str], b: tuple[str, str]) -> None:
    ea, eb = encode_key(*a), encode_key(*b)
    assert (a < b) == (ea < eb)
    assert (a == b) == (ea == eb)


@given(pairs)
def test_round_trip(pair: tuple[str, str]) -> None:
    assert decode_key(encode_key(*pair)) == pair


@settings(max_examples=300)
@given(keys, pairs)
def test_partition_bounds_contain_exactly_that_partition(pk: str, other: tuple[str, str]) -> None:
    low, high = partition_bounds(pk)
    assert low <= encode_key(pk, other[1]) < high
    assert (low <= encode_key(*other) < high) == (other[0] == pk)


@settings(max_examples=300)
@given(keys, st.one_of(st.none(), keys), pairs)
def test_range_bounds_membership(low_pk: str, high_pk: str | None, key: tuple[str, str]) -> None:
    low, high = range_bounds(low_pk, high_pk)
    enc = encode_key(*key)
    inside = low <= enc and (high is None or enc < high)
    assert inside == (low_pk <= key[0] and (high_pk is None or key[0] < high_pk))


@given(pairs)
def test_meta_keys_sort_after_entity_keys(pair: tuple[str, str]) -> None:
    assert encode_key(*pair) < META_PREFIX


def test_examples() -> None:
    assert encode_key("p", "r") == b"p\x00r"
    assert encode_key("", "") == b"\x00"
    assert decode_key(b"\x00") == ("", "")
    assert decode_key("é\x00😀".encode()) == ("é", "😀")
    assert partition_bounds("p") == (b"p\x00", b"p\x01")
    assert range_bounds("a", None) == (b"a", None)
    assert range_bounds("", "m") == (b"", b"m")
    # a prefix partition sorts before its extensions, and stays out of their ranges
    assert encode_key("a", "zzz") < encode_key("a ", "")
    assert not partition_bounds("a")[0] <= encode_key("a ", "") < partition_bounds("a")[1]
    with pytest.raises(ValueError):
        decode_key(b"no-separator")

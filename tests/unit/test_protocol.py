"""Unit tests of the wire protocol's fast path: it must give what the plain library calls give."""

from __future__ import annotations

import uuid

import msgpack
import pytest
import zmq
from hypothesis import given
from hypothesis import strategies as st

from rangetable import protocol
from rangetable.errors import TableError

# msgpack values as the servers store and answer them
values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats(allow_nan=False)
    | st.text(max_size=20) | st.binary(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)


@given(values)
def test_pack_is_msgpack(value: object) -> None:
    assert protocol.pack(value) == msgpack.packb(value, use_bin_type=True)


@given(values)
def test_a_spliced_result_is_the_packed_reply(value: object) -> None:
    stored = msgpack.packb(value, use_bin_type=True)
    assert protocol.ok(protocol.Packed(stored[:1], stored[1:])) == msgpack.packb({"ok": value}, use_bin_type=True)
    assert protocol.result(protocol.ok(protocol.Packed(stored))) == msgpack.unpackb(stored, strict_map_key=False)


def test_error_round_trip() -> None:
    with pytest.raises(TableError) as info:
        protocol.result(protocol.error(TableError("EntityNotFound", index=3)))
    assert info.value.error_code == "EntityNotFound" and info.value.index == 3
    with pytest.raises(TableError, match="malformed reply"):
        protocol.result(protocol.pack([1]))


@pytest.mark.parametrize("frames", [[b"id", b"body"], [b"only"], [b"a", b"", b"c"]])
def test_frames_round_trip(frames: list[bytes]) -> None:
    ctx = zmq.Context.instance()
    a, b = ctx.socket(zmq.PAIR), ctx.socket(zmq.PAIR)
    address = f"inproc://test-protocol-frames-{uuid.uuid4().hex}"  # a closed socket frees its name later
    try:
        a.bind(address)
        b.connect(address)
        protocol.send_frames(a, frames)
        assert b.poll(1000) and protocol.readable(b)
        assert protocol.recv_frames(b) == frames
        assert not protocol.readable(b)
        b.send_multipart(frames)
        got, first = protocol.recv_frames_peer(a)
        assert got == frames and first.bytes == frames[0] and protocol.peer_key(first) is None
        with pytest.raises(zmq.Again):
            protocol.recv_frames(a, protocol.NOBLOCK)
    finally:
        a.close(0)
        b.close(0)

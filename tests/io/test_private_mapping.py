"""Copy-on-write mappings of shared memory files that keep no descriptor open (scaler/io/private_mapping.py)."""

from __future__ import annotations

import ctypes
import os

import numpy
import pytest

from scaler.io.private_mapping import map_private
from scaler.io.shared_bytes import SharedBytes
from scaler.testing.processes import mapped_at


def _open_memfds() -> int:
    """This process's descriptors of shared memory files (others, such as sockets of clients that earlier tests left
    reconnecting, come and go)."""
    count = 0
    for name in os.listdir("/proc/self/fd"):
        try:
            count += os.readlink(f"/proc/self/fd/{name}").startswith("/memfd:")
        except OSError:  # closed meanwhile
            pass
    return count


def test_a_mapping_reads_the_file_and_keeps_its_writes() -> None:
    shared = SharedBytes.create(bytes(range(256)) * 64)
    first, second = map_private(shared.fd, shared.size), map_private(shared.fd, shared.size)
    assert bytes(first) == bytes(range(256)) * 64
    first[0:3] = b"abc"
    assert bytes(first[:4]) == b"abc\x03"
    assert bytes(second[:4]) == b"\x00\x01\x02\x03", "another mapping sees the file"
    assert shared.to_bytes()[:4] == b"\x00\x01\x02\x03", "the file itself is unchanged"


def test_mappings_keep_no_descriptor_and_go_with_their_last_view() -> None:
    shared = SharedBytes.create(b"x" * (1 << 20))
    before = _open_memfds()
    arrays = [numpy.frombuffer(map_private(shared.fd, shared.size), dtype=numpy.uint8) for _ in range(50)]
    del shared  # its descriptor closes; the mappings stay readable
    assert _open_memfds() == before - 1, "50 mappings, no descriptor for any"
    assert all(int(array[12345]) == ord("x") for array in arrays)
    address = arrays[0].__array_interface__["data"][0]
    assert mapped_at(address) is not None
    view_of_view = arrays[0][10:20]  # made from the mapping: keeps it
    del arrays
    assert mapped_at(address) is not None and bytes(view_of_view) == b"x" * 10
    del view_of_view
    assert mapped_at(address) is None, "unmapped once nothing made from it lives"


def test_the_mapping_is_a_buffer_ctypes_and_numpy_can_write_through() -> None:
    shared = SharedBytes.create(b"\x00" * 4096)
    view = map_private(shared.fd, shared.size)
    assert not view.readonly and view.format == "B" and view.nbytes == 4096
    ctypes.c_char.from_buffer(view).value = b"z"  # as worker/mapped_inputs.py takes its address
    array = numpy.frombuffer(view, dtype=numpy.uint8)
    array[1] = 7
    assert bytes(view[:2]) == b"z\x07"


def test_a_file_shorter_than_asked_is_refused_not_mapped() -> None:
    shared = SharedBytes.create(b"y" * 100)
    with pytest.raises(ValueError, match="cannot map 8192 bytes of a file of 100"):
        map_private(shared.fd, 8192)  # reading the pages past its end would kill the process (SIGBUS)

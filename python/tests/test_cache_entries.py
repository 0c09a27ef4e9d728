"""The compile cache's entries: keyed, regular files only, bounded (issue 41)."""
import os
import threading

import pytest

from fxhlo.cache import DiskCache, ENTRY_MAGIC


def test_an_entry_is_read_only_under_its_own_key(tmp_path):
    c = DiskCache(str(tmp_path))
    a, b = "a" * 64, "b" * 64
    c.put(a, b"artifact of a")
    c.put(b, b"artifact of b")
    assert c.get(a) == b"artifact of a"
    # Entries swapped between keys (the silently-wrong-answer case) are misses.
    pa, pb = c.path(a), c.path(b)
    da, db = open(pa, "rb").read(), open(pb, "rb").read()
    open(pa, "wb").write(db)
    open(pb, "wb").write(da)
    assert c.get(a) is None and c.get(b) is None
    # An entry of the old format (bare artifact bytes) is a miss too.
    open(pa, "wb").write(b"FXHLOFXA...")
    assert c.get(a) is None
    assert open(pb, "rb").read().startswith(ENTRY_MAGIC + b"a" * 64)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_a_fifo_or_a_link_to_a_device_is_a_miss_not_a_hang(tmp_path):
    c = DiskCache(str(tmp_path))
    k = "c" * 64
    os.makedirs(os.path.dirname(c.path(k)))
    os.mkfifo(c.path(k))
    got = []
    t = threading.Thread(target=lambda: got.append(c.get(k)), daemon=True)
    t.start()
    t.join(10)
    assert not t.is_alive(), "reading a FIFO entry hung"
    assert got == [None]
    os.unlink(c.path(k))
    os.symlink("/dev/zero", c.path(k))
    assert c.get(k) is None
    os.unlink(c.path(k))
    # A symlink to a valid entry is refused as well (O_NOFOLLOW).
    c.put("d" * 64, b"x")
    os.symlink(c.path("d" * 64), c.path(k))
    assert c.get(k) is None


def test_entries_larger_than_the_bound_are_misses(tmp_path, monkeypatch):
    c = DiskCache(str(tmp_path))
    k = "e" * 64
    c.put(k, b"y" * 1000)
    assert c.get(k) == b"y" * 1000
    monkeypatch.setenv("FXHLO_CACHE_MAX_BYTES", "100")
    assert c.get(k) is None

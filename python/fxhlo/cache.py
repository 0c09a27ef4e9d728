"""The on-disk compile cache of the torch backend.

An entry is the bytes of one compiled artifact (``Compiled.to_bytes()``), stored as
``<cache dir>/<key[:2]>/<key>.fxa``.  The key is a SHA-256 over everything the artifact depends
on: the fxjson text of the graph (which holds every input's dtype and shape), the constants it
names (names, types and bytes), the compile options that change the artifact (``opt_level``)
and the compiler version.  Run-time settings (threads) are not part of the key.

The folder is, in order of precedence: the backend option ``cache_dir``, the environment
variable ``FXHLO_CACHE_DIR``, ``$XDG_CACHE_HOME/fxhlo``, ``~/.cache/fxhlo``.  Entries are
written atomically (temporary file and rename), so concurrent processes never read half an
entry; an entry that fails to load (corrupted, or written by another artifact format) is
ignored, reported in the log and overwritten.

Each entry starts with ``ENTRY_MAGIC``, its own key and a newline, and is read only if that key
is the one asked for: an entry copied or swapped between keys is a miss (recompiled), never a
silently wrong answer.  An entry is opened as a regular file only (``O_NOFOLLOW``,
``O_NONBLOCK``, then ``fstat``): a FIFO, a device or a symlink at the entry's path is a miss,
not a hang or an unbounded read, and at most ``max_entry_bytes()`` (``FXHLO_CACHE_MAX_BYTES``,
default 8 GiB) are read.
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
from typing import Dict, Iterable, Optional, Tuple

log = logging.getLogger("fxhlo.cache")

KEY_VERSION = b"fxhlo-compile-cache-v1"
ENTRY_MAGIC = b"FXHLOCACHE1 "


def max_entry_bytes() -> int:
    """The largest cache entry read (``FXHLO_CACHE_MAX_BYTES``, default 8 GiB)."""
    try:
        return int(os.environ.get("FXHLO_CACHE_MAX_BYTES", 8 << 30))
    except ValueError:
        return 8 << 30


def default_cache_dir() -> str:
    """The cache folder when no ``cache_dir`` option is given (see the module docstring)."""
    env = os.environ.get("FXHLO_CACHE_DIR")
    if env:
        return env
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "fxhlo")


def cache_key(graph_json: str, weights: Iterable[Tuple[str, str, Tuple[int, ...], bytes]],
              opt_level: int, compiler_version: str) -> str:
    """The hex SHA-256 key of one compilation.

    ``weights`` yields ``(name, dtype, shape, raw bytes)`` of every constant the graph names.
    """
    h = hashlib.sha256()

    def put(b: bytes) -> None:
        h.update(len(b).to_bytes(8, "little"))
        h.update(b)

    put(KEY_VERSION)
    put(compiler_version.encode())
    put(str(int(opt_level)).encode())
    put(graph_json.encode())
    for name, dtype, shape, data in sorted(weights, key=lambda w: w[0]):
        put(name.encode())
        put(f"{dtype}{list(shape)}".encode())
        put(hashlib.sha256(data).digest())
    return h.hexdigest()


class DiskCache:
    """Artifact bytes on disk, keyed by :func:`cache_key`."""

    def __init__(self, root: Optional[str] = None):
        self.root = root or default_cache_dir()

    def path(self, key: str) -> str:
        """Where the entry of ``key`` lives."""
        return os.path.join(self.root, key[:2], key + ".fxa")

    def get(self, key: str) -> Optional[bytes]:
        """The stored artifact bytes of ``key``, or None (also for an entry that is not a
        regular file, is too large, or carries another key)."""
        p = self.path(key)
        flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
        try:
            fd = os.open(p, flags)
        except FileNotFoundError:
            return None
        except OSError as e:
            log.debug("fxhlo cache: cannot open %s: %s", p, e)
            return None
        try:
            import stat
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                log.warning("fxhlo cache: %s is not a regular file; ignored", p)
                return None
            if st.st_size > max_entry_bytes():
                log.warning("fxhlo cache: %s is %d bytes, more than %d; ignored", p,
                            st.st_size, max_entry_bytes())
                return None
            with os.fdopen(fd, "rb") as f:
                fd = -1
                data = f.read(st.st_size + 1)
        except OSError as e:
            log.debug("fxhlo cache: cannot read %s: %s", p, e)
            return None
        finally:
            if fd >= 0:
                os.close(fd)
        head = ENTRY_MAGIC + key.encode() + b"\n"
        if len(data) > st.st_size or not data.startswith(head):
            log.warning("fxhlo cache: %s does not hold the entry of its key; ignored", p)
            return None
        return data[len(head):]

    def put(self, key: str, data: bytes) -> None:
        """Stores ``data`` under ``key`` atomically; a failure is logged, never raised."""
        p = self.path(key)
        try:
            os.makedirs(os.path.dirname(p), exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=os.path.dirname(p), suffix=".tmp")
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(ENTRY_MAGIC + key.encode() + b"\n")
                    f.write(data)
                os.replace(tmp, p)
            except BaseException:
                try:
                    os.unlink(tmp)
                except OSError:
                    pass
                raise
        except OSError as e:
            log.warning("fxhlo cache: cannot write %s: %s", p, e)

    def remove(self, key: str) -> None:
        """Drops the entry of ``key`` if present."""
        try:
            os.unlink(self.path(key))
        except OSError:
            pass


_CACHES: Dict[str, DiskCache] = {}


def get_cache(root: Optional[str]) -> DiskCache:
    """The cache for folder ``root`` (None: the default folder, read at each call)."""
    root = root or default_cache_dir()
    c = _CACHES.get(root)
    if c is None:
        c = _CACHES[root] = DiskCache(root)
    return c

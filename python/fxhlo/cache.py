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
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
from typing import Dict, Iterable, Optional, Tuple

log = logging.getLogger("fxhlo.cache")

KEY_VERSION = b"fxhlo-compile-cache-v1"


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
        """The stored bytes of ``key``, or None."""
        try:
            with open(self.path(key), "rb") as f:
                return f.read()
        except FileNotFoundError:
            return None
        except OSError as e:
            log.debug("fxhlo cache: cannot read %s: %s", self.path(key), e)
            return None

    def put(self, key: str, data: bytes) -> None:
        """Stores ``data`` under ``key`` atomically; a failure is logged, never raised."""
        p = self.path(key)
        try:
            os.makedirs(os.path.dirname(p), exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=os.path.dirname(p), suffix=".tmp")
            try:
                with os.fdopen(fd, "wb") as f:
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

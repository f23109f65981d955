"""Pausing the cyclic garbage collector around bulk allocation.

Materializing a million events allocates millions of lists and dicts; CPython's generational
GC then runs full collections over everything alive, which more than halves throughput
(measured: lineage export 0.7 -> 1.6 M events/s). None of these objects form cycles, so the
collector has nothing to find: pause it for the bulk operation, then restore it.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_depth = 0
_was_enabled = False


@contextmanager
def gc_paused() -> Iterator[None]:
    """Disable the cyclic GC inside the block (re-entrant, thread-safe; never enables a GC the
    application had disabled itself)."""
    global _depth, _was_enabled
    with _lock:
        if _depth == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _was_enabled:
                gc.enable()

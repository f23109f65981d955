"""A least-recently-used cache bounded in bytes, for decoded lineage (slices, forward blocks).

Traces over a large repository touch far more decoded data than fits in the driver; every
cache of decoded arrays goes through one of these, so the driver's memory stays bounded
whatever the repository's size. An item larger than a quarter of the budget is handed back
but not kept: one huge row must not evict everything else for a single use.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable
from typing import Generic, TypeVar

V = TypeVar("V")


class ByteLRU(Generic[V]):
    """Thread-safe LRU map whose values' declared sizes never sum past `limit` bytes."""

    def __init__(self, limit: int) -> None:
        if limit < 0:
            raise ValueError(f"cache limit must not be negative, got {limit}")
        self.limit = limit
        self._items: OrderedDict[Hashable, tuple[V, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    @property
    def nbytes(self) -> int:
        """Declared bytes held now (never above `limit`)."""
        return self._bytes

    def __len__(self) -> int:
        return len(self._items)

    def get(self, key: Hashable) -> V | None:
        with self._lock:
            hit = self._items.get(key)
            if hit is None:
                return None
            self._items.move_to_end(key)
            return hit[0]

    def put(self, key: Hashable, value: V, nbytes: int) -> V:
        """Keep `value` (if it fits the budget's rules) and return it."""
        if nbytes > self.limit // 4:
            return value
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self._bytes -= old[1]
            self._items[key] = (value, nbytes)
            self._bytes += nbytes
            while self._bytes > self.limit and self._items:
                _, (_, size) = self._items.popitem(last=False)
                self._bytes -= size
        return value

    def drop(self, pred) -> None:
        """Forget every entry whose key satisfies `pred` (e.g. a log that was aged off)."""
        with self._lock:
            for key in [k for k in self._items if pred(k)]:
                self._bytes -= self._items.pop(key)[1]

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._bytes = 0

"""py4j proxies that are not in reference cycles, so a JVM object is released as soon as
Python drops its last reference to the proxy.

py4j caches a proxy's methods on the proxy (`JavaObject._methods`), and each method points
back to its proxy (`JavaMember.container`): every proxy whose method was called is in a
reference cycle, and its JVM object (a Dataset with its plans, its broadcast relations)
stays alive until Python's cyclic GC happens to run, which can be long after a query is
done. The proxies made here do not cache their methods: a method still holds its proxy
(so `jvm_call().method(...)` keeps the object alive for the call), but nothing points back.
Java collections (lists, maps, sets, arrays, iterators) keep py4j's own proxies: those
keep a method of theirs from `__init__` or cache one themselves; they are converted values
(column names, arguments), not the plans and relations that weigh.
"""

from __future__ import annotations

import threading
from typing import Any

from py4j import protocol as _protocol
from py4j.java_gateway import JavaMember, JavaObject, is_magic_member

_lock = threading.Lock()
_installed = False


class AcyclicJavaObject(JavaObject):
    """A py4j JavaObject whose methods are not cached on it: a fresh JavaMember per lookup
    (a few attribute sets, next to the call's round trip to the JVM)."""

    def __getattr__(self, name: str) -> Any:
        # Fields (auto_field gateways) and magic names keep py4j's own lookup.
        if self._auto_field or is_magic_member(name):
            return super().__getattr__(name)
        return JavaMember(name, self, self._target_id, self._gateway_client)


def install_acyclic_proxies() -> None:
    """Make py4j return these proxies for JVM objects, for every gateway of this process
    (py4j's output converters are global); idempotent. Only the proxies' lifetime changes:
    the same JVM objects, calls and answers."""
    global _installed
    with _lock:
        if not _installed:
            _protocol.register_output_converter(_protocol.REFERENCE_TYPE, _proxy)
            _installed = True


def _proxy(target_id: str, gateway_client: Any) -> AcyclicJavaObject:
    return AcyclicJavaObject(target_id, gateway_client)

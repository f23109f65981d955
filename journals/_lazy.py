"""Packages whose public names load on first use (PEP 562), so importing one of their
modules does not import the rest: Spark's Python workers import a few light modules of
`agent` and `repository` and must not pay for the driver-side ones."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, MutableMapping
from typing import Any


def lazy_exports(
    package: str, exports: Mapping[str, str], namespace: MutableMapping[str, Any]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """A package's `__getattr__` and `__dir__`: name -> the module (relative to `package`)
    that defines it, imported when the name is first looked up, then kept in `namespace`
    (the package's globals) so later lookups skip the hook."""

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, package), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(exports))

    return __getattr__, __dir__

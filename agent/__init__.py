"""PySpark capture agents: LineageContext, lineage-capturing RDDs, tracing.

Driver-side names are exported here, loaded on first use: Spark's Python workers import this
package only to unpickle the executor-side code (`_worker`, `_inputs`, `_sinks`, `_spec`),
which needs nothing heavier than numpy and `journals`, so they must not pay for the
repository, the search index and pyspark's driver modules.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._context import LineageContext
    from ._java import java_problem
    from ._rdd import SUPPORTED, CapturedRDD, UnsupportedOperation
    from ._splits import UnsupportedInput
    from ._trace import LineageRDD

_EXPORTS = {
    "SUPPORTED": "._rdd",
    "CapturedRDD": "._rdd",
    "LineageContext": "._context",
    "LineageRDD": "._trace",
    "UnsupportedInput": "._splits",
    "UnsupportedOperation": "._rdd",
    "java_problem": "._java",
}

__all__ = [
    "SUPPORTED",
    "CapturedRDD",
    "LineageContext",
    "LineageRDD",
    "UnsupportedInput",
    "UnsupportedOperation",
    "java_problem",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'agent' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value  # later lookups skip this hook
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))

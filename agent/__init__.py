"""PySpark capture agents: LineageContext, lineage-capturing RDDs, tracing.

Driver-side names are exported here, loaded on first use: Spark's Python workers import this
package only to unpickle the executor-side code (`_worker`, `_inputs`, `_sinks`, `_spec`),
which needs nothing heavier than numpy and `journals`, so they must not pay for the
repository, the search index and pyspark's driver modules.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from journals import lazy_exports

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


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())

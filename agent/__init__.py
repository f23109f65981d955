"""PySpark capture agents: LineageContext, lineage-capturing RDDs, tracing.

Driver-side names are exported here; executor-side code lives in `_worker`, `_inputs` and
`_sinks` and imports nothing heavier than numpy and `journals`.
"""

from ._context import LineageContext
from ._rdd import SUPPORTED, CapturedRDD, UnsupportedOperation
from ._splits import UnsupportedInput
from ._trace import LineageRDD

__all__ = [
    "SUPPORTED",
    "CapturedRDD",
    "LineageContext",
    "LineageRDD",
    "UnsupportedInput",
    "UnsupportedOperation",
]

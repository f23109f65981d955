"""DataFrame and Spark SQL capture: `lc.read`, `lc.createDataFrame`, `lc.sql`, `lc.udf`.

Driver-side only; names load on first use, as in `agent`, so Spark's Python workers that
unpickle the executor-side pieces (UDF wrappers, the write tap) stay light.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._frame import LineageDataFrame, LineageGroupedData
    from ._session import FrameAgent

_EXPORTS = {
    "FrameAgent": "._session",
    "LineageDataFrame": "._frame",
    "LineageGroupedData": "._frame",
}

__all__ = ["FrameAgent", "LineageDataFrame", "LineageGroupedData"]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'agent.dataframe' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value

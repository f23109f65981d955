"""Repository configuration: validated on construction, persisted in the repository directory."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
from dataclasses import dataclass, field

from journals import SYNC_POLICIES, TRANSPORTS

from ._errors import ConfigError

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|min|h|d|w)?\s*$", re.IGNORECASE)
_DURATION_UNITS = {"ms": 0.001, "s": 1, "m": 60, "min": 60, "h": 3600, "d": 86400, "w": 604800}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?i?b?)?\s*$", re.IGNORECASE)
_SIZE_UNITS = {"": 1, "b": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}


def parse_duration(value: str | float | int, what: str = "duration") -> float:
    """Seconds from a number or a string like '30s', '15m', '2h', '7d'."""
    if isinstance(value, bool):
        raise ConfigError(f"{what}: expected a duration, got {value!r}")
    if isinstance(value, (int, float)):
        seconds = float(value) if abs(value) < 1e300 else math.inf
    else:
        m = _DURATION.match(str(value))
        if not m:
            raise ConfigError(f"{what}: {value!r} is not a duration (try 30s, 15m, 2h, 7d)")
        seconds = float(m.group(1)) * _DURATION_UNITS[(m.group(2) or "s").lower()]
    if not math.isfinite(seconds):  # JSON allows Infinity and NaN; a timer cannot wait for them
        raise ConfigError(f"{what}: must be a finite duration, got {value!r}")
    if seconds < 0:
        raise ConfigError(f"{what}: must not be negative, got {value!r}")
    return seconds


def parse_size(value: str | int, what: str = "size") -> int:
    """Bytes from a number or a string like '64KiB', '512MB', '10GiB'."""
    if isinstance(value, bool):
        raise ConfigError(f"{what}: expected a size, got {value!r}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{what}: must be a finite size, got {value!r}")
    if isinstance(value, (int, float)):
        size = int(value)
    else:
        m = _SIZE.match(str(value))
        if not m:
            raise ConfigError(f"{what}: {value!r} is not a size (try 64KiB, 512MB, 10GiB)")
        unit = (m.group(2) or "").lower()
        binary = "i" in unit
        prefix = unit[:1] if unit[:1] in "kmgt" and unit else ""
        mult = (1024 ** ("kmgt".index(prefix) + 1)) if (binary and prefix) else _SIZE_UNITS[prefix]
        scaled = float(m.group(1)) * mult
        if not math.isfinite(scaled):
            raise ConfigError(f"{what}: {value!r} is too large")
        size = int(scaled)
    if size < 0:
        raise ConfigError(f"{what}: must not be negative, got {value!r}")
    return size


@dataclass(frozen=True)
class RepositoryConfig:
    """How a repository stores provenance. Every field is validated; bad values raise ConfigError.

    containers: journal directories (one per disk); relative paths are inside the repository.
        Default: one container, `<repo>/journal-containers/0`.
    journals_per_container: driver-side journals kept open per container (register_events
        threads spread over them, as NiFi's journals do).
    rollover_interval: seconds (or '30s') between timed rollovers; journals sealed by other
        processes are also noticed at once (watchdog) and merged after `rollover_debounce`.
    block_size: uncompressed bytes per independently decompressible zstd block (64 KiB).
    zstd_level: 1..22.
    max_storage_time / max_storage_bytes: age-off limits (None: keep everything).
    sync: "seal" (fsync when a journal is sealed), "batch" (fsync every append), "none" (tests).
    indexed_attributes: event attributes made searchable.
    index_shard_size: bytes after which a new index shard starts.
    transport: how Spark executors hand their journals to the repository. "auto": write
        them into the containers where an executor sees them (a shared filesystem), else
        stream them to a receiver in the driver (started by `LineageContext` for cluster
        masters); "shared": always the containers; "socket": always the receiver.
    transport_port: the receiver's TCP port (0: any free port; set one to open it in a
        firewall).
    lineage_cache_size: bytes of decoded lineage (backward slices, forward index blocks) a
        process keeps cached for traces; the bound holds whatever the repository's size.
    forward_index: build a forward lineage index beside each log (default). Off, rollover
        does less work and forward hops scan the child capture point's batches instead.
    """

    # Not "journals": a directory of that name beside a script would shadow the package.
    containers: tuple[str, ...] = ("journal-containers/0",)
    journals_per_container: int = 2
    rollover_interval: float = 30.0
    rollover_debounce: float = 0.25
    block_size: int = 64 * 1024
    zstd_level: int = 3
    max_storage_time: float | None = None
    max_storage_bytes: int | None = None
    sync: str = "seal"
    indexed_attributes: tuple[str, ...] = ()
    index_shard_size: int = 512 * 1024 * 1024
    compression_threads: int = 2
    transport: str = "auto"
    transport_port: int = 0
    lineage_cache_size: int = 256 * 1024 * 1024
    forward_index: bool = True
    extra: dict = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        def setf(name: str, value) -> None:
            object.__setattr__(self, name, value)

        if isinstance(self.containers, str):
            setf("containers", (self.containers,))
        if (
            not isinstance(self.containers, (list, tuple))  # a JSON number or object
            or not self.containers
            or not all(isinstance(c, str) and c for c in self.containers)
        ):
            raise ConfigError("containers: need at least one directory path")
        setf("containers", tuple(self.containers))
        if len(set(self.containers)) != len(self.containers):
            raise ConfigError("containers: each directory may be listed once")
        self._int_range("journals_per_container", 1, 64)
        setf("rollover_interval", parse_duration(self.rollover_interval, "rollover_interval"))
        if self.rollover_interval <= 0:
            raise ConfigError("rollover_interval: must be positive")
        setf("rollover_debounce", parse_duration(self.rollover_debounce, "rollover_debounce"))
        setf("block_size", parse_size(self.block_size, "block_size"))
        if not 4096 <= self.block_size <= 16 * 1024 * 1024:
            raise ConfigError(f"block_size: must be 4KiB..16MiB, got {self.block_size}")
        self._int_range("zstd_level", 1, 22)
        if self.max_storage_time is not None:
            setf("max_storage_time", parse_duration(self.max_storage_time, "max_storage_time"))
            if self.max_storage_time <= 0:
                raise ConfigError("max_storage_time: must be positive (or None for no limit)")
        if self.max_storage_bytes is not None:
            setf("max_storage_bytes", parse_size(self.max_storage_bytes, "max_storage_bytes"))
            if self.max_storage_bytes <= 0:
                raise ConfigError("max_storage_bytes: must be positive (or None for no limit)")
        if self.sync not in SYNC_POLICIES:
            raise ConfigError(f"sync: must be one of {', '.join(SYNC_POLICIES)}, got {self.sync!r}")
        if isinstance(self.indexed_attributes, str):
            setf("indexed_attributes", (self.indexed_attributes,))
        if not isinstance(self.indexed_attributes, (list, tuple)):
            raise ConfigError("indexed_attributes: must be a list of attribute names")
        setf("indexed_attributes", tuple(self.indexed_attributes))
        for a in self.indexed_attributes:
            if not isinstance(a, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.-]*", a):
                raise ConfigError(f"indexed_attributes: {a!r} is not a valid attribute name")
        setf("index_shard_size", parse_size(self.index_shard_size, "index_shard_size"))
        if self.index_shard_size < 1024 * 1024:
            raise ConfigError("index_shard_size: must be at least 1MiB")
        self._int_range("compression_threads", 1, 64)
        if self.transport not in TRANSPORTS:
            raise ConfigError(
                f"transport: must be one of {', '.join(TRANSPORTS)}, got {self.transport!r}"
            )
        self._int_range("transport_port", 0, 65535)
        setf("lineage_cache_size", parse_size(self.lineage_cache_size, "lineage_cache_size"))
        if not isinstance(self.forward_index, bool):
            raise ConfigError(f"forward_index: must be true or false, got {self.forward_index!r}")

    def _int_range(self, name: str, lo: int, hi: int) -> None:
        v = getattr(self, name)
        if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
            raise ConfigError(f"{name}: must be an integer {lo}..{hi}, got {v!r}")

    def container_paths(self, repo_path: str) -> list[str]:
        """Absolute container directories for a repository at `repo_path`."""
        return [os.path.normpath(os.path.join(repo_path, c)) for c in self.containers]

    def to_json(self) -> dict:
        d = dataclasses.asdict(self)
        d.pop("extra")
        d["containers"] = list(self.containers)
        d["indexed_attributes"] = list(self.indexed_attributes)
        return d

    @classmethod
    def from_json(cls, data: dict) -> RepositoryConfig:
        if not isinstance(data, dict):
            raise ConfigError("configuration must be a JSON object")
        known = {f.name for f in dataclasses.fields(cls)} - {"extra"}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(f"unknown configuration key(s): {', '.join(unknown)}")
        return cls(**data)

    @classmethod
    def load(cls, path: str) -> RepositoryConfig:
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
        except json.JSONDecodeError as e:
            raise ConfigError(f"{path}: not valid JSON ({e.msg} at line {e.lineno})") from e
        except UnicodeDecodeError as e:  # binary garbage: damaged, not an internal error
            raise ConfigError(f"{path}: not valid JSON (not UTF-8 text at byte {e.start})") from e
        return cls.from_json(data)

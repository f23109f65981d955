"""Time-named Tantivy shards under one directory, with a manifest that is the checkpoint.

```
index/manifest.json               checkpoint ("indexed through id N") + one record per shard
index/20250601T120000.123456789Z/ a Tantivy index, named by the UTC time it was created
```

One shard takes writes at a time; after a commit that leaves it at or above `shard_size` bytes
it is marked full and the next write starts a new shard. The manifest records each shard's
event-time and log bounds, so a time-range search opens only overlapping shards and age-off
deletes a shard whole once every log it points into is gone.

Commit order: Tantivy commit, then the manifest (atomically). A crash in between leaves
documents past the checkpoint in the newest shard; `recover()` deletes them in the same
Tantivy commit that adds them again, so no document is lost or duplicated. A shard directory
the manifest does not name was created after the last checkpoint: it is removed.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import threading
import time
from collections.abc import Callable, Sequence

import msgspec
import tantivy

from journals import dir_bytes, write_atomic

from ._model import INDEX_VERSION, LogSpans, Manifest, ShardInfo
from ._schema import SPAN_SCHEMA

log = logging.getLogger("provrepo.indexer")

MANIFEST = "manifest.json"
REBUILD_SUFFIX = ".rebuild"
OLD_SUFFIX = ".old"
_WRITER_HEAP = 32_000_000  # bytes; span documents are few and small
_MANIFEST_ENC = msgspec.json.Encoder()
_MANIFEST_DEC = msgspec.json.Decoder(Manifest)


class IndexDamaged(Exception):
    """The index directory cannot be trusted (it is rebuilt from the event logs)."""


def _shard_name(now_ns: int) -> str:
    secs, frac = divmod(now_ns, 1_000_000_000)
    return time.strftime("%Y%m%dT%H%M%S", time.gmtime(secs)) + f".{frac:09d}Z"


def prepare_root(root: str) -> None:
    """Finish or undo an interrupted rebuild swap (`root.rebuild` -> `root`)."""
    rebuild, old = root + REBUILD_SUFFIX, root + OLD_SUFFIX
    if not os.path.isdir(root):
        # Crashed between the two renames of a swap: the rebuilt index is complete enough
        # (its manifest is its checkpoint); otherwise fall back to the old one.
        for candidate in (rebuild, old):
            if os.path.exists(os.path.join(candidate, MANIFEST)):
                os.rename(candidate, root)
                break
    for leftover in (rebuild, old):
        if os.path.exists(leftover):
            shutil.rmtree(leftover, ignore_errors=True)


class ShardSet:
    """The shards of one index directory: searchable by anyone, written by one owner.

    Readers (`writable=False`) only read the manifest and open shards. The owner
    (`writable=True`) calls `recover()` once, then `add()` / `commit()` from one thread at a
    time (a lock serializes them), and `drop()` to delete dead shards.
    """

    def __init__(
        self,
        root: str,
        *,
        shard_size: int = 512 * 1024 * 1024,
        attributes: Sequence[str] = (),
        writable: bool = False,
    ) -> None:
        self.root = root
        self.shard_size = shard_size
        self.attributes = list(attributes)
        self.writable = writable
        self.manifest = Manifest()
        self.damaged: str | None = None  # why the manifest could not be read, if it could not
        self.opened = 0  # shards opened for searching: tests and stats watch it
        self._lock = threading.RLock()
        self._stamp: tuple[int, int] | None = None
        self._indexes: dict[str, tuple[tantivy.Index, int]] = {}
        # Writing state (owner only).
        self._next_id = 1  # in memory: every log below it is added (committed or not)
        self._writer: tantivy.IndexWriter | None = None
        self._windex: tantivy.Index | None = None
        self._wshard: ShardInfo | None = None
        self._pending: list[LogSpans] = []
        self._delete_from: int | None = None

    # -- the manifest ------------------------------------------------------------------------

    @property
    def manifest_path(self) -> str:
        return os.path.join(self.root, MANIFEST)

    @property
    def indexed_next_id(self) -> int:
        """Durable checkpoint: every log whose first id is below this is searchable."""
        return self.manifest.indexed_next_id

    @property
    def next_id(self) -> int:
        """Where the next `add` continues (owner): logs below it are added already."""
        return self._next_id

    def refresh(self) -> Manifest:
        """Re-read the manifest if it changed on disk (readers); returns the current one."""
        try:
            st = os.stat(self.manifest_path)
        except FileNotFoundError:
            with self._lock:
                if self._stamp is not None or not self.writable:
                    self.manifest, self._stamp = Manifest(), None
            return self.manifest
        stamp = (st.st_mtime_ns, st.st_size)
        if stamp == self._stamp:
            return self.manifest
        try:
            m = self._read_manifest()
        except IndexDamaged as e:
            self.damaged = str(e)
            return self.manifest
        with self._lock:
            self.manifest, self._stamp, self.damaged = m, stamp, None
        return m

    def _read_manifest(self) -> Manifest:
        try:
            with open(self.manifest_path, "rb") as f:
                m = _MANIFEST_DEC.decode(f.read())
        except FileNotFoundError:
            return Manifest()
        except (OSError, msgspec.DecodeError, msgspec.ValidationError) as e:
            raise IndexDamaged(f"{self.manifest_path}: {e}") from e
        if m.version != INDEX_VERSION:
            raise IndexDamaged(f"index version {m.version}, this provrepo writes {INDEX_VERSION}")
        return m

    def _save_manifest(self, m: Manifest) -> None:
        write_atomic(self.manifest_path, _MANIFEST_ENC.encode(m))
        self.manifest = m
        with contextlib.suppress(OSError):
            st = os.stat(self.manifest_path)
            self._stamp = (st.st_mtime_ns, st.st_size)

    def shards(self) -> list[ShardInfo]:
        return list(self.manifest.shards)

    def overlapping(self, start_ns: int | None, end_ns: int | None) -> list[ShardInfo]:
        """Shards that may hold events with start <= time < end (by their recorded bounds)."""
        return [s for s in self.manifest.shards if s.overlaps(start_ns, end_ns)]

    def bytes(self) -> int:
        return dir_bytes(self.root)

    # -- searching ---------------------------------------------------------------------------

    def searcher(self, info: ShardInfo) -> tantivy.Searcher:
        """A searcher over one shard at least as new as `info` (opened once, then reloaded)."""
        with self._lock:
            if self._wshard is not None and info.name == self._wshard.name:
                assert self._windex is not None
                return self._windex.searcher()
            cached = self._indexes.get(info.name)
            if cached is None:
                index = tantivy.Index.open(os.path.join(self.root, info.name))
                self.opened += 1
                self._indexes[info.name] = (index, info.generation)
                return index.searcher()
            index, generation = cached
            if generation != info.generation:
                index.reload()
                self._indexes[info.name] = (index, info.generation)
            return index.searcher()

    # -- owner: recovery ---------------------------------------------------------------------

    def recover(self) -> int:
        """Make the directory consistent with its manifest; returns the checkpoint.

        Unknown shard directories (made after the last checkpoint) are removed; documents past
        the checkpoint in the newest shard are deleted by the next commit, which adds them
        again. A missing or unreadable manifest or shard means the index is rebuilt: the
        directory is emptied and the checkpoint is 1.
        """
        assert self.writable
        with self._lock:
            prepare_root(self.root)
            os.makedirs(self.root, exist_ok=True)
            delete_from = None
            try:
                m = self._read_manifest()
                self._check_shards(m)
                newest = m.shards[-1] if m.shards else None
                if (
                    newest is not None
                    and not newest.full
                    and self._has_docs_from(newest, m.indexed_next_id)
                ):
                    delete_from = m.indexed_next_id
            except IndexDamaged as e:
                log.warning("index %s cannot be used (%s); rebuilding it", self.root, e)
                self._wipe()
                m = Manifest()
            known = {s.name for s in m.shards}
            for name in os.listdir(self.root):
                path = os.path.join(self.root, name)
                if name == MANIFEST or name in known:
                    continue
                if os.path.isdir(path):
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    os.unlink(path)
            self.manifest = m
            self._next_id = m.indexed_next_id
            self._delete_from = delete_from
            return m.indexed_next_id

    def _check_shards(self, m: Manifest) -> None:
        for s in m.shards:
            path = os.path.join(self.root, s.name)
            if not os.path.isdir(path):
                raise IndexDamaged(f"shard {s.name} is missing")

    def _has_docs_from(self, info: ShardInfo, log_id: int) -> bool:
        """Whether the shard holds documents of logs from `log_id` on (past the checkpoint)."""
        try:
            index = tantivy.Index.open(os.path.join(self.root, info.name))
            q = tantivy.Query.range_query(
                SPAN_SCHEMA, "log", tantivy.FieldType.Integer, log_id, None
            )
            return len(index.searcher().search(q, 1).hits) > 0
        except ValueError as e:
            raise IndexDamaged(f"shard {info.name}: {e}") from e

    def _wipe(self) -> None:
        self._close_writer()
        self._indexes.clear()
        for name in os.listdir(self.root):
            path = os.path.join(self.root, name)
            if os.path.isdir(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                os.unlink(path)

    # -- owner: writing ----------------------------------------------------------------------

    def add(self, spans: LogSpans) -> bool:
        """Add one log's spans (not yet committed). False if the log is indexed already."""
        with self._lock:
            if spans.log_id < self._next_id:
                return False
            if spans.spans:
                writer = self._writer_for_write()
                add = writer.add_document
                for span in spans.spans:
                    add(span.document())
            self._pending.append(spans)
            self._next_id = spans.next_id
            return True

    def skip(self, log_id: int, next_id: int) -> None:
        """Move past a log that has nothing to index (it vanished before it was indexed)."""
        self.add(LogSpans(log_id, next_id, []))

    def _writer_for_write(self) -> tantivy.IndexWriter:
        if self._writer is None:
            if self._wshard is None:
                self._new_shard()
            assert self._windex is not None
            self._writer = self._windex.writer(_WRITER_HEAP, 1)
            if self._delete_from is not None:
                # Delete-then-add over the overlap: the documents of logs past the checkpoint
                # go away in the same commit that adds them again.
                q = tantivy.Query.range_query(
                    SPAN_SCHEMA, "log", tantivy.FieldType.Integer, self._delete_from, None
                )
                self._writer.delete_documents_by_query(q)
        return self._writer

    def _new_shard(self) -> None:
        m = self.manifest
        newest = m.shards[-1] if m.shards else None
        if newest is not None and not newest.full:
            info = msgspec.structs.replace(newest)
        else:
            now = time.time_ns()
            name = _shard_name(now)
            while os.path.exists(os.path.join(self.root, name)):
                now += 1
                name = _shard_name(now)
            os.makedirs(os.path.join(self.root, name))
            info = ShardInfo(name=name, attributes=list(self.attributes))
        self._wshard = info
        cached = self._indexes.pop(info.name, None)
        self._windex = (
            cached[0]
            if cached is not None
            else tantivy.Index(SPAN_SCHEMA, path=os.path.join(self.root, info.name), reuse=True)
        )

    def commit(self) -> int:
        """Commit what was added, then the manifest; returns the events made searchable."""
        with self._lock:
            if not self._pending and self._delete_from is None:
                return 0
            pending, self._pending = self._pending, []
            events = sum(p.events for p in pending)
            if self._writer is None and self._delete_from is not None:
                self._writer_for_write()
            if self._writer is not None:
                self._writer.commit()
                assert self._windex is not None
                self._windex.reload()
                self._delete_from = None
            m = self.manifest
            shards = list(m.shards)
            if self._wshard is not None:
                info = self._shard_after(self._wshard, pending)
                if shards and shards[-1].name == info.name:
                    shards[-1] = info
                else:
                    shards.append(info)
                self._wshard = info
            self._save_manifest(Manifest(m.version, self._next_id, shards))
            if self._wshard is not None and self._wshard.full:
                self._close_writer()
            return events

    def _shard_after(self, info: ShardInfo, pending: list[LogSpans]) -> ShardInfo:
        docs = info.docs
        lo_t, hi_t, lo_l, hi_l = info.min_time_ns, info.max_time_ns, info.min_log, info.max_log
        for ls in pending:
            if not ls.spans:
                continue
            docs += len(ls.spans)
            t0 = min(s.min_time_ns for s in ls.spans)
            t1 = max(s.max_time_ns for s in ls.spans)
            lo_t = t0 if lo_t is None else min(lo_t, t0)
            hi_t = t1 if hi_t is None else max(hi_t, t1)
            lo_l = ls.log_id if lo_l is None else min(lo_l, ls.log_id)
            hi_l = ls.log_id if hi_l is None else max(hi_l, ls.log_id)
        size = dir_bytes(os.path.join(self.root, info.name))
        return ShardInfo(
            name=info.name,
            attributes=info.attributes,
            docs=docs,
            min_time_ns=lo_t,
            max_time_ns=hi_t,
            min_log=lo_l,
            max_log=hi_l,
            generation=info.generation + 1,
            full=size >= self.shard_size,
        )

    def _close_writer(self) -> None:
        writer, self._writer = self._writer, None
        if writer is not None:
            with contextlib.suppress(Exception):
                writer.rollback()
            with contextlib.suppress(Exception):
                writer.wait_merging_threads()
        self._wshard = None
        self._windex = None

    # -- owner: deleting ---------------------------------------------------------------------

    def drop(self, is_dead: Callable[[ShardInfo], bool]) -> list[ShardInfo]:
        """Delete every shard `is_dead` says points only into logs that are gone.

        The manifest forgets them first (a crash then leaves unknown directories, which
        `recover` removes), then the directories go. Whole shards only: never per document.
        """
        with self._lock:
            m = self.manifest
            dead = [s for s in m.shards if s.docs and is_dead(s)]
            if not dead:
                return []
            names = {s.name for s in dead}
            if self._wshard is not None and self._wshard.name in names:
                if self._pending:
                    self.commit()
                    return self.drop(is_dead)
                self._close_writer()
            keep = [s for s in m.shards if s.name not in names]
            self._save_manifest(Manifest(m.version, m.indexed_next_id, keep))
            for name in names:
                self._indexes.pop(name, None)
                shutil.rmtree(os.path.join(self.root, name), ignore_errors=True)
            return dead

    def close(self) -> None:
        """Commit anything pending and release the writer (owner)."""
        with self._lock:
            if self.writable:
                self.commit()
                self._close_writer()
            self._indexes.clear()

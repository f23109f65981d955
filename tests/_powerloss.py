"""A power-loss model of the file system, for testing what "durable" means.

`PowerLoss(root)` records, while active, every call that makes something durable or changes
a directory under `root`: `os.fsync` of a file (its content as of that moment becomes
durable) or of a directory (its entries as of that moment become durable), and the directory
operations `rename`, `replace`, `unlink`, `remove`, `mkdir`, `rmdir`. Whatever existed when
it started counts as durable.

`crash_states(upto)` then gives the states a power loss after the first `upto` recorded calls
can leave: file contents are what was last fsynced, and what was written since is either lost
or torn (cut in the middle of, or one byte short of, what the file holds at its next fsync,
if it has one: written, not yet durable); each
directory holds what its last fsync saw, plus any prefix of the operations made in it since
(the kernel may persist them in order at any time, but only a directory fsync guarantees
them); directories are independent of each other. `materialize(state, dest)` writes one out,
so a test can open a repository on it and check what survived.

Only what the code under test calls through `os` is seen: writes through file objects are
captured by the fsync that makes them durable, which is the point.
"""

from __future__ import annotations

import itertools
import os
import random
import stat
from collections import defaultdict
from collections.abc import Iterator

Node = tuple[int, int, bool]  # (inode, generation, is a directory)
_CALLS = ("fsync", "rename", "replace", "unlink", "remove", "mkdir", "rmdir")


class PowerLoss:
    def __init__(self, root: str, exclude: tuple[str, ...] = ()) -> None:
        self.root = os.path.abspath(root)
        self.exclude = tuple(os.path.join(self.root, x) for x in exclude)
        self.log: list[tuple] = []  # ("data", node, bytes) | ("dir", path, listing) | ("op", ...)
        self.marks: dict[str, int] = {}
        self._gen: dict[int, int] = defaultdict(int)
        self._real = {name: getattr(os, name) for name in _CALLS}
        self.baseline_dirs: dict[str, dict[str, Node]] = {}
        self.baseline_data: dict[Node, bytes] = {}
        for d, dirs, files in os.walk(self.root):
            if self._excluded(d):
                dirs[:] = []
                continue
            self.baseline_dirs[d] = self._listing(d)
            for name in files:
                path = os.path.join(d, name)
                with open(path, "rb") as f:
                    self.baseline_data[self._node(path)] = f.read()

    # -- recording ---------------------------------------------------------------------------

    def __enter__(self) -> PowerLoss:
        for name in _CALLS:
            setattr(os, name, getattr(self, "_" + name))
        return self

    def __exit__(self, *exc) -> None:
        for name, fn in self._real.items():
            setattr(os, name, fn)

    def mark(self, name: str) -> None:
        """Name the current point (e.g. "sealed" once seal() returned)."""
        self.marks[name] = len(self.log)

    def _excluded(self, path: str) -> bool:
        return not (path == self.root or path.startswith(self.root + os.sep)) or any(
            path == x or path.startswith(x + os.sep) for x in self.exclude
        )

    def _node(self, path: str) -> Node:
        st = os.lstat(path)
        return (st.st_ino, self._gen[st.st_ino], stat.S_ISDIR(st.st_mode))

    def _listing(self, d: str) -> dict[str, Node]:
        return {e.name: self._node(e.path) for e in os.scandir(d)}

    @staticmethod
    def _path(path, dir_fd=None) -> str:
        path = os.fsdecode(path)
        if dir_fd is not None and not os.path.isabs(path):
            path = os.path.join(os.readlink(f"/proc/self/fd/{dir_fd}"), path)
        return os.path.abspath(path)

    def _fsync(self, fd) -> None:
        fd = fd if isinstance(fd, int) else fd.fileno()
        self._real["fsync"](fd)
        path = os.readlink(f"/proc/self/fd/{fd}")
        if path.endswith(" (deleted)") or self._excluded(path):
            return
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            self.log.append(("dir", path, self._listing(path)))
        else:
            with open(f"/proc/self/fd/{fd}", "rb") as f:
                self.log.append(("data", self._node(path), f.read()))

    def _move(self, fn: str, src, dst, *a, src_dir_fd=None, dst_dir_fd=None, **kw) -> None:
        s, d = self._path(src, src_dir_fd), self._path(dst, dst_dir_fd)
        node = self._node(s) if not self._excluded(s) else None
        gone = os.lstat(d).st_ino if not self._excluded(d) and os.path.lexists(d) else None
        self._real[fn](src, dst, *a, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd, **kw)
        if gone is not None:
            self._gen[gone] += 1  # the replaced file: its inode may come back as a new file
        if node is None or self._excluded(d):
            if node is not None:
                self.log.append(("op", os.path.dirname(s), "del", os.path.basename(s), None))
            return
        # One operation, in the destination's directory: a rename is atomic, so the source's
        # name goes exactly when the destination's appears.
        src_key = (os.path.dirname(s), os.path.basename(s))
        self.log.append(("op", os.path.dirname(d), "set", os.path.basename(d), node, src_key))

    def _rename(self, src, dst, *a, **kw) -> None:
        self._move("rename", src, dst, *a, **kw)

    def _replace(self, src, dst, *a, **kw) -> None:
        self._move("replace", src, dst, *a, **kw)

    def _gone(self, fn: str, path, *a, dir_fd=None, **kw) -> None:
        p = self._path(path, dir_fd)
        ino = os.lstat(p).st_ino if not self._excluded(p) and os.path.lexists(p) else None
        self._real[fn](path, *a, dir_fd=dir_fd, **kw)
        if ino is not None:
            self._gen[ino] += 1
            self.log.append(("op", os.path.dirname(p), "del", os.path.basename(p), None))

    def _unlink(self, path, *a, **kw) -> None:
        self._gone("unlink", path, *a, **kw)

    def _remove(self, path, *a, **kw) -> None:
        self._gone("remove", path, *a, **kw)

    def _rmdir(self, path, *a, **kw) -> None:
        self._gone("rmdir", path, *a, **kw)

    def _mkdir(self, path, *a, dir_fd=None, **kw) -> None:
        self._real["mkdir"](path, *a, dir_fd=dir_fd, **kw)
        p = self._path(path, dir_fd)
        if not self._excluded(p):
            self.log.append(("op", os.path.dirname(p), "set", os.path.basename(p), self._node(p)))

    # -- crashing ----------------------------------------------------------------------------

    def crash_states(
        self, upto: int, limit: int = 12, seed: int = 0
    ) -> Iterator[dict[str, bytes | None]]:
        """States a power loss after the first `upto` calls can leave: {relative path: file
        content, or None for a directory}. Every combination of per-directory prefixes when
        there are at most `limit`, else the two extremes and random ones."""
        base: dict[str, tuple[int, dict[str, Node]]] = {
            d: (-1, dict(listing)) for d, listing in self.baseline_dirs.items()
        }
        pending: dict[str, list[tuple]] = defaultdict(list)
        data: dict[Node, bytes] = dict(self.baseline_data)
        for i, entry in enumerate(self.log[:upto]):
            if entry[0] == "data":
                data[entry[1]] = entry[2]
            elif entry[0] == "dir":
                base[entry[1]] = (i, dict(entry[2]))
                pending[entry[1]] = []
            else:
                pending[entry[1]].append(entry)
        dirs = sorted(d for d, ops in pending.items() if ops)
        sizes = [len(pending[d]) + 1 for d in dirs]
        total = 1
        for n in sizes:
            total *= n
        if total <= limit:
            choices: list[tuple[int, ...]] = list(itertools.product(*(range(n) for n in sizes)))
        else:
            rng = random.Random(seed + upto)
            choices = [tuple(0 for _ in sizes), tuple(n - 1 for n in sizes)]
            choices += [tuple(rng.randrange(n) for n in sizes) for _ in range(limit - 2)]
        future: dict[Node, bytes] = {}
        for entry in self.log[upto:]:
            if entry[0] == "data":
                future.setdefault(entry[1], entry[2])
        tears = [dict(data), dict(data)]  # cut in the middle, and just before the end
        for node, later in future.items():
            now = data.get(node, b"")
            if len(later) > len(now):
                tears[0][node] = later[: (len(now) + len(later)) // 2]
                tears[1][node] = later[:-1]
        for choice in choices:
            listings = {d: dict(entries) for d, (_, entries) in base.items()}
            for d, k in zip(dirs, choice):
                for op in pending[d][:k]:
                    _apply(listings, op)
            yield self._tree(listings, data)
            for torn in tears:
                if torn != data:
                    yield self._tree(listings, torn)

    def _tree(self, listings, data) -> dict[str, bytes | None]:
        out: dict[str, bytes | None] = {}
        todo = [self.root]
        while todo:
            d = todo.pop()
            for name, (ino, gen, is_dir) in listings.get(d, {}).items():
                path = os.path.join(d, name)
                rel = os.path.relpath(path, self.root)
                if is_dir:
                    out[rel] = None
                    todo.append(path)
                else:
                    out[rel] = data.get((ino, gen, False), b"")  # never fsynced: lost
        return out


def _apply(listings: dict[str, dict[str, Node]], op: tuple) -> None:
    _, d, kind, name, node, *rest = op
    entries = listings.setdefault(d, {})
    if kind == "del":
        entries.pop(name, None)
        return
    entries[name] = node
    if node[2]:
        listings.setdefault(os.path.join(d, name), {})
    if rest:  # a rename: the source's name goes with it
        src_dir, src_name = rest[0]
        if listings.get(src_dir, {}).get(src_name) == node:
            del listings[src_dir][src_name]


def materialize(state: dict[str, bytes | None], dest: str) -> str:
    """Write a crash state out under `dest` (which must not exist); returns `dest`."""
    os.makedirs(dest)
    for rel, content in sorted(state.items()):
        path = os.path.join(dest, rel)
        if content is None:
            os.makedirs(path, exist_ok=True)
        else:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as f:
                f.write(content)
    return dest

"""Repository errors. `BadInput` subclasses are the user's mistake: the CLI exits 2 on them."""

from __future__ import annotations


class RepositoryError(Exception):
    """Something went wrong inside the repository (I/O, corruption)."""


class BadInput(RepositoryError, ValueError):
    """The caller asked for something malformed or absent; nothing was changed."""


class ConfigError(BadInput):
    """A configuration value is invalid."""


class NotFound(BadInput):
    """No such repository, event, run or record."""


class RepositoryLocked(RepositoryError):
    """Another live process owns the repository directory."""

    def __init__(self, path: str, owner: str) -> None:
        super().__init__(f"repository {path} is owned by another process ({owner}); close it first")
        self.path = path
        self.owner = owner


def check_id(value: object, what: str, allow_zero: bool = False) -> None:
    """BadInput unless `value` is a positive int (or zero, with `allow_zero`)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadInput(f"{what} must be an integer, got {value!r}")
    if value < 0 or (value == 0 and not allow_zero):
        raise BadInput(f"{what} must be positive, got {value}")

"""User-facing errors.

Every problem a user can cause (a bad config value, a missing data file, an impossible
partition) is raised as a :class:`FedadError` whose message is one line: what is wrong,
where, and what to do. The CLI prints it and exits with status 2, never a traceback.
"""

from __future__ import annotations


class FedadError(Exception):
    """A problem with the user's input: printed as one line, exit status 2."""

    def __init__(self, what: str, fix: str | None = None) -> None:
        message = what if fix is None else f"{what} ({fix})"
        super().__init__(message.replace("\n", " "))


class ConfigError(FedadError):
    """The experiment config is invalid."""


class DataError(FedadError):
    """A data set cannot be loaded or partitioned as asked."""

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


class RunError(FedadError):
    """A federated run produced nothing usable (no client ever answered, say)."""


class Interrupted(BaseException):
    """A run stopped by SIGINT (Ctrl-C) or SIGTERM; what finished before is kept.

    A ``BaseException``, like ``KeyboardInterrupt``, so that no ``except Exception`` on the
    way (a failing client, say) swallows it. ``kept`` lists the methods whose results were
    written before the signal; ``finished``: the whole run had finished (the signal came
    while its summary was shown); ``restored``: nothing finished and the run that ``--force``
    would have replaced in ``out`` is back as it was. The CLI exits with ``128 + signum``.
    """

    def __init__(
        self,
        signum: int,
        kept: tuple[str, ...] = (),
        out: str = "",
        *,
        finished: bool = False,
        restored: bool = False,
    ) -> None:
        super().__init__(signum)
        self.signum = signum
        self.kept = kept
        self.out = out
        self.finished = finished
        self.restored = restored


_ALLOCATION_WORDS = ("can't allocate memory", "out of memory", "cannot allocate memory")


def is_allocation_failure(err: BaseException | str) -> bool:
    """Whether ``err`` (an exception, or the text of one from another process) is a failed
    memory allocation: ``MemoryError``, torch's ``OutOfMemoryError``, or a ``RuntimeError``
    of torch's CPU allocator ("can't allocate memory")."""
    if isinstance(err, MemoryError) or type(err).__name__ == "OutOfMemoryError":
        return True
    text = err if isinstance(err, str) else str(err) if isinstance(err, RuntimeError) else ""
    lowered = text.lower()
    return any(w in lowered for w in _ALLOCATION_WORDS)


class AllocationFailed(RunError):
    """A method asked for more memory than the machine has (its network or buffers are too
    large for the params it was given): that method fails, the others run."""


class MethodsFailed(RunError):
    """Some methods of a run failed and the others finished: their results are written
    (``data``: the run's metrics.json data) and the run ends with exit status 2."""

    def __init__(self, what: str, fix: str | None = None, data: dict[str, object] | None = None):
        super().__init__(what, fix)
        self.data = data

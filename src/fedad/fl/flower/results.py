"""How a ServerApp in another process hands its :class:`~fedad.fl.engine.RunOutcome` back
(:class:`ResultsDir`)."""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from fedad.core.algorithm import ServerResult
from fedad.core.errors import FedadError
from fedad.core.messages import Message
from fedad.rundir.read import read_npz

if TYPE_CHECKING:  # the engine pulls in scipy; the ClientApp's handshake stays light
    from fedad.fl.drive import RunOutcome


log = logging.getLogger("fedad")


def _json_default(v: Any) -> Any:
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, np.ndarray):
        return v.tolist()
    raise TypeError(f"cannot write {type(v).__name__} to JSON")


class _WarningRelay(logging.Handler):
    """Appends every WARNING (and worse) of the ``fedad`` logger to ``warnings.jsonl``."""

    def __init__(self, results: ResultsDir) -> None:
        super().__init__(level=logging.WARNING)
        self.results = results

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.results.append_warning(record.getMessage())
        except Exception:  # a full disk must not stop the run
            self.handleError(record)


class ResultsDir:
    """How a ServerApp in another process hands its :class:`RunOutcome` back.

    Files: ``rounds.jsonl`` (one history row per line, appended as rounds end, so the
    caller can show progress), ``warnings.jsonl`` (the ServerApp's warnings as they happen,
    e.g. ``node 2: no reply to 'train' within 30 s``, which the caller logs on its console),
    ``arrays.npz`` (``result/NAME`` and ``eval/CLIENT/NAME``) and ``outcome.json``
    (everything else; written last, atomically: its presence means done), or
    ``error.json`` when the server program failed.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    @property
    def rounds_file(self) -> Path:
        return self.path / "rounds.jsonl"

    @property
    def outcome_file(self) -> Path:
        return self.path / "outcome.json"

    @property
    def error_file(self) -> Path:
        return self.path / "error.json"

    def append_round(self, row: dict[str, Any]) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        with self.rounds_file.open("a") as fh:
            fh.write(json.dumps(row, default=_json_default) + "\n")

    def read_rounds(self, start: int = 0) -> list[dict[str, Any]]:
        """Complete rows from row ``start`` on."""
        if not self.rounds_file.is_file():
            return []
        lines = self.rounds_file.read_text().split("\n")[:-1]  # the last may be partial
        return [json.loads(x) for x in lines[start:]]

    @property
    def warnings_file(self) -> Path:
        return self.path / "warnings.jsonl"

    def append_warning(self, text: str) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        with self.warnings_file.open("a") as fh:
            fh.write(json.dumps(text) + "\n")

    def read_warnings(self, start: int = 0) -> list[str]:
        """Complete warning lines from line ``start`` on."""
        if not self.warnings_file.is_file():
            return []
        lines = self.warnings_file.read_text().split("\n")[:-1]  # the last may be partial
        return [str(json.loads(x)) for x in lines[start:]]

    @contextlib.contextmanager
    def relay_warnings(self) -> Iterator[None]:
        """Within the block, the ``fedad`` logger's warnings also go to ``warnings.jsonl``."""
        handler = _WarningRelay(self)
        log.addHandler(handler)
        try:
            yield
        finally:
            log.removeHandler(handler)

    def write(self, outcome: RunOutcome) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        arrays: dict[str, np.ndarray] = {f"result/{k}": v for k, v in outcome.result.arrays.items()}
        evals: dict[str, Any] = {}
        for cid, m in outcome.evaluations.items():
            arrays.update({f"eval/{cid}/{k}": v for k, v in m.arrays.items()})
            evals[str(cid)] = {"kind": m.kind, "scalars": dict(m.scalars), "arrays": list(m.arrays)}
        np.savez(self.path / "arrays.npz", **arrays)  # type: ignore[arg-type]
        doc = {
            "result_scalars": outcome.result.scalars,
            "result_arrays": list(outcome.result.arrays),
            "evaluations": evals,
            "history": outcome.history,
            "events": outcome.events,
            "bytes_up": outcome.bytes_up,
            "bytes_down": outcome.bytes_down,
            "seconds": outcome.seconds,
            "client_seconds": outcome.client_seconds,
            "missing_nodes": outcome.missing_nodes,
        }
        tmp = self.outcome_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(doc, default=_json_default))
        tmp.replace(self.outcome_file)

    def write_error(self, err: BaseException) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        text = str(err) if isinstance(err, FedadError) else f"{type(err).__name__}: {err}"
        tmp = self.error_file.with_suffix(".tmp")
        tmp.write_text(json.dumps({"error": text, "user_error": isinstance(err, FedadError)}))
        tmp.replace(self.error_file)

    def read(self) -> RunOutcome:
        from fedad.fl.drive import RunOutcome

        doc = json.loads(self.outcome_file.read_text())
        # the run directory's one .npz reader: this is fedad's own hand-off, but it lies in
        # the run's .flower/ (a link planted there is refused, a damaged file one line)
        arrays = read_npz(self.path / "arrays.npz", fix="run the experiment again")
        result = ServerResult(
            arrays={k: arrays[f"result/{k}"] for k in doc["result_arrays"]},
            scalars=dict(doc["result_scalars"]),
        )
        evaluations = {
            int(cid): Message(
                e["kind"], {k: arrays[f"eval/{cid}/{k}"] for k in e["arrays"]}, e["scalars"]
            )
            for cid, e in doc["evaluations"].items()
        }
        return RunOutcome(
            result=result,
            evaluations=dict(sorted(evaluations.items())),
            history=doc["history"],
            events=doc["events"],
            bytes_up=int(doc["bytes_up"]),
            bytes_down=int(doc["bytes_down"]),
            seconds=float(doc["seconds"]),
            client_seconds=float(doc["client_seconds"]),
            missing_nodes=[int(x) for x in doc["missing_nodes"]],
        )

    def read_error(self) -> str | None:
        if not self.error_file.is_file():
            return None
        return str(json.loads(self.error_file.read_text())["error"])

"""``model.json``: what an export directory holds, for a program that has only onnxruntime.

Keys: ``format`` (``"fedad-onnx"``) and ``format_version``; ``fedad_version``; ``method``
(the run's label), ``method_name``, ``detector`` (its registry name); ``personalized``
(one model per client, or one for all); ``models``, one entry per ``.onnx`` file (its
``file``, the ``clients`` it serves, its ``sha256``, ``score_dtype`` (what the detector
computes in; the ``score`` output is float32), ``maps``, the ``check`` it passed
(:class:`fedad.export.check.Parity`), ``client_input`` and ``client_check`` for a model
that takes ``client`` (what ids it accepts) and a ``note`` where its scores differ from
fedad's somewhere); ``clients``, one entry per exported client (``id``, ``name`` for a natural
partition, ``file``, ``threshold``); ``inputs`` (the graph inputs, each with its ``name``,
``type``, ``shape``, ``what``, and a text column's ``categories``), ``missing_text`` (the
text cells that read as missing), ``client_column`` (a natural partition's column: each
row's client), ``outputs`` and ``opset``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from fedad import __version__
from fedad.export.check import Parity
from fedad.export.preprocess import MISSING_TEXT, ML_OPSET
from fedad.export.torchgraph import OPSET

__all__ = ["FORMAT", "ModelEntry", "sidecar"]

FORMAT = "fedad-onnx"
FORMAT_VERSION = 1


@dataclass(frozen=True)
class ModelEntry:
    """One written model: its file, the clients it serves (ids) with their thresholds."""

    file: str
    clients: list[int]
    thresholds: list[float]
    sha256: str
    score_dtype: str
    maps: bool
    check: Parity
    note: str = ""
    scale: float = 0.0


def sidecar(
    label: str,
    method: str,
    detector: str,
    personalized: bool,
    entries: list[ModelEntry],
    inputs: list[dict[str, Any]],
    client_names: tuple[str, ...],
    client_column: str,
) -> str:
    """model.json's text (module docstring)."""
    clients = []
    for e in entries:
        for cid, thr in zip(e.clients, e.thresholds, strict=True):
            row: dict[str, Any] = {"id": cid, "file": e.file, "threshold": thr}
            if cid < len(client_names):
                row["name"] = client_names[cid]
            clients.append(row)
    models = []
    for e in entries:
        m: dict[str, Any] = {
            "file": e.file,
            "clients": e.clients,
            "sha256": e.sha256,
            "score_dtype": e.score_dtype,
            "maps": e.maps,
            "check": {**e.check.as_json(), "scale": e.scale},
        }
        if len(set(e.thresholds)) > 1:
            m["client_input"] = True
            m["client_check"] = (
                f"client (int64, [N] or [1]) must hold ids 0 to {len(e.clients) - 1}: another "
                "id (a negative one too) or length makes onnxruntime raise; no threshold is "
                "guessed"
            )
        if e.note:
            m["note"] = e.note
        models.append(m)
    outputs = [
        {"name": "score", "type": "float32", "shape": ["N"], "what": "higher = more anomalous"},
        {
            "name": "anomaly",
            "type": "int64",
            "shape": ["N"],
            "what": "1 when the score is above the client's threshold (or NaN), else 0",
        },
    ]
    if any(e.maps for e in entries):
        outputs.append(
            {
                "name": "map",
                "type": "float32",
                "shape": ["N", "H", "W"],
                "what": "per-pixel anomaly maps, higher = more anomalous",
            }
        )
    data = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "fedad_version": __version__,
        "method": label,
        "method_name": method,
        "detector": detector,
        "personalized": personalized,
        "models": models,
        "clients": sorted(clients, key=lambda r: int(r["id"])),
        "inputs": inputs,
        "missing_text": list(MISSING_TEXT),
        "client_column": client_column,
        "outputs": outputs,
        "opset": {"ai.onnx": OPSET, "ai.onnx.ml": ML_OPSET},
    }
    return json.dumps(data, indent=1)

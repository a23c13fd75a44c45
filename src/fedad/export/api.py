"""``fedad export``: a finished run's detectors of one method as ONNX models.

:func:`export_run` reads the run with :func:`fedad.rundir.load.load_run` (the run directory is
untrusted: a link anywhere in it is refused, every file size-checked, detectors rebuilt
from registered classes only; nothing is read from it but through that reader, and no ONNX
file is ever loaded from it: every model is built here from the detector's arrays), builds
each model (:mod:`fedad.export.assemble`), checks it (:mod:`fedad.export.check`) and writes
``OUT/client-<i>.onnx`` per client, or ``OUT/global.onnx`` where one detector serves every
client, and ``OUT/model.json`` (:mod:`fedad.export.sidecar`). ``OUT`` is a new or empty
folder, or, with ``force``, a previous export's (model.json and .onnx files only); it is
written beside and renamed into place, so it holds a complete export or none, and nothing is
written outside it.
"""

from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from fedad.core.detector import BaseDetector
from fedad.core.errors import FedadError
from fedad.export import deps
from fedad.export.assemble import assemble
from fedad.export.check import parity
from fedad.export.preprocess import preprocessing
from fedad.export.registry import Core, exporter_for
from fedad.export.sidecar import ModelEntry, sidecar
from fedad.export.torchgraph import to_onnx
from fedad.rundir.files import refuse_inside_run, staged_dir, target_path, write_text
from fedad.rundir.inputs import Inputs
from fedad.rundir.load import load_run
from fedad.rundir.score import _check_fit as check
from fedad.rundir.score import _client

if TYPE_CHECKING:
    from fedad.rundir.load import Run

__all__ = ["Exported", "build", "export_run"]

SIDECAR = "model.json"
_OURS = re.compile(r"(client-(0|[1-9][0-9]{0,7})|global)\.onnx|model\.json")
_DAMAGED = "the run directory is damaged: run the experiment again"


@dataclass(frozen=True)
class Exported:
    """What :func:`export_run` wrote: the folder, its files, model.json's data."""

    out: Path
    files: list[str]
    sidecar: str


def export_run(
    run_dir: str | Path,
    label: str,
    out: str | Path,
    client: str | None = None,
    force: bool = False,
) -> Exported:
    """Export method ``label``'s detectors of the run in ``run_dir`` to ``out`` (module
    docstring); ``client``: only that client's (a number or a natural client's id value)."""
    deps.onnx()
    deps.onnxruntime()
    out = target_path(out)
    refuse_inside_run(out)
    _check_out(out, force)

    run = load_run(run_dir)
    inputs = _inputs(run)
    ids = _clients(run, label, client)
    dets = {cid: run.detector(label, cid) for cid in ids}
    for det in dets.values():
        _check_fit(inputs, det, run.path, label)
    groups = _groups(dets, single=client is not None)
    pre_json: list[dict[str, Any]] = []
    blobs: dict[str, bytes] = {}
    entries: list[ModelEntry] = []
    for name, members in groups.items():
        blob, entry, pre_json = _one(name, members, dets, inputs, label)
        blobs[name] = blob
        entries.append(entry)
    first = dets[ids[0]]
    text = sidecar(
        label,
        _method_name(run, label),
        type(first).registry_name,
        not _shared(run, label),
        entries,
        pre_json,
        inputs.client_names,
        inputs.client_column,
    )
    _write(out, blobs, text)
    return Exported(out, [*blobs, SIDECAR], text)


def build(
    det: BaseDetector, inputs: Inputs, thresholds: list[float], label: str = "", name: str = ""
) -> tuple[Any, Core]:
    """The ONNX model (not yet checked) of ``det`` for the run's ``inputs``, deciding at
    ``thresholds`` (one per client it serves), and its :class:`Core`."""
    import torch

    shape = tuple(int(s) for s in inputs.feature_shape)
    core = exporter_for(det, label)(det, shape)
    rng = np.random.default_rng(0)
    example = torch.from_numpy(rng.random((2, *core.input_shape), dtype=np.float32))
    outputs = ("score", "map") if core.maps else ("score",)
    try:
        graph = to_onnx(core.module, example, outputs)
    except (RuntimeError, ValueError, TypeError) as err:
        reason = str(err).strip().splitlines()[0][:200] if str(err) else type(err).__name__
        raise FedadError(
            f"method '{label}''s detector '{type(det).registry_name}' cannot be exported to "
            f"ONNX: torch's exporter failed: {reason}"
        ) from None
    model = assemble(preprocessing(inputs), core, graph, thresholds, f"fedad {label} {name}")
    return model, core


def _one(
    name: str,
    members: list[int],
    dets: dict[int, BaseDetector],
    inputs: Inputs,
    label: str,
) -> tuple[bytes, ModelEntry, list[dict[str, Any]]]:
    """One model file: built, checked, serialised."""
    det = dets[members[0]]
    thresholds = [float(dets[c].threshold_) for c in members]
    model, core = build(det, inputs, thresholds, label, name)
    check = parity(model, det, inputs, thresholds, np.random.default_rng(0), core.scale)
    if not check.ok:
        raise FedadError(
            f"the exported model {name} of method '{label}' does not score as fedad does "
            f"(largest relative difference {check.max_rel_diff:.3g}, {check.decisions_differ} "
            f"decisions differ, tolerance 1e-5"
            f"{'' if check.empty_batch else '; an empty batch fails'}): not written",
            "report this, with the run's config, as a fedad bug",
        )
    blob = model.SerializeToString()
    entry = ModelEntry(
        name,
        members,
        thresholds,
        hashlib.sha256(blob).hexdigest(),
        core.score_dtype,
        core.maps,
        check,
        core.note,
        core.scale,
    )
    return blob, entry, preprocessing(inputs).described


def _inputs(run: Run) -> Inputs:
    if run.inputs is None:
        raise FedadError(
            f"'{run.path}' has no inputs.json (the preprocessing of its data), which an "
            "exported model needs",
            "runs made before fedad saved it cannot be exported: run the experiment again",
        )
    return run.inputs


def _clients(run: Run, label: str, client: str | None) -> list[int]:
    """The clients to export: ``client`` only, or every client whose detector the run
    holds."""
    if label not in run.detectors and label not in run.node_models:
        raise FedadError(
            f"run '{run.path}' has no method '{label}'", f"methods: {', '.join(run.detectors)}"
        )
    if client is not None:
        return [_client(run, client)]
    ids = list(run.detectors.get(label, {}))
    if not ids:
        homes = run.node_models.get(label, {})
        first = next(iter(homes.items()), (0, ""))
        raise FedadError(
            f"every client's detector of method '{label}' stayed on its Flower node",
            f"export each on its node, e.g. fedad export {first[1]} --method {label}",
        )
    return ids


def _check_fit(inputs: Inputs, det: BaseDetector, run_dir: Path, label: str) -> None:
    """``inputs.json`` must describe what the detector takes (both are the run's, both
    untrusted; :func:`fedad.rundir.score._check_fit`)."""
    check(inputs, det, run_dir, label)
    spec = det.expected_input()
    if spec is not None and spec[0] != "image" and math.prod(spec[1]) != inputs.width:
        raise FedadError(f"method '{label}''s detector does not fit inputs.json", _DAMAGED)


def _fingerprint(det: BaseDetector) -> str:
    """A hash of the detector's fitted state without its threshold."""
    h = hashlib.sha256(repr(det.to_config()).encode())
    for key, value in sorted(det.get_arrays().items()):
        if key == "threshold_":
            continue
        a = np.ascontiguousarray(value)
        h.update(f"{key}|{a.dtype.str}|{a.shape}|".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def _groups(dets: dict[int, BaseDetector], single: bool) -> dict[str, list[int]]:
    """File name -> the clients it serves: ``global.onnx`` when every client's detector is
    one model (and more than one client is exported), else ``client-<i>.onnx`` each."""
    ids = sorted(dets)
    if not single and len(ids) > 1 and len({_fingerprint(dets[c]) for c in ids}) == 1:
        return {"global.onnx": ids}
    return {f"client-{c}.onnx": [c] for c in ids}


def _shared(run: Run, label: str) -> bool:
    """Whether metrics.json says the method ends with one detector for all clients."""
    m = run.metrics.get("methods", {}).get(label, {})
    return isinstance(m, dict) and m.get("personalized") is False


def _method_name(run: Run, label: str) -> str:
    m = run.metrics.get("methods", {}).get(label, {})
    name = m.get("method") if isinstance(m, dict) else None
    return name[:64] if isinstance(name, str) else label


# -- the output folder ----------------------------------------------------------------------


def _check_out(out: Path, force: bool) -> None:
    """``out`` must be new, an empty folder, or with ``force`` a previous export."""
    if out.is_symlink():
        raise FedadError(f"--out '{out}' is a symbolic link", "give a folder's own path")
    if not out.exists():
        return
    if not out.is_dir():
        raise FedadError(f"--out '{out}' is a file, not a folder", "choose a folder")
    entries = list(out.iterdir())
    if not entries:
        return
    if not force:
        raise FedadError(
            f"--out '{out}' is not empty",
            "choose a new folder, or add --force to replace a previous export there",
        )
    odd = [
        e.name for e in entries if not _OURS.fullmatch(e.name) or e.is_symlink() or not e.is_file()
    ]
    if odd or not (out / SIDECAR).is_file():
        shown = odd[0] if odd else SIDECAR + " (missing)"
        raise FedadError(
            f"--out '{out}' holds '{shown}', so it is not a fedad export; --force replaces "
            "only a previous export",
            "choose a new folder",
        )


def _write(out: Path, blobs: dict[str, bytes], text: str) -> None:
    """The export, written beside ``out`` and renamed into place."""
    with staged_dir(out) as tmp:
        for name, blob in blobs.items():
            _write_bytes(tmp / name, blob)
        write_text(tmp / SIDECAR, text)


def _write_bytes(path: Path, blob: bytes) -> None:
    import os

    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o666)
        with os.fdopen(fd, "wb") as fh:
            fh.write(blob)
    except OSError as err:
        raise FedadError(f"cannot write '{path}': {err.strerror or err}") from None

"""Load what a run wrote: metrics, config and every client's final detector.

A run directory is untrusted input: it may be damaged, or crafted by someone else. Every
file is checked before use, and any problem is a one-line :class:`~fedad.errors.FedadError`
naming the file. Detectors are rebuilt only from the registered detector classes
(:func:`fedad.detector.detector_from_config`): nothing in a run directory can make fedad
import a module or run code.
"""

from __future__ import annotations

import json
import re
import tomllib
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fedad.detector import BaseDetector, detector_from_config
from fedad.errors import FedadError
from fedad.inputs import INPUTS_FILE, Inputs, read_inputs
from fedad.report.rundir import read_metrics

MAX_NPZ_BYTES = 8 << 30
"""Largest uncompressed checkpoint file accepted (guards against zip bombs)."""
MAX_CLIENT_ID = 10_000_000
_CLIENT_ID = re.compile(r"[0-9]{1,8}")
_DAMAGED = "the run directory is damaged: run the experiment again"


@dataclass
class Run:
    """A finished run: ``detectors[label][client_id]`` scores new data like the original."""

    path: Path
    config: dict[str, Any]
    metrics: dict[str, Any]
    detectors: dict[str, dict[int, BaseDetector]]
    node_models: dict[str, dict[int, str]] = field(default_factory=dict)
    """Per method, clients whose personalised detector stayed on their Flower node: the
    node's folder (a run directory of its own; load it there with ``fedad.load``)."""
    inputs: Inputs | None = None
    """How the run preprocessed its data (``inputs.json``); ``None`` for older runs. Each
    detector carries it as ``inputs_``, so that ``detector.score`` accepts a DataFrame."""

    def score(self, label: str, data: Any, client: int = 0) -> np.ndarray:
        """Scores of ``data`` (a DataFrame of the run's feature columns, or model inputs)
        by client ``client``'s detector of method ``label``, preprocessed as in training."""
        return self.detector(label, client).score(data)

    def detector(self, label: str, client: int = 0) -> BaseDetector:
        """The detector client ``client`` ended with for method ``label``."""
        home = self.node_models.get(label, {}).get(client)
        if home is not None:
            raise FedadError(
                f"client {client}'s detector of method '{label}' stayed on its node, in {home}",
                f"on that machine: fedad.load('{home}').detector('{label}', {client})",
            )
        try:
            return self.detectors[label][client]
        except KeyError:
            raise FedadError(
                f"run {self.path} has no detector for method '{label}', client {client}",
                f"methods: {', '.join(self.detectors)}",
            ) from None


def _inside(root: Path, path: Path) -> Path:
    """``path`` if it is a regular file or folder inside ``root`` (no link leads out)."""
    if path.is_symlink() or not path.resolve().is_relative_to(root.resolve()):
        raise FedadError(f"'{path}' is a link or lies outside the run directory", _DAMAGED)
    return path


def read_npz(path: Path) -> dict[str, np.ndarray]:
    """The arrays of an ``.npz`` file, without pickles, with one-line errors."""
    try:
        with zipfile.ZipFile(path) as zf:
            size = sum(info.file_size for info in zf.infolist())
        if size > MAX_NPZ_BYTES:
            raise FedadError(f"'{path}' would unpack to {size} bytes, more than allowed", _DAMAGED)
        with np.load(path, allow_pickle=False) as z:
            return {str(k): np.asarray(z[k]) for k in z.files}
    except FedadError:
        raise
    except FileNotFoundError:
        raise FedadError(f"'{path}' is missing", _DAMAGED) from None
    except (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile) as err:
        reason = str(err).splitlines()[0][:160] if str(err) else type(err).__name__
        raise FedadError(f"'{path}' is not a readable .npz file: {reason}", _DAMAGED) from None


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise FedadError(f"'{path}' is missing", _DAMAGED) from None
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as err:
        reason = str(err).splitlines()[0][:160] if str(err) else type(err).__name__
        raise FedadError(f"'{path}' is not readable JSON: {reason}", _DAMAGED) from None


def read_config(path: Path) -> dict[str, Any]:
    """The parsed ``config.toml`` of a run (``{}`` when the file is absent)."""
    if not path.exists():
        return {}
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError, RecursionError) as err:
        reason = str(err).splitlines()[0][:160] if str(err) else type(err).__name__
        raise FedadError(f"'{path}' is not readable TOML: {reason}", _DAMAGED) from None


def _node_models(meta: dict[str, Any], meta_path: Path) -> dict[int, str]:
    homes = meta.get("node_models", {})
    if not isinstance(homes, dict) or not all(
        isinstance(k, str) and _CLIENT_ID.fullmatch(k) and isinstance(v, str) and len(v) < 4096
        for k, v in homes.items()
    ):
        raise FedadError(f"'{meta_path}': 'node_models' is not client ids to folders", _DAMAGED)
    return {int(k): v for k, v in homes.items()}


def _checkpoint(root: Path, d: Path) -> tuple[dict[int, BaseDetector], dict[int, str]]:
    """Every client's detector of one method's ``checkpoints/LABEL`` folder, and the
    clients whose detector stayed on their node (their folders there)."""
    meta_path = _inside(root, d / "detector.json")
    meta = _read_json(meta_path)
    if (
        not isinstance(meta, dict)
        or not isinstance(meta.get("personalized"), bool)
        or not isinstance(meta.get("detector"), dict)
        or not isinstance(meta.get("thresholds"), dict)
    ):
        raise FedadError(
            f"'{meta_path}' lacks 'personalized', 'detector' or 'thresholds'", _DAMAGED
        )
    thresholds: dict[int, float] = {}
    for cid, thr in meta["thresholds"].items():
        if not (isinstance(cid, str) and _CLIENT_ID.fullmatch(cid)) or int(cid) > MAX_CLIENT_ID:
            raise FedadError(f"'{meta_path}' names client {cid[:40]!r}, not a client id", _DAMAGED)
        if not isinstance(thr, int | float) or isinstance(thr, bool):
            raise FedadError(f"'{meta_path}': threshold of client {cid} is not a number", _DAMAGED)
        thresholds[int(cid)] = float(thr)
    homes = _node_models(meta, meta_path)
    shared = None
    if not meta["personalized"]:
        shared = read_npz(_inside(root, d / "global.npz"))
    out: dict[int, BaseDetector] = {}
    for cid, thr in sorted(thresholds.items()):
        if cid in homes:
            continue
        if shared is None:
            arrays = read_npz(_inside(root, d / f"client_{cid}.npz"))
        else:
            arrays = dict(shared)
        arrays["threshold_"] = np.asarray(thr, dtype=np.float64)
        try:
            out[cid] = detector_from_config(meta["detector"], arrays)
        except FedadError as err:
            raise FedadError(f"'{meta_path}': {err}") from None
    return out, homes


def load_run(run_dir: str | Path) -> Run:
    """Read ``metrics.json``, ``config.toml`` and ``checkpoints/`` of a run directory."""
    root = Path(run_dir)
    if not (root / "metrics.json").is_file():
        raise FedadError(
            f"'{root}' is not a run directory (no metrics.json)", "give the --out of `fedad run`"
        )
    metrics = read_metrics(root / "metrics.json")
    seeds = metrics["experiment"].get("seeds")
    if isinstance(seeds, list) and not (root / "checkpoints").exists():
        first = seeds[0] if seeds and isinstance(seeds[0], int) else "N"
        raise FedadError(
            f"'{root}' holds a run over {len(seeds)} seeds, each in its own folder",
            f"load one seed's run, e.g. fedad.load('{root / f'seed-{first}'}')",
        )
    config = read_config(root / "config.toml")
    detectors: dict[str, dict[int, BaseDetector]] = {}
    homes: dict[str, dict[int, str]] = {}
    ckpt = root / "checkpoints"
    if ckpt.exists():
        _inside(root, ckpt)
        for d in sorted(ckpt.iterdir()):
            if d.name.startswith("."):  # a folder being written (fedad.outdir.staged_dir)
                continue
            if d.is_dir() or d.is_symlink():
                detectors[d.name], away = _checkpoint(root, _inside(root, d))
                if away:
                    homes[d.name] = away
    inputs = read_inputs(root) if (root / INPUTS_FILE).exists() else None
    for per_client in detectors.values():
        for det in per_client.values():
            det.inputs_ = inputs
    return Run(root, config, metrics, detectors, homes, inputs)

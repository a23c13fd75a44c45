"""Load what a run wrote: metrics, config and every client's final detector.

A run directory is untrusted input: it may be damaged, or crafted by someone else. Every
file is checked before use, and any problem is a one-line :class:`~fedad.core.errors.FedadError`
naming the file. Detectors are rebuilt only from the registered detector classes
(:func:`fedad.core.detector.detector_from_config`): nothing in a run directory can make fedad
import a module or run code. Nor read a file outside it: the run is read within
:func:`fedad.rundir.files.reading` (a symbolic link anywhere in its structure is a one-line error
before anything is read, and every file is opened without following a link), and so is
each client's checkpoint when its detector is first built.
"""

from __future__ import annotations

import copy
import json
import math
import re
import tomllib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fedad.config import MAX_CLIENTS
from fedad.core.detector import BaseDetector, detector_from_config
from fedad.core.errors import FedadError
from fedad.rundir.files import read_text, reading
from fedad.rundir.inputs import Inputs, read_inputs
from fedad.rundir.layout import CHECKPOINTS_DIR, CONFIG_FILE, INPUTS_FILE, METRICS_FILE
from fedad.rundir.read import NPZ_MAX_BYTES, npz_shapes, read_metrics
from fedad.rundir.read import read_npz as _read_npz

MAX_NPZ_BYTES = NPZ_MAX_BYTES
"""Largest uncompressed checkpoint or kept-results file accepted (why this size:
:data:`fedad.rundir.read.NPZ_MAX_BYTES`)."""
_CLIENT_ID = re.compile(r"0|[1-9][0-9]{0,7}")
_DAMAGED = "the run directory is damaged: run the experiment again"


@dataclass
class Run:
    """A finished run: ``detectors[label][client_id]`` scores new data like the original
    (each client's detector is built when first used, :class:`ClientDetectors`)."""

    path: Path
    config: dict[str, Any]
    metrics: dict[str, Any]
    detectors: dict[str, Mapping[int, BaseDetector]]
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


def read_npz(path: Path) -> dict[str, np.ndarray]:
    """The arrays of a checkpoint or kept-results ``.npz`` through the one reader of run
    directories (:func:`fedad.rundir.read.read_npz`: no pickles, every declared shape
    checked before anything is allocated), at most :data:`MAX_NPZ_BYTES` unpacked."""
    return _read_npz(path, MAX_NPZ_BYTES, _DAMAGED)


def _read_json(path: Path) -> Any:
    try:
        return json.loads(read_text(path))
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
        return tomllib.loads(read_text(path))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError, RecursionError) as err:
        reason = str(err).splitlines()[0][:160] if str(err) else type(err).__name__
        raise FedadError(f"'{path}' is not readable TOML: {reason}", _DAMAGED) from None


def client_count(config: dict[str, Any], metrics: dict[str, Any]) -> int:
    """How many clients the run had: ``metrics.json``'s ``experiment.clients``, else the
    resolved ``config.toml``'s ``partition.clients``, else the most a config may ask for
    (:data:`fedad.config.MAX_CLIENTS`); never more than that. Client ids are ``0..n-1``."""
    part = config.get("partition")
    for n in (
        metrics.get("experiment", {}).get("clients"),
        part.get("clients") if isinstance(part, dict) else None,
    ):
        if isinstance(n, int) and not isinstance(n, bool) and 1 <= n <= MAX_CLIENTS:
            return n
    return MAX_CLIENTS


def _client_id(cid: object, n_clients: int, where: Path, what: str) -> int:
    """A client id of ``where`` (a JSON key): decimal digits naming one of the run's
    ``n_clients`` clients."""
    if not (isinstance(cid, str) and _CLIENT_ID.fullmatch(cid)):
        shown = str(cid)[:40]
        raise FedadError(f"'{where}' names client {shown!r} in {what}, not a client id", _DAMAGED)
    if int(cid) >= n_clients:
        raise FedadError(
            f"'{where}' names client {cid} in {what}, but the run had {n_clients} clients "
            f"(client ids 0 to {n_clients - 1})",
            _DAMAGED,
        )
    return int(cid)


def _node_models(meta: dict[str, Any], meta_path: Path, n_clients: int) -> dict[int, str]:
    homes = meta.get("node_models", {})
    if not isinstance(homes, dict) or not all(
        isinstance(v, str) and len(v) < 4096 for v in homes.values()
    ):
        raise FedadError(f"'{meta_path}': 'node_models' is not client ids to folders", _DAMAGED)
    return {_client_id(k, n_clients, meta_path, "node_models"): v for k, v in homes.items()}


def _thresholds(meta: dict[str, Any], meta_path: Path, n_clients: int) -> dict[int, float]:
    """Each client's threshold: a finite number (a NaN threshold would flag every row)."""
    out: dict[int, float] = {}
    for cid, thr in meta["thresholds"].items():
        k = _client_id(cid, n_clients, meta_path, "thresholds")
        if not isinstance(thr, int | float) or isinstance(thr, bool) or not math.isfinite(thr):
            raise FedadError(
                f"'{meta_path}': threshold of client {cid} is not a finite number", _DAMAGED
            )
        out[k] = float(thr)
    return out


class ClientDetectors(Mapping[int, BaseDetector]):
    """One method's detectors by client id, each built when first asked for, then kept.

    A run of many clients costs only what is used: ``fedad score --client 3`` builds one
    detector. The clients of a global method (one ``global.npz``) share one detector, built
    once: each client's is a shallow copy of it with the client's own ``threshold_``, so
    they share the model too (training one trains all; ``copy.deepcopy`` one to change it
    alone). Iterating (``items()``, ``values()``) builds every client's detector.
    """

    def __init__(self, ids: list[int], build: Callable[[int], BaseDetector]) -> None:
        self._ids = sorted(ids)
        self._known = set(ids)
        self._build = build
        self._built: dict[int, BaseDetector] = {}

    def __getitem__(self, client: int) -> BaseDetector:
        if client not in self._known:
            raise KeyError(client)
        det = self._built.get(client)
        if det is None:
            det = self._built[client] = self._build(client)
        return det

    def __iter__(self) -> Iterator[int]:
        return iter(self._ids)

    def __len__(self) -> int:
        return len(self._ids)

    def __contains__(self, client: object) -> bool:
        return client in self._known

    def __repr__(self) -> str:
        return f"ClientDetectors({len(self._ids)} clients, {len(self._built)} built)"


def _checkpoint(
    root: Path, d: Path, n_clients: int, inputs: Inputs | None
) -> tuple[ClientDetectors, dict[int, str]]:
    """Every client's detector of one method's ``checkpoints/LABEL`` folder (built on
    first use, :class:`ClientDetectors`), and the clients whose detector stayed on their
    node (their folders there).

    What can be checked without building is checked now: ``detector.json`` (client ids
    bounded by the run's ``n_clients``, finite thresholds) and every client file's headers
    (:func:`~fedad.rundir.read.npz_shapes`); a global method's one detector is built now.
    """
    meta_path = d / "detector.json"
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
    thresholds = _thresholds(meta, meta_path, n_clients)
    homes = _node_models(meta, meta_path, n_clients)
    ids = [cid for cid in thresholds if cid not in homes]

    def rebuild(arrays: dict[str, np.ndarray]) -> BaseDetector:
        try:
            det = detector_from_config(meta["detector"], arrays)
        except FedadError as err:
            raise FedadError(f"'{meta_path}': {err}") from None
        det.inputs_ = inputs
        return det

    if meta["personalized"]:
        files = {cid: d / f"client_{cid}.npz" for cid in ids}
        for path in files.values():
            npz_shapes(path, MAX_NPZ_BYTES, _DAMAGED)

        def personal(cid: int) -> BaseDetector:
            with reading(root, walk=False):  # built later: still never through a link
                arrays = read_npz(files[cid])
            arrays["threshold_"] = np.asarray(thresholds[cid], dtype=np.float64)
            return rebuild(arrays)

        return ClientDetectors(ids, personal), homes
    shared = rebuild(read_npz(d / "global.npz"))

    def of_client(cid: int) -> BaseDetector:
        det = copy.copy(shared)
        det.threshold_ = thresholds[cid]
        return det

    return ClientDetectors(ids, of_client), homes


def load_run(run_dir: str | Path) -> Run:
    """Read ``metrics.json``, ``config.toml``, ``inputs.json`` and ``checkpoints/`` of a
    run directory (each client's detector is built when first used, :class:`ClientDetectors`).
    A symbolic link anywhere in the run's structure is a one-line error before anything is
    read (:func:`fedad.rundir.files.reading`)."""
    root = Path(run_dir)
    if not (root / METRICS_FILE).is_file():
        raise FedadError(
            f"'{root}' is not a run directory (no metrics.json)", "give the --out of `fedad run`"
        )
    with reading(root):
        return _load(root)


def _load(root: Path) -> Run:
    """:func:`load_run` within :func:`fedad.rundir.files.reading`."""
    metrics = read_metrics(root / METRICS_FILE)
    seeds = metrics["experiment"].get("seeds")
    if isinstance(seeds, list) and not (root / CHECKPOINTS_DIR).exists():
        first = seeds[0] if seeds and isinstance(seeds[0], int) else "N"
        raise FedadError(
            f"'{root}' holds a run over {len(seeds)} seeds, each in its own folder",
            f"load one seed's run, e.g. fedad.load('{root / f'seed-{first}'}')",
        )
    config = read_config(root / CONFIG_FILE)
    n_clients = client_count(config, metrics)
    inputs = read_inputs(root) if (root / INPUTS_FILE).exists() else None
    detectors: dict[str, Mapping[int, BaseDetector]] = {}
    homes: dict[str, dict[int, str]] = {}
    ckpt = root / CHECKPOINTS_DIR
    if ckpt.exists():
        for d in sorted(ckpt.iterdir()):  # (a link there, planted since, fails on reading)
            if d.name.startswith("."):  # a folder being written (fedad.rundir.files.staged_dir)
                continue
            if d.is_dir() or d.is_symlink():
                detectors[d.name], away = _checkpoint(root, d, n_clients, inputs)
                if away:
                    homes[d.name] = away
    return Run(root, config, metrics, detectors, homes, inputs)

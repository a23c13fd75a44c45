"""Writing a run's ``checkpoints/`` folder: the run-directory layout both engines share.

The runner writes ``checkpoints/LABEL`` for every method of a run; a Flower SuperNode writes
the same layout for the personalised detector it keeps (``docs/deployment.md``). Both use
:func:`save_checkpoint`, so this module sits below :mod:`fedad.runner` and
:mod:`fedad.fl.flower`; :func:`fedad.rundir.load.load_run` reads what it writes.

Layout of ``checkpoints/LABEL``: ``detector.json`` (method, detector config, whether it is
personalised, each client's threshold and, for detectors that stayed on their Flower node,
``node_models``), then ``client_I.npz`` per client (personalised) or ``global.npz``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fedad.core.messages import unprefixed
from fedad.rundir.files import staged_dir, write_npz, write_text
from fedad.rundir.layout import CHECKPOINTS_DIR

if TYPE_CHECKING:
    from fedad.core.algorithm import Algorithm
    from fedad.fl.drive import RunOutcome


def node_models(algorithm: Algorithm, outcome: RunOutcome) -> dict[int, str]:
    """Clients whose personalised detector stayed on their Flower node: id -> the node's
    folder (the evaluate reply's ``node_model``, with no detector arrays; see
    docs/deployment.md)."""
    if not algorithm.personalized:
        return {}
    return {
        i: str(m.scalars["node_model"])
        for i, m in sorted(outcome.evaluations.items())
        if isinstance(m.scalars.get("node_model"), str) and not unprefixed(m.arrays, "detector")
    }


def save_checkpoint(out: Path, label: str, algorithm: Algorithm, outcome: RunOutcome) -> None:
    """Write what :func:`fedad.rundir.load.load_run` needs to rebuild every client's detector.

    The folder ``checkpoints/LABEL`` is written beside and renamed into place, so it is
    either complete or absent.
    """
    thresholds = {str(i): float(m.scalars["threshold"]) for i, m in outcome.evaluations.items()}
    meta: dict[str, Any] = {
        "method": algorithm.name,
        "personalized": algorithm.personalized,
        "detector": algorithm.detector_config(),
        "thresholds": thresholds,
    }
    homes = node_models(algorithm, outcome)
    if homes:
        meta["node_models"] = {str(i): p for i, p in homes.items()}
    with staged_dir(out / CHECKPOINTS_DIR / label) as d:
        write_text(d / "detector.json", json.dumps(meta, indent=2))
        if algorithm.personalized:
            for i, m in sorted(outcome.evaluations.items()):
                if i not in homes:
                    write_npz(d / f"client_{i}.npz", unprefixed(m.arrays, "detector"))
        else:
            write_npz(d / "global.npz", outcome.result.arrays)

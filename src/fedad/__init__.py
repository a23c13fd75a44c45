"""fedad: federated anomaly detection."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fedad import old_names

if TYPE_CHECKING:
    from fedad.rundir.load import Run

__version__ = "0.1.0"

__all__ = ["__version__", "load"]

old_names.install()


def load(run_dir: str) -> Run:
    """Load the detectors a run wrote: see :func:`fedad.rundir.load.load_run`."""
    from fedad.rundir.load import load_run

    return load_run(run_dir)

"""fedad: federated anomaly detection."""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__", "load"]


def load(run_dir: str) -> object:
    """Load the detectors a run wrote: see :func:`fedad.runs.load_run`."""
    from fedad.runs import load_run

    return load_run(run_dir)

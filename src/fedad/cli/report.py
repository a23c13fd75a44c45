"""``fedad report RUN``: rebuild a run directory's report.html."""

from __future__ import annotations

from fedad.cli.options import RunDir, fail, show, shown
from fedad.core.errors import FedadError
from fedad.rundir.layout import METRICS_FILE


def report(run_dir: RunDir) -> None:
    """Rebuild report.html of a run directory."""
    from fedad.report.html import write_report

    try:
        if not (run_dir / METRICS_FILE).is_file():
            raise FedadError(
                f"'{run_dir}' has no metrics.json", "give a directory written by fedad run"
            )
        path = write_report(run_dir)
        show(f"wrote {shown(path)}")
    except FedadError as err:
        fail(err)

"""Exporters through the catalog: each detector's declaration names the module that registers
its exporter (a method's own lives in its folder) or says why it has none; a module is
imported only when a detector of its name is exported."""

from __future__ import annotations

from fedad.core.catalog import detector_entries
from fedad.export.registry import exporters
from tests.fresh import run_fresh


def test_every_declared_exporter_registers_its_detector_and_every_refusal_says_why() -> None:
    registered = exporters()
    for name, entry in detector_entries().items():
        assert not (entry.exporter and entry.export_refusal), name
        if entry.exporter:
            assert name in registered, name
        if entry.export_refusal:
            assert name not in registered and len(entry.export_refusal) > 20, name


def test_a_methods_exporter_is_imported_only_when_its_detector_is_exported() -> None:
    code = (
        "import sys\n"
        "import fedad.export.api\n"
        "from fedad.core.detector import detector_class\n"
        "from fedad.export.registry import exporter_for\n"
        "own = lambda: sorted(m for m in sys.modules if m.startswith('fedad.methods.')\n"
        "                     and m.endswith('.export'))\n"
        "assert own() == [], own()\n"
        "det = detector_class('oselm-autoencoder')(n_hidden=4)\n"
        "exporter_for(det)\n"
        "assert own() == ['fedad.methods.onlad.export'], own()\n"
    )
    run_fresh(code, timeout=300)

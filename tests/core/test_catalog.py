"""The catalog (:mod:`fedad.core.catalog`): each method folder's declarations agree with the classes
they name, and a run imports only the methods and detectors its config names."""

from __future__ import annotations

from pathlib import Path

import pytest

from fedad.core.algorithm import method_class, method_names, registry
from fedad.core.catalog import (
    declare_detector,
    declare_method,
    detector_entries,
    method_entries,
)
from fedad.core.detector import detector_class, detector_classes
from tests.fresh import run_fresh


@pytest.mark.parametrize("name", sorted(method_entries()))
def test_declaration_agrees_with_the_method(name: str) -> None:
    entry = method_entries()[name]
    cls = method_class(name)
    assert cls is not None and cls.name == name
    assert cls.__module__ == entry.module
    assert (cls.summary, tuple(cls.kinds), tuple(cls.detectors)) == (
        entry.summary,
        entry.kinds,
        entry.detectors,
    )
    assert set(entry.detectors) <= set(detector_entries())


@pytest.mark.parametrize("name", sorted(detector_entries()))
def test_declaration_agrees_with_the_detector(name: str) -> None:
    cls = detector_class(name)
    assert cls is not None and cls.registry_name == name
    assert cls.__module__ == detector_entries()[name].module


def test_every_builtin_class_is_declared() -> None:
    builtin = {n for n, c in registry().items() if c.__module__.startswith("fedad.methods.")}
    assert builtin == set(method_entries())
    detectors = {n for n, c in detector_classes().items() if c.__module__.startswith("fedad.")}
    assert detectors == set(detector_entries())
    assert set(method_entries()) <= set(method_names())


def test_unknown_names_and_conflicting_declarations() -> None:
    assert method_class("no-such-method") is None and detector_class("no-such") is None
    with pytest.raises(ValueError, match="declared twice"):
        declare_method("onlad", "fedad.methods.fgad.federated", "x", ("graph",))
    with pytest.raises(ValueError, match="declared twice"):
        declare_detector("fgad", "os")
    # the same declaration again is harmless (a module imported twice)
    entry = method_entries()["onlad"]
    declare_method(entry.name, entry.module, entry.summary, entry.kinds, entry.detectors)


def test_a_run_imports_only_its_methods() -> None:
    """Building ONLAD imports ONLAD's modules and no other method's (nor their heavy
    dependencies: torch-geometric, kornia, zuko)."""
    code = (
        "import sys\n"
        "import fedad.runner\n"
        "from fedad.core.algorithm import method_class\n"
        "from fedad.core.detector import detector_class\n"
        "assert method_class('onlad') is not None\n"
        "assert detector_class('oselm-autoencoder') is not None\n"
        "mods = {m.split('.')[2] for m in sys.modules\n"
        "        if m.startswith('fedad.methods.') and m.count('.') > 2}\n"
        "assert mods == {'onlad'}, mods\n"
        "heavy = [m for m in ('torch_geometric', 'kornia', 'zuko') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    run_fresh(code)


def test_a_declared_method_takes_summary_kinds_and_detectors_from_its_declaration(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The catalog entry is the one source: the class gets its values at registration, and a
    declared class that writes its own is refused."""
    import fedad.core.catalog as catalog
    from fedad.core import algorithm

    monkeypatch.setattr(algorithm, "_REGISTRY", dict(algorithm._REGISTRY))
    entry = catalog.MethodEntry("catalog-probe", __name__, "a probe", ("graph",), ("deepsvdd",))
    monkeypatch.setitem(catalog._METHODS, entry.name, entry)

    class Probe(algorithm.Algorithm):
        name = "catalog-probe"

    algorithm.register(Probe)
    assert (Probe.summary, Probe.kinds, Probe.detectors) == ("a probe", ("graph",), ("deepsvdd",))

    class Own(algorithm.Algorithm):
        name = "catalog-probe"
        summary = "written twice"

    del algorithm._REGISTRY["catalog-probe"]
    with pytest.raises(TypeError, match="sets summary itself"):
        algorithm.register(Own)

    class Undeclared(algorithm.Algorithm):
        name = "catalog-undeclared"
        summary = "its own"

    algorithm.register(Undeclared)
    assert Undeclared.summary == "its own"


def test_no_method_base_class_writes_a_summary_or_kinds() -> None:
    """(The registered classes themselves are held to it by ``register``, at import.)"""
    registered = set(registry().values())
    for name in method_entries():
        cls = method_class(name)
        assert cls is not None
        for klass in cls.__mro__[1:]:
            if klass.__module__.startswith("fedad.methods.") and klass not in registered:
                assert not {"summary", "kinds"} & set(vars(klass)), klass


def _plugin(root: Path, module: str, body: str) -> None:
    """An installed package of one module whose entry point in group ``fedad.methods``
    names it (a ``.dist-info`` folder on the path, as pip writes one)."""
    info = root / "fedad_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fedad-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[fedad.methods]\nplugin = {module}\n")
    (root / f"{module}.py").write_text(body)


def test_a_plugin_package_declares_methods_beside_the_built_in_ones(tmp_path: Path) -> None:
    """The catalog imports every package of the entry-point group at its first look-up: the
    built-in methods and another package's, with nothing of fedad importing either."""
    _plugin(
        tmp_path,
        "my_methods",
        "from fedad.core.catalog import declare_method\n"
        "declare_method('my-method', 'my_methods_impl', 'a plugin', ('vector',))\n",
    )
    code = (
        "import sys\n"
        f"sys.path.insert(0, {str(tmp_path)!r})\n"
        "from fedad.core.catalog import method_entries\n"
        "names = method_entries()\n"
        "assert 'my-method' in names and 'onlad' in names, sorted(names)\n"
        "assert names['my-method'].summary == 'a plugin'\n"
    )
    run_fresh(code)


def test_a_plugin_that_fails_to_import_is_one_line(tmp_path: Path) -> None:
    _plugin(tmp_path, "broken_methods", "raise RuntimeError('half installed')\n")
    code = (
        "import sys\n"
        f"sys.path.insert(0, {str(tmp_path)!r})\n"
        "from fedad.core.catalog import method_entries\n"
        "from fedad.core.errors import FedadError\n"
        "try:\n"
        "    method_entries()\n"
        "except FedadError as err:\n"
        "    text = str(err)\n"
        "else:\n"
        "    raise AssertionError('no error')\n"
        "assert \"plugin 'plugin' (broken_methods)\" in text and 'half installed' in text, text\n"
        "assert '\\n' not in text\n"
    )
    run_fresh(code)


def test_the_built_in_methods_do_not_depend_on_installed_metadata() -> None:
    """Run from its source folder, or beside metadata of an older install that lacks the
    entry point, fedad still finds its own methods."""
    code = (
        "import importlib.metadata as md\n"
        "md.entry_points = lambda **kw: md.EntryPoints(())\n"
        "from fedad.core.catalog import method_entries, detector_entries\n"
        "assert 'onlad' in method_entries() and 'oselm-autoencoder' in detector_entries()\n"
    )
    run_fresh(code)

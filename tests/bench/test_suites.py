"""The shipped suites: declarations checked against the catalog and the data halves, and a
config of the user's read as a suite."""

from __future__ import annotations

from pathlib import Path

import pytest

from fedad.bench.expand import expand_methods, pairs_for, parse_methods
from fedad.bench.suites import data_kind, load_target, shipped_suites, suite_from_config
from fedad.core.algorithm import method_class
from fedad.core.errors import ConfigError

FAMILIES = {"tables", "images", "graphs", "defects", "one-vs-rest"}


def test_every_suite_method_exists_and_takes_its_data() -> None:
    for suite in shipped_suites().values():
        for fed in suite.federations:
            kind = data_kind(fed)
            for m in fed.raw.get("methods", []):
                cls = method_class(m["name"])
                assert cls is not None, (suite.name, fed.name, m)
                assert kind in cls.kinds_for(m.get("detector")), (suite.name, fed.name, m)


def test_dev_and_eval_suites_read_their_half_and_cover_every_family() -> None:
    suites = shipped_suites()
    for split in ("dev", "eval"):
        mine = [s for s in suites.values() if s.split == split]
        assert {k for s in mine for k in s.kinds} == FAMILIES, split
        for s in mine:
            assert all(f.raw["data"]["part"] == split for f in s.federations), s.name
    assert suites["smoke"].split == "smoke"
    dev_seeds = {x for s in suites.values() if s.split == "dev" for x in s.seeds}
    eval_seeds = {x for s in suites.values() if s.split == "eval" for x in s.seeds}
    assert dev_seeds.isdisjoint(eval_seeds)


def test_a_config_without_methods_expands_to_every_compatible_pair(tmp_path: Path) -> None:
    cfg = tmp_path / "mine.toml"
    cfg.write_text('seeds = [3, 4]\n[data]\nname = "breast_cancer"\n[partition]\nclients = 2\n')
    suite = suite_from_config(cfg, [])
    assert suite.seeds == (3, 4) and suite.split == "user" and suite.kinds == ("tables",)
    pairs = expand_methods("vector", [])
    labels = {p.label for p in pairs}
    assert {"local-autoencoder", "centralized-ocsvm", "fedavg-deepsvdd", "onlad"} <= labels
    for p in pairs:  # every pair takes vectors, and none that does not is there
        assert "vector" in method_class(p.method).kinds_for(p.detector)  # type: ignore[union-attr]
    assert not any(p.detector in ("patchcore", "pretrained") for p in pairs)
    assert {p.method for p in pairs_for("graph")} >= {"fgad", "fgad-plus", "fedavg"}


def test_methods_pick_names_and_pairs() -> None:
    chosen = expand_methods("image", parse_methods("feddymem,fedavg:patchcore"))
    assert [p.label for p in chosen] == ["feddymem", "fedavg-patchcore"]
    every_fedavg = expand_methods("vector", parse_methods("fedavg"))
    assert {p.detector for p in every_fedavg} == {"autoencoder", "deepsvdd"}
    with pytest.raises(ConfigError, match="fgad"):
        expand_methods("vector", parse_methods("fgad"))


def test_a_target_that_is_neither_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="neither a shipped suite nor a config"):
        load_target("no-such-suite", [])
    bad = tmp_path / "bad.toml"
    bad.write_text('seed = 0\n[data]\nname = "breast_cancer"\nrounds_typo = 3\n')
    with pytest.raises(ConfigError):
        load_target(str(bad), [])


def test_a_top_level_table_in_a_suite_file_is_refused_not_ignored(tmp_path: Path) -> None:
    """`--set engine.device=cuda` on a suite file (or an [engine] table beside [suite])
    would apply to no federation: one line saying where it goes; per federation it works."""
    suite = tmp_path / "mine.toml"
    suite.write_text(
        '[suite]\nseeds = [0]\n[[federations]]\nname = "a"\n'
        '[federations.data]\nname = "breast_cancer"\n'
        '[federations.partition]\nscheme = "iid"\nclients = 2\n'
    )
    with pytest.raises(ConfigError, match=r"'engine' at the top level applies to no federation"):
        load_target(str(suite), ["engine.device=cuda"])
    one = load_target(str(suite), ["federations.0.engine.device=cpu"])
    assert one.federations[0].raw["engine"]["device"] == "cpu"


def test_methods_on_a_federation_with_its_own_rows_keep_their_params(tmp_path: Path) -> None:
    """--methods on a suite with explicit rows: the rows of a named method (or label) keep
    their params and labels; a name with no row there runs the catalog's pair at default
    params."""
    from fedad.bench.benchmark import BenchRequest, federation_config

    path = tmp_path / "mine.toml"
    path.write_text(
        "[suite]\nseeds = [0]\n[[federations]]\nname = 'd'\nrounds = 1\n"
        "[federations.data]\nname = 'digits'\nnormal = [0]\nanomaly = [1]\n"
        "[federations.partition]\nscheme = 'iid'\nclients = 2\n"
        "[[federations.methods]]\nname = 'fedavg'\ndetector = 'autoencoder'\n"
        "label = 'ae-fast'\nparams = {lr = 0.01}\n"
        "[[federations.methods]]\nname = 'fedavg'\ndetector = 'deepsvdd'\n"
        "[[federations.methods]]\nname = 'onlad'\n"
    )
    suite = load_target(str(path), [])
    fed = suite.federations[0]

    def picked(spec: str) -> tuple[list[str], list[str]]:
        req = BenchRequest(suite=suite, out=tmp_path / "o", methods=parse_methods(spec))
        cfg, pairs = federation_config(fed, req)
        return cfg.labels(), [p.label for p in pairs]

    labels, added = picked("fedavg:autoencoder,local:deepsvdd")
    assert labels == ["ae-fast", "local-deepsvdd"] and added == ["local-deepsvdd"]
    req = BenchRequest(suite=suite, out=tmp_path / "o", methods=parse_methods("ae-fast"))
    assert federation_config(fed, req)[0].methods[0].params == {"lr": 0.01}
    assert picked("fedavg")[0] == ["ae-fast", "fedavg"]
    assert picked("onlad,fedavg:deepsvdd") == (["onlad", "fedavg"], [])

"""The suite files behind the numbers the method docs cite (``benchmarks/suites/``): each
still loads, and each of its method rows still validates against today's params, so a
renamed or re-bounded param fails here instead of in the command a reader runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from fedad.bench.benchmark import BenchRequest, federation_config
from fedad.bench.suites import load_target
from fedad.core.algorithm import method_class

SUITES = sorted((Path(__file__).resolve().parents[2] / "benchmarks" / "suites").glob("*.toml"))


def test_there_are_suites() -> None:
    assert len(SUITES) >= 20


@pytest.mark.parametrize("path", SUITES, ids=lambda p: p.stem)
def test_a_reproduction_suite_loads_and_its_params_validate(path: Path, tmp_path: Path) -> None:
    suite = load_target(str(path), [])
    assert suite.federations
    for fed in suite.federations:
        cfg, _ = federation_config(fed, BenchRequest(suite=suite, out=tmp_path))
        for label, m in zip(cfg.labels(), cfg.methods, strict=True):
            cls = method_class(m.name)
            assert cls is not None, (path.name, fed.name, label)
            cls.ParamsModel.model_validate(m.params)

"""A user's MVTec-layout folder through ``fedad bench``: ranked with the defect methods."""

from __future__ import annotations

from pathlib import Path

from fedad.bench.results import read_results
from fedad.cli.app import app
from tests.data.test_mvtec import write_category
from tests.hostile.conftest import runner


def test_an_mvtec_folder_is_a_defects_target(tmp_path: Path) -> None:
    root = tmp_path / "mvtec_ad"
    write_category(root, "carpet", 1)
    write_category(root, "tile", 2)
    cfg = tmp_path / "factory.toml"
    cfg.write_text(
        f'rounds = 1\n[data]\nname = "mvtec"\npath = "{root}"\nsize = 32\n'
        '[partition]\nscheme = "iid"\nclients = 2\n'
    )
    out = tmp_path / "b"
    args = ["bench", str(cfg), "--out", str(out), "--methods", "feddymem,local:patchcore", "-q"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    rows = read_results(out / "results.csv")
    assert {r["label"] for r in rows} == {"feddymem", "local-patchcore"}
    assert all(r["kind"] == "defects" and r["pixel_auroc"] is not None for r in rows)

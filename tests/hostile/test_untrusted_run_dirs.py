"""Crafted run directories: what fedad reads back never allocates what a header declares,
builds what parameters declare, or scores what does not fit. All on copies of the test
session's one finished run."""

from __future__ import annotations

import io
import json
import math
import zipfile
from html import unescape
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from numpy.lib import format as npy_format

import fedad
from fedad.cli.app import app
from fedad.core.detector import InputMismatch, detector_from_config
from fedad.core.errors import FedadError
from fedad.rundir.read import npz_shapes, read_npz
from tests.hostile.conftest import one_line_error, runner

HUGE = (2**40,)
"""8 TiB of float64: what a 200-byte file may declare."""


def _header(shape: tuple[int, ...], descr: str = "<f8", fortran: bool = False) -> bytes:
    buf = io.BytesIO()
    npy_format.write_array_header_1_0(
        buf, {"descr": descr, "fortran_order": fortran, "shape": shape}
    )
    return buf.getvalue()


def _crafted(path: Path, members: dict[str, bytes]) -> Path:
    """An .npz of raw members (name -> bytes), as a crafted file would hold them."""
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return path


def _bomb(path: Path, names: tuple[str, ...]) -> Path:
    """Every array of ``names`` declared (2**40,) float64, with no data."""
    return _crafted(path, {f"{n}.npy": _header(HUGE) for n in names})


# -- the one reader --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("members", "needle"),
    [
        ({"a.npy": _header(HUGE)}, "declares array 'a' of shape (1099511627776,)"),
        ({"a.npy": _header((4,)) + b"\0" * 8}, "declares array 'a' of shape (4,) (32 bytes)"),
        ({"a.npy": _header((1,)) + b"\0" * 16}, "holds 16"),
        ({"a.npy": _header((2,), "|O")}, "not plain numbers"),
        ({"a.npy": _header((2,), "|V8")}, "not plain numbers"),
        ({"a.npy": _header((3,), "|S0")}, "items of no size"),
        ({"a.npy": b"\x93NUMPY\x01\x00" + b"\x05\x00{'x':"}, "not a readable .npz"),
        ({"a.npy": b"not an array at all"}, "not a readable .npz"),
        ({"a.txt": b"hello"}, "'a.txt' is not one array's name"),
    ],
)
def test_reader_checks_each_header_before_reading(
    tmp_path: Path, members: dict[str, bytes], needle: str
) -> None:
    path = _crafted(tmp_path / "x.npz", members)
    for read in (read_npz, npz_shapes):
        with pytest.raises(FedadError) as err:
            read(path, fix="fix it")
        assert needle in str(err.value) and "\n" not in str(err.value)
        assert str(err.value).startswith(f"'{path}'") and str(err.value).endswith("(fix it)")


def test_reader_refuses_a_name_twice_and_a_total_over_the_cap(tmp_path: Path) -> None:
    one = _header((2,)) + b"\0" * 16
    with zipfile.ZipFile(tmp_path / "twice.npz", "w") as zf:
        zf.writestr("a.npy", one)
        with pytest.warns(UserWarning, match="Duplicate name"):
            zf.writestr("a.npy", one)
    with pytest.raises(FedadError, match=r"'a\.npy' is not one array's name"):
        read_npz(tmp_path / "twice.npz")
    np.savez(tmp_path / "big.npz", a=np.zeros(100))
    with pytest.raises(FedadError, match="would unpack to 928 bytes, more than the 900"):
        read_npz(tmp_path / "big.npz", max_bytes=900)


def test_reader_gives_what_numpy_gives(tmp_path: Path) -> None:
    arrays: dict[str, Any] = {
        "f": np.asfortranarray(np.arange(12.0).reshape(3, 4)),
        "big_endian": np.arange(5, dtype=">i4"),
        "scalar": np.float64(2.5),
        "empty": np.zeros((0, 7), np.float32),
        "text": np.array(["ab", "c"]),
        "bytes": np.array([b"xy"]),
        "flags": np.array([True, False]),
        "label/score": np.linspace(0, 1, 9),
    }
    for save in (np.savez, np.savez_compressed):
        save(tmp_path / "a.npz", **arrays)
        got = read_npz(tmp_path / "a.npz")
        assert set(got) == set(arrays)
        with np.load(tmp_path / "a.npz") as ref:
            for k in arrays:
                assert got[k].dtype == ref[k].dtype and got[k].shape == ref[k].shape, k
                assert np.array_equal(got[k], ref[k]), k
                assert got[k].flags.writeable
        shapes = npz_shapes(tmp_path / "a.npz")
        assert {k: v[0] for k, v in shapes.items()} == {k: np.shape(v) for k, v in arrays.items()}


@pytest.mark.parametrize(
    "name", ["checkpoints/fedavg-ae/global.npz", "checkpoints/local-svdd/client_1.npz"]
)
def test_a_checkpoint_declaring_8_tib_is_a_one_line_error(run_copy: Path, name: str) -> None:
    _bomb(run_copy / name, ("encoder.conv.0.weight",))
    with pytest.raises(FedadError, match=r"declares array 'encoder\.conv\.0\.weight'") as err:
        fedad.load(str(run_copy))
    assert "\n" not in str(err.value)


def test_report_files_declaring_8_tib_are_left_out_with_a_note(run_copy: Path) -> None:
    _bomb(run_copy / "scores.npz", ("fedavg-ae/score", "fedavg-ae/label"))
    _bomb(run_copy / "maps.npz", ("fedavg-ae/image",))
    _bomb(run_copy / "embeddings.npz", ("fedavg-ae/embedding",))
    res = runner.invoke(app, ["report", str(run_copy)])
    assert res.exit_code == 0, res.output
    html = unescape((run_copy / "report.html").read_text())
    for name in ("scores.npz", "maps.npz", "embeddings.npz"):
        assert f"{name}' declares array" in html, name


def test_resume_from_kept_results_declaring_8_tib_loses_nothing(run_copy: Path) -> None:
    done = run_copy / ".fedad" / "done" / "fedavg-ae.npz"
    _bomb(done, ("fedavg-ae/score",))
    before = {
        p: p.read_bytes() for p in run_copy.rglob("*") if p.is_file() and "lock" not in p.name
    }
    res = runner.invoke(app, ["run", str(run_copy / "config.toml"), "--out", str(run_copy),
                              "--resume", "-q"])  # fmt: skip
    assert "declares array 'fedavg-ae/score'" in one_line_error(res)
    for path, data in before.items():
        assert path.read_bytes() == data, path


# -- detector.json ---------------------------------------------------------------------------


def _meta(run: Path, label: str = "fedavg-ae") -> Path:
    return run / "checkpoints" / label / "detector.json"


def _edit(path: Path, edit: object) -> None:
    data = json.loads(path.read_text())
    edit(data)  # type: ignore[operator]
    path.write_text(json.dumps(data))


def test_client_ids_are_bounded_by_the_runs_clients(run_copy: Path) -> None:
    _edit(
        _meta(run_copy), lambda m: m["thresholds"].update({str(i): 0.1 for i in range(2, 200_000)})
    )
    with pytest.raises(
        FedadError, match=r"names client 2 in thresholds, but the run had 2 clients"
    ):
        fedad.load(str(run_copy))
    # no believable count in metrics.json or config.toml: at most what a config may ask for
    _edit(run_copy / "metrics.json", lambda m: m["experiment"].update(clients=10**9))
    config = (run_copy / "config.toml").read_text()
    (run_copy / "config.toml").write_text(config.replace("clients = 2\n", "clients = -1\n"))
    with pytest.raises(FedadError, match="but the run had 100000 clients"):
        fedad.load(str(run_copy))
    _edit(_meta(run_copy), lambda m: m.update(thresholds={"0": 0.1, "007": 0.1}))
    with pytest.raises(FedadError, match="'007' in thresholds, not a client id"):
        fedad.load(str(run_copy))


def test_many_clients_of_a_global_method_share_one_detector_built_lazily(
    run_copy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import fedad.rundir.load as runs

    n = 100_000
    _edit(run_copy / "metrics.json", lambda m: m["experiment"].update(clients=n))
    _edit(_meta(run_copy), lambda m: m.update(thresholds={str(i): i / n for i in range(n)}))
    built: list[object] = []
    real = runs.detector_from_config  # type: ignore[attr-defined]

    def counted(*args: Any) -> Any:
        built.append(args)
        return real(*args)

    monkeypatch.setattr(runs, "detector_from_config", counted)
    run = fedad.load(str(run_copy))
    per_client = run.detectors["fedavg-ae"]
    assert len(per_client) == n and 99_999 in per_client and n not in per_client
    one, other = run.detector("fedavg-ae", 5), run.detector("fedavg-ae", 99_999)
    assert one.model_ is other.model_  # type: ignore[attr-defined]
    assert (one.threshold_, other.threshold_) == (5 / n, 99_999 / n)
    assert len(built) == 2  # the global methods' one detector each (fedavg-ae, onlad)
    assert run.detector("fedavg-ae", 5) is one
    run.detector("local-svdd", 1)  # a personalized client's: built when first asked for
    assert len(built) == 3
    x = np.zeros((2, 1, 8, 8), np.float32)
    assert np.array_equal(one.score(x), other.score(x))


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity"])
def test_a_threshold_that_is_not_finite_is_refused(run_copy: Path, value: str) -> None:
    text = _meta(run_copy, "local-svdd").read_text()
    _meta(run_copy, "local-svdd").write_text(text.replace('"1": ', f'"1": {value}, "x": ', 1))
    _edit(_meta(run_copy, "local-svdd"), lambda m: m["thresholds"].pop("x"))
    with pytest.raises(FedadError, match="threshold of client 1 is not a finite number"):
        fedad.load(str(run_copy))


def test_a_damaged_client_file_is_found_at_load_and_its_detector_built_on_use(
    run_copy: Path,
) -> None:
    path = run_copy / "checkpoints" / "local-svdd" / "client_1.npz"
    path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(FedadError, match=r"client_1\.npz' is not a readable \.npz"):
        fedad.load(str(run_copy))
    np.savez(path, weight=np.zeros(3))  # readable, but not this detector's arrays
    run = fedad.load(str(run_copy))
    assert run.detector("local-svdd", 0).score(np.zeros((1, 1, 8, 8), np.float32)).shape == (1,)
    with pytest.raises(FedadError, match="do not fit"):
        run.detector("local-svdd", 1)


def test_parameters_declaring_a_huge_network_are_refused_before_it_is_built(
    run_copy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fedad.components.detectors.neural import TorchDetector

    def never(self: object) -> None:
        raise AssertionError("a network was built before its arrays were checked")

    monkeypatch.setattr(TorchDetector, "build", never)
    for shape in ([2**21], [2**24], [1, 8, 9]):
        kind = "image" if len(shape) == 3 else "vector"
        _edit(_meta(run_copy), lambda m, s=shape, k=kind: m["detector"]["params"].update(
            input_shape=s, kind=k))  # fmt: skip
        with pytest.raises(FedadError, match="do not fit detector 'autoencoder'"):
            fedad.load(str(run_copy))


def test_feddymem_stages_beyond_the_backbone_are_refused() -> None:
    for params in ({"stages": [99]}, {"backbone": "wide_resnet50_2", "stages": [3, 5]}):
        with pytest.raises(FedadError, match="'stages' of detector 'feddymem' is invalid"):
            detector_from_config({"class": "feddymem", "params": params}, {})


def test_feddymem_stages_in_a_config_are_one_line(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text('rounds = 1\n[data]\nname = "textures"\n[[methods]]\nname = "feddymem"\n'
                   "params = { stages = [2, 99] }\n")  # fmt: skip
    msg = one_line_error(runner.invoke(app, ["run", str(cfg), "--out", str(tmp_path / "o")]))
    assert "params.stages" in msg and "1..7" in msg


# -- data that do not fit the detector ---------------------------------------------------------


def test_score_from_python_checks_the_declared_input(finished_run: Path) -> None:
    run = fedad.load(str(finished_run))
    det = run.detector("fedavg-ae", 0)  # an image autoencoder of 1 x 8 x 8 digits
    assert det.expected_input() == ("image", (1, 8, 8))
    for x in (np.zeros((3, 1, 8, 9)), np.zeros((3, 64)), np.zeros((3, 3, 8, 8))):
        with pytest.raises(InputMismatch, match=r"takes images of shape \(1, 8, 8\)") as err:
            det.score(x)
        assert "\n" not in str(err.value)
        with pytest.raises(ValueError):  # also what code that catches ValueError expects
            det.predict(x)
    assert det.score(np.zeros((3, 1, 8, 8), np.float32)).shape == (3,)
    assert math.isfinite(float(det.score(np.zeros((1, 1, 8, 8), np.float32))[0]))

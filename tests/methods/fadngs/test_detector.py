"""FADngs's detector as a checkpoint gives it back: the encoder's stem stride."""

from __future__ import annotations

import numpy as np
import pytest

from fedad.core.detector import detector_from_config
from fedad.methods.fadngs.detector import FADngsDetector


def _fitted(side: int, **params: object) -> FADngsDetector:
    det = FADngsDetector(input_shape=[1, side, side], width=4, proj_dim=4, **params).build()
    det.set_density(np.zeros((1, 4)), np.eye(4)[None])
    return det


@pytest.mark.parametrize(("side", "given", "stride"),
                         [(28, "auto", 2), (16, "auto", 2), (12, "auto", 1), (8, "auto", 1),
                          (28, 1, 1), (8, 2, 2)])  # fmt: skip
def test_stem_stride_auto_by_image_side_and_round_trips(
    side: int, given: object, stride: int
) -> None:
    det = _fitted(side, stem_stride=given)
    assert det.encoder_.backbone.stem[0].stride == (stride, stride)
    back = detector_from_config(det.to_config(), det.model_arrays())
    assert isinstance(back, FADngsDetector)
    assert back.encoder_.backbone.stem[0].stride == (stride, stride)


def test_a_checkpoint_written_before_stem_stride_scores_as_it_did() -> None:
    old = _fitted(28, stem_stride=1)
    config = old.to_config()
    del config["params"]["stem_stride"]
    back = detector_from_config(config, old.model_arrays())
    assert isinstance(back, FADngsDetector)
    assert back.encoder_.backbone.stem[0].stride == (1, 1)
    back.set_density(np.zeros((1, 4)), np.eye(4)[None])
    x = np.random.default_rng(0).random((3, 1, 28, 28)).astype(np.float32)
    np.testing.assert_allclose(back.represent(x), old.represent(x), rtol=1e-6)

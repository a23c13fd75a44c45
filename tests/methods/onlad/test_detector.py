"""ONLAD's detector (OS-ELM autoencoder): its declared input."""

from __future__ import annotations

import numpy as np
import pytest

from fedad.core.detector import InputMismatch
from fedad.methods.onlad.detector import OSELMAutoEncoder


def test_score_of_another_width_is_one_line() -> None:
    """A fitted detector declares its input width; other data are a one-line error (issue
    26 #6), not numpy's broadcasting error."""
    det = OSELMAutoEncoder(seed=0).fit(np.random.default_rng(0).random((80, 6)))
    assert det.expected_input() == ("flat", (6,))
    with pytest.raises(InputMismatch, match="takes samples of 6 values"):
        det.score(np.zeros((3, 7)))
    assert OSELMAutoEncoder().expected_input() is None  # nothing drawn yet

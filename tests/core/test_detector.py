"""What a method forwards to its detector (:meth:`BaseDetector.configured`): the fields it
declares shared, the ones it lists, never a field that only happens to have the same name."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import pytest
from pydantic import Field

from fedad.core.algorithm import Params
from fedad.core.detector import BaseDetector, DetectorParams, shared_field


class _Params(DetectorParams):
    width: int = Field(default=8, ge=1, le=64)
    rate: float = Field(default=0.1, gt=0.0)


class _Detector(BaseDetector):
    ParamsModel = _Params

    def fit(self, x: np.ndarray) -> _Detector:
        return self

    def score(self, x: np.ndarray) -> np.ndarray:
        return np.zeros(len(x))

    def get_arrays(self) -> dict[str, np.ndarray]:
        return {}

    def set_arrays(self, arrays: dict[str, np.ndarray]) -> _Detector:
        return self


def test_shared_and_listed_fields_are_forwarded() -> None:
    class Method(Params):
        forwarded: ClassVar[frozenset[str]] = frozenset({"rate"})
        width: int = shared_field(_Params, "width")
        rate: float = Field(default=0.5, gt=0.0)  # the method's own default

    det = _Detector.configured(Method(width=3))
    assert det.params.width == 3 and det.params.rate == 0.5
    assert _Detector.configured(Method(width=3), width=5).params.width == 5


def test_a_field_that_only_shares_a_name_is_refused() -> None:
    class Method(Params):
        rate: float = Field(default=0.5, gt=0.0)  # same name, not declared shared

    with pytest.raises(TypeError, match="rate has the name of a _Detector parameter"):
        _Detector.configured(Method())
    given: dict[str, Any] = {"rate": 0.2}
    assert _Detector.configured(Method(), **given).params.rate == 0.2  # given: not forwarded


def test_shared_field_keeps_bounds_and_marks_the_copy() -> None:
    class Method(Params):
        width: int = shared_field(_Params, "width", description="its own words")

    with pytest.raises(ValueError):
        Method(width=100)
    field = Method.model_fields["width"]
    assert field.description == "its own words"
    assert _Params.model_fields["width"].json_schema_extra is None  # the original is untouched

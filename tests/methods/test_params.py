"""One contract test over every registered detector and method: each hyperparameter is
declared once (the detector's ``ParamsModel``), the defaults agree everywhere, a method
forwards what it shares with its detector, and every param survives a checkpoint."""

from __future__ import annotations

import json
import typing
from typing import Any

import numpy as np
import pytest
from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo

from fedad.core.algorithm import Algorithm, Params, Setup, build_algorithm, registry
from fedad.core.detector import BaseDetector, DetectorParams, detector_classes, detector_from_config
from fedad.core.errors import FedadError

DETECTORS = detector_classes()
METHODS = registry()
SHAPES = {"vector": (8,), "image": (3, 32, 32), "graph": (5,)}
CASES = [
    (name, kind, det)
    for name, cls in METHODS.items()
    for kind in cls.kinds
    for det in ([d for d in cls.detectors if kind in cls.kinds_for(d)] or [None])
]
OWN_DECLARATIONS = {("feddymem", "score_norm"), ("feddymem", "feature_norm")}
"""Fields a method declares apart from its detector on purpose: FedDyMem divides each
client's memory features by their training spread by default (``feature_norm``), and its
description of ``score_norm`` is the federation's; a stand-alone detector, and a checkpoint
written before these keys existed, does neither."""


def _setup(kind: str) -> Setup:
    return Setup(kind, SHAPES[kind], rounds=2, seed=3, contamination=0.07, num_clients=3)  # type: ignore[arg-type]


def _candidates(info: FieldInfo, default: Any) -> list[Any]:
    """Values other than ``default`` that a field of this kind may take (checked by the
    caller against the field's bounds)."""
    if isinstance(default, bool):
        return [not default]
    if isinstance(default, int):
        return [default + 1, default - 1, default * 2]
    if isinstance(default, float):
        return [default * 0.5, default * 0.9 + 1e-3, default + 0.5]
    args = typing.get_args(info.annotation)
    choices = [a for a in args if isinstance(a, str)]
    for a in args:
        choices += [x for x in typing.get_args(a) if isinstance(x, str)]
    return [x for x in choices if x != default]


def _other_value(model: type[BaseModel], field: str, base: dict[str, Any], like: Any = None) -> Any:
    """A value of ``field`` that ``model`` accepts (with ``base`` for the others) and that
    differs from its default (``None`` = chosen later: one near ``like``); the default when
    there is none."""
    info = model.model_fields[field]
    default = info.get_default(call_default_factory=True)
    near = default if default is not None else like
    for value in _candidates(info, near) if near is not None else []:
        try:
            model.model_validate({**base, field: value})
        except ValidationError:
            continue
        return value
    return default


def _non_default(model: type[BaseModel]) -> dict[str, Any]:
    """Every field of ``model`` set, one at a time, to a valid non-default value (a value
    that would make the whole set invalid with the others is left at its default)."""
    params: dict[str, Any] = {}
    for field in model.model_fields:
        value = _other_value(model, field, params)
        try:
            model.model_validate({**params, field: value})
        except ValidationError:
            continue
        params[field] = value
    return params


@pytest.mark.parametrize("name", sorted(DETECTORS))
def test_detector_params_are_declared_once(name: str) -> None:
    cls = DETECTORS[name]
    model = cls.ParamsModel
    assert issubclass(model, DetectorParams)
    assert model.model_config.get("frozen") and model.model_config.get("extra") == "forbid"
    defaults = {f: i.get_default(call_default_factory=True) for f, i in model.model_fields.items()}
    det = cls()
    assert list(det.get_params()) == list(model.model_fields)
    # a ``None`` default is resolved by the detector (FedDyMem's stages, from its backbone)
    assert det.get_params() == {
        k: det.get_params()[k] if v is None else v for k, v in defaults.items()
    }
    assert det.contamination == defaults.get("contamination", det.contamination)
    with pytest.raises(TypeError, match="unexpected keyword argument 'no_such_param'"):
        cls(no_such_param=1)


@pytest.mark.parametrize("name", sorted(DETECTORS))
def test_every_detector_param_round_trips_through_a_checkpoint_config(name: str) -> None:
    """Non-default params -> ``to_config`` -> JSON -> the validation and construction of
    :func:`detector_from_config` (what ``fedad.load`` runs) -> the same ``get_params``."""
    cls = DETECTORS[name]
    params = _non_default(cls.ParamsModel)
    det = cls(**params)
    config = json.loads(json.dumps(det.to_config()))
    assert config["class"] == name
    validated = cls.ParamsModel.model_validate(config["params"])
    again = cls(**validated.model_dump())
    assert json.dumps(again.get_params()) == json.dumps(det.get_params())


def _left_to_detector(mine: FieldInfo, theirs: FieldInfo) -> bool:
    """A method's optional field (default ``None``) of the detector's type: unset, the
    detector's default (or one the method derives, e.g. from the images' size) applies."""
    if mine.get_default() is not None:
        return False
    rest = [a for a in typing.get_args(mine.annotation) if a is not type(None)]
    if len(rest) > 1:
        rest = [typing.Union[tuple(rest)]]  # noqa: UP007
    spelled = repr(rest[0]).replace("list[int]", "tuple[int, ...]") if len(rest) == 1 else ""
    return spelled == repr(theirs.annotation)


def _declaring(model: type[BaseModel], field: str) -> type[BaseModel]:
    """The most basic class of ``model``'s hierarchy that declares ``field``: the method's
    own declaration, not a registered variant's changed default."""
    owners = [c for c in model.__mro__ if field in getattr(c, "__annotations__", {})]
    return owners[-1]


def _shared(cls: type[Algorithm], det: type[BaseDetector]) -> list[str]:
    fields = det.ParamsModel.model_fields
    return [f for f in cls.ParamsModel.model_fields if f in fields and f != "contamination"]


def _detector_class(name: str, kind: str, det: str | None) -> type[BaseDetector]:
    return type(build_algorithm(name, {}, _setup(kind), det).make_detector())


@pytest.mark.parametrize(("name", "kind", "det"), CASES)
def test_method_and_detector_defaults_agree(name: str, kind: str, det: str | None) -> None:
    """A field a method shares (by name) with its detector has the detector's type and
    default where the method declares it (a registered variant may change a default; a
    method may bound a field more tightly than a checkpoint may)."""
    cls = METHODS[name]
    algo = build_algorithm(name, {}, _setup(kind), det)
    dcls = type(algo.make_detector())
    for field in _shared(cls, dcls):
        mine = _declaring(cls.ParamsModel, field).model_fields[field]
        theirs = dcls.ParamsModel.model_fields[field]
        if (name, field) in OWN_DECLARATIONS or _left_to_detector(mine, theirs):
            continue
        # a config takes a list where a checkpoint's schema reads a tuple (``stages``)
        spelled = repr(mine.annotation).replace("list[int]", "tuple[int, ...]")
        assert spelled == repr(theirs.annotation), field
        default = theirs.get_default(call_default_factory=True)
        # the method's declared default, or the one it resolves for this detector (the
        # baselines train patchcore in batches of 10 unless the config says otherwise)
        effective = getattr(algo.params, field)
        assert default in (mine.get_default(call_default_factory=True), effective), field


@pytest.mark.parametrize(("name", "kind", "det"), CASES)
def test_make_detector_forwards_every_shared_param(name: str, kind: str, det: str | None) -> None:
    """Each shared param, set to a non-default value, reaches the detector; the detector's
    contamination is the method's resolved one."""
    cls = METHODS[name]
    dcls = _detector_class(name, kind, det)
    algo = build_algorithm(name, {}, _setup(kind), det)
    assert algo.make_detector().contamination == algo.contamination
    defaults = dcls().get_params()
    for field in _shared(cls, dcls):
        value = _other_value(cls.ParamsModel, field, {}, like=defaults[field])
        if value == cls.ParamsModel.model_fields[field].get_default(call_default_factory=True):
            continue
        try:
            algo = build_algorithm(name, {field: value}, _setup(kind), det)
        except FedadError:  # a value this method refuses for this detector or kind
            continue
        got = algo.make_detector().get_params()[field]
        assert got == getattr(algo.params, field), field


def test_method_params_are_frozen() -> None:
    assert Params.model_config.get("frozen")
    for cls in METHODS.values():
        assert cls.ParamsModel.model_config.get("frozen"), cls.name


@pytest.mark.parametrize("name", ["fgad"])
def test_a_fitted_detector_with_non_default_params_loads_with_them(name: str) -> None:
    """Fit a tiny detector with non-default params, rebuild it from its config and arrays as
    ``fedad.load`` does: the same params and scores."""
    from tests.conftest import make_federation

    fed = make_federation("graph")
    x = fed.clients[0].x_train
    small = {"hidden": 6, "layers": 2, "gen_hidden": 4, "gen_layers": 1, "epochs": 1}
    det = DETECTORS[name](**small, pretrain_epochs=1, lam=0.5, head="teacher", seed=4)
    det.fit(x)
    config = json.loads(json.dumps(det.to_config()))
    again = detector_from_config(config, det.get_arrays())
    assert again.get_params() == det.get_params()
    np.testing.assert_array_equal(again.score(x), det.score(x))

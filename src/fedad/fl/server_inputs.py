"""What a server program gets besides its clients, resolved from a method's requirements.

:meth:`Algorithm.requirements <fedad.core.algorithm.Algorithm.requirements>` declares it;
this module checks it before anything trains (:func:`check_requirements`) and builds the
public set by name (:func:`public_set`) where the server program runs, so every engine,
the Flower ServerApp included, derives the same set from the run config alone: nothing is
handed over in files or messages. Pretrained resources are not built here: a method loads
them by name with :func:`fedad.resources.get_resource` (cached per process).
"""

from __future__ import annotations

import zlib

import numpy as np

from fedad.core.algorithm import Algorithm, Requirements, SampleField
from fedad.core.errors import ConfigError
from fedad.core.types import Federation
from fedad.data.public import public_images

PUBLIC_STREAM = zlib.crc32(b"fedad-public-set")
"""Mixed into the run's seed for the public set's own random stream."""

SUPPORTED_FIELDS: tuple[SampleField, ...] = ("x", "mask", "graph")
"""Sample fields the data layer can supply (:func:`supplied_fields` says which a run has)."""


def supplied_fields(fed: Federation) -> tuple[SampleField, ...]:
    """The sample fields ``fed`` carries: ``x`` always (dense features or graphs), ``graph``
    for graph data, ``mask`` when every client has pixel masks."""
    out: list[SampleField] = ["x"]
    if fed.kind == "graph":
        out.append("graph")
    if fed.has_masks:
        out.append("mask")
    return tuple(out)


def requirements(algorithm: Algorithm) -> Requirements:
    """The requirements of a built (validated) algorithm."""
    return type(algorithm).requirements(algorithm.params.model_dump())


def check_requirements(
    algorithm: Algorithm, label: str, fields: tuple[SampleField, ...] = ("x",)
) -> None:
    """One-line :class:`ConfigError` for a requirement this run cannot meet; ``fields`` are
    the sample fields the run's data carry (:func:`supplied_fields`)."""
    req = requirements(algorithm)
    from fedad.resources import check_available

    for name in req.resources:
        check_available(name)
    missing = [f for f in req.fields if f not in fields]
    if missing:
        raise ConfigError(
            f"method '{label}' reads sample field(s) {missing}, which this data set lacks",
            "choose a data set that has them",
        )
    if req.public is not None:
        _public_shape(algorithm, req)
        from fedad.data.public import public_names

        if req.public.name not in public_names():
            raise ConfigError(
                f"method '{label}' asks for the public set '{req.public.name}', which is not known",
                f"known: {', '.join(public_names())}",
            )


def _public_shape(algorithm: Algorithm, req: Requirements) -> tuple[int, int, int]:
    assert req.public is not None
    if req.public.shape is not None:
        return req.public.shape
    shape = tuple(algorithm.setup.feature_shape)
    if algorithm.setup.kind != "image" or len(shape) != 3:
        raise ConfigError(
            f"method '{algorithm.name}' asks for a public image set shaped like the clients' "
            f"data, which are {algorithm.setup.kind} data",
            "use it on image data",
        )
    return (int(shape[0]), int(shape[1]), int(shape[2]))


def public_set(algorithm: Algorithm) -> np.ndarray | None:
    """The public set the algorithm asked for, drawn from the run's seed, or None."""
    req = requirements(algorithm)
    if req.public is None:
        return None

    seed = (int(algorithm.setup.seed) ^ PUBLIC_STREAM) % (1 << 63)
    return public_images(req.public.name, req.public.n, _public_shape(algorithm, req), seed)

"""Missing and infinite feature values: found once per loaded data set, then handled.

``data.missing`` says what happens to a NaN or +-Inf feature value (both count as missing):

* ``"error"`` (default): a one-line :class:`~fedad.core.errors.DataError` naming the data set,
  how many values in how many rows, and the columns;
* ``"drop"``: rows (training and test) holding one are removed before anything else;
* ``"impute-mean"``: each is replaced by its feature's mean over the clients' training data
  (never test or server data), the statistic a server could get from the clients' sums and
  counts of observed values. Applied to training, test and server data alike, before
  standardization.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Literal

import numpy as np

from fedad.core.errors import DataError
from fedad.core.types import Dataset, Features, GraphSet, dense, take

MissingPolicy = Literal["error", "drop", "impute-mean"]

__all__ = ["MissingPolicy", "check_missing", "fill_missing", "training_means"]


def _bad_rows(x: Features | None) -> np.ndarray:
    if isinstance(x, GraphSet):
        bad_value = ~np.isfinite(x.x)
        if not bad_value.any():
            return np.zeros(len(x), dtype=bool)
        c = np.concatenate([[0], np.cumsum(bad_value)])
        per_graph: np.ndarray = c[x.x_ptr[1:]] - c[x.x_ptr[:-1]]
        out: np.ndarray = per_graph > 0
        return out
    if x is None or x.size == 0:
        return np.zeros(0 if x is None else len(x), dtype=bool)
    if not np.issubdtype(x.dtype, np.floating):
        return np.zeros(len(x), dtype=bool)
    flat: np.ndarray = x.reshape(len(x), -1)
    return np.asarray(~np.isfinite(flat).all(axis=1))


def _describe(ds: Dataset, name: str) -> str:
    if isinstance(ds.x, GraphSet):
        graphs = int(_bad_rows(ds.x).sum() + _bad_rows(ds.x_test).sum())
        return f"data set '{name}' has missing or infinite node features in {graphs} graphs"
    parts = [dense(p) for p in (ds.x, ds.x_test) if p is not None and len(p)]
    flat = [p.reshape(len(p), -1) for p in parts]
    bad = [~np.isfinite(f) for f in flat]
    count = sum(int(b.sum()) for b in bad)
    rows = sum(int(b.any(axis=1).sum()) for b in bad)
    cols = np.flatnonzero(np.any([b.any(axis=0) for b in bad], axis=0))
    names = [ds.columns[c] if c < len(ds.columns) else str(c) for c in cols]
    shown = ", ".join(names[:8]) + (f" and {len(names) - 8} more" if len(names) > 8 else "")
    what = "columns" if ds.columns else "features"
    return (
        f"data set '{name}' has {count} missing or infinite values in {rows} rows ({what} {shown})"
    )


def check_missing(ds: Dataset, name: str, policy: MissingPolicy) -> Dataset:
    """``ds`` checked for NaN/Inf under ``policy`` (see the module docstring).

    ``"drop"`` returns the data set without the affected rows; ``"impute-mean"`` returns it
    with every missing or infinite value as NaN, for :func:`fill_missing` to fill later.
    """
    bad, bad_test = _bad_rows(ds.x), _bad_rows(ds.x_test)
    if not (bad.any() or bad_test.any()):
        return ds
    if policy == "error":
        raise DataError(
            _describe(ds, name),
            'set data.missing = "drop" or "impute-mean", or clean the data',
        )
    if policy == "drop":
        if bad.all():
            raise DataError(f"data.missing = 'drop' leaves data set '{name}' without rows")
        keep = np.flatnonzero(~bad)
        out = dataclasses.replace(
            ds,
            x=take(ds.x, keep),
            y=ds.y[keep],
            mask=None if ds.mask is None else ds.mask[keep],
            defect=None if ds.defect is None else ds.defect[keep],
            group=None if ds.group is None else ds.group[keep],
        )
        if ds.x_test is not None and ds.y_test is not None:
            keep_test = np.flatnonzero(~bad_test)
            out = dataclasses.replace(
                out,
                x_test=take(ds.x_test, keep_test),
                y_test=ds.y_test[keep_test],
                mask_test=None if ds.mask_test is None else ds.mask_test[keep_test],
                defect_test=None if ds.defect_test is None else ds.defect_test[keep_test],
                group_test=None if ds.group_test is None else ds.group_test[keep_test],
            )
        return out
    if isinstance(ds.x, GraphSet):
        raise DataError(
            f"data.missing = 'impute-mean' does not apply to graph data ('{name}')",
            'use data.missing = "drop", or clean the node features',
        )
    assert isinstance(ds.x_test, np.ndarray | None)
    out = dataclasses.replace(ds, x=np.where(np.isfinite(ds.x), ds.x, np.nan).astype(ds.x.dtype))
    if ds.x_test is not None:
        x_test = np.where(np.isfinite(ds.x_test), ds.x_test, np.nan).astype(ds.x_test.dtype)
        out = dataclasses.replace(out, x_test=x_test)
    return out


def training_means(blocks: Sequence[np.ndarray], name: str) -> np.ndarray:
    """Per-feature mean of the observed (finite) values in the clients' training ``blocks``.

    :math:`\\mu_j = \\sum_k s_{kj} / \\sum_k c_{kj}` from each client's sum and count of
    observed values of feature :math:`j`.
    """
    total: np.ndarray | None = None
    count: np.ndarray | None = None
    for b in blocks:
        if len(b) == 0:
            continue
        x = b.reshape(len(b), -1).astype(np.float64)
        seen = np.isfinite(x)
        s, c = np.where(seen, x, 0.0).sum(axis=0), seen.sum(axis=0)
        total = s if total is None else total + s
        count = c if count is None else count + c
    if total is None or count is None:
        raise DataError(f"data.missing = 'impute-mean': '{name}' has no training data")
    if np.any(count == 0):
        j = int(np.flatnonzero(count == 0)[0])
        raise DataError(
            f"data.missing = 'impute-mean': feature {j} of '{name}' has no observed value in "
            "the training data",
            'use data.missing = "drop" or remove that feature',
        )
    return np.asarray(total / count)


def fill_missing(x: np.ndarray, means: np.ndarray) -> np.ndarray:
    """``x`` with each NaN replaced by its feature's value in ``means`` (same dtype)."""
    if len(x) == 0:
        return x
    flat = x.reshape(len(x), -1)
    out = np.where(np.isnan(flat), means[None, :].astype(x.dtype), flat)
    return out.reshape(x.shape).astype(x.dtype, copy=False)

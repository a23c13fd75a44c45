"""data.missing: NaN/Inf found once per data set; error, drop or training-mean imputation."""

from __future__ import annotations

import numpy as np
import pytest

from fedad.core.errors import DataError
from fedad.core.types import Dataset
from fedad.data.missing import check_missing, fill_missing, training_means


def _ds() -> Dataset:
    x = np.arange(24, dtype=np.float32).reshape(6, 4)
    x[1, 2] = np.nan
    x[4, 0] = np.inf
    xt = np.ones((3, 4), np.float32)
    xt[2, 3] = -np.inf
    return Dataset("t", x, np.arange(6) % 2, "vector", ("a", "b"), True, xt, np.zeros(3, int),
                   columns=("w", "x", "y", "z"))  # fmt: skip


def test_error_names_set_count_rows_and_columns() -> None:
    with pytest.raises(DataError) as err:
        check_missing(_ds(), "t", "error")
    msg = str(err.value)
    assert "'t' has 3 missing or infinite values in 3 rows (columns w, y, z)" in msg
    assert "data.missing" in msg and "\n" not in msg


def test_drop_removes_rows_of_train_and_test() -> None:
    out = check_missing(_ds(), "t", "drop")
    assert out.x.shape == (4, 4) and np.isfinite(out.x).all()
    assert list(out.y) == [0, 0, 1, 1]
    assert out.x_test is not None and out.x_test.shape == (2, 4)


def test_impute_marks_nan_then_fills_with_training_means_only() -> None:
    out = check_missing(_ds(), "t", "impute-mean")
    assert np.isnan(out.x[4, 0]) and np.isnan(out.x[1, 2])
    train = [out.x[:3], out.x[3:]]
    mu = training_means(train, "t")
    assert mu[0] == pytest.approx(np.mean([0, 4, 8, 12, 20]))
    assert mu[2] == pytest.approx(np.mean([2, 10, 14, 18, 22]))
    filled = fill_missing(out.x, mu)
    assert filled[4, 0] == pytest.approx(mu[0]) and filled.dtype == np.float32
    assert np.array_equal(filled[0], out.x[0])


def test_clean_data_is_untouched() -> None:
    ds = Dataset("c", np.zeros((3, 2), np.float32), np.zeros(3, int), "vector", ("n",))
    assert check_missing(ds, "c", "error") is ds


def test_feature_never_observed_in_training() -> None:
    with pytest.raises(DataError, match="feature 1"):
        training_means([np.array([[1.0, np.nan]])], "t")


def test_graphs_with_missing_node_features_are_dropped_or_refused() -> None:
    from fedad.core.types import GraphSet

    def g(v: float, nodes: int = 2) -> tuple[np.ndarray, np.ndarray]:
        return np.full((nodes, 2), v, np.float32), np.zeros((2, 0), np.int64)

    graphs = GraphSet.from_graphs([g(0.0), g(np.nan), g(1.0, 0), g(np.inf, 1), g(2.0)])
    ds = Dataset("gr", graphs, np.array([0, 0, 1, 1, 0]), "graph", ("a", "b"))
    with pytest.raises(DataError, match="node features in 2 graphs"):
        check_missing(ds, "gr", "error")
    kept = check_missing(ds, "gr", "drop")
    assert isinstance(kept.x, GraphSet) and len(kept.x) == 3
    np.testing.assert_array_equal(kept.y, [0, 1, 0])
    assert kept.x.graph(2)[0][0, 0] == 2.0 and kept.x.n_nodes.tolist() == [2, 0, 2]
    with pytest.raises(DataError, match="does not apply to graph data"):
        check_missing(ds, "gr", "impute-mean")

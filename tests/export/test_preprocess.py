"""The preprocessing of inputs.json inside an exported model equals fedad's
(:meth:`fedad.rundir.inputs.Inputs.table`), bit for bit, on random tables and raw rows."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fedad.core.errors import FedadError
from fedad.export.check import session, table_feeds
from fedad.export.preprocess import MISSING_TEXT, X, preprocessing, standalone
from fedad.export.registry import NotExportable
from fedad.rundir.inputs import Inputs

CATS = ("acme", "omni", "zeta", "NA-like")


@st.composite
def tables(draw: st.DrawFn) -> tuple[Inputs, pd.DataFrame]:
    """Inputs of 1-3 numeric columns and 0-2 text columns (0-3 categories kept each),
    imputed or not, standardised or not; a frame of raw rows for them."""
    n_num = draw(st.integers(1, 3))
    n_txt = draw(st.integers(0, 2))
    cats = {f"t{k}": tuple(draw(st.permutations(CATS))[: draw(st.integers(0, 3))])
            for k in range(n_txt)}  # fmt: skip
    columns = tuple(f"n{k}" for k in range(n_num)) + tuple(cats)
    width = n_num + sum(len(c) for c in cats.values())
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    impute = draw(st.booleans())
    scaled = draw(st.booleans())
    hot = np.array([False] * n_num + [True] * (width - n_num))
    inputs = Inputs(
        kind="vector",
        feature_shape=(width,),
        dataset="table",
        columns=columns,
        categories=cats,
        impute_means=rng.normal(0, 3, width) if impute else None,
        mean=np.where(hot, 0.0, rng.normal(0, 10, width)) if scaled else None,
        std=np.where(hot, 1.0, rng.uniform(0.01, 5, width)) if scaled else None,
    )
    rows = draw(st.integers(1, 12))
    data: dict[str, list[object]] = {}
    for c in columns:
        if c in cats:
            pool = [*cats[c], "other", " acme ", "  NA"] + ([None, "NA", ""] if impute else [])
            data[c] = [pool[int(i)] for i in rng.integers(0, len(pool), rows)]
        else:
            v = rng.normal(0, 20, rows).tolist()
            if impute:
                v[int(rng.integers(rows))] = float("nan")
            data[c] = v
    return inputs, pd.DataFrame(data)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tables())
def test_the_graph_preprocesses_raw_rows_as_fedad_does(case: tuple[Inputs, pd.DataFrame]) -> None:
    inputs, frame = case
    want = inputs.table(frame)
    sess = session(standalone(preprocessing(inputs)))
    got = sess.run([X], table_feeds(frame, inputs))[0]
    assert got.dtype == np.float32 and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


def test_rows_fedad_refuses_are_marked() -> None:
    """No imputation: a missing cell, or a value that standardises beyond float32, marks
    the row (the model then scores it NaN, flagged) where fedad refuses the table."""
    inputs = Inputs("vector", (2,), "table", ("a", "b"), {}, None,
                    np.array([0.0, 0.0]), np.array([1.0, 1e-12]))  # fmt: skip
    frame = pd.DataFrame({"a": [1.0, float("nan"), 2.0], "b": [0.0, 0.0, 1e30]})
    with pytest.raises(FedadError):
        inputs.table(frame)
    pre = preprocessing(inputs)
    x, bad = session(standalone(pre)).run([X, pre.bad], table_feeds(frame, inputs))
    assert bad.tolist() == [False, True, True]
    np.testing.assert_array_equal(x[:1], inputs.table(frame.iloc[:1]))


def test_missing_text_cells_are_missing_unless_a_category() -> None:
    """pandas' missing cells (empty, NA, null, ...) are missing, each one-hot column NaN
    and then imputed; one training kept as a category stays that category."""
    cats = {"d": ("NA", "x")}
    inputs = Inputs("vector", (2,), "table", ("d",), cats, np.array([0.25, 0.5]))
    feeds = {"d": np.array([["NA"], ["null"], ["x"], ["y"]], dtype=object)}
    got = session(standalone(preprocessing(inputs))).run([X], feeds)[0]
    np.testing.assert_array_equal(got, [[1, 0], [0.25, 0.5], [0, 1], [0, 0]])
    assert "null" in MISSING_TEXT


@pytest.mark.parametrize("column", ["score", "anomaly", "client", ""])
def test_a_column_named_like_an_output_is_refused(column: str) -> None:
    inputs = Inputs("vector", (1,), "table", (column,))
    with pytest.raises(NotExportable, match="cannot name an input"):
        preprocessing(inputs)


def test_graph_data_is_refused_in_one_line() -> None:
    with pytest.raises(NotExportable, match="graph data cannot be exported") as err:
        preprocessing(Inputs("graph", (7,), "mutag"))
    assert "\n" not in str(err.value)

"""Exact-number, agreement and property tests for fedad.evaluation.metrics."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.metrics import (
    average_precision_score,
    f1_score,
    precision_score,
    recall_score,
    roc_auc_score,
)
from sklearn.metrics import roc_curve as sk_roc_curve

from fedad.evaluation.metrics import (
    EVALUATE_KEYS,
    aupr,
    auroc,
    binary_metrics,
    confusion_counts,
    eer,
    evaluate,
    evaluate_clients,
    normal_positive_metrics,
    roc_curve,
)

# --------------------------------------------------------------------------- hand-computed


def test_auroc_hand_computed_with_tie() -> None:
    # anomalies: 0.8, 0.4 ; normals: 0.1, 0.4, 0.5
    # pairs (a, n): (0.8,*) wins 3; (0.4,0.1) win, (0.4,0.4) tie = 0.5, (0.4,0.5) loss
    # AUROC = (3 + 1 + 0.5) / (2 * 3) = 0.75
    y = [1, 0, 1, 0, 0]
    s = [0.8, 0.1, 0.4, 0.4, 0.5]
    assert auroc(y, s) == pytest.approx(0.75, abs=1e-12)


def test_aupr_hand_computed() -> None:
    # descending scores: 0.9(1) 0.8(0) 0.7(1) 0.2(0)
    # thresholds: k=1 P=1/1 R=1/2 ; k=2 P=1/2 R=1/2 ; k=3 P=2/3 R=1 ; k=4 P=2/4 R=1
    # AP = (1/2 - 0) * 1 + 0 + (1 - 1/2) * 2/3 + 0 = 1/2 + 1/3 = 5/6
    y = [1, 0, 1, 0]
    s = [0.9, 0.8, 0.7, 0.2]
    assert aupr(y, s) == pytest.approx(5 / 6, abs=1e-12)


def test_aupr_with_tied_block() -> None:
    # all four scores tied: a single threshold with P = 2/4, R = 1 -> AP = 0.5
    assert aupr([1, 0, 1, 0], [3, 3, 3, 3]) == pytest.approx(0.5)


def test_eer_exact_point() -> None:
    # y=[0,0,1,1], s=[0.1,0.4,0.35,0.8]; ROC points (FPR, TPR):
    # (0,0) -> t=0.8 (0, 1/2) -> t=0.4 (1/2, 1/2) -> t=0.35 (1/2, 1) -> (1, 1)
    # at (1/2, 1/2): FPR = FNR = 1/2 exactly
    assert eer([0, 0, 1, 1], [0.1, 0.4, 0.35, 0.8]) == pytest.approx(0.5)


def test_eer_interpolated() -> None:
    # y=[0,0,0,1,1], s=[1,2,4,3,5]; descending: 5(a) 4(n) 3(a) 2(n) 1(n)
    # ROC points and d = FPR - FNR: (0,0) d=-1; (0,1/2) d=-1/2; (1/3,1/2) d=-1/6;
    # (1/3,1) d=+1/3 -> interpolate: w = (1/6) / (1/2) = 1/3,
    # FPR = 1/3, FNR = 1/2 - w * 1/2 = 1/3  => EER = 1/3
    assert eer([0, 0, 0, 1, 1], [1, 2, 4, 3, 5]) == pytest.approx(1 / 3)


def test_eer_extremes() -> None:
    assert eer([0, 0, 1, 1], [1, 2, 3, 4]) == pytest.approx(0.0)
    assert eer([0, 0, 1, 1], [4, 3, 2, 1]) == pytest.approx(1.0)
    # all tied: the ROC is the diagonal segment (0,0)-(1,1); FPR = FNR at 1/2
    assert eer([0, 1, 0, 1], [7, 7, 7, 7]) == pytest.approx(0.5)


def test_roc_curve_points() -> None:
    fpr, tpr, thr = roc_curve([0, 0, 1, 1], [0.1, 0.4, 0.35, 0.8])
    np.testing.assert_allclose(fpr, [0, 0, 0.5, 0.5, 1])
    np.testing.assert_allclose(tpr, [0, 0.5, 0.5, 1, 1])
    assert thr[0] == np.inf
    np.testing.assert_allclose(thr[1:], [0.8, 0.4, 0.35, 0.1])


def test_binary_metrics_hand_computed() -> None:
    #            y: 1 1 1 1 0 0 0 0 0 0
    #         pred: 1 1 1 0 1 1 0 0 0 0
    # TP = 3, FN = 1, FP = 2, TN = 4, n = 10
    y = [1, 1, 1, 1, 0, 0, 0, 0, 0, 0]
    pred = [1, 1, 1, 0, 1, 1, 0, 0, 0, 0]
    assert confusion_counts(y, pred) == (3, 2, 1, 4)
    m = binary_metrics(y, pred)
    assert m["precision"] == pytest.approx(3 / 5)
    assert m["recall"] == pytest.approx(3 / 4)
    assert m["f1"] == pytest.approx(2 * 3 / (2 * 3 + 2 + 1))  # 6/9
    assert m["accuracy"] == pytest.approx(7 / 10)
    assert m["fe"] == pytest.approx(2 / 5)  # FP / (TP + FP)
    assert m["me"] == pytest.approx(1 / 4)  # FN / (TP + FN)


def test_binary_metrics_normal_positive() -> None:
    # same data; normal positive: TP' = TN = 4, FP' = FN = 1, FN' = FP = 2, TN' = TP = 3
    y = [1, 1, 1, 1, 0, 0, 0, 0, 0, 0]
    pred = [1, 1, 1, 0, 1, 1, 0, 0, 0, 0]
    assert confusion_counts(y, pred, positive=0) == (4, 1, 2, 3)
    m = binary_metrics(y, pred, positive=0)
    assert m["precision"] == pytest.approx(4 / 5)
    assert m["recall"] == pytest.approx(4 / 6)
    assert m["f1"] == pytest.approx(8 / 11)
    assert m["accuracy"] == pytest.approx(7 / 10)
    assert normal_positive_metrics(y, pred) == {
        "precision": m["precision"],
        "recall": m["recall"],
        "f1": m["f1"],
    }


def test_binary_metrics_undefined_ratios_are_none() -> None:
    # no anomalies in y and none predicted: TP = FP = FN = 0, TN = 3
    m = binary_metrics([0, 0, 0], [0, 0, 0])
    assert m["precision"] is None and m["fe"] is None  # 0 / (TP + FP) = 0/0
    assert m["recall"] is None and m["me"] is None  # 0 / (TP + FN) = 0/0
    assert m["f1"] is None
    assert m["accuracy"] == 1.0
    # anomalies exist but none predicted: precision/fe 0/0, recall = 0, me = 1, f1 = 0
    m = binary_metrics([1, 0, 1], [0, 0, 0])
    assert m["precision"] is None and m["fe"] is None
    assert m["recall"] == 0.0 and m["me"] == 1.0 and m["f1"] == 0.0
    for v in m.values():
        assert v is None or not math.isnan(v)


def test_single_class_ranking_metrics_are_none() -> None:
    for y in ([0, 0, 0], [1, 1, 1]):
        assert auroc(y, [0.1, 0.2, 0.3]) is None
        assert aupr(y, [0.1, 0.2, 0.3]) is None
        assert eer(y, [0.1, 0.2, 0.3]) is None


def test_evaluate_keys_and_types() -> None:
    y = [1, 1, 1, 1, 0, 0, 0, 0, 0, 0]
    s = [9, 8, 7, 1, 6, 5, 2, 3, 4, 0]
    pred = [1, 1, 1, 0, 1, 1, 0, 0, 0, 0]
    out = evaluate(y, s, pred)
    assert tuple(out) == EVALUATE_KEYS
    assert out["n"] == 10 and out["n_anomalies"] == 4
    assert isinstance(out["n"], int)
    assert out["fe"] == pytest.approx(2 / 5)
    # pairs: 9, 8, 7 beat all 6 normals (18); 1 beats 0 only (1) -> 19 / 24
    assert out["auroc"] == pytest.approx(19 / 24)
    assert all(v is None or isinstance(v, (int, float)) for v in out.values())
    no_pred = evaluate(y, s)
    assert no_pred["f1"] is None and no_pred["auroc"] == out["auroc"]


def test_evaluate_clients() -> None:
    y = np.array([1, 0, 0, 1, 0, 0, 0])
    s = np.array([0.9, 0.1, 0.2, 0.3, 0.5, 0.4, 0.6])
    pred = np.array([1, 0, 0, 0, 0, 0, 1])
    client = np.array([2, 2, 2, 0, 0, 0, 5])
    rows = evaluate_clients(y, s, pred, client)
    assert [r["client"] for r in rows] == [0, 2, 5]
    assert all(tuple(r)[1:] == EVALUATE_KEYS for r in rows)
    c0, c2, c5 = rows
    assert c0["auroc"] == 0.0 and c0["n"] == 3 and c0["n_anomalies"] == 1
    assert c2["auroc"] == 1.0 and c2["f1"] == 1.0
    assert c5["auroc"] is None  # one sample, one class
    assert c5["precision"] == 0.0 and c5["recall"] is None  # FP = 1, TP + FN = 0


# --------------------------------------------------------------------------- validation


@pytest.mark.parametrize(
    ("y", "s", "match"),
    [
        ([0, 1], [0.1], "same length"),
        ([0, 2], [0.1, 0.2], "only 0"),
        ([0, 1], [0.1, np.nan], "finite"),
        ([0, 1], [0.1, np.inf], "finite"),
        ([[0, 1], [1, 0]], [[0.1, 0.2], [0.3, 0.4]], "1-D"),
        ([0, 1], ["a", "b"], "real numbers"),
    ],
)
def test_invalid_inputs(y: object, s: object, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        auroc(y, s)  # type: ignore[arg-type]


def test_invalid_pred_and_client() -> None:
    with pytest.raises(ValueError, match="pred"):
        binary_metrics([0, 1], [0, 3])
    with pytest.raises(ValueError, match="same length"):
        evaluate([0, 1], [0.1, 0.2], [0])
    with pytest.raises(ValueError, match="client"):
        evaluate_clients([0, 1], [0.1, 0.2], [0, 1], [0.5, 1.0])
    with pytest.raises(ValueError, match="positive"):
        binary_metrics([0, 1], [0, 1], positive=2)


def test_bool_and_float_labels_accepted() -> None:
    assert auroc(np.array([True, False]), [1.0, 0.0]) == 1.0
    assert auroc(np.array([1.0, 0.0]), [1.0, 0.0]) == 1.0


# --------------------------------------------------------------------------- vs scikit-learn


@pytest.mark.parametrize("seed", range(5))
def test_agreement_with_sklearn(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = 200
    y = (rng.random(n) < 0.2).astype(int)
    y[:2] = [0, 1]
    s = rng.normal(size=n) + y
    if seed % 2:
        s = np.round(s, 1)  # many ties
    pred = (s > 0.8).astype(int)
    assert auroc(y, s) == pytest.approx(roc_auc_score(y, s), abs=1e-12)
    assert aupr(y, s) == pytest.approx(average_precision_score(y, s), abs=1e-12)
    m = binary_metrics(y, pred)
    assert m["f1"] == pytest.approx(f1_score(y, pred), abs=1e-12)
    assert m["precision"] == pytest.approx(precision_score(y, pred), abs=1e-12)
    assert m["recall"] == pytest.approx(recall_score(y, pred), abs=1e-12)
    mn = normal_positive_metrics(y, pred)
    assert mn["f1"] == pytest.approx(f1_score(y, pred, pos_label=0), abs=1e-12)
    # our ROC has every point; sklearn's full curve (no dropping) must match it
    fpr, tpr, _ = roc_curve(y, s)
    sk_fpr, sk_tpr, _ = sk_roc_curve(y, s, drop_intermediate=False)
    np.testing.assert_allclose(fpr, sk_fpr)
    np.testing.assert_allclose(tpr, sk_tpr)
    # the EER lies on the ROC curve where FPR = FNR
    e = eer(y, s)
    assert e is not None and 0.0 <= e <= 1.0
    assert e == pytest.approx(np.interp(0.0, fpr - (1 - tpr), fpr), abs=1e-12)


# --------------------------------------------------------------------------- properties

_labels = st.lists(st.integers(0, 1), min_size=2, max_size=40).filter(lambda v: 0 in v and 1 in v)


@st.composite
def _labelled_scores(draw: st.DrawFn, unique: bool = False) -> tuple[list[int], list[float]]:
    y = draw(_labels)
    ints = st.integers(-50, 50)
    values = draw(st.lists(ints, min_size=len(y), max_size=len(y), unique=unique))
    return y, [float(v) for v in values]


@settings(max_examples=100, deadline=None)
@given(_labelled_scores())
def test_auroc_invariant_under_increasing_transform(data: tuple[list[int], list[float]]) -> None:
    y, s = data
    x = np.asarray(s)
    a = auroc(y, s)
    assert a is not None
    for t in (3.0 * x - 7.0, x**3 + 5.0 * x, np.exp(x / 10.0)):
        assert auroc(y, t) == pytest.approx(a, abs=1e-12)
    assert aupr(y, x**3 + 5.0 * x) == pytest.approx(aupr(y, s), abs=1e-12)
    assert eer(y, 3.0 * x - 7.0) == pytest.approx(eer(y, s), abs=1e-12)


@settings(max_examples=100, deadline=None)
@given(_labelled_scores(unique=True))
def test_auroc_of_negated_scores(data: tuple[list[int], list[float]]) -> None:
    y, s = data
    a, b = auroc(y, s), auroc(y, [-v for v in s])
    assert a is not None and b is not None
    assert b == pytest.approx(1.0 - a, abs=1e-12)


@settings(max_examples=100, deadline=None)
@given(_labelled_scores())
def test_eer_symmetric_under_class_swap(data: tuple[list[int], list[float]]) -> None:
    # swapping the classes and negating the scores swaps FPR and FNR: the EER is unchanged
    y, s = data
    e = eer(y, s)
    assert e is not None and 0.0 <= e <= 1.0
    assert eer([1 - v for v in y], [-v for v in s]) == pytest.approx(e, abs=1e-12)


@settings(max_examples=100, deadline=None)
@given(_labelled_scores())
def test_ranking_metrics_match_sklearn_with_ties(data: tuple[list[int], list[float]]) -> None:
    y, s = data
    assert auroc(y, s) == pytest.approx(roc_auc_score(y, s), abs=1e-12)
    assert aupr(y, s) == pytest.approx(average_precision_score(y, s), abs=1e-12)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 1), st.integers(0, 1)), min_size=1, max_size=30))
def test_fe_me_complement_precision_recall(pairs: list[tuple[int, int]]) -> None:
    y = [a for a, _ in pairs]
    pred = [b for _, b in pairs]
    m = binary_metrics(y, pred)
    assert (m["fe"] is None) == (m["precision"] is None)
    assert (m["me"] is None) == (m["recall"] is None)
    if m["precision"] is not None:
        assert m["fe"] == pytest.approx(1.0 - m["precision"])
    if m["recall"] is not None:
        assert m["me"] == pytest.approx(1.0 - m["recall"])

"""Exact tests for fedad.evaluation.pixel: pixel AUROC against scikit-learn, PRO against a slow
reference written straight from the definition of [Bergmann et al. 2021]."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from sklearn.metrics import roc_auc_score

import fedad.evaluation.pixel as pixel_metrics_module
from fedad.evaluation.pixel import PIXEL_KEYS, pixel_auroc, pixel_metrics, pro_score

# --------------------------------------------------------------------------- reference


def _regions_8(mask: np.ndarray) -> list[list[tuple[int, int]]]:
    """Connected components of one 2-D mask, 8-connectivity, by flood fill."""
    h, w = mask.shape
    seen = np.zeros_like(mask, dtype=bool)
    regions = []
    for i in range(h):
        for j in range(w):
            if not mask[i, j] or seen[i, j]:
                continue
            seen[i, j] = True
            stack, region = [(i, j)], []
            while stack:
                a, b = stack.pop()
                region.append((a, b))
                for da in (-1, 0, 1):
                    for db in (-1, 0, 1):
                        u, v = a + da, b + db
                        if 0 <= u < h and 0 <= v < w and mask[u, v] and not seen[u, v]:
                            seen[u, v] = True
                            stack.append((u, v))
            regions.append(region)
    return regions


def reference_pro(maps: np.ndarray, masks: np.ndarray, fpr_limit: float = 0.3) -> float:
    """PRO from the definition: one threshold at a time, one region at a time."""
    maps = np.asarray(maps, dtype=np.float64)
    anomalous = np.asarray(masks) != 0
    regions = [(n, r) for n in range(len(maps)) for r in _regions_8(anomalous[n])]
    n_normal = int((~anomalous).sum())
    if not regions or n_normal == 0:
        return math.nan
    points = [(0.0, 0.0)]  # threshold above every score: nothing predicted anomalous
    for t in sorted(set(maps.ravel().tolist()), reverse=True):
        predicted = maps >= t
        fpr = int((predicted & ~anomalous).sum()) / n_normal
        overlaps = [sum(bool(predicted[n, a, b]) for a, b in r) / len(r) for n, r in regions]
        points.append((fpr, sum(overlaps) / len(overlaps)))
    area = 0.0
    for (x0, y0), (x1, y1) in itertools.pairwise(points):
        if x0 >= fpr_limit:
            break
        if x1 <= fpr_limit:
            area += (x1 - x0) * (y0 + y1) / 2
        else:  # the segment crosses the limit: cut it there
            y_at = y0 + (y1 - y0) * (fpr_limit - x0) / (x1 - x0)
            area += (fpr_limit - x0) * (y0 + y_at) / 2
            break
    return area / fpr_limit


def _same(a: float, b: float, tol: float = 1e-9) -> bool:
    return (math.isnan(a) and math.isnan(b)) or abs(a - b) <= tol


# --------------------------------------------------------------------------- hand-computed


def _diagonal_example() -> tuple[np.ndarray, np.ndarray]:
    # mask        scores
    # 1 1 0 0     .5 .5 .8 .1
    # 0 0 1 0     .1 .1 .9 .1
    # (0,1) and (1,2) touch at a corner: one region of 3 pixels with 8-connectivity.
    mask = np.array([[[1, 1, 0, 0], [0, 0, 1, 0]]], dtype=np.uint8)
    maps = np.array([[[0.5, 0.5, 0.8, 0.1], [0.1, 0.1, 0.9, 0.1]]])
    return maps, mask


def test_pro_hand_computed_eight_connectivity() -> None:
    # 5 normal pixels. t=.9: FPR 0, PRO 1/3; t=.8: FPR 1/5, PRO 1/3; t=.5: FPR 1/5, PRO 1;
    # t=.1: (1, 1). Area to 0.3 = 0.2 * 1/3 + 0.1 * 1 = 1/6; / 0.3 = 5/9.
    # (With 4-connectivity the regions would be {(0,0),(0,1)} and {(1,2)}: 2/3.)
    maps, mask = _diagonal_example()
    assert pro_score(maps, mask) == pytest.approx(5 / 9, abs=1e-12)
    assert reference_pro(maps, mask) == pytest.approx(5 / 9, abs=1e-12)


def test_pro_regions_do_not_join_across_images() -> None:
    # Image 0: one defect pixel in its last row, column 1, scored above everything.
    # Image 1: column 1 is a defect of 3 pixels, scored below everything. Two regions, so
    # the curve is (0,0) -> (0, 1/2) -> (1, 1/2) -> (1, 1) and the score 1/2. Labelling the
    # stack as one 3-D volume (same position in consecutive images) or as an (N*H, W) image
    # (last row of one image next to the first row of the next) would join them into one
    # region of 4 pixels and give 1/4.
    masks = np.zeros((2, 3, 3), dtype=bool)
    masks[0, 2, 1] = True
    masks[1, :, 1] = True
    maps = np.zeros((2, 3, 3))
    maps[0, 2, 1] = 2.0
    maps[1, :, 1] = -1.0
    assert pro_score(maps, masks) == pytest.approx(0.5, abs=1e-12)
    assert reference_pro(maps, masks) == pytest.approx(0.5, abs=1e-12)


def test_pro_perfect_and_constant_maps() -> None:
    rng = np.random.default_rng(0)
    masks = rng.random((3, 8, 8)) < 0.2
    masks[0] = False  # a defect-free image
    perfect = masks.astype(float) + rng.random(masks.shape) * 0.5
    assert pro_score(perfect, masks) == pytest.approx(1.0, abs=1e-12)
    assert pixel_auroc(perfect, masks) == 1.0
    constant = np.full(masks.shape, 0.7)
    # The curve is the diagonal (0,0)-(1,1): area to L is L^2 / 2, normalised L / 2.
    for limit in (0.3, 0.05, 1.0):
        assert pro_score(constant, masks, fpr_limit=limit) == pytest.approx(limit / 2, abs=1e-12)
    assert pixel_auroc(constant, masks) == 0.5
    inverted = -perfect
    assert pro_score(inverted, masks) == pytest.approx(0.0, abs=1e-12)
    assert pixel_auroc(inverted, masks) == 0.0


def test_pro_interpolates_at_the_limit() -> None:
    # 1 region of 1 pixel, 10 normals; the defect pixel ties with 5 normals at the top:
    # curve (0,0) -> (0.5, 1) -> (1, 1). At L = 0.3 the first segment is cut at PRO 0.6:
    # area 0.3 * 0.6 / 2 = 0.09; / 0.3 = 0.3.
    maps = np.array([[[1.0] * 6 + [0.0] * 5]])
    masks = np.zeros_like(maps, dtype=int)
    masks[0, 0, 0] = 1
    assert pro_score(maps, masks) == pytest.approx(0.3, abs=1e-12)
    assert reference_pro(maps, masks) == pytest.approx(0.3, abs=1e-12)
    # L = 0.5 lands on a curve point: 0.5 * 1 / 2 / 0.5 = 0.5; L = 1: (0.25 + 0.5) / 1.
    assert pro_score(maps, masks, fpr_limit=0.5) == pytest.approx(0.5, abs=1e-12)
    assert pro_score(maps, masks, fpr_limit=1.0) == pytest.approx(0.75, abs=1e-12)


def test_pixel_auroc_hand_computed_with_tie() -> None:
    # anomalous: 0.8, 0.4; normal: 0.1, 0.4, 0.5 -> (3 + 1 + 0.5) / 6 = 0.75
    maps = np.array([[[0.8, 0.1, 0.4, 0.4, 0.5]]])
    masks = np.array([[[1, 0, 1, 0, 0]]])
    assert pixel_auroc(maps, masks) == 0.75


# --------------------------------------------------------------------------- edge cases


def test_undefined_cases_give_nan() -> None:
    maps = np.random.default_rng(1).random((2, 4, 4))
    normal = np.zeros(maps.shape, dtype=bool)
    anomalous = np.ones(maps.shape, dtype=bool)
    for masks in (normal, anomalous):
        assert math.isnan(pixel_auroc(maps, masks))
        assert math.isnan(pro_score(maps, masks))
        out = pixel_metrics(maps, masks)
        assert all(math.isnan(v) for v in out.values())
    empty = np.zeros((0, 4, 4))
    assert math.isnan(pixel_auroc(empty, empty.astype(bool)))
    assert math.isnan(pro_score(empty, empty.astype(bool)))


def test_input_validation() -> None:
    maps = np.zeros((2, 3, 3))
    masks = np.zeros((2, 3, 3), dtype=bool)
    with pytest.raises(ValueError, match="shape"):
        pixel_auroc(maps[0], masks[0])
    with pytest.raises(ValueError, match="shape of maps"):
        pro_score(maps, masks[:1])
    bad = maps.copy()
    bad[0, 0, 0] = np.nan
    with pytest.raises(ValueError, match="finite"):
        pixel_auroc(bad, masks)
    with pytest.raises(ValueError, match=r"only 0 \(normal\) and 1"):
        pro_score(maps, np.full((2, 3, 3), 255, dtype=np.uint8))
    with pytest.raises(ValueError, match="only 0"):
        pro_score(maps, np.full((2, 3, 3), 0.5))
    with pytest.raises(ValueError, match="real numbers"):
        pixel_auroc(masks, masks)
    for limit in (0.0, -0.1, 1.5, float("nan")):
        with pytest.raises(ValueError, match="fpr_limit"):
            pro_score(maps, masks, fpr_limit=limit)


def test_dtypes_agree() -> None:
    rng = np.random.default_rng(2)
    masks = rng.random((2, 6, 7)) < 0.3
    maps = rng.integers(0, 5, masks.shape)
    expected = pixel_metrics(maps.astype(np.float64), masks)
    assert set(expected) == set(PIXEL_KEYS)
    for m in (maps, maps.astype(np.float32), maps.astype(np.float16)):
        for g in (masks, masks.astype(np.int64), masks.astype(np.uint8), masks.astype(float)):
            assert pixel_metrics(m, g) == expected
    # A non-contiguous view is accepted as is.
    wide = np.zeros((2, 6, 14))
    wide[:, :, ::2] = maps
    assert pixel_metrics(wide[:, :, ::2], masks) == expected


def test_pixel_metrics_matches_the_single_functions() -> None:
    rng = np.random.default_rng(3)
    masks = rng.random((4, 9, 9)) < 0.15
    maps = rng.normal(size=masks.shape) + masks
    out = pixel_metrics(maps, masks, fpr_limit=0.2)
    assert list(out) == list(PIXEL_KEYS)
    assert out["pixel_auroc"] == pixel_auroc(maps, masks)
    assert out["pro"] == pro_score(maps, masks, fpr_limit=0.2)
    assert all(type(v) is float for v in out.values())


def test_larger_case_against_sklearn_and_reference() -> None:
    rng = np.random.default_rng(4)
    masks = np.zeros((3, 24, 24), dtype=bool)
    masks[0, 3:9, 4:12] = True
    masks[0, 15:17, 15:22] = True
    masks[1, 10:20, 2:5] = True
    distinct = rng.normal(size=masks.shape) + 1.5 * masks
    for maps in (distinct, np.round(distinct, 1)):  # every score distinct; many ties
        assert pixel_auroc(maps, masks) == pytest.approx(
            roc_auc_score(masks.ravel(), maps.ravel()), abs=1e-12
        )
        assert pro_score(maps, masks) == pytest.approx(reference_pro(maps, masks), abs=1e-9)


def test_auroc_sum_in_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(5)
    masks = rng.random((2, 10, 10)) < 0.3
    maps = np.round(rng.normal(size=masks.shape) + masks, 1)
    want = roc_auc_score(masks.ravel(), maps.ravel())
    for chunk in (1, 3, 7, 1 << 20):
        monkeypatch.setattr(pixel_metrics_module, "_CHUNK", chunk)
        assert pixel_auroc(maps, masks) == pytest.approx(want, abs=1e-12)


# --------------------------------------------------------------------------- properties


@st.composite
def _maps_and_masks(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray]:
    shape = (
        draw(st.integers(1, 3)),
        draw(st.integers(1, 6)),
        draw(st.integers(1, 6)),
    )
    density = draw(st.sampled_from([0.0, 0.1, 0.3, 0.6, 1.0]))
    masks = draw(arrays(np.float64, shape, elements=st.floats(0, 1))) < density
    if draw(st.booleans()):
        masks[draw(st.integers(0, shape[0] - 1))] = False  # an image without defect
    levels = draw(st.sampled_from([2, 3, 5, 1000]))  # few levels: many ties
    maps = draw(arrays(np.int64, shape, elements=st.integers(0, levels - 1)))
    return maps / (levels - 1) + 0.25 * masks * draw(st.sampled_from([0, 1])), masks


@settings(max_examples=100, deadline=None)
@given(data=_maps_and_masks(), limit=st.sampled_from([0.3, 0.3, 0.1, 0.5, 1.0, 0.07]))
def test_pro_equals_reference(data: tuple[np.ndarray, np.ndarray], limit: float) -> None:
    maps, masks = data
    got = pro_score(maps, masks, fpr_limit=limit)
    want = reference_pro(maps, masks, fpr_limit=limit)
    assert _same(got, want), (got, want)
    if not math.isnan(got):
        assert 0.0 <= got <= 1.0 + 1e-12


@settings(max_examples=100, deadline=None)
@given(data=_maps_and_masks())
def test_pixel_auroc_equals_sklearn(data: tuple[np.ndarray, np.ndarray]) -> None:
    maps, masks = data
    got = pixel_auroc(maps, masks)
    if masks.all() or not masks.any():
        assert math.isnan(got)
    else:
        want = roc_auc_score(masks.ravel(), maps.ravel())
        assert abs(got - want) <= 1e-12, (got, want)

"""The report's figures: per-round curves, scores, communication (:func:`figures_section`),
anomaly maps (:func:`maps_section`) and the t-SNE of representations
(:func:`embedding_section`). A figure that cannot be drawn is a note; the report goes on."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from fedad.core.errors import FedadError
from fedad.evaluation.columns import FamilySpec
from fedad.report import plots
from fedad.report.fmt import esc, figure_html, num, threshold
from fedad.rundir.files import LinkError
from fedad.rundir.layout import EMBEDDINGS_FILE, MAPS_FILE
from fedad.rundir.read import (
    MethodEmbedding,
    MethodMaps,
    MethodScores,
    read_embeddings,
    read_maps,
)

FigureSpec = tuple[bool, str, Callable[[], Figure], str]
"""(available, title, how to draw it, caption) of one figure."""

PER_SEED_ONLY = ("ROC curves", "Score histograms", "Scores per client", "Per-client AUROC")
"""Figures of one seed's scores and clients: in each seed's own report only."""


def _logged(history: Mapping[str, Any], column: str) -> bool:
    """Whether some method's history has a finite value in ``column``."""
    return any(
        column in table and any(math.isfinite(v) for v in table[column])
        for table in history.values()
    )


def _score_figures(
    entries: Mapping[str, Mapping[str, Any]], scores: Mapping[str, MethodScores]
) -> list[FigureSpec]:
    """ROC curves, score histograms and the per-client score boxes."""
    pairs = {lab: (ms.label, ms.score) for lab, ms in scores.items()}
    by_client = {
        lab: (ms.label, ms.score, ms.client) for lab, ms in scores.items() if ms.client is not None
    }
    boxed = max((len(np.unique(c)) for _, _, c in by_client.values()), default=0)
    thresholds = {lab: threshold(entries.get(lab, {})) for lab in pairs}
    return [
        (
            bool(pairs),
            "ROC curves",
            lambda: plots.roc_figure(pairs),
            "ROC curves of all methods on the pooled test set (anomaly = positive class).",
        ),
        (
            bool(pairs),
            "Score histograms",
            lambda: plots.score_histograms(pairs, thresholds),
            "Test-score distributions of normal and anomalous samples (each normalised to unit "
            "area); the dashed line is the method's threshold (pooled, or the mean of the "
            "clients' thresholds), fixed on training data.",
        ),
        (
            bool(by_client),
            "Scores per client",
            lambda: plots.score_boxes_figure(by_client, BOX_CLIENTS),
            "Each client's test scores with its final detector (as in FADngs's Fig. 8): per "
            "client a box of its normal test samples' scores and one of its anomalous ones "
            "(quartiles, median as the black line, whiskers at 1.5 IQR); one panel per method, "
            "all clients on one score axis. A panel whose scores span more than 50 times their "
            "interquartile range has a symmetric-log axis (its y label says so); non-finite "
            "scores are left out."
            + (
                f" Only the first {BOX_CLIENTS} of {boxed} clients are drawn."
                if boxed > BOX_CLIENTS
                else ""
            ),
        ),
    ]


def _round_figures(history: Mapping[str, Any], families: Sequence[FamilySpec]) -> list[FigureSpec]:
    """The per-round curves: loss, the families' learning curves, communication."""
    has_loss = _logged(history, "loss")
    has_bytes = any(("bytes_up" in t or "bytes_down" in t) for t in history.values())
    return [
        (
            has_loss,
            "Loss per round",
            lambda: plots.loss_figure(history),
            "Training loss reported in each round.",
        ),
        *(
            (
                _logged(history, fig.column),
                fig.title,
                lambda column=fig.column: plots.loss_figure(history, column),
                fig.caption,
            )
            for family in families
            for fig in family.figures
        ),
        (
            has_bytes,
            "Communication",
            lambda: plots.bytes_figure(history),
            "Cumulative bytes sent (server to clients plus clients to server) after each round.",
        ),
    ]


def _client_figure(per_client: Mapping[str, Mapping[int, Mapping[str, Any]]]) -> FigureSpec:
    """Each client's AUROC, per method."""
    auroc_by_client = {
        lab: {c: num(row.get("auroc")) for c, row in rows.items()}
        for lab, rows in per_client.items()
    }
    client_names = {
        c: str(row["client_name"])
        for rows in per_client.values()
        for c, row in rows.items()
        if isinstance(row.get("client_name"), str) and row["client_name"]
    }
    return (
        bool(per_client),
        "Per-client AUROC",
        lambda: plots.per_client_auroc_figure(auroc_by_client, names=client_names),
        "AUROC on each client's local test set; the dashed line is chance level.",
    )


def figures_section(
    entries: Mapping[str, Mapping[str, Any]],
    scores: Mapping[str, MethodScores],
    history: Mapping[str, Any],
    per_client: Mapping[str, Mapping[int, Mapping[str, Any]]],
    notes: list[str],
    families: Sequence[FamilySpec],
    several: bool = False,
) -> str:
    """Every figure of the run (the learning curves of ``families``, the run's metric
    families, among them); for a several-seed run only the per-round ones, as means."""
    specs = [
        *_score_figures(entries, scores),
        *_round_figures(history, families),
        _client_figure(per_client),
    ]
    parts = ["<h2>Figures</h2>"]
    if several:  # scores and per-client metrics belong to one seed's run: see its report
        specs = [
            (a, f"{t} (mean over seeds)", m, c) for a, t, m, c in specs if t not in PER_SEED_ONLY
        ]
        parts.append(
            '<p class="muted">ROC curves, score histograms and per-client metrics are in each '
            "seed's own report (see Seeds); per-round curves below are means over seeds.</p>"
        )
    for available, title, make, caption in specs:
        parts.append(f"<h3>{esc(title)}</h3>")
        if not available:
            parts.append('<p class="muted">Not available for this run.</p>')
            continue
        try:
            parts.append(figure_html(make(), title, caption))
        except Exception as exc:  # a broken figure must not cost the rest of the report
            notes.append(f"figure '{title}' could not be drawn: {type(exc).__name__}: {exc}")
            parts.append('<p class="muted">Could not be drawn (see notes).</p>')
    return "".join(parts)


BOX_CLIENTS = 20
"""At most this many clients per method in the per-client score box plots."""


def read_embedding_sample(
    run: Path, labels: list[str], notes: list[str]
) -> dict[str, MethodEmbedding]:
    """``embeddings.npz``'s samples; a damaged file is a note, and the report goes on."""
    try:
        return read_embeddings(run / EMBEDDINGS_FILE, labels)
    except LinkError:
        raise
    except FedadError as err:
        notes.append(f"embeddings.npz left out: {err}")
        return {}


def embedding_section(embeds: Mapping[str, MethodEmbedding], notes: list[str]) -> str:
    """t-SNE of each method's test-sample representations (from ``embeddings.npz``)."""
    if not embeds:
        return ""
    parts = [
        "<h2>Representations (t-SNE)</h2>"
        '<p class="muted">For methods whose detector represents samples (e.g. FADngs\'s '
        "projection z(x), on which its score is computed), each client's final detector "
        "represented a sample of its own test set (at most 200 per client, half anomalous "
        "when there are enough), and the run kept at most 2,000 of them per method. The "
        "t-SNE (scikit-learn, seeded, PCA initialisation) is of those samples only, after "
        "FADngs's Fig. 6 and 7: left the normal ones coloured by client, right normal against "
        "anomalous. Distances between clusters in a t-SNE map mean little; neighbourhoods "
        "do.</p>"
    ]
    for label, e in embeds.items():
        title = f"t-SNE: {label}"
        try:
            coords = plots.tsne_coordinates(e.embedding)
            fig = plots.tsne_figure(coords, e.label, e.client)
            n_anom = int((e.label == 1).sum())
            caption = (
                f"t-SNE of the {e.embedding.shape[1]}-dimensional representations of "
                f"{len(e.label)} test samples of {label} ({len(e.label) - n_anom} normal, "
                f"{n_anom} anomalous, from {len(np.unique(e.client))} clients)."
            )
            parts.append(f"<h3>{esc(label)}</h3>")
            parts.append(figure_html(fig, title, caption))
        except Exception as exc:  # a broken figure must not cost the rest of the report
            notes.append(f"figure '{title}' could not be drawn: {type(exc).__name__}: {exc}")
    return "".join(parts)


def read_map_sample(run: Path, labels: list[str], notes: list[str]) -> dict[str, MethodMaps]:
    """``maps.npz``'s samples; a damaged file is a note, and the report goes on without it."""
    try:
        return read_maps(run / MAPS_FILE, labels)
    except LinkError:
        raise
    except FedadError as err:
        notes.append(f"maps.npz left out: {err}")
        return {}


def maps_section(maps: Mapping[str, MethodMaps], notes: list[str]) -> str:
    """Anomaly maps over their test images, one figure per method (from ``maps.npz``)."""
    if not maps:
        return ""
    parts = [
        "<h2>Anomaly maps</h2>"
        '<p class="muted">A few test images of every client, for every method that localises '
        "(the same images for every method: mostly anomalous ones). Left: the "
        "image, the ground-truth defect outlined in red; right: the method's anomaly map as "
        "heat over the image (one colour scale per method), the defect outlined in cyan. The "
        "score is the image's anomaly score.</p>"
    ]
    for label, m in maps.items():
        title = f"Anomaly maps: {label}"
        try:
            fig = plots.anomaly_map_figure(
                m.image, m.map, m.mask, m.score, m.label, clients=m.client
            )
            parts.append(f"<h3>{esc(label)}</h3>")
            parts.append(
                figure_html(
                    fig, title, f"{len(m.map)} test images of {label} with their anomaly maps."
                )
            )
        except Exception as exc:  # a broken figure must not cost the rest of the report
            notes.append(f"figure '{title}' could not be drawn: {type(exc).__name__}: {exc}")
    return "".join(parts)

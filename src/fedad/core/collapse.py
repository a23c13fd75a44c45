"""The collapse guard: is a contrastive encoder learning, or sitting at its collapsed value?

A contrastive (InfoNCE-type) loss whose representations all point the same way takes one
value whatever the weights: :math:`\\log(N - 1)` for SimCLR's pairs, in general the mean
over the anchors of :math:`\\log(P_a + N_a)` (``fedad.components.losses.collapsed_loss``).
A loss that stays there means the encoder is not learning, whatever the AUROC says
(FADngs's earlier group-norm encoder, with no norm in its head, sat there for a whole run).

Methods that train such a loss log three columns per round in their history (the
convention this module reads; nothing else needs to change for a new method):

* ``loss``: the loss;
* ``loss_collapsed``: its collapsed value on the same batches;
* ``rep_cos``: the mean pairwise cosine of the representations of different samples.

From them :func:`add_loss_ratio` derives ``loss_ratio`` = ``loss / loss_collapsed`` (1 at
collapse, lower when learning) and :func:`collapse_message` says, after the final round,
whether the encoder failed to learn: its loss never fell below :data:`RATIO_COLLAPSED` of the
collapsed value in any round, or its representations still point the same way in the final
round (``rep_cos`` at or above :data:`COS_COLLAPSED`). The lowest ratio of the run, not the
last, is what counts: a loss can rise above its collapsed value when the objective changes
(FADngs's CRAD, after the SimCLR warm-up, treats other normal images as positives and the
anchor's own rotations as negatives, which the warm-up had made the nearest), and falls
again as the encoder learns. A random encoder whose representations spread but do not
learn also stays at the collapsed value (positives no closer than negatives), and is named
too. The server context calls both when it closes a round
(:meth:`fedad.core.context.ServerContext.end_round`), so every engine warns alike, in one
line, and the report draws both columns per round.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, MutableMapping, Sequence
from typing import Any

NOT_LEARNING = "encoder not learning"
"""How the guard's event starts."""
RATIO_COLLAPSED = 0.98
"""A run whose ``loss_ratio`` never fell below this did not learn (the loss stayed within 2%
of its collapsed value; a learning encoder on our federations falls to 0.8-0.9 within a few
rounds)."""
COS_COLLAPSED = 0.95
"""A final ``rep_cos`` at or above this means the representations of different samples
still point the same way (about 0.99 for FADngs's group-norm encoder at initialisation)."""


def _finite(row: Mapping[str, Any], key: str) -> float | None:
    value = row.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    v = float(value)
    return v if math.isfinite(v) else None


def add_loss_ratio(row: MutableMapping[str, Any]) -> None:
    """Set ``row["loss_ratio"]`` = ``loss / loss_collapsed`` when both are finite and the
    collapsed value is positive; leave the row as it is otherwise."""
    loss, flat = _finite(row, "loss"), _finite(row, "loss_collapsed")
    if loss is not None and flat is not None and flat > 0:
        row["loss_ratio"] = loss / flat


def collapse_message(history: Sequence[Mapping[str, Any]]) -> str | None:
    """One line saying the encoder did not learn over the run's ``history`` (rows, the
    final round last), or None when it did or no row has the columns."""
    ratios = [(r, v) for r in history if (v := _finite(r, "loss_ratio")) is not None]
    cos = _finite(history[-1], "rep_cos") if history else None
    best = min(ratios, key=lambda rv: rv[1]) if ratios else None
    stuck = best is not None and best[1] >= RATIO_COLLAPSED
    crowded = cos is not None and cos >= COS_COLLAPSED
    if not (stuck or crowded):
        return None
    parts = []
    if stuck and best is not None:
        row, ratio = best
        parts.append(
            f"its contrastive loss never fell below {RATIO_COLLAPSED} of its collapsed value "
            f"(closest {ratio:.3f}: {_finite(row, 'loss'):.4g} against "
            f"{_finite(row, 'loss_collapsed'):.4g})"
        )
    if crowded:
        parts.append(f"its representations' mean pairwise cosine ended at {cos:.3f}")
    return (
        f"{NOT_LEARNING}: "
        + " and ".join(parts)
        + " (collapse; more rounds or a higher lr may help, see docs/methods/fadngs.md)"
    )

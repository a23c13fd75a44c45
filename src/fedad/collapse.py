"""The collapse guard: is a contrastive encoder learning, or sitting at its collapsed value?

A contrastive (InfoNCE-type) loss whose representations all point the same way takes one
value whatever the weights: :math:`\\log(N - 1)` for SimCLR's pairs, in general the mean
over the anchors of :math:`\\log(P_a + N_a)` (``fedad.methods.fadngs.losses.collapsed_loss``).
A loss that stays there means the encoder is not learning, whatever the AUROC says
(FADngs's group-norm encoder sat there for a whole run before issue 27).

Methods that train such a loss log three columns per round in their history (the
convention this module reads; nothing else needs to change for a new method):

* ``loss``: the loss;
* ``loss_collapsed``: its collapsed value on the same batches;
* ``rep_cos``: the mean pairwise cosine of the representations of different samples.

From them :func:`add_loss_ratio` derives ``loss_ratio`` = ``loss / loss_collapsed`` (1 at
collapse, lower when learning) and :func:`collapse_message` says, for the final round, whether
the representations stayed collapsed: ``loss_ratio`` at or above :data:`RATIO_COLLAPSED` or
``rep_cos`` at or above :data:`COS_COLLAPSED`. The server context calls both when it closes a
round (:meth:`fedad.fl.context.ServerContext.end_round`), so every engine warns alike, in one
line, and the report draws both columns per round.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, MutableMapping
from typing import Any

RATIO_COLLAPSED = 0.98
"""A final ``loss_ratio`` at or above this means the loss stayed within 2% of its collapsed
value (a learning encoder on our federations ends at 0.7-0.9 within ten rounds)."""
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


def collapse_message(row: Mapping[str, Any]) -> str | None:
    """One line saying the representations stayed collapsed in this (final) round's ``row``,
    or None when they did not or the row has none of the columns."""
    ratio, cos = _finite(row, "loss_ratio"), _finite(row, "rep_cos")
    stuck = ratio is not None and ratio >= RATIO_COLLAPSED
    crowded = cos is not None and cos >= COS_COLLAPSED
    if not (stuck or crowded):
        return None
    parts = []
    if ratio is not None:
        parts.append(
            f"the contrastive loss ended at {ratio:.3f} of its collapsed value "
            f"({_finite(row, 'loss'):.4g} against {_finite(row, 'loss_collapsed'):.4g})"
        )
    if cos is not None:
        parts.append(f"the representations' mean pairwise cosine is {cos:.3f}")
    return (
        "representations collapsed: "
        + " and ".join(parts)
        + "; the encoder is not learning (more rounds, a higher lr, or see docs/methods/fadngs.md)"
    )

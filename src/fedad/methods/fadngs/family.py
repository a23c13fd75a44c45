"""FADngs's privacy measures as a metric family: a table of their own in the report.

From the evaluate replies: the clients' distance correlations [FADngs eq. 18, Fig. 9]
(:func:`fedad.methods.fadngs.privacy.distance_correlations`), averaged over the clients
that sent them. ``density_epsilon`` and ``density_delta`` come from the method's
``extra_metrics`` (they depend on its params, not on the replies) and are shown in the
same table when present.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from fedad.evaluation.columns import Column
from fedad.evaluation.families import MetricFamily, Pooled

DCOR_KEYS = ("dcor_shared", "dcor_random", "dcor_shared_u", "dcor_random_u")


@dataclass(frozen=True)
class _Privacy(MetricFamily):
    def applies(self, ev: Pooled) -> bool:
        return any(DCOR_KEYS[0] in m.scalars for m in ev.replies.values())

    def pooled(self, ev: Pooled) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key in DCOR_KEYS:
            vals = [float(m.scalars[key]) for m in ev.replies.values() if key in m.scalars]
            out[key] = float(np.mean(vals)) if vals else None
        return out


PRIVACY: MetricFamily = _Privacy(
    name="fadngs-privacy",
    keys=(*DCOR_KEYS, "density_epsilon"),
    columns=(
        Column("dcor_shared", "dCor shared"),
        Column("dcor_random", "dCor random"),
        Column("dcor_shared_u", "dCor² U shared"),
        Column("dcor_random_u", "dCor² U random"),
        Column("density_epsilon", "ε of the densities"),
        Column("density_delta", "δ"),
    ),
    in_summary=False,
    title="Privacy measures (FADngs)",
    note=(
        "Distance correlation (FADngs eq. 18, Fig. 9) between each client's raw training "
        "images and draws from the Gaussians it shared (shared), and from a random Gaussian "
        "of the same shape (random), mean over clients; U: the bias-corrected squared "
        "version (about 0 for independent samples). The draws are independent of the images "
        "they are paired with, so similar values are the paper's evidence, not a guarantee. "
        "ε (at δ): the Gaussian mechanism on the density statistics (density_noise), all of "
        "a client's releases, RDP accountant; it covers the densities only, not the model "
        "updates, so the run as a whole is not ε-DP by it. “–”: the mechanism is off."
    ),
)

"""Which representation of a finished Fashion-MNIST run separates the fine classes: a diagnostic.

    .venv/bin/python benchmarks/fadngs_representations.py RUN_DIR
        [--fadngs LABEL] [--autoencoder LABEL] [--per-class 400]

``RUN_DIR`` is one seed's run (a ``benchmarks/fadngs.py --work`` folder's ``seed-N``). For
client 0's trained FADngs encoder (``--fadngs``, default ``fadngs-nosed``) and, if given,
an autoencoder's encoder (``--autoencoder``, e.g. ``fedavg-ae``), it embeds ``--per-class``
images of every normal class from Fashion-MNIST's training split, fits one shrunk Gaussian
per normal class on each representation (:func:`~fedad.methods.fadngs.density.fit_gaussians`,
rho 0.1: the density of a client that holds one class, as the federation's global set),
scores ``--per-class`` images of every class of the official test split by the smallest
Mahalanobis distance [FADngs eq. 6], and prints one line per representation: its width,
the AUROC of the normal classes' test images against all anomalies and against each anomaly
class. Representations of the FADngs encoder:

* ``z``: the projection :math:`h(f(x))`, FADngs's score input; ``zu``: ``z`` unit-normalised
  (the authors' code);
* ``f``: the backbone's pooled features (before the projection head);
* ``s1``, ``s2``: stages 1 and 2 globally pooled; ``s3_2x2``: stage 3 pooled to a 2x2 grid
  (spatial layout kept, 4x the width);
* ``pixels_7x7``: the image itself averaged to 7x7 (no network);

and ``ae_latent``: the autoencoder's bottleneck. A diagnostic: it reads test labels, so
nothing in it may choose a method or a setting.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from fadngs_classes import auroc, load_run

from fedad.blas import limit_blas_threads
from fedad.methods.fadngs.density import fit_gaussians, min_mahalanobis

Embed = Callable[[torch.Tensor], dict[str, torch.Tensor]]


def fadngs_views(encoder: torch.nn.Module) -> Embed:
    """The representations of a FADngs :class:`~fedad.components.nn.resnet.Encoder`."""

    def views(x: torch.Tensor) -> dict[str, torch.Tensor]:
        bb = encoder.backbone
        h = bb.stem(x)
        out: dict[str, torch.Tensor] = {}
        for i, stage in enumerate(bb.stages):
            h = stage(h)
            if i < 2:
                out[f"s{i + 1}"] = h.mean((2, 3))
        f = bb.pool(h).flatten(1)
        z = encoder.head(f)
        out |= {"z": z, "zu": F.normalize(z, dim=1), "f": f}
        out["s3_2x2"] = F.adaptive_avg_pool2d(h, 2).flatten(1)
        out["pixels_7x7"] = F.adaptive_avg_pool2d(x, 7).flatten(1)
        return out

    return views


def embed_all(views: Embed, x: np.ndarray) -> dict[str, np.ndarray]:
    """``views`` over ``x`` in batches, as float64 arrays."""
    parts: dict[str, list[torch.Tensor]] = {}
    with torch.no_grad():
        for i in range(0, len(x), 256):
            for key, v in views(torch.from_numpy(x[i : i + 256])).items():
                parts.setdefault(key, []).append(v.double())
    return {k: torch.cat(v).numpy() for k, v in parts.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path)
    ap.add_argument("--fadngs", default="fadngs-nosed")
    ap.add_argument("--autoencoder", default=None)
    ap.add_argument("--per-class", type=int, default=400)
    args = ap.parse_args()
    limit_blas_threads()
    run, normal, anomaly, ds = load_run(args.run)
    assert ds.x_test is not None and ds.y_test is not None
    rng = np.random.default_rng(0)
    x_train, x_test = np.asarray(ds.x, np.float32), np.asarray(ds.x_test, np.float32)
    train = {c: x_train[rng.choice(np.flatnonzero(ds.y == c), args.per_class, False)]
             for c in normal}  # fmt: skip
    test = {c: x_test[rng.choice(np.flatnonzero(ds.y_test == c), args.per_class, False)]
            for c in normal + anomaly}  # fmt: skip
    encoders: list[Embed] = [fadngs_views(run.detector(args.fadngs).encoder_.eval())]
    if args.autoencoder:
        ae = run.detector(args.autoencoder).model_.eval()
        encoders.append(lambda x: {"ae_latent": ae.encoder(x)})
    for views in encoders:
        tr = {c: embed_all(views, v) for c, v in train.items()}
        te = {c: embed_all(views, v) for c, v in test.items()}
        for key in tr[normal[0]]:
            fitted = [fit_gaussians(tr[c][key], np.zeros(args.per_class, int)) for c in normal]
            means = np.concatenate([m for m, _ in fitted])
            covs = np.concatenate([s for _, s in fitted])
            s = {c: min_mahalanobis(te[c][key], means, covs) for c in te}
            ref = np.concatenate([s[c] for c in normal])
            every = round(auroc(ref, np.concatenate([s[c] for c in anomaly])), 3)
            by_class = {ds.classes[c]: round(auroc(ref, s[c]), 3) for c in anomaly}
            print(f"{key:<11} width {tr[normal[0]][key].shape[1]:>4}  all {every:.3f}  {by_class}")


if __name__ == "__main__":
    main()

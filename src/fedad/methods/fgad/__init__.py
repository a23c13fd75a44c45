"""FGAD: federated graph anomaly detection with self-boosted distillation (Cai et al., ACM
MM 2024). Paper label: ``FGAD``.

=========================================  ===================================================
paper                                      code
=========================================  ===================================================
eq. 1-3 (GIN, sum readout of layers)       :class:`fedad.components.nn.gin.GIN`
eq. 5-7 (VGAE generator, per graph)        ``model.Generator``
eq. 8 (adjacency reconstruction)           ``losses.reconstruction_loss`` (ours: its balanced form
                                           ``losses.balanced_reconstruction_loss`` with
                                           ``losses.edge_prior_shift``)
eq. 9 (normal vs generated)                ``losses.detection_loss``
eq. 10 (pre-training)                      ``train.train_epoch(distill=False)``
eq. 11-12 (logits, distillation)           ``model.FGADNet``, ``losses.distillation_loss``
eq. 13 (total)                             ``losses.total_loss``, ``train.train_epoch``
eq. 14 (shared backbone)                   ``model.FGADNet``
eq. 15 (student head averaged)             ``federated.FGAD`` (``ctx.mean``)
score                                      ``detector.FGADDetector.score``
=========================================  ===================================================
"""

from fedad.core.catalog import GRAPHS_NOT_EXPORTABLE, declare_detector, declare_method

declare_method(
    "fgad",
    "fedad.methods.fgad.federated",
    (
        "FGAD as published (for reproduction; below chance on our graphs: use fgad-plus): VGAE-"
        "generated anomalies, teacher-student distillation, head-only FL"
    ),
    ("graph",),
)
declare_method(
    "fgad-plus",
    "fedad.methods.fgad.federated",
    (
        "FGAD that works (ours): learnt VGAE, 0/1 generated graphs with their own degree "
        "features, the student trained on them too; student head only"
    ),
    ("graph",),
)
declare_detector("fgad", "fedad.methods.fgad.detector", export_refusal=GRAPHS_NOT_EXPORTABLE)

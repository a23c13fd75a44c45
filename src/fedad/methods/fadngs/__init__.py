"""FADngs: Federated Anomaly Detection with Noisy Global Density Estimation and
Self-supervised Ensemble Distillation (Dong et al., IEEE TNNLS 2024). Paper label: ``FADngs``.

This package holds, for now, only the method's pure math; it registers nothing.

=========================================  ===================================================
paper                                      function
=========================================  ===================================================
:math:`z(x) = h(f(x))` (Sec. III-A)        ``model.Encoder`` (``project``,
                                           ``normalized_projections``), ``model.ResNet``,
                                           ``model.ProjectionHead``
eq. 1 (cluster mean)                       ``density.fit_gaussians``
eq. 2 (sample covariance, 1/N)             ``density.sample_covariance``
eq. 3 (shrinkage)                          ``density.shrinkage_covariance``
eq. 4, 5 (noise of weak clustering)        ``density.weak_kmeans`` then ``fit_gaussians``
eq. 6 (score: min Mahalanobis)             ``density.min_mahalanobis``,
                                           ``density.mahalanobis_sq``
eq. 7 (contrastive loss)                   ``losses.contrastive_loss``
eq. 8, 9 (predicted anomalies, pairs)      ``losses.crad_mask``, ``losses.crad_anchors``
eq. 7-9 (CRAD)                             ``losses.crad_loss``
SimCLR pairs (warm-up, Table IV)           ``losses.simclr_mask`` with ``contrastive_loss``
eq. 11, 12 (similarity distributions)      ``losses.similarity_distribution``
eq. 13 (weighted ensemble distillation)    ``losses.sed_loss``, ``losses.ensemble_sed_loss``
:math:`w_c` (Sec. III-D, Pearson)          ``losses.pearson_weights``
instance queue :math:`D_c` (Sec. III-D)    ``losses.FifoQueue``
:math:`T_+`, :math:`T_-` (Sec. III-C)      ``augment.normal_transform``, ``augment.rotations``,
                                           ``augment.crad_views``
=========================================  ===================================================

Not yet: the federated protocol (Algorithm 1: GetDensityFunctions, LocalUpdate, Aggregate;
the threshold :math:`\\delta` of eq. 8; the SimCLR warm-up; the detector; registration as a
method).
"""

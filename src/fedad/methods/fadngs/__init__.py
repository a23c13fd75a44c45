"""FADngs: Federated Anomaly Detection with Noisy Global Density Estimation and
Self-supervised Ensemble Distillation (Dong et al., IEEE TNNLS 2024). Paper label: ``FADngs``.

Modules: ``model`` (the encoder), ``augment`` (the transforms), ``density`` (NGDE and the
score), ``losses`` (the contrastive and distillation losses), ``train`` (LocalUpdate and
SED's loops), ``privacy`` (the Gaussian mechanism on the densities, distance correlations),
``detector`` (the ``fadngs`` detector), ``family`` (its metrics) and ``federated`` (the
protocol, [FADngs Algorithm 1]; registers ``fadngs`` and ``fadngs-nosed``). Importing this
package registers nothing; :mod:`fedad.methods` imports ``federated``.

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
CSI's pairs (Table IV, Tack et al. eq. 4)  ``augment.shifted_views``,
                                           ``losses.shifted_instance_mask``
eq. 11, 12 (similarity distributions)      ``losses.similarity_distribution``
eq. 13 (weighted ensemble distillation)    ``losses.sed_loss``, ``losses.ensemble_sed_loss``
SED's cosine form (``sed_form``, ours)     ``losses.cosine_distill_loss``
teachers' agreement (history)              ``losses.teacher_agreement``
:math:`w_c` (Sec. III-D, Pearson)          ``losses.pearson_weights``
instance queue :math:`D_c` (Sec. III-D)    ``losses.FifoQueue``
:math:`T_+`, :math:`T_-` (Sec. III-C)      ``augment.normal_transform``, ``augment.rotations``,
                                           ``augment.crad_views``
Algorithm 1 (GetDensityFunctions,          ``federated.FADngs``, ``federated.FADngsNoSED``
LocalUpdate, Aggregate)                    (``train.local_update``, ``train.sed_distill``)
=========================================  ===================================================
"""

from fedad.core.catalog import declare_detector, declare_method

declare_method(
    "fadngs",
    "fedad.methods.fadngs.federated",
    "FADngs: noisy global densities, contrastive CRAD, ensemble distillation (SED)",
    ("image",),
)
declare_method(
    "fadngs-nosed",
    "fedad.methods.fadngs.federated",
    "FADngs without SED: noisy global densities and CRAD, FedAvg aggregation",
    ("image",),
)
declare_detector("fadngs", "fedad.methods.fadngs.detector", exporter="fedad.methods.fadngs.export")

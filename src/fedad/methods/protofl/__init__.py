"""ProtoFL: prototypical representation distillation and local normalizing flows.

Paper label ``ProtoFL``: Kim, Kwak, Jung, Shin, Kim, Kim, *ProtoFL: Unsupervised Federated
Learning via Prototypical Distillation*, ICCV 2023. Code in this package cites it as
``[ProtoFL eq. N]``, ``[ProtoFL Alg. N]`` and ``[ProtoFL Sec. X]``, always with the label.

The paper's equations and algorithm steps, and what implements each (module paths relative
to ``fedad.methods.protofl``):

================  =================================================================================
paper             what, and where it is implemented
================  =================================================================================
eq. 1             FedAvg, θ_g = Σ_k |D_k| / Σ|D| θ_k: ``ServerContext.mean`` in
                  ``federated.ProtoFL.server``
eq. 2             cosine positive loss 1 − d(·, ·̂): ``model.positive_cosine_loss``
eq. 3             flow KL / likelihood objective: ``model.flow_nll`` (with the constant)
eq. 4             r = φ(x), r̂ = φ(x̂) on two augmented views: ``model.Encoder.forward``,
                  ``augment.two_views``
eq. 5             L_p = mean(1 − d(r, r̂)): ``model.positive_cosine_loss``
eq. 6             v_k = F(s_k) on the server: ``federated.ProtoFL.prototypes`` (one distinct
                  public image per joined client: ``federated.farthest_point``)
eq. 7             L_pd = mean(KL(v‖r) + KL(v‖r̂)), softmax-normalised:
                  ``model.prototype_distillation_loss``, ``model.distillation_kl``
eq. 8             L_φ = (1 − α) L_pd + α L_p, α = 0.1: ``model.phase1_loss``; trained by
                  ``train.train_encoder`` in ``federated.ProtoFL.client_train``
eq. 9             L_mle = mean(‖z‖²/2 − log|det j|): ``model.phase2_loss`` (``model.flow_latent``)
eq. 10            L_reg = mean(1 − d(z, ẑ)): ``model.phase2_loss``
eq. 11            L_t = L_mle + λ L_reg, λ = 0.01: ``model.phase2_loss``, ``train.train_flow``
Alg. 1            prototypes once, then T rounds of FedAvg over sampled clients:
                  ``federated.ProtoFL.server``, ``federated.ProtoFL.client_train``
Alg. 2            frozen global model + local flow: ``federated.ProtoFL.client_detector``,
                  ``detector.ProtoFLDetector.fit_head``; score = NLL:
                  ``detector.ProtoFLDetector.score``
Sec. 5.2          group norm instead of batch norm (tables: ``vector_norm = "group"``; by
                  default none there, see below), 8 affine coupling layers (RealNVP),
                  RAdam (0.94, 0.98), weight decay 1e-3: ``model.Trunk``, ``model.make_flow``,
                  ``train.RADAM_BETAS``
Fig. 5            new clients (only phase 2): ``new_clients``, ``federated.ProtoFL.new_ids``,
                  ``federated.ProtoFL.extra_metrics``
Table 4           KDE, Gaussian, OC-SVM heads: ``detector.ProtoFLDetector`` (``head``)
================  =================================================================================

Not in the paper (ours; each documented where it is defined and in
``docs/methods/protofl.md``): the softmax (temperature 1) that turns representations into
distributions for the KL; the projection g from the representation h to the prototype
dimension, with phase 2 on h; farthest-point choice of prototype images; standardisation
of h before the head; the small CNN; the augmentation strengths; the flow's epoch count
picked on held-out training samples (``train.choose_flow_epochs``); the ``phase1 = "local"``
baseline (``federated.ProtoFL``); the ``trunk = "pretrained"`` variant (an MLP trunk on frozen
backbone features, :mod:`.features`); on tables, the MLP trunk without the paper's group norm
(``vector_norm = "none"``, the default: group norm hides rows anomalous by their size); the
``trunk = "efficientnet"`` variant (EfficientNet-Lite0's tail as the trunk, from its shipped
weights); ``phase1 = "none"`` (each client fits only its head on the initial trunk: the
default on images, with that trunk at ``trunk_size = 96`` and the Gaussian head, chosen on
development federations because no phase 1 added enough for its cost on one-class-per-client
federations, ``benchmarks/suites/protofl-default-screen.toml``);
``distill = "sample"`` and ``contrast`` (per-sample distillation, an instance-contrastive term
over the client's own views: the registered phase-1 form with negatives); ``max_samples``
(the most samples of a client per phase-1 epoch and for its flow); the CNN and MLP trunks and
the flow scored in float64 (:attr:`.detector.ProtoFLDetector.float64`).
"""

from fedad.core.catalog import declare_detector, declare_method

declare_method(
    "protofl",
    "fedad.methods.protofl.federated",
    "ProtoFL: prototypical distillation from a pretrained model + local flows",
    ("vector", "image"),
)
declare_detector(
    "protofl", "fedad.methods.protofl.detector", exporter="fedad.methods.protofl.export"
)

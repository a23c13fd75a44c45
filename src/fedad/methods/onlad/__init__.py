"""ONLAD (OS-ELM autoencoders on edge clients) with selective model aggregation.

Paper label ``ONLAD``: Qin, Matsutani, Kondo, *A Selective Model Aggregation Approach in
Federated Learning for Online Anomaly Detection*. Code in this package cites it as
``[ONLAD eq. N]``, ``[ONLAD Alg. 1 l. N]`` (Algorithm 1, line N) and ``[ONLAD Sec. X]``,
always with the label, so that an equation number is never read against another method's
paper (FADngs, FedDyMem, FGAD, ProtoFL). The numbers are that paper's own: its eqs. 1-5
restate OS-ELM (Liang et al. 2006) and the ONLAD model (Tsukada, Kondo, Matsutani 2019) in
its Sec. III-A; those two papers are cited by author, never by equation number.

The paper's equations and algorithm steps, and what implements each (module paths relative
to ``fedad.methods.onlad``):

================  =================================================================================
paper             what, and where it is implemented
================  =================================================================================
eq. 1             y = G(xα + b)β: ``model.hidden`` (H = G(xα + b)), ``model.reconstruction_error``
                  (‖x − Hβ‖² / n, the score), ``detector.OSELMAutoEncoder.score``
eq. 2             G(xα + b)β̂ = t: a definition (the system eq. 3 solves); no code
eq. 3             β̂ = H†t = (HᵀH)⁻¹Hᵀt: ``model.batch_ridge`` (with a ridge δ; the batch
                  reference the sequential phase is tested against)
eq. 4             initial phase P₀, β₀: ``model.init_phase`` (with a ridge δ), called by
                  ``detector.OSELMAutoEncoder.fit`` and by the first
                  ``detector.OSELMAutoEncoder.partial_fit``; the server's initial model in
                  ``federated._ONLAD.server``
eq. 5             sequential phase Pᵢ, βᵢ: ``model.sequential_phase``,
                  ``model.sequential_phase_residual``, called by
                  ``detector.OSELMAutoEncoder.partial_fit`` and
                  ``detector.OSELMAutoEncoder.detect_and_learn``; the client's round in
                  ``federated._ONLAD.client_train``
eq. 6             FedAvg, P_t, β_t = Σ_k (n_k / N)(P_t^k, β_t^k): ``credit.fedavg_weights``, then
                  ``federated._combine``; method ``onlad`` (``federated.ONLAD``)
eq. 7             loss_t^k = L(X, G(Xα + b)β_t^k): ``federated.observed_loss`` (L = mean squared
                  reconstruction error over the observed set X)
eq. 8             P_t, β_t = Σ_k c_t^k (P_t^k, β_t^k): ``federated._combine``
Alg. 1 l. 1-3     each client's loss (eq. 7): ``federated._ONLAD.server``, one
                  ``federated.observed_loss`` per reply
Alg. 1 l. 5-6     loss_t^k > λ gives c_t^k = 0: ``credit.credit_scores`` with ``lam``; λ chosen in
                  ``federated.ONLADSelective.weights`` (method ``onlad-selective``)
Alg. 1 l. 8       credit score c_t^k ∝ (n_k / N)(1 / loss_t^k): ``credit.credit_scores``; methods
                  ``onlad-score`` (``federated.ONLADScore``) and ``onlad-selective``
                  (``federated.ONLADSelective``)
Alg. 1 l. 11-12   the aggregation, as eq. 8: ``federated._combine``
Sec. III-A(2)     autoencoder, target t = x, undercomplete Ñ < n:
                  ``detector.OSELMAutoEncoder.fit`` and ``partial_fit`` (target = input),
                  ``model.default_hidden`` (the width)
Sec. III-B        the server holds normal data, draws α, b (fixed for the run), sends β₀, P₀;
                  clients learn only the data they do not flag as anomalous:
                  ``federated._ONLAD.server``, ``model.init_input_weights``,
                  ``detector.OSELMAutoEncoder.detect_and_learn`` (the threshold τ is ours:
                  see ``federated``)
Sec. IV-B(3)      a client's data cut into "updating times" chunks: ``federated.stream_chunks``
Sec. IV-B(5)      adaptive threshold, λ lowered linearly over the rounds:
                  ``credit.adaptive_lambda``
================  =================================================================================

Not in the paper (ours, or from elsewhere; each says so where it is defined): the ridge δ
of eqs. 3-4 and the exponential forgetting factor in eq. 5 (``model``); the detection
threshold τ as a quantile of the observed-set scores and the scale-free default λ
(``credit.median_lambda``, ``federated``); input standardisation (``model.standardizer``);
and the whole of ``onlad-robust`` (``credit.exceedance_mass``, ``credit.exceedance_ratios``,
``credit.exceedance_gate``, ``federated.ExceedanceTally``, ``credit.share_steps``,
``credit.update_effects``, ``credit.effect_gate``, ``credit.robust_credit_scores``,
``credit.accept_aggregate``, ``federated.ONLADRobust``).
"""

from fedad.core.catalog import declare_detector, declare_method

declare_method(
    "onlad",
    "fedad.methods.onlad.federated",
    "ONLAD: online OS-ELM autoencoders, FedAvg of beta and P [ONLAD eq. 6]",
    ("vector", "image"),
)
declare_method(
    "onlad-robust",
    "fedad.methods.onlad.federated",
    (
        "ONLAD + credit scores over clients that pass an exceedance check and whose update does "
        "not raise the observed loss (ours)"
    ),
    ("vector", "image"),
)
declare_method(
    "onlad-score",
    "fedad.methods.onlad.federated",
    "ONLAD + credit scores from observed-set losses [ONLAD eq. 7, Alg. 1 l. 8]",
    ("vector", "image"),
)
declare_method(
    "onlad-selective",
    "fedad.methods.onlad.federated",
    "ONLAD + selective aggregation: credit scores, clients over lambda excluded",
    ("vector", "image"),
)
declare_detector(
    "oselm-autoencoder", "fedad.methods.onlad.detector", exporter="fedad.methods.onlad.export"
)

"""FADngs's protocol: what each phase sends, SED's queues across rounds, ablations, errors."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from fedad.core.algorithm import Setup, build_algorithm
from fedad.core.errors import ConfigError
from fedad.core.messages import Message
from fedad.core.types import Federation
from fedad.fl.drive import RunOutcome
from fedad.fl.engine import run_inprocess
from fedad.methods.fadngs.federated import _FADngs
from tests.conftest import failures, make_federation

FAST = {"width": 4, "proj_dim": 8, "public_n": 8, "distill_batch": 4, "queue_size": 12}


def _run(
    fed: Federation, name: str = "fadngs", rounds: int = 2, seed: int = 3, **params: Any
) -> tuple[_FADngs, RunOutcome]:
    setup = Setup(
        fed.kind, fed.feature_shape, rounds=rounds, seed=seed, contamination=0.1,
        num_clients=len(fed.clients),
    )  # fmt: skip
    algo = build_algorithm(name, {**FAST, **params}, setup)
    assert isinstance(algo, _FADngs)
    return algo, run_inprocess(algo, fed, rounds=rounds, seed=seed)


def test_density_phase_uploads_only_means_and_covariances(
    delivered: list[tuple[int, Message, Message | None]],
) -> None:
    fed = make_federation("image", clients=3)
    _, out = _run(fed, rounds=2, warmup_rounds=1, k_c=2)
    assert failures(out.events) == []
    kinds = [m.kind for _, m, _ in delivered]
    # round 1 warm-up (train), round 2 density + train, final density, evaluate
    assert (
        kinds
        == ["train"] * 3 + ["density"] * 3 + ["train"] * 3 + ["density"] * 3 + ["evaluate"] * 3
    )
    for _, msg, reply in delivered:
        if msg.kind == "density":
            assert reply is not None
            assert set(reply.arrays) == {"means", "covs"}
            assert reply.arrays["means"].shape == (2, 8)  # K_c = 2 Gaussians
            assert reply.arrays["covs"].shape == (2, 8, 8)
        if msg.kind == "train" and not msg.get("warmup", False):
            # the global density set is the union: 3 clients x 2 Gaussians
            assert msg.arrays["means"].shape == (6, 8)
    assert out.history[1]["gaussians"] == 6
    # the evaluated detectors score with the final union
    assert out.result.arrays["means"].shape == (6, 8)


def test_sed_queues_persist_across_rounds_when_asked() -> None:
    fed = make_federation("image", clients=2)
    seed = {"sed_form": "seed", "sed_queues": "persist"}  # queues are eq. 11-13's
    algo1, out1 = _run(fed, rounds=1, warmup_rounds=0, **seed)
    algo2, out2 = _run(fed, rounds=2, warmup_rounds=0, **seed)
    assert failures(out1.events) == [] and failures(out2.events) == []
    for cid in (0, 1):
        q1, q2 = algo1.queues[cid].values, algo2.queues[cid].values
        assert q1.shape == q2.shape == (12, 8)
        # round 1 pushed 8 teacher representations (two batches of 4) after 4 random
        # rows; round 2 pushed 8 more: the oldest rows now are round 1's last batch
        np.testing.assert_array_equal(q2[:4].numpy(), q1[-4:].numpy())
        assert not np.allclose(q2[4:].numpy(), q1[4:].numpy())
    assert "sed_loss" in out2.history[1] and np.isfinite(out2.history[1]["sed_loss"])


def test_sed_queues_are_renewed_every_round_by_default() -> None:
    fed = make_federation("image", clients=2)
    algo1, _ = _run(fed, rounds=1, warmup_rounds=0, sed_form="seed")
    algo2, out2 = _run(fed, rounds=2, warmup_rounds=0, sed_form="seed")
    for cid in (0, 1):
        q1, q2 = algo1.queues[cid].values.numpy(), algo2.queues[cid].values.numpy()
        # each round: 4 fresh random unit rows, then that round's 8 teacher representations
        assert not np.allclose(q2[:4], q1[:4])
        np.testing.assert_allclose(np.linalg.norm(q2, axis=1), 1.0, rtol=1e-5)
        assert not np.allclose(q2[4:], q1[4:])
    assert np.isfinite(out2.history[1]["sed_loss"])


def test_sed_changes_the_fedavg_start() -> None:
    fed = make_federation("image", clients=3)
    _, sed = _run(fed, rounds=2, warmup_rounds=0)
    _, nosed = _run(fed, "fadngs-nosed", rounds=2, warmup_rounds=0)
    key = "head.net.3.weight"  # the head's last linear layer (linear, BN, ReLU, linear)
    assert not np.allclose(sed.result.arrays[key], nosed.result.arrays[key])
    assert "sed_loss" not in nosed.history[0]


def test_sed_form_reaches_the_distillation_and_changes_the_student() -> None:
    """``sed_form = "cosine"`` (the default) is passed to SED (a spy on the loss) and gives
    another student than eq. 11-13 (``"seed"``) from the same FedAvg start."""
    import fedad.methods.fadngs.train as train

    fed = make_federation("image", clients=3)
    seen: list[str] = []
    real = train.ensemble_sed_loss

    def spy(*args: Any, **kwargs: Any) -> Any:
        seen.append(args[7] if len(args) > 7 else kwargs.get("form", "seed"))
        return real(*args, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(train, "ensemble_sed_loss", spy)
        algo, cos = _run(fed, rounds=2, warmup_rounds=0, sed_form="cosine")
    assert seen and set(seen) == {"cosine"}
    assert algo.queues == {}  # the cosine form keeps no queue
    _, seed = _run(fed, rounds=2, warmup_rounds=0, sed_form="seed")
    _, default = _run(fed, rounds=2, warmup_rounds=0)
    key = "head.net.3.weight"
    assert not np.allclose(cos.result.arrays[key], seed.result.arrays[key])
    np.testing.assert_array_equal(default.result.arrays[key], cos.result.arrays[key])
    assert np.isfinite(cos.history[1]["sed_loss"])


def test_sed_teachers_differ_after_a_round_and_keep_the_clients_statistics() -> None:
    """Each client's model after its local round is a teacher of its own (the issue's
    collapsed run had identical teachers); SED moves the student's weights but not the
    batch-norm running statistics that FedAvg gave it (the public images are not the
    clients')."""
    fed = make_federation("image", clients=3)
    _, sed = _run(fed, rounds=1, warmup_rounds=0)  # one round: the same teachers in both
    _, nosed = _run(fed, "fadngs-nosed", rounds=1, warmup_rounds=0)
    row = sed.history[-1]
    assert 0.0 < row["sed_teacher_cos"] < 0.999
    assert row["sed_weight_min"] < row["sed_weight_max"]  # the Pearson weights differ too
    stats = ("head.net.1.running_mean", "head.net.1.running_var")
    for key in stats:  # the same FedAvg of the clients' statistics as without SED
        np.testing.assert_allclose(sed.result.arrays[key], nosed.result.arrays[key], rtol=1e-6)
    key = "head.net.3.weight"
    assert not np.allclose(sed.result.arrays[key], nosed.result.arrays[key])


def test_density_none_shares_nothing(
    delivered: list[tuple[int, Message, Message | None]],
) -> None:
    fed = make_federation("image", clients=3)
    algo, out = _run(fed, "fadngs-nosed", rounds=2, density="none", warmup_rounds=1)
    assert failures(out.events) == [] and algo.personalized
    for _, msg, reply in delivered:
        assert msg.kind in ("train", "evaluate")  # no density phase
        if msg.kind == "train":
            assert msg.arrays == {} and reply is not None and reply.arrays == {}
    own = [out.client_states[c]["own/head.net.3.weight"] for c in range(3)]
    assert not np.array_equal(own[0], own[1])
    # each client's saved detector: its own model, its own single Gaussian
    for cid, m in out.evaluations.items():
        np.testing.assert_array_equal(m.arrays["detector/head.net.3.weight"], own[cid])
        assert m.arrays["detector/means"].shape == (1, 8)


def test_density_local_shares_the_model_not_the_densities(
    delivered: list[tuple[int, Message, Message | None]],
) -> None:
    fed = make_federation("image", clients=3)
    algo, out = _run(fed, "fadngs-nosed", rounds=2, density="local", warmup_rounds=0)
    assert failures(out.events) == [] and algo.personalized
    assert all(m.kind != "density" for _, m, _ in delivered)
    assert all("means" not in m.arrays for _, m, _ in delivered)
    means = [out.evaluations[c].arrays["detector/means"] for c in range(3)]
    assert not np.allclose(means[0], means[1])  # each client's own Gaussian


def test_same_seed_same_scores_other_seed_other_scores() -> None:
    fed = make_federation("image")
    _, a = _run(fed, rounds=2, warmup_rounds=1)
    _, b = _run(fed, rounds=2, warmup_rounds=1)
    _, c = _run(fed, rounds=2, warmup_rounds=1, seed=4)
    for cid in a.evaluations:
        np.testing.assert_array_equal(a.evaluations[cid].arrays["score"],
                                      b.evaluations[cid].arrays["score"])  # fmt: skip
    assert not np.allclose(a.evaluations[0].arrays["score"], c.evaluations[0].arrays["score"])


def test_privacy_measure_and_density_dp_in_metrics() -> None:
    from fedad.evaluation.families import Pooled
    from fedad.methods.fadngs.family import PRIVACY

    fed = make_federation("image")
    algo, out = _run(fed, rounds=2, warmup_rounds=0, density_noise=1.0)
    dc = PRIVACY.pooled(Pooled(out.evaluations))
    assert set(dc) == {"dcor_shared", "dcor_random", "dcor_shared_u", "dcor_random_u"}
    assert all(0.0 <= dc[k] <= 1.0 for k in ("dcor_shared", "dcor_random"))
    want = np.mean([m.scalars["dcor_shared"] for m in out.evaluations.values()])
    assert dc["dcor_shared"] == pytest.approx(want)
    assert failures(out.events) == []
    extra = algo.extra_metrics(out.evaluations)
    dp = extra["density_dp"]
    assert dp["releases"] == 2 * (2 + 1) and dp["epsilon"] > 0 and np.isfinite(dp["epsilon"])
    assert extra["density_epsilon"] == dp["epsilon"] and extra["density_delta"] == 1e-5
    plain_algo, plain = _run(fed, rounds=2, warmup_rounds=0, privacy_measure=False)
    assert plain_algo.extra_metrics(plain.evaluations) == {}
    assert not PRIVACY.applies(Pooled(plain.evaluations))


@pytest.mark.parametrize(
    ("name", "params", "shape", "rounds", "needle"),
    [
        ("fadngs", {"density": "local"}, (1, 8, 8), 2, "fadngs-nosed"),
        ("fadngs-nosed", {"warmup_rounds": 2}, (1, 8, 8), 2, "warmup_rounds"),
        ("fadngs-nosed", {}, (1, 8, 12), 2, "square"),
        ("fadngs-nosed", {"density_noise": 1.0, "k_c": 2}, (1, 8, 8), 2, "k_c = 1"),
        ("fadngs-nosed", {"density_noise": 1.0, "density": "local"}, (1, 8, 8), 2, "shares none"),
    ],
)
def test_config_errors(
    name: str, params: dict[str, Any], shape: tuple[int, ...], rounds: int, needle: str
) -> None:
    setup = Setup("image", shape, rounds=rounds, seed=0, contamination=0.1, num_clients=3)
    with pytest.raises(ConfigError, match=needle):
        build_algorithm(name, params, setup)


def test_a_global_density_set_too_large_for_the_detector_is_refused_before_training() -> None:
    """k_c x clients Gaussians must fit the detector's bound; k_c's own bound is the
    detector's (one field, written once)."""
    from fedad.methods.fadngs.detector import MAX_GAUSSIANS, FADngsDetectorParams
    from fedad.methods.fadngs.params import FADngsParams

    clients = 10
    setup = Setup("image", (1, 8, 8), rounds=2, seed=0, contamination=0.1, num_clients=clients)
    fits = MAX_GAUSSIANS // clients
    build_algorithm("fadngs-nosed", {"k_c": fits}, setup)
    with pytest.raises(ConfigError, match=f"lower k_c to at most {fits}"):
        build_algorithm("fadngs-nosed", {"k_c": fits + 1}, setup)
    build_algorithm("fadngs-nosed", {"k_c": fits + 1, "density": "local"}, setup)
    bound = FADngsParams.model_fields["k_c"].metadata
    assert bound == FADngsDetectorParams.model_fields["k_c"].metadata


def test_vector_data_is_refused() -> None:
    setup = Setup("vector", (6,), rounds=2, seed=0, contamination=0.1, num_clients=3)
    with pytest.raises(ConfigError, match="image"):
        build_algorithm("fadngs", {}, setup)


def test_default_warmup_is_a_fifth_of_the_rounds() -> None:
    for rounds, want in [(1, 0), (4, 0), (5, 1), (20, 4)]:
        setup = Setup("image", (1, 8, 8), rounds=rounds, seed=0, contamination=0.1, num_clients=3)
        algo = build_algorithm("fadngs", {}, setup)
        assert isinstance(algo, _FADngs) and algo.warmup == want


@pytest.mark.parametrize("loss", ["csi", "simclr"])
def test_loss_ablations_aggregate_every_round(loss: str) -> None:
    fed = make_federation("image", clients=2)
    _, out = _run(fed, "fadngs-nosed", rounds=2, warmup_rounds=0, loss=loss)
    assert failures(out.events) == []
    assert all(r["clients_rejected"] == 0 for r in out.history)
    assert "delta" not in out.history[0] and np.isfinite(out.history[0]["loss"])
    _, crad = _run(fed, "fadngs-nosed", rounds=2, warmup_rounds=0)
    key = "head.net.3.weight"
    assert not np.allclose(out.result.arrays[key], crad.result.arrays[key])


def test_sed_with_the_gaussian_mechanism_runs_on_the_unit_sphere() -> None:
    fed = make_federation("image", clients=2)
    _, out = _run(fed, rounds=2, warmup_rounds=0, density_noise=0.5)
    assert failures(out.events) == [] and np.all(np.isfinite(out.history[-1]["sed_loss"]))
    # the shared means are means of unit vectors (plus noise): well inside the unit ball
    assert np.linalg.norm(out.result.arrays["means"], axis=1).max() < 1.5


def test_private_noise_is_not_the_seeds_and_a_round_is_released_once(
    delivered: list[tuple[int, Message, Message | None]],
) -> None:
    fed = make_federation("image", clients=2)
    _, a = _run(fed, "fadngs-nosed", rounds=3, warmup_rounds=1, density_noise=0.5)
    _, b = _run(fed, "fadngs-nosed", rounds=3, warmup_rounds=1, density_noise=0.5)
    assert not np.allclose(a.result.arrays["means"], b.result.arrays["means"])
    _, c = _run(fed, "fadngs-nosed", rounds=3, warmup_rounds=1, density_noise=0.5,
                noise_source="seeded")  # fmt: skip
    _, d = _run(fed, "fadngs-nosed", rounds=3, warmup_rounds=1, density_noise=0.5,
                noise_source="seeded")  # fmt: skip
    np.testing.assert_array_equal(c.result.arrays["means"], d.result.arrays["means"])
    # with learning-curve checkpoints the checkpoint's density phase re-sends the next
    # round's release: a client's distinct releases are one per round after the warm-up + 1
    delivered.clear()
    setup = Setup("image", fed.feature_shape, rounds=3, seed=3, contamination=0.1,
                  num_clients=2)  # fmt: skip
    algo = build_algorithm("fadngs-nosed", {**FAST, "warmup_rounds": 2, "density_noise": 0.5},
                           setup)  # fmt: skip
    out = run_inprocess(algo, fed, rounds=3, seed=3, eval_every=1)
    assert failures(out.events) == [] and "eval_auroc" in out.history[1]  # the warm-up's last round
    assert "eval_auroc" not in out.history[0]  # no curve inside the warm-up
    for node in (0, 1):
        sent = [r.arrays["means"].tobytes() for n, m, r in delivered
                if n == node and m.kind == "density" and r is not None]  # fmt: skip
        assert len(sent) == 3 and len(set(sent)) == (3 - 2) + 1


def test_crafted_covariances_are_refused_in_one_line() -> None:
    from fedad.core.detector import detector_from_config
    from fedad.core.errors import FedadError

    fed = make_federation("image", clients=2)
    algo, out = _run(fed, "fadngs-nosed", rounds=1, warmup_rounds=0)
    arrays = dict(out.result.arrays)
    bad = arrays["covs"].copy()
    bad[0] = -np.eye(bad.shape[1])  # not positive definite
    for broken in ({**arrays, "covs": bad}, {**arrays, "threshold_": np.asarray(np.nan)}):
        with pytest.raises(FedadError, match="do not fit") as err:
            detector_from_config(algo.detector_config(), broken)
        assert "\n" not in str(err.value)


def test_the_views_params_reach_the_normal_transform(monkeypatch: pytest.MonkeyPatch) -> None:
    """``crop_min`` and ``jitter`` of the method's params are the ones its clients' T+
    pipeline is built with; without params, FADngs's own (no crop, no jitter), not the
    ``contrastive`` detector's."""
    import fedad.methods.fadngs.train as train

    seen: list[tuple[float, float]] = []
    real = train.normal_transform

    def spy(c: int, h: int, w: int, crop_min: float = 0.5, jitter: float = 0.4) -> Any:
        seen.append((crop_min, jitter))
        return real(c, h, w, crop_min=crop_min, jitter=jitter)

    monkeypatch.setattr(train, "normal_transform", spy)
    fed = make_federation("image", clients=2)
    _run(fed, "fadngs-nosed", rounds=1, warmup_rounds=0)
    assert seen and set(seen) == {(1.0, 0.0)}
    seen.clear()
    _run(fed, "fadngs-nosed", rounds=1, warmup_rounds=0, crop_min=0.6, jitter=0.3)
    assert seen and set(seen) == {(0.6, 0.3)}

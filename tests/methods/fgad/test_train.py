"""FGAD's training loop: the sampled generated graphs and the generator options (ours)."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("torch_geometric")

from fedad.methods.fgad.train import sample_adjacency


def test_sampled_adjacency_is_symmetric_binary_and_follows_the_probabilities() -> None:
    p = torch.zeros(2, 5, 5)
    p[0, :4, :4] = 0.5  # graph 0: 4 nodes; node 4 is padding
    p[1] = 1.0
    p *= 1 - torch.eye(5)
    g = torch.Generator().manual_seed(0)
    a = sample_adjacency(p, g)
    assert torch.equal(a, a.transpose(1, 2))
    assert set(a.unique().tolist()) <= {0.0, 1.0}
    assert (a[:, range(5), range(5)] == 0).all()  # no self-loops
    assert (a[0, 4] == 0).all() and (a[0, :, 4] == 0).all()  # padding stays empty
    assert torch.equal(a[1], 1 - torch.eye(5))  # probability 1: every edge
    # the edge frequency matches the probability
    many = torch.stack([sample_adjacency(p[:1], g)[0, 0, 1] for _ in range(2000)])
    assert abs(float(many.mean()) - 0.5) < 0.05


def test_the_vgae_options_learn_the_adjacency_and_the_papers_generator_does_not() -> None:
    """Training-only diagnostics on normal lattices: eq. 8 against the best constant predictor
    and the edge AUROC of the logits (the reason for the ``gen_output``, ``decoder_bias`` and
    ``reconstruction`` options)."""
    import numpy as np

    from fedad.data.graph_domains import make_domain
    from fedad.methods.fgad.detector import FGADDetector

    ds = make_domain("graphs_grids", per_class=48)
    grids = ds.x[np.flatnonzero(ds.y == 0)]
    last = {}
    for name, opts in {
        "paper": {},
        "vgae": {"gen_output": "linear", "decoder_bias": True, "reconstruction": "balanced"},
    }.items():
        det = FGADDetector(in_dim=2, hidden=8, layers=2, seed=0, **opts)  # type: ignore[arg-type]
        det.build(2)
        rng = np.random.default_rng(0)
        last[name] = det.train_epochs(grids, 20, distill=False, rng=rng)
    paper, vgae = last["paper"], last["vgae"]
    assert paper["loss_g"] > paper["recon_constant"]  # worse than knowing only the density
    assert abs(paper["recon_edge_auc"] - 0.5) < 0.05
    assert vgae["loss_g"] < vgae["recon_constant"]
    assert vgae["recon_edge_auc"] > 0.7
    assert paper["recon_constant"] == pytest.approx(vgae["recon_constant"], rel=0.05)


def test_the_teacher_head_scores_when_asked_and_the_choice_survives_a_checkpoint() -> None:
    import numpy as np

    from fedad.core.detector import detector_from_config
    from fedad.methods.fgad.detector import FGADDetector
    from tests.conftest import make_federation

    graphs = make_federation("graph", clients=1).clients[0].x_train
    small = {"hidden": 4, "layers": 2, "gen_hidden": 4, "gen_layers": 1, "epochs": 1}
    det = FGADDetector(in_dim=3, pretrain_epochs=2, head="teacher", seed=0, **small)
    det.fit(graphs)  # type: ignore[arg-type]
    np.testing.assert_array_equal(det.score(graphs), det.teacher_score(graphs))  # type: ignore[arg-type]
    again = detector_from_config(det.to_config(), det.get_arrays())
    assert isinstance(again, FGADDetector) and again.params.head == "teacher"
    np.testing.assert_allclose(again.score(graphs), det.score(graphs))  # type: ignore[arg-type]
    # a configuration written before ``head`` existed still scores with the student
    old = det.to_config()
    del old["params"]["head"]
    student = detector_from_config(old, det.get_arrays())
    assert isinstance(student, FGADDetector) and student.params.head == "student"
    assert not np.allclose(student.score(graphs), det.score(graphs))  # type: ignore[arg-type]
    with pytest.raises(Exception, match="head"):
        detector_from_config({**old, "params": {**old["params"], "head": "both"}}, det.get_arrays())

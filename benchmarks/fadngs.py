"""FADngs's Table I analog on one federation, and its ablations (Tables III and IV).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/fadngs.py
        --suite table1|digits|ablation|evens|speed|reverse|sed|hard|screen|crops|crops-table1|
                jitter|jitter-table1|sed9|sed9-table1|sed10|sed10-hard
        [--seeds 5] [--first-seed 0] [--jobs 2] [--rounds 10] [--per-client 200]
        [--work DIR] [--tag TAG] [--summarise-only] [--only LABEL ...] [--device auto|cpu|cuda]

Every suite is one fedad run with ``seeds = [first, ..., first + seeds - 1]``
(:func:`fedad.seeds.run_seeds`, ``--jobs`` worker processes, one torch thread each;
``first`` is ``--first-seed``, 0 by default, so that a later run can add seeds to an earlier
one's), every method on the same federation per seed: Fashion-MNIST, 10 clients,
``scheme = "dominant"`` (client k holds mostly class ``normal[k mod 5]``: 90% of its
training images), normal classes 0-4 (T-shirt, trouser, pullover, dress, coat), 1%
contamination spread over the clients, ``--per-client`` training images per client, 2,000
test images pooled. ``--local-test shared`` (default, the paper's setting): every client
scores the whole pooled test set, so its detector meets the other clients' normal classes
(false detection), and metrics are the mean over clients; ``own``: each client scores its
share, which mirrors its own classes.

* ``table1``: test anomalies from the held-out classes 5-9. Methods: ``local`` and
  ``fedavg`` with ``autoencoder``, ``deepsvdd``, ``contrastive``; ``local`` + ``ocsvm``;
  ``fadngs-nosed``; ``fadngs``; ``centralized`` + ``contrastive`` (the upper reference that
  pools the data); ``local`` and ``centralized`` + ``pretrained`` (frozen EfficientNet-Lite0
  features, k-NN, no training).
* ``digits``: the same normal data, test anomalies from scikit-learn's digits at 28x28
  (``anomaly_source = "digits"``), the methods of ``table1``.
* ``evens``: a federation no FADngs choice was made on: 5 clients,
  ``dominant`` (90%), normal classes 0, 2, 4, 6, 8 (T-shirt, pullover, coat, shirt, bag),
  test anomalies 1, 3, 5, 7, 9, ``local_test = "own"`` unless ``--local-test`` says
  otherwise, 12 rounds unless ``--rounds``; the federated rows of ``table1`` and the
  no-training reference ``local`` + ``pretrained``.
* ``speed`` (registered before it ran): the Table I analog on the
  development seeds (run it with ``--first-seed 100 --seeds 3``), ``fedavg-ae`` and both
  FADngs variants with the encoder's stem at stride 1 (the default until then) and at
  stride 2 (``stem_stride = 2``: every map half as wide, a quarter of the convolutions'
  arithmetic). Decision rule, fixed before the run: stride 2 becomes FADngs's default if,
  on the mean over the three seeds, ``fadngs`` and ``fadngs-nosed`` at stride 2 are each
  no more than 0.01 AUROC below the same variant at stride 1 and take at most 0.6 of its
  seconds. The evaluation (``table1`` and ``evens``, seeds 0-4, all rows in one run each)
  then runs on whatever the rule decides; no evaluation seed is looked at before.
  Outcome (2026-11-26, ``benchmarks/results/fadngs_speed_shared.json``): stride 2 is
  the default (``stem_stride = "auto"``: 2 from 16 px on; 8 px images keep stride 1).
* ``reverse``: a federation no FADngs choice was ever made on:
  the Table I analog with the classes swapped (normal 5-9: sandal, shirt, sneaker, bag,
  ankle boot; test anomalies 0-4), 10 clients, shared tests, the rows of ``evens``.
* Evaluation of the stride-2 stem, registered before it ran (commit of this text): the
  suites ``table1``, ``evens`` and ``reverse``, seeds 0-4, all rows in one run each, with
  ``--jobs 2`` on the 2-core CPU, defaults as above; the criteria read on the
  means over the seeds: ``fadngs`` at least 0.05 AUROC above the best federated baseline
  (``fedavg`` with ``autoencoder``, ``deepsvdd``, ``contrastive``), not below
  ``fadngs-nosed``, FE and ME no worse than those baselines', and at most 8x the seconds
  of ``fedavg-ae``. Every number is reported, met or not.
  Amendment, before ``reverse`` started (``table1`` running, its seeds 0-1 seen): on the
  2-core CPU the ``contrastive`` rows cost 330-350 s per seed each with 10 clients, so
  ``reverse`` runs without ``fedavg-contrastive`` (``--only fedavg-ae fedavg-deepsvdd
  fadngs-nosed fadngs local-pretrained``) and its criterion is read against the
  autoencoder and Deep SVDD only.
* ``sed`` (registered before it ran; run it with
  ``--first-seed 100 --seeds 3``): the development federation of the earlier SED choices
  (5 clients, ``dominant``, normal 1, 3, 5, 7, 9, anomalies 0, 2, 4, 6, 8, own tests, 10
  rounds) with the stride-2 stem: ``fadngs-nosed``, ``fadngs`` and four weaker or softer
  SEDs (``distill_lr`` 0.001 and 0.0003; the student's temperature 0.2, SEED's; a soft
  teacher at 0.05). Rule: with B the mean AUROC of ``fadngs`` (defaults) over the three
  seeds, the variant with the highest mean becomes the default if it is at least B + 0.01
  (a tie: the one nearer the paper's settings); otherwise the defaults stay. Whether any
  SED is at or above ``fadngs-nosed`` is reported either way.
* ``hard`` and ``screen`` (registered before they ran; run each
  with ``--first-seed 100 --seeds 3``): the rows of :data:`SCREEN` (defaults, six variants
  that cost no more time than the defaults, two that cost more, the references) on two
  development federations. ``hard`` is new: the Table I analog (10 clients, shared tests,
  10 rounds) with normal classes 2, 5, 7, 8, 9 (pullover, sandal, sneaker, bag, ankle boot)
  and anomalies 0, 1, 3, 4, 6: a pullover is normal and T-shirts, coats and shirts are
  anomalies, the kind of fine difference on which FADngs fell 0.1 below ``fedavg-ae`` in the
  stride-2 evaluation's ``reverse`` (that federation itself is not looked at again before the
  evaluation). ``screen`` is the Table I analog on the development seeds. Rule, fixed
  before the run: among :data:`SCREEN_CHOICES`, taken in order of their mean AUROC on
  ``hard``, the first that is at least 0.01 above ``fadngs-nosed`` (defaults) on ``hard``
  and no more than 0.005 below it on ``screen`` becomes the default of both FADngs methods;
  if none is, the defaults stay. ``nosed-epochs-2`` and ``nosed-width-32`` are reported
  only (they cost time the time criterion does not allow). Then the evaluation (``table1``,
  ``evens``, ``reverse``, seeds 0-4) runs on whatever the rule decides.
  Amendment before any FADngs row was seen: on a lent H100 (a runner, since removed, that
  started 36 processes at once) only ``fedavg-ae`` finished in the budget, so the suites
  run on the 2-core CPU instead (``--jobs 2``), ``hard`` first without ``fadngs`` and
  ``local-pretrained`` (time), then ``screen`` with ``fadngs-nosed`` and only the
  candidates that pass ``hard``'s bar (the rule reads ``screen`` for those alone).
  Outcome (2026-11-27, ``benchmarks/results/fadngs_hard_shared_only.json``): none passed
  (the best, ``lr = 0.03``, +0.001); the defaults stay and ``screen`` did not run.
* Evaluation ``s8`` (registered before it ran, after the screen): the code of
  this commit, whose views' random streams differ from the stride-2 evaluation's (SED's teacher
  representations once per round, the privacy measure's distance matrices once, a batch's
  normal views in one kornia call). Seeds 0-4, ``--jobs 2``, 2-core CPU, nothing else
  running, in this order: ``evens`` (all its rows), ``reverse`` and ``table1`` with
  ``--only fedavg-ae fedavg-deepsvdd fadngs-nosed fadngs local-pretrained`` (the
  contrastive rows cost 330-360 s per seed with 10 clients; on ``table1`` the stride-2
  evaluation's ``fedavg-contrastive`` was 0.012 below ``fedavg-ae``), each with ``--work``
  kept so that the per-client AUROCs can be read afterwards. Criteria as the stride-2
  evaluation's; every number is reported, met or not.
* ``crops`` and ``crops-table1`` (registered before they ran;
  ``--first-seed 100 --seeds 3``): after the evaluation, per anomaly class, showed FADngs
  scoring coats, pullovers, T-shirts and shirts alike (``benchmarks/fadngs_classes.py``),
  milder crops of CRAD's normal views (``crop_min`` 0.8 and 1, against the default 0.5)
  on ``hard``'s federation (``crops``) and the Table I analog (``crops-table1``), beside
  ``fadngs-nosed``'s defaults on the same code. Rule: a ``crop_min`` that is 0.01 above
  the defaults on ``crops`` and no more than 0.005 below them on ``crops-table1`` is
  reported as the candidate default; it becomes the default only after the evaluation
  suites confirm it in a later registered run (no time was left for one).
* ``jitter`` and ``jitter-table1`` (registered before they ran;
  ``--first-seed 100 --seeds 3``): a representation diagnostic on development seed 100
  (``benchmarks/fadngs_representations.py``, one Gaussian per normal class) found the
  trained encoder's ``z`` below a Gaussian on the image itself averaged to 7x7 on ``evens``'s
  federation (0.843 against 0.908; ankle boots 0.857 against 0.995) and level with it on
  ``hard``'s. A brightness/contrast jitter makes the encoder blind to how much of the
  image a garment fills and how dark it is, cues that tell many Fashion-MNIST classes
  apart. Rows: ``fadngs-nosed``'s defaults (``jitter = 0.4``), ``jitter`` 0 and 0.2, and
  ``jitter`` 0 with ``crop_min = 1`` (no photometric and no scale change at all), on
  ``hard``'s federation (``jitter``) and the Table I analog (``jitter-table1``). Rule, fixed
  before the run: among the three variants, taken in order of their mean AUROC on
  ``jitter``, the first that is at least 0.01 above the defaults there and no more than
  0.005 below them on ``jitter-table1`` becomes the default of both FADngs methods, and
  the evaluation (``evens``, ``reverse``, ``table1`` as evaluation ``s8``'s, seeds 0-4)
  runs again on it; if none is, the defaults stay. No evaluation seed (0-4) of any
  federation is run before that evaluation.
  Outcome (2026-11-27, ``benchmarks/results/fadngs_jitter_shared_s9.json``,
  ``fadngs_jitter-table1_shared_s9.json``): on ``jitter`` the defaults 0.833, ``jitter``
  0 0.826, 0.2 0.828, 0 with ``crop_min = 1`` 0.846 (+0.013); on ``jitter-table1`` 0.914,
  0.917, 0.916, 0.913 (-0.001). So ``jitter = 0, crop_min = 1`` is the default of both
  FADngs methods (and of the FADngs detector); the ``contrastive`` baseline keeps its
  views.
* Evaluation ``s9`` (registered before it ran, on the code of this commit):
  as evaluation ``s8`` (same suites, order, ``--only`` lists, seeds 0-4, ``--jobs 2``,
  2-core CPU, nothing else running, ``--work`` kept, ``--tag s9``), with the new views.
  Criteria as the stride-2 evaluation's; every number is reported, met or not.
* ``sed9`` and ``sed9-table1`` (registered before they ran, after
  the evaluation's ``evens`` suite showed ``fadngs`` 0.035 below ``fadngs-nosed`` with the
  new views; ``--first-seed 100 --seeds 3``): ``hard``'s federation (``sed9``) and the
  Table I analog (``sed9-table1``), rows ``fadngs-nosed``, ``fadngs`` (defaults) and
  three weaker SEDs (``distill_lr`` 0.001 and 0.0003; the student's temperature 0.2).
  Rule: among the three, taken in order of their mean AUROC on ``sed9``, the first that is
  at least 0.01 above ``fadngs`` there and no more than 0.005 below it on
  ``sed9-table1`` becomes ``fadngs``'s default, and ``fadngs``'s rows of the evaluation
  (with ``fedavg-ae`` beside them for the time ratio; the other rows are deterministic
  and unchanged) run again on it; otherwise the defaults stay.
  Outcome (2026-11-27, ``benchmarks/results/fadngs_sed9_shared_s9.json``,
  ``fadngs_sed9-table1_shared_s9.json``): on ``sed9`` ``fadngs-nosed`` 0.846, ``fadngs``
  0.829, ``distill_lr`` 0.001 0.840, 0.0003 0.842, student 0.2 0.847; on ``sed9-table1``
  0.913, 0.917, 0.918, 0.914, 0.916. The student's temperature 0.2 passed (+0.018,
  -0.001) and is ``fadngs``'s default; the rerun of ``fadngs``'s rows: ``--only fedavg-ae
  fadngs --tag s9sed`` on the three suites, as the evaluation above otherwise.
* ``sed10`` and ``sed10-hard`` (registered before they ran;
  ``--first-seed 100 --seeds 3``): SED still cost ``fadngs`` 0.032 against ``fadngs-nosed`` on
  ``evens``'s federation in evaluation ``s9``, on all five seeds. Learning curves on
  development seed 100 (``engine.eval_every = 1``) show the cost from SED's first round on
  that federation, a gain of 0.015 on the ``sed`` federation (normal 1, 3, 5, 7, 9), and a
  cost of 0.016 growing over the last rounds, while the teachers agree more and more (mean
  cosine 0.97), on a new development federation, ``sed10``: 5 clients, ``dominant``,
  normal 0, 2, 3, 4, 6 (T-shirt, pullover, dress, coat, shirt), anomalies 1, 5, 7, 8, 9, own
  tests, 12 rounds, as ``evens``'s federation is built but with other classes. When the
  teachers agree, eq. 11-13 with the teacher's own entry first in the queue is a contrast
  of each public image against the others: it spreads generated shapes apart and nothing
  else. Rows: ``fadngs-nosed``, ``fadngs`` (defaults), two weaker SEDs (``distill_lr``
  0.001 and 0.0003) and ``sed_form = "cosine"`` (each teacher's term a cosine pull of the
  student toward that teacher, no queue: nothing to do where the teachers agree), on
  ``sed10`` and on ``hard``'s federation (``sed10-hard``). Rule: among the three, taken in
  order of their mean AUROC on ``sed10``, the first that is at least 0.01 above ``fadngs``
  there and no more than 0.005 below it on ``sed10-hard`` becomes ``fadngs``'s default,
  and ``fadngs``'s rows of the evaluation (``evens``, ``reverse``, ``table1``, seeds 0-4,
  ``--only fedavg-ae fadngs``, ``--jobs 2``, nothing else running, ``--tag s10``) run
  again on it; otherwise the defaults stay. Each variant's mean against ``fadngs-nosed``
  is reported either way.
  Outcome (2026-11-27, ``benchmarks/results/fadngs_sed10_own_s10.json``,
  ``fadngs_sed10-hard_shared_s10.json``): on ``sed10`` ``fadngs-nosed`` 0.9606, ``fadngs``
  0.9424, ``distill_lr`` 0.001 0.9544, 0.0003 0.9590, ``sed_form = "cosine"`` 0.9590 (first
  by 0.00003: a tie in all but the rule's order); on ``sed10-hard`` 0.846, 0.847, 0.845,
  0.846, 0.845. ``sed_form = "cosine"`` passed (+0.017, -0.002) and is ``fadngs``'s
  default (the paper's eq. 11-13: ``sed_form = "seed"``); the evaluation's ``fadngs`` rows
  run again on it.
* ``ablation``: Table III (``density = "local"``, ``"none"`` on ``fadngs-nosed``), Table IV
  (``loss = "csi"``, ``"simclr"``), eq. 7 as printed (``con_form = "eq7"``) on both
  variants, SED as eq. 11-13 (``sed_form = "seed"``, the paper's) and eq. 11-13 with one
  temperature of 0.5 for teacher and student. Rerun with the cosine SED (``--tag s10``,
  seeds 0-4, the Table I analog's federation; its ``fadngs-nosed`` and ``fadngs`` rows are
  evaluations ``s9``'s and ``s10``'s, same seeds, deterministic): a measurement, no choice
  made on it.

Writes ``benchmarks/results/fadngs_<suite>_<local-test>.json`` (per method: mean and
population std over seeds of AUROC, AUPR, FE, ME; the mean per-client AUROC; MB per round;
seconds; the privacy measures) and prints a markdown table.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np
from suites import Method, method_lines, pm, run_suite, seed_methods

TABLE1: list[Method] = [
    ("local-ae", "local", {}, "autoencoder"),
    ("fedavg-ae", "fedavg", {}, "autoencoder"),
    ("local-deepsvdd", "local", {}, "deepsvdd"),
    ("fedavg-deepsvdd", "fedavg", {}, "deepsvdd"),
    ("local-contrastive", "local", {}, "contrastive"),
    ("fedavg-contrastive", "fedavg", {}, "contrastive"),
    ("local-ocsvm", "local", {}, "ocsvm"),
    ("fadngs-nosed", "fadngs-nosed", {}, None),
    ("fadngs", "fadngs", {}, None),
    ("centralized-contrastive", "centralized", {}, "contrastive"),
    ("local-pretrained", "local", {}, "pretrained"),
    ("centralized-pretrained", "centralized", {}, "pretrained"),
]
ABLATION: list[Method] = [
    ("nosed-density-local", "fadngs-nosed", {"density": "local"}, None),
    ("nosed-density-none", "fadngs-nosed", {"density": "none"}, None),
    ("nosed-loss-csi", "fadngs-nosed", {"loss": "csi"}, None),
    ("nosed-loss-simclr", "fadngs-nosed", {"loss": "simclr"}, None),
    ("nosed-eq7", "fadngs-nosed", {"con_form": "eq7"}, None),
    ("fadngs-eq7", "fadngs", {"con_form": "eq7"}, None),
    (
        "fadngs-sed-tau-0.5",
        "fadngs",
        {"sed_form": "seed", "sed_temperature": 0.5, "sed_teacher_temperature": 0.5},
        None,
    ),
    ("fadngs-sed-seed", "fadngs", {"sed_form": "seed"}, None),
]
SPEED: list[Method] = [
    ("fedavg-ae", "fedavg", {}, "autoencoder"),
    ("fadngs-nosed-s1", "fadngs-nosed", {"stem_stride": 1}, None),
    ("fadngs-s1", "fadngs", {"stem_stride": 1}, None),
    ("fadngs-nosed-s2", "fadngs-nosed", {"stem_stride": 2}, None),
    ("fadngs-s2", "fadngs", {"stem_stride": 2}, None),
]
SED: list[Method] = [
    ("fedavg-ae", "fedavg", {}, "autoencoder"),
    ("fadngs-nosed", "fadngs-nosed", {}, None),
    ("fadngs", "fadngs", {}, None),
    ("fadngs-dlr-0.001", "fadngs", {"distill_lr": 0.001}, None),
    ("fadngs-dlr-0.0003", "fadngs", {"distill_lr": 0.0003}, None),
    ("fadngs-student-0.2", "fadngs", {"sed_temperature": 0.2}, None),
    ("fadngs-teacher-0.05", "fadngs", {"sed_teacher_temperature": 0.05}, None),
]
SCREEN: list[Method] = [
    ("fedavg-ae", "fedavg", {}, "autoencoder"),
    ("fadngs-nosed", "fadngs-nosed", {}, None),
    ("fadngs", "fadngs", {}, None),
    ("nosed-tau-0.2", "fadngs-nosed", {"temperature": 0.2}, None),
    ("nosed-tau-0.1", "fadngs-nosed", {"temperature": 0.1}, None),
    ("nosed-kc-3", "fadngs-nosed", {"k_c": 3}, None),
    ("nosed-lr-0.03", "fadngs-nosed", {"lr": 0.03}, None),
    ("nosed-simclr", "fadngs-nosed", {"loss": "simclr"}, None),
    ("nosed-warmup-half", "fadngs-nosed", {"warmup_rounds": 5}, None),
    ("nosed-epochs-2", "fadngs-nosed", {"local_epochs": 2}, None),
    ("nosed-width-32", "fadngs-nosed", {"width": 32}, None),
    ("local-pretrained", "local", {}, "pretrained"),
]
CROPS: list[Method] = [
    ("fadngs-nosed", "fadngs-nosed", {}, None),
    ("nosed-crop-0.8", "fadngs-nosed", {"crop_min": 0.8}, None),
    ("nosed-crop-1", "fadngs-nosed", {"crop_min": 1.0}, None),
]
JITTER: list[Method] = [
    ("fadngs-nosed", "fadngs-nosed", {}, None),
    ("nosed-jitter-0", "fadngs-nosed", {"jitter": 0.0}, None),
    ("nosed-jitter-0.2", "fadngs-nosed", {"jitter": 0.2}, None),
    ("nosed-jitter-0-crop-1", "fadngs-nosed", {"jitter": 0.0, "crop_min": 1.0}, None),
]
SED9: list[Method] = [
    ("fadngs-nosed", "fadngs-nosed", {}, None),
    ("fadngs", "fadngs", {}, None),
    ("fadngs-dlr-0.001", "fadngs", {"distill_lr": 0.001}, None),
    ("fadngs-dlr-0.0003", "fadngs", {"distill_lr": 0.0003}, None),
    ("fadngs-student-0.2", "fadngs", {"sed_temperature": 0.2}, None),
]
SED10: list[Method] = [
    *SED9[:4],
    ("fadngs-sed-cosine", "fadngs", {"sed_form": "cosine"}, None),
]
SCREEN_CHOICES = [
    "nosed-tau-0.2",
    "nosed-tau-0.1",
    "nosed-kc-3",
    "nosed-lr-0.03",
    "nosed-simclr",
    "nosed-warmup-half",
]
"""The ``screen`` rows that cost no more time than the defaults: the candidates of its rule."""
EVENS: list[Method] = [
    ("fedavg-ae", "fedavg", {}, "autoencoder"),
    ("fedavg-deepsvdd", "fedavg", {}, "deepsvdd"),
    ("fedavg-contrastive", "fedavg", {}, "contrastive"),
    ("fadngs-nosed", "fadngs-nosed", {}, None),
    ("fadngs", "fadngs", {}, None),
    ("local-pretrained", "local", {}, "pretrained"),
]
SUITE_ROWS: dict[str, list[Method]] = {
    "ablation": ABLATION, "evens": EVENS, "speed": SPEED, "reverse": EVENS, "sed": SED,
    "hard": SCREEN, "screen": SCREEN, "crops": CROPS, "crops-table1": CROPS,
    "jitter": JITTER, "jitter-table1": JITTER, "sed9": SED9, "sed9-table1": SED9,
    "sed10": SED10, "sed10-hard": SED10,
}  # fmt: skip
"""The rows of each suite; ``table1`` and ``digits`` run :data:`TABLE1`."""
HARD_FEDERATION = ("hard", "crops", "jitter", "sed9", "sed10-hard")
"""The suites on ``hard``'s federation (normal 2, 5, 7, 8, 9; anomalies 0, 1, 3, 4, 6)."""
FIVE_OWN = ("evens", "sed", "sed10")
"""The suites of 5 clients that score their own tests by default (the others: 10, shared)."""
KEYS = ("auroc", "aupr", "fe", "me")


def config_text(
    suite: str,
    seeds: int,
    rounds: int,
    per_client: int,
    local_test: str = "shared",
    only: list[str] | None = None,
    first_seed: int = 0,
    device: str = "auto",
) -> str:
    """The suite's experiment as TOML (``only``: just the rows with these labels; seeds
    ``first_seed`` to ``first_seed + seeds - 1``)."""
    evens = suite == "evens"
    lines = [
        f"seeds = {list(range(first_seed, first_seed + seeds))}",
        f"rounds = {rounds}",
        "[data]",
        'name = "fashion_mnist"',
        "normal = [0, 2, 4, 6, 8]" if evens else "normal = [0, 1, 2, 3, 4]",
    ]
    if suite == "reverse":
        lines[4] = "normal = [5, 6, 7, 8, 9]"
    if suite == "sed":
        lines[4] = "normal = [1, 3, 5, 7, 9]"
    if suite in HARD_FEDERATION:
        lines[4] = "normal = [2, 5, 7, 8, 9]"
    if suite == "sed10":
        lines[4] = "normal = [0, 2, 3, 4, 6]"
    if suite == "digits":
        lines += ["anomaly = []", 'anomaly_source = "digits"', "size = 28"]
    elif suite == "reverse":
        lines += ["anomaly = [0, 1, 2, 3, 4]"]
    elif suite == "sed":
        lines += ["anomaly = [0, 2, 4, 6, 8]"]
    elif suite in HARD_FEDERATION:
        lines += ["anomaly = [0, 1, 3, 4, 6]"]
    elif suite == "sed10":
        lines += ["anomaly = [1, 5, 7, 8, 9]"]
    else:
        lines += ["anomaly = [1, 3, 5, 7, 9]" if evens else "anomaly = [5, 6, 7, 8, 9]"]
    lines += [
        f"max_train_per_client = {per_client}",
        "max_test = 2000",
        "[partition]",
        'scheme = "dominant"',
        f"clients = {5 if suite in FIVE_OWN else 10}",
        "contamination = 0.01",
        f'local_test = "{local_test}"',
    ]
    if device != "auto":
        lines += ["[engine]", f'device = "{device}"']
    rows = SUITE_ROWS.get(suite, TABLE1)
    lines += method_lines(rows, only, suite)
    return "\n".join(lines) + "\n"


def summarise(run: Path) -> dict[str, Any]:
    """Per method, over the seeds finished in ``run``: mean and population std of each of
    :data:`KEYS`, the mean per-client AUROC, MB per round, seconds (and, where the run has
    ``fedavg-ae``, the mean, least and most of a seed's seconds over its), privacy
    measures."""
    per_seed = seed_methods(run)
    labels = list(per_seed[0]) if per_seed else []
    out: dict[str, Any] = {}
    for label in labels:
        ms = [m[label] for m in per_seed if isinstance(m.get(label), dict)]
        row: dict[str, Any] = {"seeds": len(ms)}
        for key in KEYS:
            vals = [float(m[key]) for m in ms if m.get(key) is not None]
            row[key] = float(np.mean(vals)) if vals else None
            row[f"{key}_std"] = float(np.std(vals)) if vals else None
        row["auroc_per_seed"] = [m.get("auroc") for m in ms]
        client_means = [
            np.mean([r["auroc"] for r in m.get("per_client", []) if r.get("auroc") is not None])
            for m in ms
        ]
        row["client_auroc"] = float(np.mean(client_means)) if client_means else None
        per_round = [(m["bytes_up"] + m["bytes_down"]) / max(m["rounds"], 1) / 1e6 for m in ms]
        row["mb_per_round"] = float(np.mean(per_round)) if per_round else None
        row["seconds"] = float(np.mean([m["seconds"] for m in ms])) if ms else None
        ratios = [m[label]["seconds"] / m["fedavg-ae"]["seconds"] for m in per_seed
                  if isinstance(m.get(label), dict) and isinstance(m.get("fedavg-ae"), dict)
                  and m["fedavg-ae"].get("seconds")]  # fmt: skip
        if ratios:  # the time criterion: seconds over fedavg-ae's of the same seed
            row["x_fedavg_ae"] = [float(np.mean(ratios)), min(ratios), max(ratios)]
        for key in ("dcor_shared", "dcor_random", "dcor_shared_u", "dcor_random_u"):
            vals = [float(m[key]) for m in ms if m.get(key) is not None]
            if vals:
                row[key] = float(np.mean(vals))
        out[label] = row
    return out


def table(rows: dict[str, Any]) -> str:
    """Markdown: one row per method."""
    lines = [
        "| method | FE ↓ | ME ↓ | AUROC ↑ | AUPR ↑ | client AUROC | MB / round | s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for label, r in rows.items():
        lines.append(
            f"| {label} | {pm(r, 'fe')} | {pm(r, 'me')} | {pm(r, 'auroc')} | "
            f"{pm(r, 'aupr')} | {r['client_auroc']:.3f} | {r['mb_per_round']:.2f} | "
            f"{r['seconds']:.0f} |"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--suite",
        choices=["table1", "digits", *SUITE_ROWS],
        required=True,
    )
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--first-seed", type=int, default=0, help="the first of the seeds")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=None, help="10 (evens, sed10: 12)")
    ap.add_argument("--per-client", type=int, default=200)
    ap.add_argument("--local-test", choices=["shared", "own"], default=None,
                    help="partition.local_test (shared: each client scores all; default "
                         "shared; evens, sed, sed10: own)")  # fmt: skip
    ap.add_argument("--device", default="auto", help="engine.device (auto: a GPU if any)")
    ap.add_argument("--only", nargs="+", default=None, metavar="LABEL",
                    help="only these rows (writes ..._only.json)")  # fmt: skip
    ap.add_argument("--tag", default="", help="appended to the results file's name")
    ap.add_argument("--work", type=Path, default=None, help="keep (and resume) the run here")
    ap.add_argument("--summarise-only", action="store_true",
                    help="do not run: summarise the seeds already finished in --work")  # fmt: skip
    args = ap.parse_args()
    rounds = args.rounds or (12 if args.suite in ("evens", "sed10") else 10)
    local_test = args.local_test or ("own" if args.suite in FIVE_OWN else "shared")
    text = config_text(
        args.suite,
        args.seeds,
        rounds,
        args.per_client,
        local_test,
        args.only,
        args.first_seed,
        args.device,
    )
    suffix = ("_only" if args.only else "") + (f"_{args.tag}" if args.tag else "")
    rows = run_suite(
        text, f"fadngs_{args.suite}_{local_test}{suffix}", summarise, work=args.work,
        jobs=args.jobs, summarise_only=args.summarise_only, suite=args.suite,
    )  # fmt: skip
    print(f"```toml\n{text}```\n")
    print(table(rows))


if __name__ == "__main__":
    main()

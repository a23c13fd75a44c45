"""The report's first section (fedad.report.answer): the best method, its pooled and
client-mean AUROC with the seeds' spread, a reading, and the caveats, before the folds."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np

from fedad.core.collapse import NOT_LEARNING
from fedad.evaluation.seeds import aggregate
from fedad.report.answer import Standing, caveats, reading, standings
from fedad.report.html import render_report

SEEDS = [0, 1, 2]
POOLED = {  # label -> (method, detector, pooled AUROC per seed)
    "centralized-ae": ("centralized", "autoencoder", [0.95, 0.96, 0.94]),
    "fedavg-ae": ("fedavg", "autoencoder", [0.90, 0.92, 0.91]),
    "local-ae": ("local", "autoencoder", [0.85, 0.86, 0.84]),
    "fedavg-con": ("fedavg", "contrastive", [0.70, 0.72, 0.71]),
}
CLIENTS = {  # label -> per seed, each client's AUROC
    "centralized-ae": [[0.9, 1.0], [0.92, 0.96], [0.9, 0.94]],
    "fedavg-ae": [[0.8, 0.9], [0.94, 0.9], [0.88, 0.9]],
    "local-ae": [[0.8, 0.8], [0.9, 0.8], [0.85, 0.8]],
    "fedavg-con": [[0.7, 0.7], [0.7, 0.8], [0.7, 0.75]],
}
STUCK = f"{NOT_LEARNING}: the contrastive loss stayed at 0.99 of its collapsed value"


def _entry(label: str, i: int) -> dict[str, Any]:
    method, detector, pooled = POOLED[label]
    rows = [{"client": c, "auroc": a} for c, a in enumerate(CLIENTS[label][i])]
    events = [STUCK] if label == "fedavg-con" and SEEDS[i] == 1 else []
    return {"method": method, "detector": detector, "auroc": pooled[i], "f1": 0.5,
            "per_client": rows, "events": events}  # fmt: skip


def make_seeds_run(tmp_path: Path) -> Path:
    """A several-seed run directory as fedad.seeds writes it: OUT/metrics.json aggregated
    from each OUT/seed-N/metrics.json."""
    run = tmp_path / "run"
    per_seed: dict[int, dict[str, Any]] = {}
    experiment = {"dataset": "digits", "clients": 2, "scheme": "iid"}
    for i, s in enumerate(SEEDS):
        data = {
            "methods": {label: _entry(label, i) for label in POOLED},
            "experiment": {**experiment, "seed": s},
            "columns": {"summary": ["auroc", "f1"]},
        }
        (run / f"seed-{s}").mkdir(parents=True)
        (run / f"seed-{s}" / "metrics.json").write_text(json.dumps(data))
        per_seed[s] = data
    (run / "metrics.json").write_text(json.dumps(aggregate(per_seed, SEEDS, list(POOLED))))
    return run


def _pm(values: list[float]) -> str:
    return f"{np.mean(values):.3f} ± {np.std(values):.3f}"


def _answer(text: str) -> str:
    start = text.index('<h2 id="answer">')
    return text[start : text.index("<h2>Summary</h2>", start)]


def test_the_answer_comes_first_and_the_details_are_folded(tmp_path: Path) -> None:
    text = render_report(make_seeds_run(tmp_path))
    headings = re.findall(r"<h2[^>]*>([^<]+)</h2>", text)
    assert headings[:2] == ["Answer", "Summary"]
    first_fold = text.index("<details>")
    assert text.index('<h2 id="answer">') < text.index("<h2>Summary</h2>") < first_fold
    for title in ("Experiment", "Seeds", "Evaluation protocol", "Configuration"):
        if f"<h2>{title}</h2>" in text:
            assert f"<details><summary><h2>{title}</h2></summary>" in text, title
    assert text.count("<details>") == text.count("</details>") >= 3


def test_best_method_with_the_seeds_spread(tmp_path: Path) -> None:
    answer = _answer(render_report(make_seeds_run(tmp_path)))
    pooled = POOLED["centralized-ae"][2]
    client = [float(np.mean(c)) for c in CLIENTS["centralized-ae"]]
    headline = re.search(r'<p class="headline">(.*?)</p>', answer)
    assert headline is not None
    assert headline.group(1) == (
        f"Best on digits, 2 clients (iid): centralized-ae (centralized / autoencoder), "
        f"pooled AUROC {_pm(pooled)}, client-mean AUROC {_pm(client)}, over 3 seeds."
    )
    # every method's client mean is the mean over seeds of its clients' mean
    fed = [float(np.mean(c)) for c in CLIENTS["fedavg-ae"]]
    assert _pm(fed) in answer and _pm(POOLED["fedavg-ae"][2]) in answer
    # the reading: the lead is beyond the spread; the best is the pooled-data reference
    gap = np.mean(pooled) - np.mean(POOLED["fedavg-ae"][2])
    assert f"leads fedavg-ae by {gap:.3f} pooled AUROC, more than the seeds" in answer
    assert "the best method that keeps data where it is, fedavg-ae" in answer


def test_caveats_below_local_and_a_collapsed_encoder(tmp_path: Path) -> None:
    answer = _answer(render_report(make_seeds_run(tmp_path)))
    caveats_html = answer[answer.index("Caveats") :]
    assert "fedavg-con (pooled AUROC 0.710) is below local-ae (0.850)" in caveats_html
    assert f"fedavg-con: seed 1: {NOT_LEARNING}" in caveats_html
    assert "fedavg-ae (pooled" not in caveats_html  # above the reference: no caveat


def test_a_missing_seed_is_a_note_not_an_error(tmp_path: Path) -> None:
    run = make_seeds_run(tmp_path)
    (run / "seed-2" / "metrics.json").unlink()
    text = render_report(run)
    assert "seed 2: no seed-2/metrics.json: left out of the client means" in text
    client = [float(np.mean(c)) for c in CLIENTS["centralized-ae"][:2]]
    assert f"client-mean AUROC {_pm(client)}" in _answer(text)


def _st(label: str, pooled: float, sd: float, method: str = "fedavg") -> Standing:
    return Standing(label, method, "autoencoder", pooled, sd)


def test_reading_within_the_spread_and_one_seed() -> None:
    close = [_st("a", 0.90, 0.02), _st("b", 0.89, 0.01)]
    assert "within the seeds' spread (± 0.020): these seeds do not separate them" in reading(
        close, 3
    )
    assert "leads b by 0.010 pooled AUROC on one seed" in reading(close, 1)
    alone = [_st("local", 0.9, 0.0, "local"), _st("b", 0.8, 0.0)]
    assert "no federated method beat it here" in reading(alone, 1)
    assert reading([], 1).startswith("No method has a pooled AUROC")
    tie = [_st("a", 0.9, 0.001), _st("b", 0.9, 0.001)]
    assert "are less than 0.001 apart" in reading(tie, 3)


def test_reading_names_a_different_best_by_the_client_mean() -> None:
    a = Standing("a", "fedavg", "ae", 0.90, 0.01, client_mean=0.80, client_sd=0.01)
    b = Standing("b", "fedprox", "ae", 0.85, 0.01, client_mean=0.83, client_sd=0.02)
    assert reading([a, b], 1).endswith("by the client-mean AUROC b is best (0.030 above a).")
    b.client_sd = 0.04  # the lead is within the seeds' spread: not claimed
    assert "client-mean" not in reading([a, b], 3)
    b.client_sd = 0.001
    assert "by the client-mean AUROC b is best" in reading([a, b], 3)


def test_the_reference_has_the_same_detector_where_the_run_has_one() -> None:
    local_ae = _st("local-ae", 0.88, 0.0, "local")
    local_svdd = Standing("local-svdd", "local", "deepsvdd", 0.74)
    fed_svdd = Standing("fedavg-svdd", "fedavg", "deepsvdd", 0.72)
    fadngs = Standing("fadngs", "fadngs", "", 0.80)
    found = caveats([local_ae, fadngs, local_svdd, fed_svdd], {}, 1)
    assert found == [
        "fadngs (pooled AUROC 0.800) is below local-ae (0.880), where each client trains "
        "alone: the federation did not help it here",
        "fedavg-svdd (pooled AUROC 0.720) is below local-svdd (0.740), where each client "
        "trains alone: the federation did not help it here",
    ]


def test_below_the_reference_only_beyond_the_spread() -> None:
    ranked = [_st("local", 0.90, 0.03, "local"), _st("fed", 0.88, 0.03)]
    assert caveats(ranked, {}, 3) == []  # 0.02 apart, spread 0.03
    assert len(caveats(ranked, {}, 1)) == 1  # one seed: any amount


def test_privacy_without_epsilon_and_non_finite_scores() -> None:
    entries = {
        "dp": {"method": "fedavg", "auroc": 0.8, "privacy": {"epsilon": 2.0}},
        "bank": {"method": "fedavg", "auroc": 0.7, "nonfinite_scores": 3,
                 "privacy": {"epsilon": None, "note": "sends a memory bank un-noised"}},
    }  # fmt: skip
    found = caveats(standings(entries), entries, 1)
    assert "bank has no ε under [privacy]: sends a memory bank un-noised" in found
    assert "bank gave 3 non-finite scores (counted as most anomalous)" in found
    assert not any(c.startswith("dp has no") for c in found)


def test_untrusted_labels_are_escaped(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    methods = {"<img src=x onerror=alert(1)>": {"method": "<b>m</b>", "auroc": 0.9}}
    (run / "metrics.json").write_text(json.dumps({"methods": methods, "experiment": {}}))
    answer = _answer(render_report(run))
    assert "<img src=x" not in answer and "&lt;img src=x onerror=alert(1)&gt;" in answer
    assert "<b>m</b>" not in answer


def test_a_crafted_metrics_json_renders_with_notes(tmp_path: Path) -> None:
    """Wrong types everywhere, odd seeds, a seed's metrics.json that is a folder or not
    JSON: the answer is still written, escaped, and nothing raises."""
    run = tmp_path / "run"
    (run / "seed-0" / "metrics.json").mkdir(parents=True)
    (run / "seed--1").mkdir()
    (run / "seed--1" / "metrics.json").write_text("{not json")
    methods = {
        "a": {"auroc": "0.9", "std": [1], "per_client": {"x": 1}, "events": "stuck",
              "privacy": {"epsilon": "x", "note": ["<i>"]}, "nonfinite_scores": True,
              "method": ["local"]},
        "b": {"auroc": float("nan"), "per_client": [{"auroc": 2e308}, "x", {"auroc": 0.5}]},
        "c": {"auroc": 0.7, "method": "fedavg", "std": {"auroc": "wide"}},
    }  # fmt: skip
    experiment = {"seeds": [0, "1", True, 10**30, -1], "clients": {"x": 1}, "dataset": "<s>"}
    text = json.dumps({"methods": methods, "experiment": experiment})
    (run / "metrics.json").write_text(text)  # NaN: Python writes and reads it
    html = render_report(run)
    answer = _answer(html)
    assert "Best on &lt;s&gt;" in answer and "c (fedavg)" in answer
    assert "a has no ε under [privacy]: [&#x27;&lt;i&gt;&#x27;]" in answer
    assert "seed 0: " in html and "seed -1: " in html
    many = {"methods": methods, "experiment": {"seeds": list(range(2000))}}
    (run / "metrics.json").write_text(json.dumps(many))
    assert "more than a run can have" in render_report(run)


def test_one_vs_rest_reports_the_client_mean_once(tmp_path: Path) -> None:
    """Overlapping local test sets (one-vs-rest): the pooled metrics are already the
    client mean (fedad.evaluation.families.evaluate_replies), so the answer shows one AUROC."""
    run = tmp_path / "run"
    run.mkdir()
    methods = {"fedavg-ae": _entry("fedavg-ae", 0), "local-ae": _entry("local-ae", 0)}
    experiment = {"dataset": "digits", "clients": 2, "pooled": "client-mean"}
    (run / "metrics.json").write_text(json.dumps({"methods": methods, "experiment": experiment}))
    answer = _answer(render_report(run))
    assert "fedavg-ae (fedavg / autoencoder), AUROC 0.900 (the mean over clients)." in answer
    assert "<th>AUROC (client mean)</th>" in answer and "pooled AUROC</th>" not in answer


def test_normalised_scores_are_named_below_the_table(tmp_path: Path) -> None:
    how = "each client's scores over its own training scores' median & spread <i>"
    run = make_seeds_run(tmp_path)
    assert "normalised before pooling" not in _answer(render_report(run))  # all raw: silent
    for s in SEEDS:  # the key travels from each seed's metrics.json into the aggregate
        path = run / f"seed-{s}" / "metrics.json"
        data = json.loads(path.read_text())
        data["methods"]["fedavg-ae"]["score_scale"] = how
        path.write_text(json.dumps(data))
    per_seed = {s: json.loads((run / f"seed-{s}" / "metrics.json").read_text()) for s in SEEDS}
    (run / "metrics.json").write_text(json.dumps(aggregate(per_seed, SEEDS, list(POOLED))))
    answer = _answer(render_report(run))
    assert (
        "Scores normalised before pooling: fedavg-ae: each client&#x27;s scores over its own "
        "training scores&#x27; median &amp; spread &lt;i&gt;. Every other method&#x27;s "
        "scores are pooled raw."
    ) in answer

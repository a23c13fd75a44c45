"""The HTML report of a run directory: content, robustness to missing pieces, escaping."""

from __future__ import annotations

import base64
import csv
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fedad.core.errors import FedadError
from fedad.evaluation.metrics import evaluate, evaluate_clients
from fedad.report import write_report
from fedad.report.html import render_report
from fedad.rundir.read import read_history, read_scores

LABELS = ("fedavg-ae", "onlad-sel")
HISTORY_COLUMNS = [
    "method",
    "round",
    "clients_sampled",
    "clients_replied",
    "clients_rejected",
    "bytes_up",
    "bytes_down",
    "seconds",
    "loss",
    "lr",
]
IMG = re.compile(r'<img src="data:image/png;base64,([A-Za-z0-9+/=]+)"')


def _scores(seed: int, n: int = 120, clients: int = 3) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    label = (rng.random(n) < 0.25).astype(np.int8)
    score = rng.normal(size=n) + 1.5 * label
    return {
        "score": score,
        "label": label,
        "client": rng.integers(0, clients, size=n),
        "pred": (score > 1.0).astype(np.int8),
    }


def _method_entry(name: str, arrays: dict[str, np.ndarray], **overrides: Any) -> dict[str, Any]:
    pooled = evaluate(arrays["label"], arrays["score"], arrays["pred"])
    per_client = evaluate_clients(
        arrays["label"], arrays["score"], arrays["pred"], arrays["client"]
    )
    for row in per_client:
        row["threshold"] = 1.0
    entry: dict[str, Any] = {
        "method": name,
        "detector": "autoencoder" if name == "fedavg" else None,
        **{k: v for k, v in pooled.items() if k not in ("n", "n_anomalies")},
        "threshold": 1.0,
        "bytes_up": 123_456,
        "bytes_down": 654_321,
        "seconds": 1.25,
        "rounds": 3,
        "per_client": per_client,
        "extra_key": {"anything": [1, 2]},
    }
    entry.update(overrides)
    return entry


def make_run(
    tmp_path: Path,
    *,
    history: bool = True,
    scores: bool = True,
    config: bool = True,
    null_metrics: bool = False,
) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    arrays = {lab: _scores(i) for i, lab in enumerate(LABELS)}
    methods = {
        LABELS[0]: _method_entry("fedavg", arrays[LABELS[0]]),
        LABELS[1]: _method_entry("onlad", arrays[LABELS[1]]),
    }
    if null_metrics:
        for key in ("auroc", "aupr", "eer", "f1", "precision", "fe", "threshold", "bytes_up"):
            methods[LABELS[1]][key] = None
        methods[LABELS[1]]["per_client"] = []
        for row in methods[LABELS[0]]["per_client"]:
            row["auroc"] = None
    experiment = {"dataset": "fashion_mnist", "clients": 3, "scheme": "dirichlet", "seed": 0}
    (run / "metrics.json").write_text(json.dumps({"methods": methods, "experiment": experiment}))
    if history:
        with (run / "history.csv").open("w", newline="") as fh:
            writer = csv.writer(fh)
            writer.writerow(HISTORY_COLUMNS)
            for lab in LABELS:
                for r in (3, 1, 2):  # out of order on purpose
                    loss = "" if (lab == LABELS[1] and r == 2) else f"{1.0 / r:.3f}"
                    writer.writerow([lab, r, 3, 3, 0, 1000 * r, 2000 * r, 0.1, loss, ""])
    if scores:
        np.savez(
            run / "scores.npz",
            **{f"{lab}/{k}": v for lab in LABELS for k, v in arrays[lab].items()},
        )
    if config:
        (run / "config.toml").write_text('seed = 0\nrounds = 3\n[data]\nname = "fashion_mnist"\n')
    return run


def _check_pngs(text: str) -> int:
    images = IMG.findall(text)
    for data in images:
        assert base64.b64decode(data).startswith(b"\x89PNG\r\n\x1a\n")
    return len(images)


def test_full_report(tmp_path: Path) -> None:
    run = make_run(tmp_path)
    out = write_report(run)
    assert out == run / "report.html"
    text = out.read_text(encoding="utf-8")
    assert text.startswith("<!DOCTYPE html>")
    for lab in LABELS:
        assert lab in text
    assert _check_pngs(text) == 6  # ROC, histograms, score boxes, loss, bytes, per-client
    assert 'class="per-client"' in text
    assert "mean over clients" in text
    assert "fashion_mnist" in text and "dirichlet" in text
    assert "training data only" in text  # the protocol note
    assert "rounds = 3" in text  # the config, verbatim
    assert "123.46 kB" in text  # bytes up, human-readable
    # self-contained: no external resources
    assert not re.search(r'(src|href)="(https?:)?//', text)
    assert "<script" not in text and "<link" not in text


def test_per_client_table_has_one_row_per_client(tmp_path: Path) -> None:
    text = write_report(make_run(tmp_path)).read_text(encoding="utf-8")
    table = text[text.index('class="per-client"') :]
    table = table[: table.index("</table>")]
    body = table[table.index("<tbody>") :]
    assert body.count("<tr") == 3 + 1  # three clients plus the mean row
    assert table.count("<th>AUROC</th>") == len(LABELS)


def test_null_metrics_and_no_history(tmp_path: Path) -> None:
    run = make_run(tmp_path, history=False, null_metrics=True)
    text = write_report(run).read_text(encoding="utf-8")
    for lab in LABELS:
        assert lab in text
    assert "–" in text
    assert "no history.csv" in text
    # ROC, histograms and per-client AUROC still drawn; loss and bytes are not
    assert _check_pngs(text) == 4  # ROC, histograms, score boxes, per-client


def test_empty_history_missing_scores_and_config(tmp_path: Path) -> None:
    run = make_run(tmp_path, history=False, scores=False, config=False)
    (run / "history.csv").write_text(",".join(HISTORY_COLUMNS) + "\n")
    text = write_report(run).read_text(encoding="utf-8")
    assert "history.csv has no rows" in text
    assert "no scores.npz" in text
    assert "No config.toml" in text
    assert _check_pngs(text) == 1  # per-client AUROC from metrics.json only


def test_one_method_without_scores_and_one_class(tmp_path: Path) -> None:
    run = make_run(tmp_path)
    arrays = _scores(7)
    arrays["label"][:] = 0  # one class only: no ROC, AUROC undefined
    np.savez(run / "scores.npz", **{f"{LABELS[0]}/{k}": v for k, v in arrays.items()})
    text = write_report(run).read_text(encoding="utf-8")
    assert f"{LABELS[1]}: no test scores" in text
    assert _check_pngs(text) == 6  # the score boxes too


def test_per_client_computed_from_scores_when_missing(tmp_path: Path) -> None:
    run = make_run(tmp_path)
    metrics = json.loads((run / "metrics.json").read_text())
    for entry in metrics["methods"].values():
        del entry["per_client"]
    (run / "metrics.json").write_text(json.dumps(metrics))
    text = write_report(run).read_text(encoding="utf-8")
    table = text[text.index('class="per-client"') :]
    assert table[: table.index("</table>")].count("<tr") == 2 + 3 + 1


def test_text_is_escaped(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    evil = "<script>alert(1)</script>"
    metrics = {
        "methods": {evil: {"method": evil, "auroc": 0.5, "per_client": []}},
        "experiment": {"dataset": evil},
    }
    (run / "metrics.json").write_text(json.dumps(metrics))
    (run / "config.toml").write_text(f'name = "{evil}"\n')
    text = write_report(run).read_text(encoding="utf-8")
    assert "<script>" not in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text


def test_nan_and_odd_values_in_metrics(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.json").write_text(
        '{"methods": {"a": {"auroc": NaN, "f1": "n/a", "seconds": Infinity}, "b": 3}}'
    )
    text = write_report(run).read_text(encoding="utf-8")
    assert "b: metrics entry is not an object" in text
    assert "NaN" not in text and "Infinity" not in text


def test_missing_metrics_is_a_user_error(tmp_path: Path) -> None:
    with pytest.raises(FedadError, match="metrics"):
        write_report(tmp_path)
    (tmp_path / "metrics.json").write_text("{not json")
    with pytest.raises(FedadError, match="not valid JSON"):
        write_report(tmp_path)


def test_read_history_sorts_rounds_and_marks_missing(tmp_path: Path) -> None:
    run = make_run(tmp_path)
    history = read_history(run / "history.csv")
    assert list(history) == list(LABELS)
    np.testing.assert_array_equal(history[LABELS[0]]["round"], [1, 2, 3])
    np.testing.assert_allclose(history[LABELS[0]]["bytes_up"], [1000, 2000, 3000])
    assert np.isnan(history[LABELS[1]]["loss"][1])
    assert np.all(np.isnan(history[LABELS[0]]["lr"]))


def test_read_scores_skips_broken_methods(tmp_path: Path) -> None:
    path = tmp_path / "scores.npz"
    np.savez(
        path,
        **{
            "ok/score": np.array([0.1, np.nan, 0.3]),
            "ok/label": np.array([0, 1, 1]),
            "short/score": np.array([0.1, 0.2]),
            "short/label": np.array([0]),
            "bad/score": np.array([0.1]),
            "bad/label": np.array([2]),
        },
    )
    scores, notes = read_scores(path, ["ok", "missing"])
    assert list(scores) == ["ok"]
    np.testing.assert_array_equal(scores["ok"].label, [0, 1])
    assert scores["ok"].client is None and scores["ok"].pred is None
    joined = " | ".join(notes)
    for part in ("missing: no test scores", "short:", "bad:", "non-finite"):
        assert part in joined


def test_normal_positive_table_appears_only_when_logged(tmp_path: Path) -> None:
    run = make_run(tmp_path)
    assert "Normal-positive metrics" not in render_report(run)
    m = json.loads((run / "metrics.json").read_text())
    m["methods"][LABELS[1]].update(normal_precision=0.98, normal_recall=0.91, normal_f1=0.9437)
    (run / "metrics.json").write_text(json.dumps(m))
    text = render_report(run)
    assert "Normal-positive metrics" in text and "0.944" in text


def test_incomplete_run_says_so_at_the_top(tmp_path: Path) -> None:
    from fedad.report.html import render_report

    (tmp_path / "metrics.json").write_text(
        json.dumps({"methods": {}, "experiment": {"status": "partial", "pending": ["b<i>"]}})
    )
    html = render_report(tmp_path)
    assert 'class="warning">This run is incomplete; not finished: b&lt;i&gt;.' in html
    (tmp_path / "metrics.json").write_text(json.dumps({"methods": {}, "experiment": {}}))
    assert "This run is incomplete" not in render_report(tmp_path)


def _summary_headers(text: str) -> list[str]:
    table = text[text.index("<h2>Summary</h2>") :]
    head = table[table.index("<thead>") : table.index("</thead>")]
    return re.findall(r"<th>([^<]*)</th>", head)


def test_columns_in_metrics_json_drive_the_tables(tmp_path: Path) -> None:
    """The summary, per-client and family tables show what metrics.json's columns list:
    known keys with their header and format, unknown ones under their own name."""
    run = make_run(tmp_path)
    before = _summary_headers(render_report(run))
    assert before[2:] == [
        "AUROC", "AUPR", "EER", "F1", "Precision", "Recall", "FE", "ME",
        "Bytes up", "Bytes down", "Bytes up / client / round", "Seconds", "Rounds",
    ]  # fmt: skip
    m = json.loads((run / "metrics.json").read_text())
    m["methods"][LABELS[0]].update(pixel_auroc=0.91234, pro=0.5, my_score=3.25)
    m["methods"][LABELS[1]].update(pixel_auroc=0.8, pro=None, my_score=1.0)
    for row in m["methods"][LABELS[0]]["per_client"]:
        row["pixel_auroc"] = 0.75
    m["columns"] = {
        "summary": ["auroc", "pixel_auroc", "pro", "my_score", "bytes_up"],
        "per_client": ["auroc", "pixel_auroc"],
        "my-family": ["my_score"],
    }
    (run / "metrics.json").write_text(json.dumps(m))
    text = render_report(run)
    assert _summary_headers(text)[2:] == ["AUROC", "Pixel AUROC", "PRO", "my_score", "Bytes up"]
    assert '<td class="num best">0.912</td>' in text  # better = max, bold
    assert "3.25" in text
    assert "per-region-overlap" in text  # the pixel family's note under the summary
    assert "<h2>Metrics: my-family</h2>" in text
    table = text[text.index('class="per-client"') :]
    table = table[: table.index("</table>")]
    assert table.count("<th>Pixel AUROC</th>") == len(LABELS) and "0.750" in table
    assert "<th>F1</th>" not in table


def test_family_tables_from_columns(tmp_path: Path) -> None:
    run = make_run(tmp_path)
    m = json.loads((run / "metrics.json").read_text())
    m["methods"][LABELS[1]].update(normal_precision=0.98, normal_recall=0.91, normal_f1=0.9437)
    m["columns"] = {"summary": ["auroc"], "per_client": ["auroc"]}  # no family listed
    (run / "metrics.json").write_text(json.dumps(m))
    assert "Normal-positive metrics" not in render_report(run)
    m["columns"]["normal-positive"] = ["normal_precision", "normal_recall", "accuracy", "normal_f1"]
    (run / "metrics.json").write_text(json.dumps(m))
    text = render_report(run)
    assert "Normal-positive metrics" in text and "0.944" in text and "ONLAD" in text
    m["columns"] = "not a dict"  # damaged: the columns come from the entries instead
    (run / "metrics.json").write_text(json.dumps(m))
    assert "Normal-positive metrics" in render_report(run)

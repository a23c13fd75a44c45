"""What an exported model does with a wrong ``client`` or an empty batch, tables and images.

A ``client`` id outside the model's clients (a negative one, which ONNX ``Gather`` wraps
round to the last client's threshold, or one past the last) or of another length than the
batch makes onnxruntime raise, naming the check; an empty batch gives empty outputs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fedad.export.assemble import CLIENT_CHECK
from fedad.export.check import Parity, session
from tests.export.test_cli import export


@pytest.fixture(scope="module")
def models(
    image_run: Path, table_run: Path, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    """The global autoencoder of each run (its clients' thresholds differ: a client input)."""
    out: dict[str, Any] = {}
    for kind, run in (("image", image_run), ("table", table_run)):
        folder = tmp_path_factory.mktemp(f"batches-{kind}") / "e"
        result = export(run, "fedavg-ae", folder)
        assert result.exit_code == 0, result.output  # type: ignore[attr-defined]
        out[kind] = session((folder / "global.onnx").read_bytes())
    return out


def feeds(sess: Any, n: int, client: list[int] | None = None) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(n)
    out: dict[str, np.ndarray] = {}
    for spec in sess.get_inputs():
        if spec.name == "client":
            ids = client if client is not None else [i % 2 for i in range(n)]
            out["client"] = np.array(ids, dtype=np.int64)
        elif spec.name == "image":
            out["image"] = rng.random((n, *spec.shape[1:]), dtype=np.float32)
        elif spec.type == "tensor(string)":
            out[spec.name] = np.array([["acme"]] * n, dtype=object).reshape(n, 1)
        else:
            out[spec.name] = rng.normal(50, 5, (n, 1)).astype(np.float32)
    return out


def run(sess: Any, f: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(None, f), strict=True))


WRONG = {
    "negative": lambda last: [-1, 0, 1],
    "minus-two": lambda last: [0, -2, 1],
    "one-past-the-last": lambda last: [0, 1, last + 1],
    "far": lambda last: [0, 1, 99],
    "too-short": lambda last: [0, 1],
    "too-long": lambda last: [0, 1, 0, 1],
}


@pytest.mark.parametrize("kind", ["image", "table"])
@pytest.mark.parametrize("case", sorted(WRONG))
def test_a_wrong_client_makes_onnxruntime_raise(
    models: dict[str, Any], kind: str, case: str
) -> None:
    sess = models[kind]
    last = 1 if kind == "image" else 2  # two clients, or the table's three sites
    with pytest.raises(Exception, match="fedad/check: client must hold ids 0 to") as err:
        sess.run(None, feeds(sess, 3, WRONG[case](last)))
    assert CLIENT_CHECK.format(last=last) in str(err.value)


@pytest.mark.parametrize("kind", ["image", "table"])
def test_good_clients_pick_their_thresholds(models: dict[str, Any], kind: str) -> None:
    sess = models[kind]
    per_row = run(sess, feeds(sess, 4, [0, 1, 1, 0]))
    for k in (0, 1):
        one = run(sess, feeds(sess, 4, [k]))  # one for all
        np.testing.assert_array_equal(one["score"], per_row["score"])
        rows = [0, 3] if k == 0 else [1, 2]
        np.testing.assert_array_equal(one["anomaly"][rows], per_row["anomaly"][rows])


@pytest.mark.parametrize("kind", ["image", "table"])
@pytest.mark.parametrize("client", [[], [0]])
def test_an_empty_batch_gives_empty_outputs(
    models: dict[str, Any], kind: str, client: list[int]
) -> None:
    sess = models[kind]
    full = run(sess, feeds(sess, 2))
    got = run(sess, feeds(sess, 0, client))
    want = {"score", "anomaly", "map"} if kind == "image" else {"score", "anomaly"}
    assert set(got) == set(full) == want
    for name, value in got.items():
        assert value.shape == (0, *full[name].shape[1:]) and value.dtype == full[name].dtype


@pytest.mark.parametrize("kind", ["image", "table"])
def test_one_row_scores_as_in_a_batch(models: dict[str, Any], kind: str) -> None:
    """The padding row is fed only to an empty batch: a batch of one is itself."""
    sess = models[kind]
    f = feeds(sess, 3, [1])
    whole = run(sess, f)
    for i in range(3):
        one = run(sess, {k: v[i : i + 1] if k != "client" else v for k, v in f.items()})
        np.testing.assert_allclose(one["score"], whole["score"][i : i + 1], rtol=1e-6)


def test_a_failing_empty_batch_fails_the_check() -> None:
    assert Parity(4, 0.0, 0).ok
    assert not Parity(4, 0.0, 0, empty_batch=False).ok
    assert Parity(4, 0.0, 0).as_json()["empty_batch"] is True

"""The TU Dortmund loader on small folders the tests write, friendly and hostile."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from fedad.core.errors import ConfigError, DataError
from fedad.data.graphs.features import DEGREE_CAP
from fedad.data.graphs.tu import load_tu
from fedad.data.registry import dataset_info, list_datasets, load_dataset

# Three graphs: a triangle (nodes 1-3, label -1), a path 4-5-6-7 (label 1), an edge 8-9
# with a self-loop on 9 (label -1). Edges listed once, one of them twice.
EDGES = [(1, 2), (2, 3), (3, 1), (4, 5), (5, 6), (6, 7), (5, 4), (8, 9), (9, 9)]
INDICATOR = [1, 1, 1, 2, 2, 2, 2, 3, 3]
LABELS = [-1, 1, -1]


def write_tu(
    folder: Path,
    name: str = "TOY",
    edges: Sequence[tuple[int, int]] = EDGES,
    indicator: Sequence[int] = INDICATOR,
    labels: Sequence[int] = LABELS,
    node_labels: Sequence[int] | None = None,
    attributes: Sequence[Sequence[float]] | None = None,
) -> Path:
    """A TU folder in the published layout (``i, j`` lines, 1-based ids)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}_A.txt").write_text("".join(f"{i}, {j}\n" for i, j in edges))
    (folder / f"{name}_graph_indicator.txt").write_text("".join(f"{g}\n" for g in indicator))
    (folder / f"{name}_graph_labels.txt").write_text("".join(f"{v}\n" for v in labels))
    if node_labels is not None:
        (folder / f"{name}_node_labels.txt").write_text("".join(f"{v}\n" for v in node_labels))
    if attributes is not None:
        text = "".join(", ".join(str(v) for v in row) + "\n" for row in attributes)
        (folder / f"{name}_node_attributes.txt").write_text(text)
    return folder


def edge_set(e: np.ndarray) -> set[tuple[int, int]]:
    return {(int(a), int(b)) for a, b in e.T}


def test_graphs_labels_and_undirected_edges(tmp_path: Path) -> None:
    ds = load_dataset("tu", path=str(write_tu(tmp_path / "TOY")))
    assert ds.kind == "graph" and ds.name == "tu"
    assert ds.classes == ("-1", "1")  # sorted raw values, as strings
    assert ds.y.tolist() == [0, 1, 0]
    assert ds.x.n_nodes.tolist() == [3, 4, 2]
    _, e0 = ds.x.graph(0)
    assert edge_set(e0) == {(0, 1), (1, 0), (1, 2), (2, 1), (0, 2), (2, 0)}
    _, e1 = ds.x.graph(1)  # the duplicate (5, 4) collapses into (4, 5)'s pair
    assert edge_set(e1) == {(0, 1), (1, 0), (1, 2), (2, 1), (2, 3), (3, 2)}
    assert e1.shape[1] == 6
    _, e2 = ds.x.graph(2)  # a self-loop in the file is kept once
    assert edge_set(e2) == {(0, 1), (1, 0), (1, 1)} and e2.shape[1] == 3
    assert dataset_info("tu").kind == "graph"
    assert "TU" in dict(list_datasets())["tu"]


def test_features_degree_without_labels_or_attributes(tmp_path: Path) -> None:
    ds = load_tu(str(write_tu(tmp_path / "TOY")))
    assert ds.x.shape == (3, DEGREE_CAP + 1)
    x1, _ = ds.x.graph(1)
    assert np.argmax(x1, axis=1).tolist() == [1, 2, 2, 1]  # the path's degrees
    assert np.all(x1.sum(1) == 1)


def test_degree_is_capped(tmp_path: Path) -> None:
    n = DEGREE_CAP + 10
    star = [(1, j) for j in range(2, n + 1)]
    ds = load_tu(str(write_tu(tmp_path / "S", edges=star, indicator=[1] * n, labels=[0])))
    x, _ = ds.x.graph(0)
    assert np.argmax(x[0]) == DEGREE_CAP and np.argmax(x[1]) == 1


def test_features_from_node_labels_one_hot(tmp_path: Path) -> None:
    folder = write_tu(tmp_path / "TOY", node_labels=[0, 5, 5, 2, 0, 0, 2, 5, 5])
    ds = load_tu(str(folder))
    assert ds.x.shape[1] == 3  # distinct labels 0, 2, 5
    x0, _ = ds.x.graph(0)
    assert np.argmax(x0, axis=1).tolist() == [0, 2, 2]


def test_features_from_attributes_win_over_labels(tmp_path: Path) -> None:
    attrs = [[float(i), -float(i)] for i in range(9)]
    folder = write_tu(tmp_path / "TOY", node_labels=[0] * 9, attributes=attrs)
    ds = load_tu(str(folder))
    assert ds.x.shape[1] == 2
    x2, _ = ds.x.graph(2)
    assert x2.tolist() == [[7.0, -7.0], [8.0, -8.0]]
    assert ds.x.x.dtype == np.float32


def test_a_shuffled_indicator_is_reordered(tmp_path: Path) -> None:
    folder = write_tu(
        tmp_path / "T", edges=[(1, 3), (2, 4)], indicator=[1, 2, 1, 2], labels=[0, 1],
        attributes=[[1.0], [2.0], [3.0], [4.0]],
    )  # fmt: skip
    ds = load_tu(str(folder))
    x0, e0 = ds.x.graph(0)
    assert x0[:, 0].tolist() == [1.0, 3.0] and edge_set(e0) == {(0, 1), (1, 0)}
    x1, _ = ds.x.graph(1)
    assert x1[:, 0].tolist() == [2.0, 4.0]


def test_loads_are_equal_and_independent(tmp_path: Path) -> None:
    folder = str(write_tu(tmp_path / "TOY"))
    a, b = load_tu(folder), load_tu(folder)
    assert a.x == b.x
    a.x.x[:] = 7
    assert load_tu(folder).x == b.x


# ---------------------------------------------------------------------------- hostile input


def one_line_error(exc: pytest.ExceptionInfo[BaseException], *parts: str) -> str:
    msg = str(exc.value)
    assert "\n" not in msg
    for p in parts:
        assert p in msg, msg
    return msg


def test_no_path_is_a_config_error() -> None:
    with pytest.raises(ConfigError) as exc:
        load_tu(None)
    one_line_error(exc, "data.path")


def test_folder_missing_or_without_a_file(tmp_path: Path) -> None:
    with pytest.raises(DataError) as exc:
        load_tu(str(tmp_path / "nope"))
    one_line_error(exc, "not a folder")
    with pytest.raises(DataError) as exc:
        load_tu(str(tmp_path))
    one_line_error(exc, "_A.txt")


def test_several_data_sets_in_one_folder(tmp_path: Path) -> None:
    write_tu(tmp_path, "ONE")
    write_tu(tmp_path, "TWO")
    with pytest.raises(DataError) as exc:
        load_tu(str(tmp_path))
    one_line_error(exc, "ONE_A.txt", "TWO_A.txt")


@pytest.mark.parametrize("missing", ["graph_indicator", "graph_labels"])
def test_a_required_file_missing(tmp_path: Path, missing: str) -> None:
    folder = write_tu(tmp_path / "TOY")
    (folder / f"TOY_{missing}.txt").unlink()
    with pytest.raises(DataError) as exc:
        load_tu(str(folder))
    one_line_error(exc, f"TOY_{missing}.txt", "missing")


@pytest.mark.parametrize(
    ("file", "text", "parts"),
    [
        ("A", "1, 2\n2, 3\n3, 99\n", ["TOY_A.txt", "line 3", "99"]),
        ("A", "1, 2\n0, 3\n", ["TOY_A.txt", "line 2"]),
        ("A", "1, 2\n\n2, 3, 4\n", ["TOY_A.txt", "line 3", "3 values"]),
        ("A", "1, 2\n2\n", ["TOY_A.txt", "line 2", "1 values"]),
        ("A", "1, 2\nx, 3\n", ["TOY_A.txt", "line 2", "'x'", "not an integer"]),
        ("A", "1, 2\n2.5, 3\n", ["TOY_A.txt", "line 2", "'2.5'"]),
        ("A", "1, 2\n3, 4\n", ["TOY_A.txt", "line 2", "within one graph"]),
        ("A", "1, 99999999999999999999999\n", ["TOY_A.txt", "line 1"]),
        ("A", "", ["TOY_A.txt", "empty"]),
        ("graph_indicator", "1\n1\n1\n2\n2\n2\n2\n3\n9\n", ["indicator", "line 9", "9"]),
        ("graph_indicator", "1\n1\n1\n1\n1\n1\n1\n3\n3\n", ["indicator", "graph 2", "no node"]),
        ("graph_indicator", "1\n1\n1\n2\n2\n2\n2\n3\n", ["TOY_A.txt", "line 8", "9"]),
        ("graph_labels", "-1\n1\nbad\n", ["graph_labels", "line 3", "'bad'"]),
        ("graph_labels", "-1\n1\n", ["indicator", "line 8", "3"]),
        ("node_labels", "0\n1\n", ["node_labels", "2 lines", "9"]),
        ("node_attributes", "1.0\n" * 8 + "nan\n", ["node_attributes", "line 9", "finite"]),
        ("node_attributes", "1.0, 2\n" * 8 + "1.0\n", ["node_attributes", "line 9"]),
        ("node_attributes", "1.0\n" * 8 + "1e999\n", ["node_attributes", "line 9", "finite"]),
        ("A", "1, 2\n\xe9, 3\n", ["TOY_A.txt", "line 2", "ASCII"]),
    ],
)
def test_hostile_files_give_one_line_errors(
    tmp_path: Path, file: str, text: str, parts: list[str]
) -> None:
    folder = write_tu(tmp_path / "TOY")
    (folder / f"TOY_{file}.txt").write_bytes(text.encode("latin-1"))
    with pytest.raises(DataError) as exc:
        load_tu(str(folder))
    one_line_error(exc, *parts)


def test_an_oversized_file_is_refused_before_parsing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import fedad.data.graphs.tu as tu

    monkeypatch.setattr(tu, "MAX_FILE_BYTES", 20)
    folder = write_tu(tmp_path / "TOY")
    with pytest.raises(DataError) as exc:
        load_tu(str(folder))
    one_line_error(exc, "larger than the 20 bytes")


def test_too_many_label_values_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import fedad.data.graphs.tu as tu

    monkeypatch.setattr(tu, "MAX_WIDTH", 4)
    folder = write_tu(tmp_path / "TOY", node_labels=list(range(9)))
    with pytest.raises(DataError) as exc:
        load_tu(str(folder))
    one_line_error(exc, "node_labels", "distinct")


def test_a_tu_folder_runs_through_the_federation(tmp_path: Path) -> None:
    from fedad.config import parse_config
    from fedad.core.types import GraphSet
    from fedad.federation import build_federation

    rng = np.random.default_rng(0)
    edges, indicator, labels, start = [], [], [], 1
    for g in range(60):
        n = int(rng.integers(4, 9))
        edges += [(start + i, start + i + 1) for i in range(n - 1)]
        if g % 3 == 0:
            edges.append((start, start + n - 1))  # rings are class "7"
        indicator += [g + 1] * n
        labels.append(7 if g % 3 == 0 else 2)
        start += n
    folder = write_tu(tmp_path / "RINGS", "RINGS", edges, indicator, labels)
    cfg = parse_config({
        "seed": 0, "rounds": 1,
        "data": {"name": "tu", "path": str(folder), "normal": [0], "anomaly": [1]},
        "partition": {"scheme": "iid", "clients": 2},
        "methods": [{"name": "fgad"}],
    })  # fmt: skip
    fed = build_federation(cfg)
    assert len(fed.clients) == 2
    for c in fed.clients:
        assert isinstance(c.x_train, GraphSet) and c.x_train.shape[1] == DEGREE_CAP + 1
        assert set(np.unique(c.y_test)) == {0, 1}


def test_two_tu_folders_as_sources_via_register_tu(tmp_path: Path) -> None:
    from fedad.config import parse_config
    from fedad.data.graphs.tu import register_tu
    from fedad.data.registry import unregister_dataset
    from fedad.federation import build_federation

    def folder(name: str, ring_label: int, other: int) -> Path:
        edges, indicator, labels, start = [], [], [], 1
        for g in range(40):
            n = 5 + g % 4
            edges += [(start + i, start + i + 1) for i in range(n - 1)]
            if g % 2 == 0:
                edges.append((start, start + n - 1))
            indicator += [g + 1] * n
            labels.append(ring_label if g % 2 == 0 else other)
            start += n
        return write_tu(tmp_path / name, name, edges, indicator, labels)

    register_tu("tu_test_a", folder("A", 1, 2), overwrite=True)
    register_tu("tu_test_b", folder("B", -1, 1), overwrite=True)
    try:
        cfg = parse_config({
            "seed": 0, "rounds": 1,
            "data": {"name": "tu_test_a", "sources": ["tu_test_a", "tu_test_b"],
                     "normal": [0], "anomaly": [1]},
            "partition": {"scheme": "by-source", "clients": 2},
            "methods": [{"name": "fgad"}],
        })  # fmt: skip
        fed = build_federation(cfg)
        assert len(fed.clients) == 2
        assert load_dataset("tu_test_b").name == "tu_test_b"
    finally:
        unregister_dataset("tu_test_a")
        unregister_dataset("tu_test_b")

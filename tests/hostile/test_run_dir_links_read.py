"""Reading a run directory never follows a symbolic link below it.

``fedad report``, ``fedad.load(str(run)).detector(L).score(...)`` and ``fedad score`` read a run
someone else may have crafted: a link at any path of its structure (``metrics.json`` to a
file outside, ``checkpoints/LABEL`` to another model, ...) must be a one-line error naming
it, and the outside file must never be opened. Each outside target is a copy of what was
there, marked (:data:`MARKER`) where a reader would carry it into its output; every open
of the process is watched (:func:`_watch`), so a target opened at all fails the test, marked
or not (``.npz`` files cannot carry a marker to an output).
"""

from __future__ import annotations

import builtins
import contextlib
import io
import json
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

import fedad
import fedad.rundir.files as outdir
from fedad.cli.app import app
from fedad.core.errors import FedadError
from tests.hostile.conftest import one_line_error, runner

LINK_ERROR = "is a symbolic link; fedad does not follow links inside a run directory"
MARKER = "OUTSIDE-MARKER-5d1e9"
READERS = ("report", "load", "score")


# -- helpers --------------------------------------------------------------------------------


def _mark(path: Path) -> None:
    """Put :data:`MARKER` into a text file where its reader would show it."""
    if path.name == "metrics.json":
        data = json.loads(path.read_text())
        data["experiment"]["dataset"] = MARKER  # the report's subtitle and facts
        path.write_text(json.dumps(data))
    elif path.suffix == ".json":
        data = json.loads(path.read_text())
        path.write_text(json.dumps({**data, "dataset": MARKER} if isinstance(data, dict) else data))
    elif path.suffix in (".toml", ".csv", ".html"):
        with path.open("a") as fh:  # the report shows config.toml verbatim
            fh.write(f"\n# {MARKER}\n" if path.suffix == ".toml" else f"{MARKER}\n")


def _marked_copy(src: Path, dst: Path) -> None:
    """A copy of ``src`` (file or folder) at ``dst``, its text files marked."""
    if src.is_dir():
        shutil.copytree(src, dst)
        files = [p for p in dst.rglob("*") if p.is_file()]
    else:
        shutil.copyfile(src, dst)
        files = [dst]
    for f in files:
        _mark(f)


def _digest(path: Path) -> dict[str, bytes]:
    """Every file below ``path`` (``path`` itself when a file) with its bytes."""
    if path.is_file():
        return {".": path.read_bytes()}
    return {str(p.relative_to(path)): p.read_bytes() for p in path.rglob("*") if p.is_file()}


@contextlib.contextmanager
def _linked(run: Path, rel: Path, outside: Path) -> Iterator[Path]:
    """``run/rel`` replaced by a link to a marked copy of it under ``outside`` for the
    block, then put back (quicker than a fresh copy of the run per path)."""
    where = run / rel
    target = outside / str(rel).replace(os.sep, "__")
    _marked_copy(where, target)
    before = _digest(target)
    aside = run.parent / "aside"
    os.rename(where, aside)
    where.symlink_to(target, target_is_directory=target.is_dir())
    try:
        yield where
    finally:
        where.unlink()
        os.rename(aside, where)
    assert _digest(target) == before, rel


@contextlib.contextmanager
def _watch(outside: Path) -> Iterator[list[str]]:
    """Within the block, every file or folder the process opens (``os.open``, ``open``,
    ``io.open``: what zipfile, pathlib and numpy use) whose real path lies under ``outside``
    is listed."""
    seen: list[str] = []
    top = str(outside.resolve()) + os.sep
    real_os_open, real_open = os.open, builtins.open

    def note(fd: int) -> None:
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/self/fd/{fd}").startswith(top):
                seen.append(os.readlink(f"/proc/self/fd/{fd}"))

    def os_open(path: Any, flags: int, mode: int = 0o777, *, dir_fd: int | None = None) -> int:
        fd = real_os_open(path, flags, mode, dir_fd=dir_fd)
        note(fd)
        return fd

    def b_open(file: Any, *args: Any, **kwargs: Any) -> Any:
        fh = real_open(file, *args, **kwargs)
        with contextlib.suppress(AttributeError, OSError, ValueError):
            note(fh.fileno())
        return fh

    with pytest.MonkeyPatch.context() as m:
        m.setattr(os, "open", os_open)
        m.setattr(builtins, "open", b_open)
        m.setattr(io, "open", b_open)
        yield seen


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three 8x8 grey images, what the digits run of ``finished_run`` scores."""
    d = tmp_path_factory.mktemp("images")
    rng = np.random.default_rng(0)
    for i in range(3):
        Image.fromarray(rng.integers(0, 256, (8, 8), dtype=np.uint8)).save(d / f"{i}.png")
    return d


def _x() -> np.ndarray:
    return np.random.default_rng(1).random((4, 1, 8, 8), dtype=np.float32)


def _cli_score(run: Path, images: Path, out: Path) -> Any:
    args = ["score", str(run), str(images), "--method", "local-svdd", "--client", "1"]
    return runner.invoke(app, [*args, "--out", str(out)])


def _refused_by_every_reader(run: Path, link: Path, images: Path, tmp: Path) -> None:
    """``fedad report``, ``fedad.load(...).detector(...).score(...)`` and ``fedad score``
    each stop with the one-line link error naming ``link``; nothing shows the marker, and
    nothing is written."""
    report = run / "report.html"
    before = None if report.is_symlink() else report.read_bytes()
    res = runner.invoke(app, ["report", str(run)])
    msg = one_line_error(res)
    assert LINK_ERROR in msg and f"'{link}'" in msg, msg
    assert MARKER not in res.output
    if before is not None:
        assert report.read_bytes() == before  # not rewritten
    with pytest.raises(FedadError) as err:
        fedad.load(str(run)).detector("local-svdd", 1).score(_x())
    assert LINK_ERROR in str(err.value) and f"'{link}'" in str(err.value)
    assert "\n" not in str(err.value) and MARKER not in str(err.value)
    out = tmp / "scores.csv"
    res = _cli_score(run, images, out)
    msg = one_line_error(res)
    assert LINK_ERROR in msg and f"'{link}'" in msg, msg
    assert MARKER not in res.output and not out.exists()


# -- a link at every path ---------------------------------------------------------------------


def test_a_link_at_any_path_of_a_run_stops_every_reader(
    tmp_path: Path, finished_run: Path, images: Path
) -> None:
    run = tmp_path / "run"
    shutil.copytree(finished_run, run)
    paths = sorted(p.relative_to(run) for p in run.rglob("*"))
    for name in ("metrics.json", "config.toml", "history.csv", "inputs.json", "scores.npz",
                 "checkpoints/local-svdd/client_1.npz", "checkpoints/fedavg-ae/global.npz",
                 "checkpoints/onlad/detector.json", ".fedad/done/onlad.npz"):  # fmt: skip
        assert Path(name) in paths, name
    outside = tmp_path / "outside"
    outside.mkdir()
    for rel in paths:
        with _linked(run, rel, outside) as link, _watch(outside) as opened:
            _refused_by_every_reader(run, link, images, tmp_path)
        assert opened == [], (rel, opened)
    # put back as it was, the run reads as before
    assert runner.invoke(app, ["report", str(run)]).exit_code == 0
    res = _cli_score(run, images, tmp_path / "scores.csv")
    assert res.exit_code == 0, res.output
    assert len((tmp_path / "scores.csv").read_text().splitlines()) == 4


def test_a_link_in_a_seed_folder_stops_every_reader(
    tmp_path: Path, finished_run: Path, images: Path
) -> None:
    """A several-seed run: the aggregate's report and each seed's readers refuse a link
    anywhere in a seed's folder (and a seed folder that is a link)."""
    out = tmp_path / "seeds"
    seed = out / "seed-3"
    shutil.copytree(finished_run, seed)
    metrics = json.loads((finished_run / "metrics.json").read_text())
    metrics["experiment"]["seeds"] = [3]
    (out / "metrics.json").write_text(json.dumps(metrics))
    shutil.copyfile(finished_run / "config.toml", out / "config.toml")
    outside = tmp_path / "outside"
    outside.mkdir()
    # normal first: the seed's personalised detectors load and score
    scores = fedad.load(str(seed)).detector("local-svdd", 1).score(_x())
    assert scores.shape == (4,) and np.all(np.isfinite(scores))
    for name in ("seed-3", "seed-3/checkpoints/local-svdd/client_1.npz", "seed-3/metrics.json"):
        rel = Path(name)
        with _linked(out, rel, outside) as link, _watch(outside) as opened:
            msg = one_line_error(runner.invoke(app, ["report", str(out)]))
            assert LINK_ERROR in msg and f"'{link}'" in msg, msg
            if rel != Path("seed-3"):
                _refused_by_every_reader(seed, link, images, tmp_path)
        assert opened == [], (rel, opened)


# -- links planted after the check (as in a race): every read still refuses them -------------

READ_BY = {
    "metrics.json": READERS,
    "config.toml": READERS,
    "history.csv": ("report",),
    "scores.npz": ("report",),
    "inputs.json": ("load", "score"),
    "checkpoints": ("load", "score"),
    "checkpoints/local-svdd": ("load", "score"),
    "checkpoints/local-svdd/detector.json": ("load", "score"),
    "checkpoints/local-svdd/client_1.npz": ("load", "score"),
    "checkpoints/fedavg-ae/global.npz": ("load", "score"),
}
"""Paths of the finished run and which readers open them."""


def _reader(name: str, run: Path, images: Path, tmp: Path) -> Callable[[], str | None]:
    """A call of one reader: its one-line error, or ``None`` when it succeeded."""

    def call() -> str | None:
        if name == "load":
            try:
                fedad.load(str(run)).detector("local-svdd", 1).score(_x())
            except FedadError as err:
                assert "\n" not in str(err)
                return str(err)
            return None
        res = (
            runner.invoke(app, ["report", str(run)])
            if name == "report"
            else _cli_score(run, images, tmp / "scores.csv")
        )
        return None if res.exit_code == 0 else one_line_error(res)

    return call


@pytest.mark.parametrize("rel", sorted(READ_BY))
def test_a_link_planted_after_the_check_is_refused_on_reading(
    tmp_path: Path,
    finished_run: Path,
    images: Path,
    rel: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The walk over the run's structure turned off (a link planted just after it): each
    reader of the path still refuses the link when it opens the file (``O_NOFOLLOW`` at
    every component), never opening the outside copy."""
    monkeypatch.setattr(outdir, "refuse_links", lambda root, seeds=True: None)
    run = tmp_path / "run"
    shutil.copytree(finished_run, run)
    outside = tmp_path / "outside"
    outside.mkdir()
    with _linked(run, Path(rel), outside) as link:
        for name in READ_BY[rel]:
            with _watch(outside) as opened:
                msg = _reader(name, run, images, tmp_path)()
            assert msg is not None and LINK_ERROR in msg and f"'{link}'" in msg, (name, msg)
            assert MARKER not in msg and opened == [], (name, opened)
    assert msg is not None and "remove it, or put the file itself in its place" in msg


def test_a_checkpoint_linked_after_loading_is_refused_when_first_used(
    tmp_path: Path, finished_run: Path
) -> None:
    """``fedad.load`` builds a client's detector when first used: that later read refuses
    a link planted in between too."""
    run = tmp_path / "run"
    shutil.copytree(finished_run, run)
    outside = tmp_path / "outside"
    outside.mkdir()
    loaded = fedad.load(str(run))
    for rel in ("checkpoints/local-svdd/client_1.npz", "checkpoints/local-svdd", "checkpoints"):
        with _linked(run, Path(rel), outside) as link, _watch(outside) as opened:
            with pytest.raises(FedadError, match=LINK_ERROR) as err:
                loaded.detector("local-svdd", 1).score(_x())
            assert f"'{link}'" in str(err.value)
        assert opened == []
    assert loaded.detector("local-svdd", 1).score(_x()).shape == (4,)  # put back: fine


def test_the_watch_sees_a_read_through_a_link(tmp_path: Path) -> None:
    """The test's own instrument: opening the outside file through a link is seen."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "f").write_text(MARKER)
    (tmp_path / "link").symlink_to(outside / "f")
    with _watch(outside) as opened:
        assert (tmp_path / "link").read_text() == MARKER
        np.savez(outside / "a.npz", a=np.zeros(1))
    assert len(opened) == 2


# -- the Flower engines' own hand-offs go through the same reader -----------------------------


def test_flower_results_are_read_by_the_one_reader(tmp_path: Path) -> None:
    """``.flower/.../results/arrays.npz`` (the ServerApp's hand-off): a link there is
    refused unopened, an object array is a one-line error (was ``np.load``'s ValueError)."""
    pytest.importorskip("flwr")
    from fedad.fl.flower.results import ResultsDir

    results = tmp_path / "results"
    results.mkdir()
    (results / "outcome.json").write_text("{}")
    outside = tmp_path / "outside"
    outside.mkdir()
    np.savez(outside / "arrays.npz", **{"result/w": np.ones(2)})  # type: ignore[arg-type]
    (results / "arrays.npz").symlink_to(outside / "arrays.npz")
    with _watch(outside) as opened, pytest.raises(FedadError, match=LINK_ERROR):
        ResultsDir(results).read()
    assert opened == []
    (results / "arrays.npz").unlink()
    objects = {"result/w": np.array([{"a": 1}], dtype=object)}
    np.savez(results / "arrays.npz", **objects)  # type: ignore[arg-type]
    with pytest.raises(FedadError, match=r"not a readable \.npz file") as err:
        ResultsDir(results).read()
    assert "\n" not in str(err.value)


def test_a_linked_client_cache_is_rebuilt_not_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A SuperNode's partition cache (``FEDAD_FLOWER_CACHE``) that is a link: never opened;
    the partition is rebuilt and the link replaced by the file itself."""
    pytest.importorskip("flwr")
    from fedad.config import parse_config
    from fedad.fl.flower import app as flower_app
    from tests.hostile.conftest import SMALL_RUN

    cfg = parse_config(SMALL_RUN)
    cache = tmp_path / "cache"
    cache.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    np.savez(outside / "c.npz", client_id=np.int64(0))
    link = cache / f"{flower_app.data_key(cfg)}-0.npz"
    link.symlink_to(outside / "c.npz")
    monkeypatch.setenv(flower_app.CACHE_ENV, str(cache))
    monkeypatch.setattr(flower_app, "_FEDERATIONS", {})
    with _watch(outside) as opened:
        with pytest.raises(FedadError, match=LINK_ERROR):
            flower_app._load_client(link)
        data = flower_app.client_data(cfg, 0)
    assert opened == [] and data.client_id == 0
    assert not link.is_symlink() and flower_app._load_client(link).client_id == 0
    assert sorted(np.load(outside / "c.npz").files) == ["client_id"]  # untouched

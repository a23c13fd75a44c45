"""Readers for the files of a run directory (docs/outputs.md, "The run directory").

Each reader is tolerant of the optional pieces: a missing ``history.csv`` gives an empty
history, a method without arrays in ``scores.npz`` is simply absent from the result, and
problems that do not stop a report are returned as one-line notes the report shows.
Only ``metrics.json`` is required.

Every reader opens its file with :func:`fedad.rundir.files.open_read`: never through a symbolic
link (below a root being read, :func:`fedad.rundir.files.reading`, at no component; elsewhere,
at least not the file itself), never waiting on a pipe. A link is a one-line error
(:class:`fedad.rundir.files.LinkError`), never a note.
"""

from __future__ import annotations

import csv
import io
import json
import math
import tokenize
import zipfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np
from numpy.lib import format as npy_format
from numpy.typing import NDArray

from fedad.core.errors import FedadError
from fedad.rundir.files import LinkError, open_read, read_bytes

__all__ = [
    "History",
    "MethodEmbedding",
    "MethodMaps",
    "MethodScores",
    "npz_shapes",
    "read_config_text",
    "read_embeddings",
    "read_history",
    "read_maps",
    "read_metrics",
    "read_npz",
    "read_scores",
]

#: ``history[method][column]``: a float array with one entry per round, sorted by round;
#: empty or non-numeric cells are ``nan``.
History = dict[str, dict[str, NDArray[np.float64]]]


@dataclass(frozen=True)
class MethodScores:
    """One method's pooled test-set arrays from ``scores.npz``.

    ``score`` holds finite floats (higher = more anomalous), ``label`` 0/1 ground truth,
    ``client`` the local test set each sample came from and ``pred`` the detector's 0/1
    decisions; ``client`` and ``pred`` are ``None`` when the file lacks them.
    """

    score: NDArray[np.float64]
    label: NDArray[np.int8]
    client: NDArray[np.int64] | None = None
    pred: NDArray[np.int8] | None = None


def read_metrics(path: str | Path) -> dict[str, Any]:
    """Load ``metrics.json`` as ``{"methods": {LABEL: {...}}, "experiment": {...}}``.

    Missing top-level sections become empty dicts. Raises :class:`~fedad.core.errors.FedadError`
    when the file is missing, a link, larger than 64 MiB or is not a JSON object.
    """
    p = Path(path)
    if not p.is_file():
        raise FedadError(f"no metrics file at {p}", "point at a directory written by `fedad run`")
    try:
        text = read_bytes(p).decode("utf-8", errors="strict")
    except OSError as exc:
        raise FedadError(f"{p} cannot be read: {_reason(exc)}") from None
    except ValueError as exc:  # not UTF-8
        raise FedadError(f"{p} is not valid JSON: {_reason(exc)}") from None
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:  # JSON errors included
        raise FedadError(f"{p} is not valid JSON: {_reason(exc)}") from None
    if not isinstance(data, dict):
        raise FedadError(f"{p} must hold a JSON object, found {type(data).__name__}")
    methods = data.get("methods")
    experiment = data.get("experiment")
    data["methods"] = methods if isinstance(methods, dict) else {}
    data["experiment"] = experiment if isinstance(experiment, dict) else {}
    return data


def _reason(exc: BaseException) -> str:
    text = str(exc).splitlines()[0][:160] if str(exc) else ""
    return text or type(exc).__name__


# -- the one reader of .npz files from a run directory ------------------------------------------

NPZ_MAX_BYTES = 8 << 30
"""Default cap on what one ``.npz`` of a run directory may unpack to (8 GiB).

The largest files a run writes are a detector's state (``checkpoints/LABEL/*.npz``) and a
method's kept results (``.fedad/done/LABEL.npz``, ``scores.npz``). The built-in detectors'
states are bounded by their schemas well below this (a PatchCore bank is at most 16,384
patches of a few hundred floats, FADngs's covariances at most 2**26 entries, 512 MiB); a
method's results hold five numbers per test sample plus capped samples of maps and
representations, so a 1,000-client run with 10,000 test samples per client and maps keeps
about 0.5 GB per method. 8 GiB leaves an order of magnitude for larger user models and data
while a crafted file can no longer make fedad allocate more: the declared shape of every
array is checked against this cap and against the bytes the file really holds *before*
anything is allocated (:func:`read_npz`)."""
NPZ_MAX_MEMBERS = 1 << 16
"""Most arrays one ``.npz`` may hold (a detector has dozens, ``scores.npz`` 4 per method)."""
_NPZ_CHUNK = 16 << 20
_NPZ_KINDS = "biufcSU"
"""Array kinds accepted: booleans, integers, floats, complex, fixed-size bytes and text
(no objects, which need pickles; no records, dates or raw void)."""


def read_npz(path: str | Path, max_bytes: int = NPZ_MAX_BYTES, fix: str = "") -> dict[str, Any]:
    """The arrays of an untrusted ``.npz`` file: no pickles, every member's header parsed
    and checked before its data are read.

    Each member must be a ``.npy`` array of a plain dtype (:data:`_NPZ_KINDS`) whose declared
    shape accounts for exactly the bytes the member holds, and all members together at most
    ``max_bytes``; so a tiny file that declares a ``(2**40,)`` array is refused without
    allocating it, and nothing is ever read beyond what the zip directory declares. Any
    problem is a one-line :class:`~fedad.core.errors.FedadError` naming the file, with ``fix``
    as its remedy.
    """
    return _scan_npz(Path(path), max_bytes, fix, read=True)


def npz_shapes(
    path: str | Path, max_bytes: int = NPZ_MAX_BYTES, fix: str = ""
) -> dict[str, tuple[tuple[int, ...], np.dtype[Any]]]:
    """Every array's shape and dtype as :func:`read_npz` would return them, with the same
    checks and errors, from the headers only (the data are not read)."""
    return _scan_npz(Path(path), max_bytes, fix, read=False)


def _scan_npz(p: Path, max_bytes: int, fix: str, read: bool) -> dict[str, Any]:
    def bad(what: str) -> FedadError:
        return FedadError(f"'{p}' {what}", fix or None)

    try:
        with open_read(p) as raw, zipfile.ZipFile(raw) as zf:
            infos = zf.infolist()
            if len(infos) > NPZ_MAX_MEMBERS:
                raise bad(f"holds {len(infos)} arrays, more than the {NPZ_MAX_MEMBERS} allowed")
            size = sum(info.file_size for info in infos)
            if size > max_bytes:
                raise bad(f"would unpack to {size} bytes, more than the {max_bytes} allowed")
            out: dict[str, Any] = {}
            for info in infos:
                name = info.filename
                key = name.removesuffix(".npy")
                if key == name or key in out:
                    raise bad(f"is not a readable .npz file: '{name[:80]}' is not one array's name")
                with zf.open(info) as fh:
                    shape, fortran, dtype = _npy_header(fh, info.file_size, key, bad)
                    out[key] = (
                        _npy_data(fh, shape, fortran, dtype, key, bad) if read else (shape, dtype)
                    )
            return out
    except FedadError:
        raise
    except FileNotFoundError:
        raise bad("is missing") from None
    except (
        OSError,
        ValueError,
        EOFError,
        KeyError,
        RuntimeError,
        NotImplementedError,
        zipfile.BadZipFile,
        zlib.error,
        MemoryError,
        SyntaxError,
        tokenize.TokenError,  # these two: a garbled header, from numpy's parser
    ) as exc:
        raise bad(f"is not a readable .npz file: {_reason(exc)}") from None


def _npy_header(
    fh: IO[bytes], stored: int, key: str, bad: Callable[[str], FedadError]
) -> tuple[tuple[int, ...], bool, np.dtype[Any]]:
    """The checked header of one ``.npy`` member of ``stored`` bytes (``fh`` left at the
    data): its shape must account for exactly the bytes that follow."""
    version = npy_format.read_magic(fh)
    if version == (1, 0):
        shape, fortran, dtype = npy_format.read_array_header_1_0(fh)
    elif version == (2, 0):
        shape, fortran, dtype = npy_format.read_array_header_2_0(fh)
    else:
        raise bad(f"is not a readable .npz file: array '{key}' is in .npy format {version}")
    if dtype.kind not in _NPZ_KINDS or dtype.hasobject or dtype.fields or dtype.subdtype:
        raise bad(
            f"is not a readable .npz file: array '{key}' is of type {str(dtype)[:40]}, not "
            "plain numbers or text"
        )
    if any(not isinstance(n, int) or n < 0 for n in shape):
        raise bad(f"is not a readable .npz file: array '{key}' has shape {str(shape)[:80]}")
    count = math.prod(shape)
    if dtype.itemsize == 0 and count:
        raise bad(f"is not a readable .npz file: array '{key}' has items of no size")
    nbytes, header = count * dtype.itemsize, fh.tell()
    if header + nbytes != stored:
        raise bad(
            f"declares array '{key}' of shape {str(shape)[:80]} ({nbytes} bytes) but holds "
            f"{stored - header}"
        )
    return tuple(shape), bool(fortran), dtype


def _npy_data(
    fh: IO[bytes],
    shape: tuple[int, ...],
    fortran: bool,
    dtype: np.dtype[Any],
    key: str,
    bad: Callable[[str], FedadError],
) -> NDArray[Any]:
    """The data of a member whose header :func:`_npy_header` checked, read in chunks into
    one array of the declared (and so bounded) size."""
    count = math.prod(shape)
    nbytes = count * dtype.itemsize
    arr = np.empty(count, dtype=dtype)
    raw = arr.view(np.uint8) if nbytes else arr
    done = 0
    while done < nbytes:
        chunk = fh.read(min(_NPZ_CHUNK, nbytes - done))
        if not chunk:
            raise bad(f"is not a readable .npz file: it ends inside array '{key}'")
        raw[done : done + len(chunk)] = np.frombuffer(chunk, dtype=np.uint8)
        done += len(chunk)
    if fortran:
        return arr.reshape(shape[::-1]).transpose()
    return arr.reshape(shape)


def _to_float(cell: str | None) -> float:
    if cell is None:
        return math.nan
    try:
        return float(cell)
    except ValueError:
        return math.nan


def read_history(path: str | Path) -> History:
    """Load ``history.csv`` (one row per method and round) grouped by method.

    Rows are sorted by the ``round`` column when present (file order otherwise). Every column
    other than ``method`` is parsed as float; empty or non-numeric cells become ``nan``.
    A missing or empty file gives ``{}``; an unreadable one (not UTF-8, not CSV) raises a
    one-line :class:`~fedad.core.errors.FedadError`.
    """
    p = Path(path)
    if not p.is_file():
        return {}
    rows: dict[str, list[dict[str, str | None]]] = {}
    try:
        with open_read(p) as raw, io.TextIOWrapper(raw, encoding="utf-8", newline="") as fh:
            reader = csv.DictReader(fh)
            columns = [c for c in (reader.fieldnames or []) if c and c != "method"]
            for row in reader:
                method = (row.get("method") or "").strip()
                rows.setdefault(method, []).append(dict(row))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise FedadError(f"{p} is not a readable CSV file: {_reason(exc)}") from None
    history: History = {}
    for method, method_rows in rows.items():
        table = {c: np.array([_to_float(r.get(c)) for r in method_rows]) for c in columns}
        if "round" in table:
            order = np.argsort(table["round"], kind="stable")
            table = {c: v[order] for c, v in table.items()}
        history[method] = table
    return history


SCORES_MAX_BYTES = NPZ_MAX_BYTES
"""``scores.npz`` is refused above this: about 32 bytes per test sample and method (score,
label, client, decision), so 8 GiB is 250 million of them."""


def read_scores(
    path: str | Path, labels: list[str] | None = None
) -> tuple[dict[str, MethodScores], list[str]]:
    """Load ``scores.npz``: arrays ``LABEL/score``, ``LABEL/label``, ``LABEL/client``,
    ``LABEL/pred``.

    ``labels`` lists the methods to look for (all labels found in the file when ``None``;
    labels present in the file but not in ``labels`` are appended). Returns the methods whose
    ``score`` and ``label`` arrays are usable, and notes on those that are not: missing,
    of different lengths, non-0/1 labels. Non-finite scores are dropped with a note.
    """
    p = Path(path)
    notes: list[str] = []
    if not p.is_file():
        return {}, []
    try:
        arrays = read_npz(p, SCORES_MAX_BYTES)
    except LinkError:
        raise
    except FedadError as exc:
        return {}, [f"scores.npz could not be read: {exc}"]
    in_file = sorted({k.rsplit("/", 1)[0] for k in arrays if "/" in k})
    wanted = list(labels) if labels is not None else []
    wanted += [lab for lab in in_file if lab not in wanted]
    out: dict[str, MethodScores] = {}
    for label in wanted:
        score = arrays.get(f"{label}/score")
        y = arrays.get(f"{label}/label")
        if score is None or y is None:
            notes.append(f"{label}: no test scores in scores.npz")
            continue
        score = np.asarray(score, dtype=np.float64).reshape(-1)
        y = np.asarray(y).reshape(-1)
        optional = {k: arrays.get(f"{label}/{k}") for k in ("client", "pred")}
        flat = {k: None if v is None else np.asarray(v).reshape(-1) for k, v in optional.items()}
        lengths = {len(score), len(y)} | {len(v) for v in flat.values() if v is not None}
        if len(lengths) != 1:
            notes.append(f"{label}: arrays in scores.npz differ in length; scores skipped")
            continue
        if not np.all(np.isin(y, (0, 1))):
            notes.append(f"{label}: labels in scores.npz are not 0/1; scores skipped")
            continue
        pred = flat["pred"]
        if pred is not None and not np.all(np.isin(pred, (0, 1))):
            notes.append(f"{label}: predictions in scores.npz are not 0/1; ignored")
            pred = None
        client = flat["client"]
        if client is not None and not (
            np.issubdtype(client.dtype, np.integer)
            or (np.issubdtype(client.dtype, np.floating) and np.all(client == np.round(client)))
        ):
            notes.append(f"{label}: client ids in scores.npz are not integers; ignored")
            client = None
        finite = np.isfinite(score)
        if not np.all(finite):
            notes.append(
                f"{label}: {int((~finite).sum())} non-finite test score(s) left out of the plots"
            )
        out[label] = MethodScores(
            score=score[finite],
            label=y[finite].astype(np.int8),
            client=None if client is None else client[finite].astype(np.int64),
            pred=None if pred is None else pred[finite].astype(np.int8),
        )
    return out, notes


@dataclass(frozen=True)
class MethodMaps:
    """One method's sample of anomaly maps from ``maps.npz`` (checked shapes and values).

    ``image`` ``(n, C, H, W)`` float32 with ``C`` 1 or 3, ``map`` ``(n, H, W)`` float64,
    ``mask`` ``(n, H, W)`` 0/1 uint8, ``score`` ``(n,)`` float64, ``label`` ``(n,)`` 0/1,
    ``client`` ``(n,)`` int64 or ``None``.
    """

    image: NDArray[np.float32]
    map: NDArray[np.float64]
    mask: NDArray[np.uint8]
    score: NDArray[np.float64]
    label: NDArray[np.int8]
    client: NDArray[np.int64] | None = None


MAPS_MAX_BYTES = 512 << 20
"""``maps.npz`` is refused when it would unpack to more than this (a zip bomb)."""
MAPS_MAX_IMAGES = 64
"""At most this many images per method (a run keeps 16:
:data:`fedad.evaluation.samples.MAPS_CAP`)."""
MAPS_MAX_SIDE = 4096
"""Largest image side accepted."""
_MAPS_FIELDS = ("image", "map", "mask", "score", "label")


def _real(a: NDArray[Any]) -> bool:
    return bool(np.issubdtype(a.dtype, np.floating) or np.issubdtype(a.dtype, np.integer))


def _method_maps(path: Path, label: str, arrays: dict[str, NDArray[Any]]) -> MethodMaps:
    """One method's arrays, checked; a one-line FedadError naming what is wrong."""

    def bad(what: str) -> FedadError:
        return FedadError(
            f"'{path}' is damaged: {label}/{what}",
            "rebuild it by running the experiment again (the report is fine without it)",
        )

    got = {k: arrays.get(f"{label}/{k}") for k in (*_MAPS_FIELDS, "client")}
    for k in _MAPS_FIELDS:
        v = got[k]
        if v is None:
            raise bad(f"{k} is missing")
        if not _real(v):
            raise bad(f"{k} holds {v.dtype}, not numbers")
    image, maps, mask = got["image"], got["map"], got["mask"]
    score, y, client = got["score"], got["label"], got["client"]
    assert image is not None and maps is not None and mask is not None
    assert score is not None and y is not None
    if image.ndim != 4 or image.shape[1] not in (1, 3):
        raise bad(f"image has shape {image.shape}, not (n, 1 or 3, H, W)")
    n, _, h, w = image.shape
    if not (n <= MAPS_MAX_IMAGES and 0 < h <= MAPS_MAX_SIDE and 0 < w <= MAPS_MAX_SIDE):
        raise bad(
            f"image has shape {image.shape}: at most {MAPS_MAX_IMAGES} images of side "
            f"at most {MAPS_MAX_SIDE}"
        )
    for k, v, want in (
        ("map", maps, (n, h, w)),
        ("mask", mask, (n, h, w)),
        ("score", score, (n,)),
        ("label", y, (n,)),
    ):
        if v.shape != want:
            raise bad(f"{k} has shape {v.shape}, not {want}")
    if not np.all((mask == 0) | (mask == 1)):
        raise bad("mask holds values other than 0 and 1")
    if not np.all((y == 0) | (y == 1)):
        raise bad("label holds values other than 0 and 1")
    if client is not None and (client.shape != (n,) or not np.issubdtype(client.dtype, np.integer)):
        client = None
    return MethodMaps(
        image=image.astype(np.float32),
        map=maps.astype(np.float64),
        mask=mask.astype(np.uint8),
        score=score.astype(np.float64),
        label=y.astype(np.int8),
        client=None if client is None else client.astype(np.int64),
    )


def _read_capped_npz(p: Path, max_bytes: int) -> tuple[dict[str, NDArray[Any]], list[str]]:
    """The arrays of an untrusted ``.npz`` (:func:`read_npz`, at most ``max_bytes``
    unpacked) and the method labels its ``LABEL/key`` names hold, in file order; one-line
    :class:`~fedad.core.errors.FedadError` otherwise."""
    arrays = read_npz(
        p, max_bytes, "rebuild it by running the experiment again (the report is fine without it)"
    )
    return arrays, list(dict.fromkeys(k.rsplit("/", 1)[0] for k in arrays if "/" in k))


def read_maps(path: str | Path, labels: list[str] | None = None) -> dict[str, MethodMaps]:
    """Load ``maps.npz`` (``LABEL/image``, ``LABEL/map``, ``LABEL/mask``, ``LABEL/score``,
    ``LABEL/label``, optional ``LABEL/client``) as untrusted input.

    No pickles; refused when it would unpack to more than :data:`MAPS_MAX_BYTES`; every
    array's shape, type and values checked. Methods in ``labels``' order, then any other
    label in the file. A missing file gives ``{}``; anything damaged raises a one-line
    :class:`~fedad.core.errors.FedadError` naming the file and the array.
    """
    p = Path(path)
    if not p.is_file():
        return {}
    arrays, in_file = _read_capped_npz(p, MAPS_MAX_BYTES)
    wanted = [lab for lab in (labels or []) if lab in in_file]
    wanted += [lab for lab in in_file if lab not in wanted]
    return {lab: _method_maps(p, lab, arrays) for lab in wanted}


@dataclass(frozen=True)
class MethodEmbedding:
    """One method's sample of test-sample representations from ``embeddings.npz``.

    ``embedding`` ``(n, D)`` float64 (finite rows only), ``label`` ``(n,)`` 0/1, ``client``
    ``(n,)`` int64, aligned row by row.
    """

    embedding: NDArray[np.float64]
    label: NDArray[np.int8]
    client: NDArray[np.int64]


EMBED_MAX_BYTES = 256 << 20
"""``embeddings.npz`` is refused when it would unpack to more than this (a zip bomb)."""
EMBED_MAX_ROWS = 10_000
"""At most this many rows per method (a run keeps 2,000:
:data:`fedad.evaluation.samples.EMBED_CAP`)."""
EMBED_MAX_DIM = 8192
"""At most this many columns."""
EMBED_MAX_TOTAL = 40_000
"""Most rows over all methods of one ``embeddings.npz`` (each is one t-SNE in the report)."""


def _method_embedding(path: Path, label: str, arrays: dict[str, NDArray[Any]]) -> MethodEmbedding:
    """One method's arrays, checked; a one-line FedadError naming what is wrong."""

    def bad(what: str) -> FedadError:
        return FedadError(
            f"'{path}' is damaged: {label}/{what}",
            "rebuild it by running the experiment again (the report is fine without it)",
        )

    got = {k: arrays.get(f"{label}/{k}") for k in ("embedding", "label", "client")}
    for k, v in got.items():
        if v is None:
            raise bad(f"{k} is missing")
        if not _real(v):
            raise bad(f"{k} holds {v.dtype}, not numbers")
    z, y, client = got["embedding"], got["label"], got["client"]
    assert z is not None and y is not None and client is not None
    if z.ndim != 2 or not (z.shape[0] <= EMBED_MAX_ROWS and 1 <= z.shape[1] <= EMBED_MAX_DIM):
        raise bad(
            f"embedding has shape {z.shape}, not (n, D) with n <= {EMBED_MAX_ROWS} and "
            f"1 <= D <= {EMBED_MAX_DIM}"
        )
    n = z.shape[0]
    for k, v in (("label", y), ("client", client)):
        if v.shape != (n,):
            raise bad(f"{k} has shape {v.shape}, not ({n},)")
    if not np.all((y == 0) | (y == 1)):
        raise bad("label holds values other than 0 and 1")
    if not (np.issubdtype(client.dtype, np.integer) or np.all(client == np.round(client))):
        raise bad("client holds values that are not integers")
    zz = z.astype(np.float64)
    keep = np.all(np.isfinite(zz), axis=1)
    return MethodEmbedding(
        embedding=zz[keep],
        label=y[keep].astype(np.int8),
        client=client[keep].astype(np.int64),
    )


def read_embeddings(
    path: str | Path, labels: list[str] | None = None
) -> dict[str, MethodEmbedding]:
    """Load ``embeddings.npz`` (``LABEL/embedding``, ``LABEL/label``, ``LABEL/client``) as
    untrusted input.

    No pickles; refused when it would unpack to more than :data:`EMBED_MAX_BYTES`; every
    array's shape, type and values checked; rows with a non-finite value are dropped.
    Only the methods in ``labels`` (every label in the file when ``None``), in that order;
    at most :data:`EMBED_MAX_TOTAL` rows over all of them. A missing file gives
    ``{}``; anything damaged raises a one-line :class:`~fedad.core.errors.FedadError`.
    """
    p = Path(path)
    if not p.is_file():
        return {}
    arrays, in_file = _read_capped_npz(p, EMBED_MAX_BYTES)
    wanted = in_file if labels is None else [lab for lab in labels if lab in in_file]
    out = {lab: _method_embedding(p, lab, arrays) for lab in wanted}
    total = sum(len(m.label) for m in out.values())
    if total > EMBED_MAX_TOTAL:
        raise FedadError(
            f"'{p}' holds {total} rows over its methods, more than the {EMBED_MAX_TOTAL} the "
            "report draws",
            "rebuild it by running the experiment again (the report is fine without it)",
        )
    return out


def read_config_text(path: str | Path) -> str | None:
    """The text of ``config.toml`` verbatim (at most 64 MiB), or ``None`` when the file is
    missing."""
    p = Path(path)
    if not p.is_file():
        return None
    try:
        return read_bytes(p).decode("utf-8", errors="replace")
    except OSError as exc:
        raise FedadError(f"{p} cannot be read: {_reason(exc)}") from None

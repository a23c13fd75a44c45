"""``image_folder``: the user's own folder of images, one folder per class, at ``data.path``.

Layouts (``<class>`` names are the classes, sorted; ``data.normal``/``data.anomaly`` select
them by name, ``Dataset.by_value``)::

    <path>/<class>/*.png|jpg|jpeg|bmp                  no official test split
    <path>/train/<class>/...  <path>/test/<class>/...  an official split (the top level holds
                                                       exactly the folders train/ and test/;
                                                       a class may be in one of them only)
    <path>/<class>/<client>/*.png                      natural clients: a class folder holding
                                                       only folders; each names the client of
                                                       its images (also under train/, test/)
    <path>/clients.csv                                 or natural clients from a table with the
                                                       header ``file,client``: every image's
                                                       path relative to <path> (``good/1.png``,
                                                       ``train/good/1.png``) and its client id

With clients, ``Dataset.group`` (``group_test``) holds each sample's client id as a string.
Samples are ordered by class, then by path relative to ``<path>``.

Decoding (:mod:`fedad.data.imagefiles` reads each file): grey images stay one channel and
colour images three (alpha dropped, palettes converted, 16-bit grey scaled to 8 bits) *as
found*: every image grey gives ``C = 1``, any colour image makes every image RGB; the
``channels`` option (``data.channels``) forces 1 or 3. With ``size`` every image is resized
bilinearly to ``size`` x ``size``; without it, every image must have the same height and
width (else a one-line error naming two files of different sizes). Output: float32
``(N, C, H, W)`` in [0, 1]. :func:`read_images` decodes new images (``fedad score``)
exactly as the loader did.

The folder is untrusted input: only ``.png``, ``.jpg``/``.jpeg`` and ``.bmp`` files are
read, decoded as PNG, JPEG or BMP whatever their name says, each at most
:data:`~fedad.data.imagefiles.MAX_FILE_BYTES` bytes and
:data:`~fedad.data.imagefiles.MAX_PIXELS` pixels (from the header, before decoding);
``clients.csv`` at most :data:`MAX_CSV_BYTES`, UTF-8. Hidden files and folders are skipped.
A path (symlink) leading outside ``data.path`` is a one-line error. A *bad file* (another
file in a class or client folder, an undecodable, truncated or too large image, a symlink
loop) is a
one-line :class:`~fedad.core.errors.DataError` naming it, or, with ``skip_bad_files``, skipped and
counted in one warning. Decoded sets are cached in-process, keyed on the folder, ``size``,
``channels``, ``skip_bad_files`` and every file's path, size and modification time.
"""

from __future__ import annotations

import csv
import io
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

import numpy as np

from fedad.core.errors import DataError
from fedad.core.types import Dataset
from fedad.data.imagefiles import (
    BadImage,
    ImageFile,
    eight_bit,
    inside,
    is_hidden,
    is_image_name,
    open_image,
    stat_image,
)
from fedad.data.paths import FOLDER, not_a
from fedad.data.registry import register_dataset
from fedad.printable import printable

if TYPE_CHECKING:
    from PIL.Image import Image as PILImage

__all__ = ["MAX_CSV_BYTES", "list_images", "load_image_folder", "read_images"]

MAX_CSV_BYTES = 4 * 2**20
MAX_DEPTH = 32
_WHAT = "image_folder"
_SKIP = "remove it or set data.skip_bad_files = true"
_SKIP_SCORE = "remove it or skip bad files (fedad score --skip-bad-files)"
_HOW = (
    "set data.path to a folder holding one folder of images per class "
    "(<class>/*.png, or train/<class>/ and test/<class>/)"
)
_GREY_MODES = frozenset({"1", "L", "LA", "La"})
_log = logging.getLogger("fedad")


@dataclass(frozen=True)
class _Item:
    file: ImageFile
    rel: str
    label: int
    client: str | None


@dataclass
class _Found:
    """What a scan of one split found: per class folder, its files and their clients."""

    files: dict[str, list[tuple[Path, str | None]]] = field(default_factory=dict)
    direct: list[Path] = field(default_factory=list)
    by_client: list[Path] = field(default_factory=list)


@dataclass
class _Bad:
    """Bad files met so far (skipped), and whether to skip them or stop."""

    skip: bool
    hint: str = _SKIP
    paths: list[str] = field(default_factory=list)

    def meet(self, what: str, path: str | Path) -> None:
        if not self.skip:
            raise DataError(what, self.hint)
        self.paths.append(str(path))

    def warn(self) -> None:
        if self.paths:
            first = printable(self.paths[0])  # a file's name is the data's: no control code
            _log.warning(
                "%s: skipped %d bad file(s) (the first: %s)", _WHAT, len(self.paths), first
            )


# --------------------------------------------------------------------------- scanning


def _entries(folder: Path, root: Path) -> tuple[list[Path], list[Path]]:
    """The visible folders and files of ``folder`` (each checked to stay under ``root``),
    sorted by name."""
    inside(folder, root, _WHAT)
    dirs: list[Path] = []
    files: list[Path] = []
    for p in sorted(folder.iterdir(), key=lambda q: q.name):
        if is_hidden(p):
            continue
        try:
            real = inside(p, root, _WHAT)
        except BadImage:  # a symlink loop: a bad file, met when it is read
            files.append(p)
            continue
        (dirs if real.is_dir() else files).append(p)
    return dirs, files


def _not_image(p: Path) -> str:
    return f"{_WHAT}: {p} is not an image file (.png, .jpg, .jpeg, .bmp)"


def _images_of(folder: Path, files: list[Path], bad: _Bad) -> list[Path]:
    out = []
    for p in files:
        if is_image_name(p):
            out.append(p)
        else:
            bad.meet(_not_image(p), p)
    return out


def _class_files(
    cls: Path, root: Path, bad: _Bad, seen: set[Path]
) -> tuple[list[tuple[Path, str | None]], bool]:
    """The image files of class folder ``cls`` with their client folder (``None``: images
    directly in ``cls``), and whether ``cls`` holds client folders."""
    dirs, files = _entries(cls, root)
    seen.update(files)
    if dirs and files:
        raise DataError(
            f"{_WHAT}: the class folder {cls} holds both files ({files[0].name}) and folders "
            f"({dirs[0].name})",
            "put every image of a class in client folders (<class>/<client>/), or none",
        )
    if not dirs:
        return [(p, None) for p in _images_of(cls, files, bad)], False
    out: list[tuple[Path, str | None]] = []
    for sub in dirs:
        inner, sub_files = _entries(sub, root)
        if inner:
            raise DataError(
                f"{_WHAT}: the client folder {sub} holds a folder ({inner[0].name})",
                "a client folder holds images only",
            )
        seen.update(sub_files)
        out += [(p, sub.name) for p in _images_of(sub, sub_files, bad)]
    return out, True


def _scan_split(folder: Path, root: Path, bad: _Bad, seen: set[Path]) -> _Found:
    dirs, files = _entries(folder, root)
    loose = [p for p in files if is_image_name(p)]
    if loose:
        raise DataError(f"{_WHAT}: the image {loose[0]} is not in a class folder", _HOW)
    if not dirs:
        raise DataError(f"{_WHAT}: no class folder under {folder}", _HOW)
    found = _Found()
    for cls in dirs:
        pairs, by_client = _class_files(cls, root, bad, seen)
        if not pairs:
            raise DataError(f"{_WHAT}: no image in the class folder {cls}", _HOW)
        found.files[cls.name] = pairs
        (found.by_client if by_client else found.direct).append(cls)
    return found


def _splits(base: Path, root: Path) -> dict[str, Path]:
    """``{"train": ..., "test": ...}`` for the split layout, else ``{"": base}``."""
    dirs, _ = _entries(base, root)
    if {d.name for d in dirs} == {"train", "test"}:
        return {d.name: d for d in dirs}
    return {"": base}


# --------------------------------------------------------------------------- clients.csv


def _csv_text(p: Path, root: Path) -> str:
    real = inside(p, root, _WHAT)
    if not real.is_file():
        raise DataError(f"{_WHAT}: {p} is not a file", "clients.csv is a file: file,client rows")
    with open(real, "rb") as fh:
        raw = fh.read(MAX_CSV_BYTES + 1)
    if len(raw) > MAX_CSV_BYTES:
        raise DataError(
            f"{_WHAT}: {p} has more than {MAX_CSV_BYTES:,} bytes", "a clients.csv is small"
        )
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise DataError(f"{_WHAT}: {p} is not UTF-8 text (byte {e.start})") from None


def _csv_row(p: Path, line: int, row: list[str]) -> tuple[str, str]:
    if len(row) != 2:
        raise DataError(
            f"{_WHAT}: {p} line {line} has {len(row)} fields, not 2", "write file,client rows"
        )
    rel, client = row[0].strip(), row[1].strip()
    pure = PurePosixPath(rel)
    if not rel or not client or pure.is_absolute() or ".." in pure.parts or "\\" in rel:
        raise DataError(
            f"{_WHAT}: {p} line {line} is not 'file,client' with a relative file path",
            "write paths relative to data.path with forward slashes, e.g. good/001.png",
        )
    return pure.as_posix(), client


def _read_clients(p: Path, root: Path) -> dict[str, tuple[str, int]]:
    """``clients.csv``: relative path -> (client id, line number)."""
    reader = csv.reader(io.StringIO(_csv_text(p, root), newline=""))
    out: dict[str, tuple[str, int]] = {}
    try:
        header = next(reader, None)
        if header is None or [h.strip().lower() for h in header] != ["file", "client"]:
            raise DataError(f"{_WHAT}: {p} does not start with the header 'file,client'")
        for row in reader:
            if not any(v.strip() for v in row):
                continue
            rel, client = _csv_row(p, reader.line_num, row)
            if rel in out:
                raise DataError(
                    f"{_WHAT}: {p} lists {rel} twice (lines {out[rel][1]} and {reader.line_num})"
                )
            out[rel] = (client, reader.line_num)
    except csv.Error as e:
        raise DataError(f"{_WHAT}: {p} line {reader.line_num} is not valid CSV ({e})") from None
    return out


# --------------------------------------------------------------------------- layout


def _check_client_forms(founds: list[_Found], csv_given: bool) -> bool:
    """Whether the images have clients (client folders or clients.csv); errors when the
    forms are mixed."""
    direct = [c for f in founds for c in f.direct]
    folders = [c for f in founds for c in f.by_client]
    if folders and csv_given:
        raise DataError(
            f"{_WHAT}: both clients.csv and client folders ({folders[0]}) give clients",
            "use one of them",
        )
    if folders and direct:
        raise DataError(
            f"{_WHAT}: {folders[0]} holds client folders but {direct[0]} holds images directly",
            "give every class folder client folders, or none",
        )
    return bool(folders) or csv_given


def _clients_from_csv(base: Path, root: Path, images: list[Path], seen: set[Path]) -> list[str]:
    """The client of each of ``images`` from ``clients.csv``; every image must be listed,
    and every listed file must be one ``seen`` in a class folder."""
    table = _read_clients(base / "clients.csv", root)
    rels = [p.relative_to(base).as_posix() for p in images]
    for p, rel in zip(images, rels, strict=True):
        if rel not in table:
            raise DataError(
                f"{_WHAT}: the image {p} is not listed in {base / 'clients.csv'}",
                "give every image a file,client row",
            )
    known = {q.relative_to(base).as_posix() for q in seen}
    for rel, (_, line) in table.items():
        if rel not in known:
            raise DataError(
                f"{_WHAT}: {base / 'clients.csv'} line {line} lists {rel}, which is not a file "
                "of a class folder",
                "remove the row or fix the path",
            )
    return [table[rel][0] for rel in rels]


def _scan(
    base: Path, root: Path, bad: _Bad
) -> tuple[tuple[str, ...], dict[str, list[_Item]], bool]:
    """Classes, the items of each split (``""``, or ``"train"`` and ``"test"``), and
    whether they have clients."""
    seen: set[Path] = set()
    splits = _splits(base, root)
    founds = {name: _scan_split(folder, root, bad, seen) for name, folder in splits.items()}
    csv_given = (base / "clients.csv").exists() or (base / "clients.csv").is_symlink()
    has_clients = _check_client_forms(list(founds.values()), csv_given)
    classes = tuple(sorted({c for f in founds.values() for c in f.files}))
    flat: list[tuple[str, Path, str | None, int]] = []
    for name, found in founds.items():
        for cls, pairs in found.files.items():
            flat += [(name, p, client, classes.index(cls)) for p, client in pairs]
    flat.sort(key=lambda t: (t[0], t[3], t[1].relative_to(base).as_posix()))
    if csv_given:
        clients: list[str | None] = list(
            _clients_from_csv(base, root, [p for _, p, _, _ in flat], seen)
        )
    else:
        clients = [c for _, _, c, _ in flat]
    out: dict[str, list[_Item]] = {name: [] for name in splits}
    for (name, p, _, k), client in zip(flat, clients, strict=True):
        try:
            f = stat_image(p, root, _WHAT)
        except BadImage as e:
            bad.meet(e.what, e.path)
            continue
        out[name].append(_Item(f, p.relative_to(base).as_posix(), k, client))
    return classes, out, has_clients


# --------------------------------------------------------------------------- decoding


def _base(im: PILImage) -> PILImage:
    """``im`` as 8-bit grey (``L``) when it is grey, else as ``RGB`` (alpha dropped,
    palette converted)."""
    im = eight_bit(im)
    if im.mode in _GREY_MODES:
        return im if im.mode == "L" else im.convert("L")
    return im if im.mode == "RGB" else im.convert("RGB")


def _pixels(im: PILImage, channels: int, hw: tuple[int, int]) -> np.ndarray:
    """``(channels, H, W)`` float32 in [0, 1]: ``im`` (from :func:`_base`) converted and,
    when its size differs, resized bilinearly."""
    from PIL import Image

    im = im.convert("L" if channels == 1 else "RGB")
    if im.size != (hw[1], hw[0]):
        im = im.resize((hw[1], hw[0]), Image.Resampling.BILINEAR)
    arr = np.asarray(im, dtype=np.float32) / np.float32(255.0)
    return arr[None] if channels == 1 else arr.transpose(2, 0, 1)


def _open_all(files: Sequence[ImageFile], bad: _Bad) -> list[tuple[int, PILImage]]:
    """``(index, image from _base)`` of every readable file; bad ones met."""
    out = []
    for i, f in enumerate(files):
        try:
            out.append((i, _base(open_image(f, _WHAT))))
        except BadImage as e:
            bad.meet(e.what, e.path)
    return out


def _common_hw(images: list[tuple[int, PILImage]], files: Sequence[ImageFile]) -> tuple[int, int]:
    first_i, first = images[0]
    for i, im in images[1:]:
        if im.size != first.size:
            raise DataError(
                f"{_WHAT}: {files[first_i].path} is {first.size[0]}x{first.size[1]} pixels but "
                f"{files[i].path} is {im.size[0]}x{im.size[1]}",
                "set data.size to resize every image to data.size x data.size",
            )
    return first.size[1], first.size[0]


def _stack(images: list[tuple[int, PILImage]], channels: int, hw: tuple[int, int]) -> np.ndarray:
    out = np.empty((len(images), channels, *hw), np.float32)
    for j, (_, im) in enumerate(images):
        out[j] = _pixels(im, channels, hw)
    return out


@lru_cache(maxsize=1)
def _decode(
    classes: tuple[str, ...],
    splits: tuple[tuple[str, tuple[_Item, ...]], ...],
    size: int | None,
    channels: int | None,
    skip: bool,
    has_clients: bool,
) -> tuple[Dataset, tuple[str, ...]]:
    bad = _Bad(skip)
    files = [it.file for _, items in splits for it in items]
    every = [it for _, items in splits for it in items]
    images = _open_all(files, bad)
    if not images:
        raise DataError(f"{_WHAT}: no readable image", _HOW)
    c = channels or (1 if all(im.mode == "L" for _, im in images) else 3)
    hw = (size, size) if size is not None else _common_hw(images, files)
    split_of = [name for name, items in splits for _ in items]
    parts: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray | None]] = {}
    for name, _ in splits:
        mine = [(i, im) for i, im in images if split_of[i] == name]
        if not mine:
            raise DataError(f"{_WHAT}: no readable image in the {name or 'data.path'} folders")
        its = [every[i] for i, _ in mine]
        y = np.array([it.label for it in its], np.int64)
        group = np.array([str(it.client) for it in its]) if has_clients else None
        parts[name] = (_stack(mine, c, hw), y, group)
    train = parts.get("train", parts.get(""))
    assert train is not None
    test = parts.get("test")
    ds = Dataset(
        _WHAT,
        train[0],
        train[1],
        "image",
        classes,
        x_test=None if test is None else test[0],
        y_test=None if test is None else test[1],
        by_value=True,
        group=train[2],
        group_test=None if test is None else test[2],
    )
    return ds, tuple(bad.paths)


def _check_options(size: int | None, channels: int | None) -> None:
    if size is not None and not 1 <= int(size) <= 4096:
        raise DataError(f"{_WHAT}: data.size {size} is outside 1..4096", "use e.g. 64")
    if channels not in (None, 1, 3):
        raise DataError(f"{_WHAT}: data.channels is {channels!r}", "use 1 (grey) or 3 (RGB)")


@register_dataset(
    "image_folder",
    description="your own images: data.path/<class>/*.png|jpg (optional train/ test/ "
    "splits, client folders or clients.csv)",
    kind="image",
    options=("channels", "skip_bad_files"),
)
def load_image_folder(
    path: str | None = None,
    size: int | None = None,
    *,
    channels: int | None = None,
    skip_bad_files: bool | None = None,
) -> Dataset:
    """The image folder at ``path`` (see the module docstring)."""
    if not path:
        raise DataError("data set 'image_folder' needs data.path", _HOW)
    base = Path(path).expanduser()
    if (wrong := not_a(base, FOLDER)) is not None:
        raise DataError(f"{_WHAT}: {wrong} (from data.path)", _HOW)
    _check_options(size, channels)
    skip = bool(skip_bad_files)
    bad = _Bad(skip)
    classes, items, has_clients = _scan(base, base.resolve(), bad)
    splits = tuple((name, tuple(its)) for name, its in items.items())
    side = None if size is None else int(size)
    ds, skipped = _decode(classes, splits, side, channels, skip, has_clients)
    bad.paths += skipped
    bad.warn()
    return ds


# --------------------------------------------------------------------------- new images


def _walk(folder: Path, root: Path, bad: _Bad, out: list[Path], above: frozenset[Path]) -> None:
    if len(above) > MAX_DEPTH:
        raise DataError(f"{_WHAT}: {folder} is more than {MAX_DEPTH} folders deep")
    for p in sorted(folder.iterdir(), key=lambda q: q.name):
        if is_hidden(p):
            continue
        try:
            real = inside(p, root, _WHAT, "the folder")
        except BadImage as e:  # a symlink loop
            bad.meet(e.what, e.path)
            continue
        if real.is_dir():
            if real in above:
                raise DataError(f"{_WHAT}: {p} leads back to a folder above it (symlink loop)")
            _walk(p, root, bad, out, above | {real})
        elif is_image_name(p):
            out.append(p)
        else:
            bad.meet(_not_image(p), p)


def list_images(folder: str | Path, *, skip_bad_files: bool = False) -> list[Path]:
    """Every image file under ``folder``, recursively, sorted by path relative to it.

    Hidden files and folders are skipped; another file is a one-line error (skipped and
    counted in a warning with ``skip_bad_files``); a path leading outside ``folder`` is
    refused; a folder without images is an error.
    """
    base = Path(folder).expanduser()
    if (wrong := not_a(base, FOLDER)) is not None:
        raise DataError(f"{_WHAT}: {wrong}", "give a folder of images")
    root = base.resolve()
    bad = _Bad(skip_bad_files, _SKIP_SCORE)
    out: list[Path] = []
    _walk(base, root, bad, out, frozenset({root}))
    bad.warn()
    if not out:
        raise DataError(f"{_WHAT}: no image file (.png, .jpg, .jpeg, .bmp) under {base}")
    return sorted(out, key=lambda p: p.relative_to(base).as_posix())


def read_images(
    files: Sequence[Path],
    root: Path,
    shape: tuple[int, int, int],
    *,
    skip_bad_files: bool = False,
) -> tuple[np.ndarray, list[Path]]:
    """``files`` (under ``root``) decoded as :func:`load_image_folder` decodes them for a
    model whose samples are ``shape`` = (C, H, W): float32 ``(N, C, H, W)`` in [0, 1],
    converted to C channels (grey or RGB) and resized bilinearly to (H, W) when their size
    differs. Returns the array and the files read (bad files skipped with
    ``skip_bad_files``, else a one-line error naming the first)."""
    c, h, w = (int(v) for v in shape)
    if c not in (1, 3) or h < 1 or w < 1:
        raise DataError(f"{_WHAT}: cannot read images as {shape} (C must be 1 or 3)")
    real_root = Path(root).expanduser().resolve()
    bad = _Bad(skip_bad_files, _SKIP_SCORE)
    read: list[Path] = []
    stats: list[ImageFile] = []
    for p in files:
        if not is_image_name(p):
            bad.meet(_not_image(p), p)
            continue
        try:
            stats.append(stat_image(Path(p), real_root, _WHAT, where="the folder"))
        except BadImage as e:
            bad.meet(e.what, e.path)
            continue
        read.append(Path(p))
    images = _open_all(stats, bad)
    bad.warn()
    if files and not images:
        raise DataError(f"{_WHAT}: none of the {len(files)} files is a readable image")
    return _stack(images, c, (h, w)), [read[i] for i, _ in images]

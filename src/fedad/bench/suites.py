"""Benchmark suites: named sets of federations, each a config in the usual format.

A suite is a TOML file: a ``[suite]`` table (``summary``, ``split``, ``minutes``, ``seeds``)
and one ``[[federations]]`` table per federation, each an experiment config without
``seed``/``seeds`` (the suite's seeds apply) and usually without ``[[methods]]`` (then every
method and detector the catalog declares for its data kind runs, :mod:`fedad.bench.expand`).
fedad ships its suites in ``fedad/bench/suites/`` (``fedad list suites``); a user's own
config file is a suite of one federation (:func:`suite_from_config`).

``split`` says which half of the data a suite reads: ``dev`` suites read ``data.part =
"dev"`` only, and defaults are chosen on them; ``eval`` suites read ``data.part = "eval"``
only and are run once per registered plan (docs/data.md); ``smoke`` is every method once on
tiny data, for CI; ``user`` a config of the user's. A shipped suite's federations must say
their part, and it must match the split (:func:`check_split`).
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from fedad.config import parse_config
from fedad.core.errors import ConfigError
from fedad.data.registry import dataset_info
from fedad.toml_files import apply_overrides, read_toml

__all__ = ["Federation", "Suite", "load_target", "shipped_suites", "suite_from_config"]

Split = Literal["dev", "eval", "smoke", "user"]
_NAME = re.compile(r"[A-Za-z0-9_.+-]{1,64}")
_SUITE_KEYS = {"summary", "split", "minutes", "seeds"}


@dataclass(frozen=True)
class Federation:
    """One federation of a suite: its ``name`` (a folder of the benchmark's output) and
    its config (``raw``: TOML tables, no seed), with the family ``kind`` it is ranked in
    (:func:`_kind`)."""

    name: str
    raw: dict[str, Any]
    kind: str


@dataclass(frozen=True)
class Suite:
    """A benchmark suite (module docstring)."""

    name: str
    summary: str
    split: Split
    seeds: tuple[int, ...]
    federations: tuple[Federation, ...]
    minutes: float | None = None
    """Expected wall time of the whole suite on a quiet 2-core machine (measured)."""
    source: str = ""
    kinds: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        kinds = tuple(dict.fromkeys(f.kind for f in self.federations))
        object.__setattr__(self, "kinds", kinds)


FAMILIES = {"vector": "tables", "image": "images", "graph": "graphs"}
"""The family of each data kind; defect sets and one-vs-rest federations are their own."""


def _kind(raw: dict[str, Any], where: str) -> str:
    """The family a federation is ranked in: ``tables``, ``images``, ``graphs``, ``defects``
    (a defect set, with pixel masks) or ``one-vs-rest`` (its partition scheme)."""
    data = raw.get("data")
    if not isinstance(data, dict) or not isinstance(data.get("name"), str):
        raise ConfigError(f"{where}: a federation needs [data] with a name")
    info = dataset_info(data["name"])
    part = raw.get("partition", {})
    if isinstance(part, dict) and part.get("scheme") == "one-vs-rest":
        return "one-vs-rest"
    return "defects" if info.defects else FAMILIES[info.kind]


def data_kind(fed: Federation) -> str:
    """The data kind (``vector``, ``image``, ``graph``) of a federation's data set."""
    return dataset_info(fed.raw["data"]["name"]).kind


def _federation(raw: Any, where: str, default_name: str) -> Federation:
    if not isinstance(raw, dict):
        raise ConfigError(f"{where} must be a table")
    raw = dict(raw)
    name = raw.pop("name", default_name)
    if not isinstance(name, str) or not _NAME.fullmatch(name) or set(name) <= {"."}:
        raise ConfigError(f"{where}.name {name!r} must be a plain name (letters, digits, -_.+)")
    if "seed" in raw or "seeds" in raw:
        raise ConfigError(f"{where} gives a seed", "the suite's seeds (or --seeds) apply")
    check = {**raw, "methods": raw.get("methods") or [{"name": "local"}]}
    try:
        parse_config(check)  # every key of the usual format, checked now
    except ConfigError as err:
        raise ConfigError(f"{where} ({name}): {err}") from None
    return Federation(name, raw, _kind(raw, where))


def parse_suite(raw: dict[str, Any], name: str, source: str = "") -> Suite:
    """A suite from its TOML tables; a problem is a one-line :class:`ConfigError`."""
    stray_tables = sorted(set(raw) - {"suite", "federations"})
    if stray_tables:
        raise ConfigError(
            f"suite '{name}': {stray_tables[0]!r} at the top level applies to no federation",
            f"put it in each [[federations]] table (--set federations.N.{stray_tables[0]}...)",
        )
    head = raw.get("suite", {})
    if not isinstance(head, dict) or set(head) - _SUITE_KEYS:
        stray = sorted(set(head) - _SUITE_KEYS) if isinstance(head, dict) else ["suite"]
        raise ConfigError(f"suite '{name}': unknown key [suite].{stray[0]}")
    split = head.get("split", "user")
    if split not in ("dev", "eval", "smoke", "user"):
        raise ConfigError(f"suite '{name}': split {split!r} is not dev, eval, smoke or user")
    seeds = head.get("seeds", [0])
    if not (isinstance(seeds, list) and seeds and all(type(s) is int for s in seeds)):
        raise ConfigError(f"suite '{name}': seeds must be a list of integers")
    feds = raw.get("federations")
    if not isinstance(feds, list) or not feds:
        raise ConfigError(f"suite '{name}' has no [[federations]]")
    federations = tuple(
        _federation(f, f"suite '{name}' federations.{i}", f"federation-{i}")
        for i, f in enumerate(feds)
    )
    names = [f.name for f in federations]
    if len(set(names)) != len(names):
        raise ConfigError(f"suite '{name}': two federations share a name")
    minutes = head.get("minutes")
    return Suite(
        name=name,
        summary=str(head.get("summary", "")),
        split=split,
        seeds=tuple(seeds),
        federations=federations,
        minutes=float(minutes) if isinstance(minutes, int | float) else None,
        source=source,
    )


def check_split(suite: Suite) -> None:
    """A ``dev`` or ``eval`` suite reads only its half of every data set (``data.part``)."""
    if suite.split not in ("dev", "eval"):
        return
    for f in suite.federations:
        part = f.raw.get("data", {}).get("part", "all")
        if part != suite.split:
            raise ConfigError(
                f"suite '{suite.name}' is a {suite.split} suite, but federation '{f.name}' "
                f"reads data.part = {part!r}"
            )


def shipped_suites() -> dict[str, Suite]:
    """The suites fedad ships (``fedad/bench/suites/*.toml``), by name."""
    out: dict[str, Suite] = {}
    folder = resources.files("fedad.bench") / "suites"
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".toml"):
            name = entry.name.removesuffix(".toml")
            suite = parse_suite(tomllib.loads(entry.read_text("utf-8")), name, "shipped")
            check_split(suite)
            out[name] = suite
    return out


def suite_from_config(path: Path, overrides: list[str]) -> Suite:
    """A config file of the usual format as a suite of one federation (named after the
    file): its ``seed``/``seeds`` are the suite's seeds, its ``[[methods]]`` (if any) are
    the methods."""
    raw = apply_overrides(read_toml(path), overrides)
    if "suite" in raw or "federations" in raw:
        return parse_suite(raw, path.stem, str(path))
    seeds: dict[str, Any] = {k: raw.pop(k) for k in ("seed", "seeds") if k in raw}
    checked = parse_config({**raw, **seeds, "methods": [{"name": "local"}]})  # as a run reads
    name = re.sub(r"[^A-Za-z0-9_.+-]", "-", path.stem)[:64].strip(".") or "config"
    federation = _federation(raw, str(path), name)
    chosen = tuple(checked.seed_list())
    return Suite(name, f"the config {path.name}", "user", chosen, (federation,), None, str(path))


def load_target(target: str, overrides: list[str]) -> Suite:
    """``fedad bench TARGET``: a shipped suite's name, or a config (or suite) file."""
    suites = shipped_suites()
    if target in suites and not Path(target).is_file():
        if overrides:
            raise ConfigError("--set applies to a config file, not to a shipped suite")
        return suites[target]
    path = Path(target)
    if path.suffix.lower() != ".toml" and not path.exists():
        raise ConfigError(
            f"'{target}' is neither a shipped suite nor a config file",
            f"suites: {', '.join(suites)} (`fedad list suites`), or the path of a TOML file",
        )
    return suite_from_config(path, overrides)

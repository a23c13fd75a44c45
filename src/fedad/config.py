"""Experiment configuration: the TOML contract of docs/config.md, validated with pydantic.

Every section forbids unknown keys, so a typo is an error that names the key, never a
silently ignored setting. :func:`load_config` turns any validation problem into a one-line
:class:`~fedad.core.errors.ConfigError`.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from fedad.core.as_written import AsWritten
from fedad.core.errors import ConfigError
from fedad.toml_files import MAX_CONFIG_BYTES as MAX_CONFIG_BYTES
from fedad.toml_files import apply_overrides as apply_overrides
from fedad.toml_files import dump_toml as dump_toml
from fedad.toml_files import read_toml as read_toml

SchemeName = Literal[
    "iid", "dirichlet", "dominant", "one-class", "one-vs-rest", "by-source", "natural"
]
EngineName = Literal["inprocess", "flower-simulation", "flower-deployment"]
AttackName = Literal["none", "gaussian-data", "contamination", "scaled-update", "sign-flip"]

MAX_ROUNDS = 1_000_000
"""Most federated rounds a config may ask for (``rounds``)."""
MAX_CLIENTS = 100_000
"""Most clients a config may ask for (``partition.clients``)."""
SEED_RANGE = (-(2**63), 2**63 - 1)
"""Smallest and largest ``seed``: a signed 64-bit integer."""
MAX_SEEDS = 1000
"""Most seeds one run may ask for (``seeds``)."""
MAX_LABEL = 64
"""Longest ``[[methods]] label``: it names a directory of the run."""

_LABEL = re.compile(rf"[A-Za-z0-9_.+-]{{1,{MAX_LABEL}}}")


class _Strict(AsWritten):
    # allow_inf_nan=False: every float field (and the float arm of every int | float union)
    # must be finite; ``inf`` and ``nan`` are refused with pydantic's ``finite_number`` error.
    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)


class DataConfig(_Strict):
    """Which data, which classes are normal, and how much of it to use."""

    name: str
    path: str | None = None
    normal: list[int | str] | None = Field(
        default=None,
        description="normal classes: indices, or values for tables and image folders",
    )
    anomaly: list[int | str] | None = None
    anomaly_source: str = ""
    anomaly_source_path: str | None = None
    sources: list[str] = Field(default_factory=list)
    size: int | None = Field(default=None, ge=4, le=512)
    max_train_per_client: int | None = Field(default=None, ge=1)
    max_test: int | None = Field(default=None, ge=2)
    test_anomaly_fraction: float | None = Field(
        default=None, gt=0.0, lt=1.0, description="share of anomalies in the pooled test set"
    )
    test_fraction: float = Field(default=0.3, gt=0.0, lt=1.0)
    server_normal: int = Field(default=0, ge=0)
    standardize: bool = True
    missing: Literal["error", "drop", "impute-mean"] = Field(
        default="error",
        description=(
            "what to do with NaN/Inf feature values: error (default), drop the rows, "
            "or impute the training mean"
        ),
    )
    # tables and image folders (fedad.data.table, fedad.data.image_folder)
    label_column: str | None = Field(default=None, description="table: the label column")
    client_column: str | None = Field(
        default=None, description="table: the column naming each row's client (natural)"
    )
    features: list[str] | None = Field(
        default=None, description="table: the feature columns (default: every other column)"
    )
    drop_columns: list[str] | None = Field(
        default=None, description="table: columns that are not features"
    )
    split_column: str | None = Field(
        default=None, description="table: a column of 'train'/'test' giving the test split"
    )
    channels: Literal[1, 3] | None = Field(
        default=None, description="image folder: force grey (1) or RGB (3)"
    )
    skip_bad_files: bool | None = Field(
        default=None, description="image folder: skip and count unreadable images"
    )
    part: Literal["all", "dev", "eval"] = Field(
        default="all",
        description="the data set's fixed development or evaluation half (docs/data.md)",
    )

    def loader_options(self) -> dict[str, Any]:
        """The extra keys a loader may take (``None``: not set); see ``load_dataset``."""
        keys = (
            "label_column",
            "client_column",
            "features",
            "drop_columns",
            "split_column",
            "channels",
            "skip_bad_files",
        )
        return {k: getattr(self, k) for k in keys}


class PartitionConfig(_Strict):
    """How the normal training data are split over clients (see docs/data.md)."""

    scheme: SchemeName = "iid"
    clients: int = Field(default=10, ge=1, le=MAX_CLIENTS)
    alpha: float = Field(default=0.5, gt=0.0)
    dominant_fraction: float = Field(default=0.9, ge=0.0, le=1.0)
    contamination: float = 0.0
    min_per_client: int = Field(default=2, ge=1)
    local_test: Literal["own", "shared"] = "own"
    """``own``: the pooled test set is split over the clients, each mirroring its own
    training classes; ``shared``: every client scores the whole pooled test set (metrics are
    the mean over clients), so a client's detector meets the other clients' normal data too."""

    @field_validator("contamination")
    @classmethod
    def _contamination_range(cls, v: float) -> float:
        if not 0.0 <= v < 1.0:
            raise ValueError("must be in [0, 1), e.g. 0.01 for 1% anomalies in training data")
        return v


class EngineConfig(_Strict):
    """Which engine runs the federation."""

    name: EngineName = "inprocess"
    fraction: float = Field(default=1.0, gt=0.0, le=1.0)
    dropout: float = Field(default=0.0, ge=0.0, lt=1.0)
    min_clients: int = Field(default=1, ge=1)
    timeout: float | None = Field(default=None, gt=0.0)
    progress: bool = True
    eval_every: int = Field(
        default=0, ge=0, description="also score the test sets every N rounds (curves only)"
    )
    workers: Annotated[int, Field(ge=1, le=1024)] | Literal["auto"] = Field(
        default=1,
        description="inprocess: run the clients in N worker processes (auto: one per CPU)",
    )
    clientapp: Literal["per-node", "per-message"] = Field(
        default="per-node",
        description=(
            "flower-deployment: one long-running ClientApp process per SuperNode (per-node), "
            "or Flower's own, a fresh process per message (per-message)"
        ),
    )
    device: str = Field(
        default="auto",
        pattern=r"^(auto|cpu|cuda|cuda:[0-9]{1,3}|mps)$",
        description="where torch work runs: auto (CUDA if available, else CPU), cpu, cuda[:N], mps",
    )


class AttackConfig(_Strict):
    """Poisoned or faulty clients (see :mod:`fedad.attacks`)."""

    kind: AttackName = "none"
    clients: int = Field(default=1, ge=0, description="how many clients are attacked")
    fraction: float = Field(
        default=1.0, ge=0.0, le=1.0, description="share of an attacked client's data affected"
    )
    scale: float = Field(default=10.0, gt=0.0, description="update factor for scaled-update")


class PrivacyConfig(_Strict):
    """Differential privacy on shared updates (see :mod:`fedad.privacy`)."""

    mechanism: Literal["none", "gaussian"] = Field(
        default="none",
        description=(
            "none or gaussian; when omitted, gaussian as soon as clip, noise_multiplier or "
            "target_epsilon is given (a config that names the noise gets it)"
        ),
    )
    clip: float = Field(default=1.0, gt=0.0, description="L2 clipping norm C of an update")
    noise_multiplier: float = Field(
        default=1.0, ge=0.0, description="noise standard deviation in units of C"
    )
    delta: float | None = Field(
        default=None, gt=0.0, lt=1.0, description="the delta of (epsilon, delta); default n^-1.1"
    )
    target_epsilon: float | None = Field(
        default=None, gt=0.0, description="calibrate noise_multiplier to this epsilon"
    )
    noise_source: Literal["private", "seeded"] = Field(
        default="private", description="private: OS entropy; seeded: reproducible, honest server"
    )
    secagg: bool = Field(
        default=False, description="Flower's SecAgg+ for the phases that only need a weighted mean"
    )
    secagg_clip: float = Field(
        default=8.0, gt=0.0, description="SecAgg+ clipping range: weighted entries kept in [-c, c]"
    )
    secagg_shares: int | float | Literal["auto"] = Field(
        default="auto",
        description=(
            "SecAgg+ key shares per client: a count (int > 2), a share of the sampled clients "
            "(float in (0, 1]) or auto: max(15, 2 ceil(log2 n) + 1), at most n"
        ),
    )
    secagg_threshold: int | float = Field(
        default=0.5,
        gt=0,
        description="shares needed to rebuild a key: a count (int) or a share of the shares",
    )

    @model_validator(mode="before")
    @classmethod
    def _noise_means_gaussian(cls, data: Any) -> Any:
        """``mechanism`` omitted with ``clip``, ``noise_multiplier`` or ``target_epsilon``
        given means ``"gaussian"``. An explicit ``"none"`` stays none: resolved configs
        write every key, the defaults of the noise included."""
        if not isinstance(data, dict):
            return data
        noise_keys = sorted({"clip", "noise_multiplier", "target_epsilon"} & set(data))
        if noise_keys and "mechanism" not in data:
            # docs/outputs.md's contract reads "[privacy] Gaussian mechanism (clip,
            # noise_multiplier)": a config that sets the noise and not the switch means the
            # noise; running it silently without noise would be the worse reading.
            return {**data, "mechanism": "gaussian"}
        return data

    @model_validator(mode="after")
    def _secagg_sizes(self) -> PrivacyConfig:
        s, t = self.secagg_shares, self.secagg_threshold
        if isinstance(s, float) and s <= 0.0:
            raise ValueError("secagg_shares as a share must be in (0, 1]")
        if isinstance(s, int) and s <= 2:
            raise ValueError("secagg_shares as a count must be at least 3 (or a share like 1.0)")
        if isinstance(s, float) and s > 1.0:
            raise ValueError("secagg_shares as a share must be in (0, 1]; write a count as an int")
        if isinstance(t, float) and t > 1.0:
            raise ValueError("secagg_threshold as a share must be in (0, 1]")
        if isinstance(t, int) and isinstance(s, int) and t >= s:
            raise ValueError("secagg_threshold must be smaller than secagg_shares")
        if self.target_epsilon is not None:
            if self.mechanism != "gaussian":
                raise ValueError('privacy.target_epsilon needs mechanism = "gaussian"')
            if "noise_multiplier" in self.model_fields_set:
                raise ValueError(
                    "give privacy.noise_multiplier or privacy.target_epsilon, not both "
                    "(target_epsilon sets the noise)"
                )
        return self


class TrackingConfig(_Strict):
    """Experiment tracking (:mod:`fedad.tracking`, docs/tracking.md): a ``[tracking]``
    section turns it on; without one nothing is tracked."""

    mlflow: str = Field(
        min_length=1,
        max_length=4096,
        description="MLflow: a folder (a local file store) or a tracking URI",
    )
    experiment: str = Field(
        default="fedad", min_length=1, max_length=256, description="MLflow experiment name"
    )
    run_name: str | None = Field(
        default=None,
        min_length=1,
        max_length=256,
        description="MLflow run name (default: the output folder's name)",
    )


class MethodConfig(_Strict):
    """One method to run on the federation."""

    name: str
    label: str | None = None
    detector: str | None = None
    params: dict[str, Any] = Field(default_factory=dict)

    @field_validator("label")
    @classmethod
    def _safe_label(cls, v: str | None) -> str | None:
        """A label names a directory of the run: a plain name, never a path."""
        if v is None:
            return v
        if not _LABEL.fullmatch(v) or set(v) == {"."}:
            raise ValueError(
                f"a label is 1 to {MAX_LABEL} characters from letters, digits and - _ . + "
                "and not only dots (it names a folder of the run; write e.g. 'fedavg-ae')"
            )
        return v


def check_client_counts(cfg: ExperimentConfig, clients: int, natural: bool = False) -> None:
    """``attack.clients`` and ``engine.min_clients`` within the federation's ``clients``."""
    where = (
        f"the {clients} clients of the natural partition (the ids in the data)"
        if natural
        else f"partition.clients={clients}"
    )
    fix = "" if natural else " or raise partition.clients"
    if cfg.attack.kind != "none" and cfg.attack.clients > clients:
        raise ValueError(f"attack.clients={cfg.attack.clients} exceeds {where}")
    if cfg.engine.min_clients > clients:
        raise ValueError(
            f"engine.min_clients={cfg.engine.min_clients} exceeds {where}: lower "
            f"engine.min_clients{fix}"
        )


class ExperimentConfig(_Strict):
    """A whole experiment: one federation, one or more methods."""

    seed: int = Field(default=0, ge=SEED_RANGE[0], le=SEED_RANGE[1])
    seeds: list[Annotated[int, Field(ge=SEED_RANGE[0], le=SEED_RANGE[1])]] | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_SEEDS,
        description="several seeds: each a complete run in OUT/seed-N/, aggregated in OUT/",
    )
    rounds: int = Field(default=10, ge=1, le=MAX_ROUNDS)
    data: DataConfig
    partition: PartitionConfig = Field(default_factory=PartitionConfig)
    engine: EngineConfig = Field(default_factory=EngineConfig)
    attack: AttackConfig = Field(default_factory=AttackConfig)
    privacy: PrivacyConfig = Field(default_factory=PrivacyConfig)
    tracking: TrackingConfig | None = None
    methods: list[MethodConfig] = Field(min_length=1)

    @field_validator("seeds")
    @classmethod
    def _distinct_seeds(cls, v: list[int] | None) -> list[int] | None:
        if v is not None and len(set(v)) != len(v):
            dup = sorted({s for s in v if v.count(s) > 1})
            raise ValueError(f"seeds {dup} are listed twice; each seed runs once")
        return v

    @model_validator(mode="after")
    def _check_classes(self) -> ExperimentConfig:
        if self.seeds is not None and "seed" in self.model_fields_set:
            raise ValueError("give 'seed' or 'seeds', not both (seeds = [0, 1, 2] runs each)")
        d = self.data
        if d.normal is not None and d.anomaly is not None:
            both = sorted(set(d.normal) & set(d.anomaly), key=str)
            if both:
                raise ValueError(
                    f"data.normal and data.anomaly share classes {both}; "
                    "a class is one or the other"
                )
        if self.partition.scheme != "natural":  # natural: checked once the data are read
            check_client_counts(self, self.partition.clients)
        # labels name folders: unique regardless of case (macOS and Windows fold it)
        labels = [m.label.casefold() for m in self.methods if m.label]
        if len(labels) != len(set(labels)):
            dup = sorted({x for x in labels if labels.count(x) > 1})
            raise ValueError(
                f"methods[].label {dup} used twice (ignoring case); labels must be unique"
            )
        return self

    def natural_counts_checked(self, clients: int) -> ExperimentConfig:
        """This config with a natural partition's client count, once the data gave it
        (``partition.clients``); a count that ``attack.clients`` or ``engine.min_clients``
        exceeds is a one-line :class:`ConfigError`."""
        try:
            check_client_counts(self, clients, natural=True)
        except ValueError as err:
            raise ConfigError(str(err)) from None
        part = self.partition.model_copy(update={"clients": clients})
        return self.model_copy(update={"partition": part})

    def seed_list(self) -> list[int]:
        """The seeds to run: ``seeds``, else ``[seed]``."""
        return list(self.seeds) if self.seeds is not None else [self.seed]

    def for_seed(self, seed: int) -> ExperimentConfig:
        """This config as a single run with ``seed`` (what each ``OUT/seed-N/`` runs)."""
        one = self.model_copy(update={"seed": seed, "seeds": None})
        one.model_fields_set.discard("seeds")
        return one

    def labels(self) -> list[str]:
        """Keys in metrics.json: ``label``, else ``name``; a repeated key gets ``-2``, ``-3`` ...

        Explicit labels must be unique (checked at validation); generated ones skip any
        key already taken. Keys name folders, so both compare without case.
        """
        taken = {m.label.casefold() for m in self.methods if m.label}
        out: list[str] = []
        for m in self.methods:
            if m.label:
                out.append(m.label)
                continue
            key, k = m.name, 1
            while key.casefold() in taken or key.casefold() in {o.casefold() for o in out}:
                k += 1
                key = f"{m.name}-{k}"
            out.append(key)
        return out


_UNION_ARMS = {"int", "float", "str", "bool"}
_ARM_PREFIXES = ("literal[", "constrained-")


def _is_arm(part: str) -> bool:
    """Whether a location part names the arm of a union (``int``, ``constrained-int`` for
    an ``Annotated[int, Field(ge=1)]``, ``literal['auto']``): pydantic's, not a key."""
    return part in _UNION_ARMS or part.startswith(_ARM_PREFIXES)


def _other_arms(err: ValidationError, parts: list[str]) -> str:
    """`` (or 'auto')`` when a literal arm of the same union also refused the value."""
    wanted = [
        e["msg"].removeprefix("Input should be ")
        for e in err.errors()[1:]
        if e["type"] == "literal_error"
        and len(e["loc"]) == len(parts) + 1
        and [str(p) for p in e["loc"][:-1]] == parts
    ]
    return f" (or {' or '.join(wanted)})" if wanted else ""


def _format_error(err: ValidationError) -> str:
    first = err.errors()[0]
    kind = first["type"]
    parts = [str(p) for p in first["loc"]]
    # the arm of a union (``privacy.secagg_shares.int``) is pydantic's, not a key
    arm = bool(parts) and _is_arm(parts[-1])
    if kind != "extra_forbidden" and len(parts) > 1 and arm:
        parts.pop()
    loc = ".".join(parts)
    msg = first["msg"] + (_other_arms(err, parts) if arm else "")
    if kind == "extra_forbidden":
        return (
            f"unknown key '{loc}' in the config "
            "(remove it or check its spelling; see docs/config.md)"
        )
    if kind == "missing":
        return f"missing key '{loc}' in the config (add it; see configs/quickstart.toml)"
    msg = msg.removeprefix("Value error, ")
    if kind == "finite_number":
        msg = "must be a finite number (inf and nan are not allowed)"
    elif kind == "int_parsing_size":
        msg = "the number is far too large"
    if not loc:
        return f"invalid config: {msg}"
    if loc in _LIMITS and kind in ("less_than_equal", "greater_than_equal", "int_parsing_size"):
        msg = _LIMITS[loc]
    given = first.get("input")
    shown = "" if isinstance(given, dict | list) else f" (got {_short(repr(given))})"
    return f"invalid value for '{loc}'{shown}: {msg}"


_LIMITS = {
    "rounds": f"must be 1 to {MAX_ROUNDS:,} (lower rounds)",
    "partition.clients": f"must be 1 to {MAX_CLIENTS:,} (lower partition.clients)",
    "seed": "must be a signed 64-bit integer, -2**63 to 2**63 - 1",
}


def _short(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def parse_config(raw: dict[str, Any]) -> ExperimentConfig:
    """Validate a config dict; raise a one-line :class:`ConfigError` on any problem."""
    try:
        return ExperimentConfig.model_validate(raw)
    except ValidationError as err:
        raise ConfigError(_format_error(err)) from None


def load_config(path: str | Path, overrides: list[str] | None = None) -> ExperimentConfig:
    """Read, override and validate an experiment config."""
    return parse_config(apply_overrides(read_toml(path), overrides or []))

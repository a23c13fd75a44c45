"""Server-side context: client sampling, reply checks, per-round history.

The same :class:`ServerContext` is used by every engine, so sampling, rejection of malformed
replies and the history rows are identical in-process and on Flower.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from fedad.core.aggregate import weighted_mean_dicts
from fedad.core.collapse import add_loss_ratio, collapse_message
from fedad.core.grid import Grid, SecureGrid
from fedad.core.messages import Message
from fedad.core.rng import rng as seeded_rng
from fedad.core.secagg import WEIGHT, SecAggSettings, unflatten
from fedad.core.types import Features
from fedad.core.validate import ArraySpec, check_reply, outlying_updates

log = logging.getLogger("fedad")


@dataclass
class Mean:
    """The result of :meth:`ServerContext.mean`."""

    arrays: dict[str, np.ndarray] | None
    """The weighted mean, or ``None`` when no reply could be used."""
    replies: dict[int, Message]
    """The contributing clients' scalars (no arrays), sorted by client id."""


class ServerContext:
    """Everything a server program needs besides the grid itself."""

    def __init__(
        self,
        grid: Grid,
        rounds: int,
        seed: int,
        fraction: float = 1.0,
        min_clients: int = 1,
        on_round: Callable[[dict[str, Any]], None] | None = None,
        server_data: Features | None = None,
        secagg: SecAggSettings | None = None,
        *,
        public: np.ndarray | None = None,
        update_phases: tuple[str, ...] = (),
        evaluator: Callable[[Any], dict[str, Any]] | None = None,
        eval_every: int = 0,
    ) -> None:
        self.grid = grid
        self.secagg = secagg
        """SecAgg+ settings when ``privacy.secagg`` is on: :meth:`mean` then runs SecAgg+."""
        self.secure_phases = 0
        self.server_data = server_data
        """Normal data the server holds (``data.server_normal``; never test data), or None."""
        self.public = public
        """The public set the method asked for (:class:`~fedad.core.algorithm.PublicRequest`):
        images unrelated to the clients, generated or loaded by name; None if not asked."""
        self.evaluator = evaluator
        """Evaluates a round's global state for the learning curve (``eval_*`` columns), every
        ``eval_every`` rounds (0: never)."""
        self.eval_every = eval_every
        self.rounds = rounds
        self.seed = seed
        self.fraction = fraction
        self.min_clients = min_clients
        self.rng = seeded_rng(seed, 0x5A3)
        self.history: list[dict[str, Any]] = []
        self.events: list[str] = []
        self._on_round = on_round
        self._row: dict[str, Any] = {}
        self._t0 = time.perf_counter()
        self._b0 = (grid.bytes_up, grid.bytes_down)
        self._missing: set[int] = set()
        self.update_phases = update_phases
        """The method's model-update phases: their replies' update norms are checked too
        (:func:`~fedad.core.validate.outlying_updates`)."""

    # -- sampling ---------------------------------------------------------------------
    def sample(self, node_ids: Sequence[int] | None = None) -> list[int]:
        """A seeded sample of ``ceil(fraction * n)`` nodes (at least ``min_clients``), sorted."""
        ids = sorted(self.grid.get_node_ids() if node_ids is None else node_ids)
        k = min(len(ids), max(self.min_clients, math.ceil(self.fraction * len(ids))))
        if k == len(ids):
            return ids
        chosen = self.rng.choice(len(ids), size=k, replace=False)
        return sorted(ids[i] for i in chosen)

    # -- communication ---------------------------------------------------------------
    def send(
        self,
        messages: Mapping[int, Message],
        arrays: Mapping[str, ArraySpec] | None = None,
        scalars: Sequence[str] = (),
    ) -> dict[int, Message]:
        """Send, receive and keep only well-formed replies (rejections are logged)."""
        replies = self.grid.send_and_receive(messages)
        good: dict[int, Message] = {}
        rejected: dict[int, str] = {}
        kind = next(iter(messages.values())).kind if messages else None
        for nid in sorted(replies):
            why = check_reply(replies[nid], arrays, scalars, kind=kind)
            if why is None:
                good[nid] = replies[nid]
            else:
                rejected[nid] = why
        if kind in self.update_phases:
            for nid, why in outlying_updates(messages, good).items():
                rejected[nid] = why
                del good[nid]
        self._tally(messages, good, rejected)
        return good

    def _tally(
        self,
        messages: Mapping[int, Message],
        replied: Mapping[int, Message],
        rejected: Mapping[int, str],
    ) -> None:
        """Count a phase in the round's row; log missing nodes and rejected replies."""
        missing = sorted(set(messages) - set(replied) - set(rejected))
        self._missing.update(missing)
        row = self._row
        row["clients_sampled"] = row.get("clients_sampled", 0) + len(messages)
        row["clients_missing"] = row.get("clients_missing", 0) + len(missing)
        if missing:
            self.event(f"no reply from node(s) {missing}")
        for nid, why in sorted(rejected.items()):
            self.event(f"rejected reply of node {nid}: {why}")
        row["clients_rejected"] = row.get("clients_rejected", 0) + len(rejected)
        row["clients_replied"] = row.get("clients_replied", 0) + len(replied)

    def mean(
        self,
        messages: Mapping[int, Message],
        arrays: Mapping[str, ArraySpec],
        scalars: Sequence[str] = (),
    ) -> Mean:
        """Send ``messages``; return the replies' example-weighted mean of ``arrays``.

        :math:`\\bar x = \\sum_k n_k x_k / \\sum_k n_k` over the well-formed replies, with
        :math:`n_k` the reply's ``num_examples``, as FedAvg needs (McMahan et al., 2017,
        Algorithm 1). The program sees the mean and each reply's ``scalars`` (which always
        include ``num_examples``), never a single client's arrays, so a phase written with
        :meth:`mean` runs unchanged under Flower's SecAgg+ when ``privacy.secagg`` is on
        (:mod:`fedad.core.secagg`: the server then learns only the sum).
        """
        wanted = [WEIGHT, *(s for s in scalars if s != WEIGHT)]
        if self.secagg is None:
            good = self.send(messages, arrays, wanted)
            if not good:
                return Mean(None, {})
            weights = [float(m.scalars[WEIGHT]) for m in good.values()]
            parts = [{k: m.arrays[k] for k in arrays} for m in good.values()]
            mean = weighted_mean_dicts(parts, weights)
            bad = sorted(k for k, v in mean.items() if not np.all(np.isfinite(v)))
            if bad:
                self.event(
                    f"the weighted mean of {', '.join(bad)} over nodes {sorted(good)} is not "
                    "finite (an update of extreme magnitude); it is discarded"
                )
                return Mean(None, {})
            return Mean(mean, {nid: Message(m.kind, {}, m.scalars) for nid, m in good.items()})
        self.secure_phases += 1
        grid = cast(SecureGrid, self.grid)
        out = grid.secure_mean(messages, arrays, wanted, self.secagg)
        self._tally(messages, out.replies, out.rejected)
        if out.overhead_bytes:
            self._row["secagg_bytes"] = self._row.get("secagg_bytes", 0) + out.overhead_bytes
        if out.halted is not None:
            self.event(f"secure aggregation halted: {out.halted}")
        secured = None if out.mean is None else unflatten(out.mean, arrays)
        return Mean(secured, dict(sorted(out.replies.items())))

    # -- history ------------------------------------------------------------------------
    def event(self, text: str) -> None:
        """Record (and log) something worth a line in the report."""
        round_no = self._row.get("round", len(self.history) + 1)
        self.events.append(f"round {round_no}: {text}")
        log.warning("round %s: %s", round_no, text)

    def log(self, **values: Any) -> None:
        """Add values (losses, anything) to the current round's history row."""
        self._row.update(values)

    def checkpoint(self, round_no: int, result: Any) -> None:
        """Offer the round's global state for a learning-curve evaluation (``eval_*`` columns).

        Server programs call this at the end of a round; it does nothing unless the engine
        attached an evaluator and ``round_no`` is a multiple of ``engine.eval_every``.
        """
        if self.wants_checkpoint(round_no):
            assert self.evaluator is not None
            self.log(**self.evaluator(result))

    def wants_checkpoint(self, round_no: int) -> bool:
        """Whether :meth:`checkpoint` would evaluate in this round (to skip preparing it)."""
        return (
            self.evaluator is not None and self.eval_every > 0 and round_no % self.eval_every == 0
        )

    def end_round(self, round_no: int) -> dict[str, Any]:
        """Close the row of round ``round_no``: bytes and seconds since the previous one."""
        now = time.perf_counter()
        up, down = self.grid.bytes_up, self.grid.bytes_down
        row: dict[str, Any] = {
            "round": round_no,
            "clients_sampled": 0,
            "clients_replied": 0,
            "clients_rejected": 0,
            "clients_missing": 0,
        }
        row.update(self._row)
        row["round"] = round_no
        add_loss_ratio(row)
        if round_no == self.rounds and (collapsed := collapse_message([*self.history, row])):
            self.event(collapsed)
        row["bytes_up"] = up - self._b0[0]
        row["bytes_down"] = down - self._b0[1]
        row["seconds"] = now - self._t0
        self.history.append(row)
        self._row = {}
        self._t0 = now
        self._b0 = (up, down)
        if self._on_round is not None:
            self._on_round(row)
        return row

    @property
    def missing_nodes(self) -> list[int]:
        """Nodes that failed to answer at least once."""
        return sorted(self._missing)

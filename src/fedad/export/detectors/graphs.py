"""Graph detectors: not exportable. A graph model takes graphs of any size (node features
and edge lists of each graph, then a readout over its nodes); ``fedad export`` writes
models with fixed, per-sample inputs, so these say so in one line (exit status 2)."""

from __future__ import annotations

from fedad.export.registry import refuse

WHY = (
    "it scores graphs (node features and edges of any size), which the exported models' "
    "fixed per-sample inputs cannot hold"
)

for _name in ("fgad", "fedstar"):
    refuse(_name, WHY)

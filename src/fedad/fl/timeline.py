"""Timestamps of a Flower deployment's messages: where the seconds of a round go.

When the environment variable ``FEDAD_FLOWER_TIMELINE`` names a file, the processes of a
Flower run append one JSON object per line to it (wall-clock seconds, ``time.time()``, so
that processes on one machine agree):

* ``fedad`` (:func:`fedad.fl.flower.deploy.run.submit_and_wait`): ``run-submit`` as it starts
  ``flwr run``;
* the ServerApp (:mod:`fedad.fl.flower.app`, :class:`fedad.fl.flower.grid.FlowerGrid`):
  ``serverapp-main`` when its main function starts (the process is up, the app installed
  and imported), ``server-nodes`` once it sees the SuperNodes, ``server-push`` when a
  phase's messages are with the SuperLink (``message_ids``), ``server-reply`` for each
  reply it pulls (``reply_to``);
* each node's ClientApp process (:mod:`fedad.fl.flower.worker`): ``node-task`` per message
  with ``pending`` (when the SuperNode, having pulled the message from the SuperLink, made
  it a task), ``acquired``, ``input`` (message, context and run pulled), ``handled`` (the
  ClientApp returned) and ``pushed`` (reply and context back with the SuperNode).

``benchmarks/flower_engines.py --deployment`` reads it to split a deployment round, and a
method's start-up, into their parts.
Nothing is written when the variable is unset (the default); a write that fails is
ignored, since timing must never fail a run.
"""

from __future__ import annotations

import contextlib
import json
import os
from typing import Any

TIMELINE_ENV = "FEDAD_FLOWER_TIMELINE"
"""Environment variable: the JSON-lines file that timeline events are appended to."""


def timeline_event(event: str, **fields: Any) -> None:
    """Append ``{"event": event, "pid": ..., **fields}`` to the timeline file, if one is set."""
    path = os.environ.get(TIMELINE_ENV)
    if not path:
        return
    line = json.dumps({"event": event, "pid": os.getpid(), **fields}, default=str) + "\n"
    with contextlib.suppress(OSError), open(path, "a", encoding="utf-8") as fh:
        fh.write(line)


def read_timeline(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The events of a timeline file (lines that are not JSON objects are skipped)."""
    out: list[dict[str, Any]] = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            with contextlib.suppress(ValueError):
                doc = json.loads(line)
                if isinstance(doc, dict):
                    out.append(doc)
    return out

"""A method that asks for more memory than the machine has: the one line that says so.

fedad keeps no memory model per method. A param that sizes a network or a buffer beyond
the machine (``latent_dim = 100000000``) fails where torch allocates; the runner catches
that failure for the one method (:func:`fedad.core.errors.is_allocation_failure`), lets the
others run, writes their results and report, and ends with this line: the method, how
much it asked for where torch says, and the largest size param it was given, to lower.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel

from fedad.core.errors import AllocationFailed

_ASKED = re.compile(r"allocate (\d+) bytes")


def _asked(err: BaseException) -> str:
    """`` (it asked for 26.4 GB)`` when the error says how much, else empty."""
    m = _ASKED.search(str(err))
    return f" (it asked for {int(m.group(1)) / 1e9:.1f} GB)" if m else ""


def largest_size_param(params: BaseModel) -> tuple[str, int] | None:
    """The integer param of ``params`` with the largest value among those set away from
    their default (else among all), or ``None`` when it has none."""
    values = {
        k: v
        for k, v in params.model_dump().items()
        if isinstance(v, int) and not isinstance(v, bool) and v > 1
    }
    if not values:
        return None
    fields = type(params).model_fields
    changed = {k: v for k, v in values.items() if k in fields and fields[k].default != v}
    pool = changed or values
    name = max(pool, key=lambda k: pool[k])
    return name, pool[name]


def allocation_error(label: str, index: int, params: Any, err: BaseException) -> AllocationFailed:
    """The one-line error of method ``label`` (``[[methods]]`` number ``index``) whose
    allocation failed with ``err``."""
    where = f"methods.{index}.params"
    big = largest_size_param(params) if isinstance(params, BaseModel) else None
    fix = (
        f"lower {where}.{big[0]} (now {big[1]}), or run it on a machine with more memory"
        if big is not None
        else "give it smaller data (data.max_train_per_client, data.size) or more memory"
    )
    return AllocationFailed(f"method '{label}' ran out of memory{_asked(err)}", fix)

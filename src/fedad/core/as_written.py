"""Values taken as they are written: no text read as a number or a switch.

pydantic's lax mode turns ``rounds = "2"`` into 2 and ``standardize = "yes"`` into true, so
a quoted number or a misspelt switch in a config passes unseen. :class:`AsWritten` (the
base of the config's sections and of every method's params) refuses text where a field
takes no text, anything but true/false for a switch, true/false for a number, and text or
true/false among the items of a list of numbers; whole numbers still fill float fields,
and floats int fields, whose bounds then word the error.
"""

from __future__ import annotations

from types import UnionType
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ValidationInfo, field_validator

__all__ = ["AsWritten", "as_written"]


def _arms(annotation: Any) -> tuple[Any, ...]:
    """The types a field admits at its top level (a union's arms, ``Optional``'s type)."""
    if get_origin(annotation) in (Union, UnionType):
        return tuple(a for arm in get_args(annotation) for a in _arms(arm))
    return (annotation,)


def _takes_text(annotation: Any) -> bool:
    """Whether a field admits text: ``str``, a ``Literal`` with a text value, or a list or
    union of them."""
    for arm in _arms(annotation):
        if arm is str or arm is Any:
            return True
        if get_origin(arm) is Literal and any(isinstance(v, str) for v in get_args(arm)):
            return True
    return False


def _takes(annotation: Any, kind: type) -> bool:
    """Whether a field admits values of ``kind`` itself (or anything)."""
    return any(arm is kind or arm is Any for arm in _arms(annotation))


def as_written(annotation: Any, value: Any) -> Any:
    """``value`` as given, unless it is text for a number or a switch (``rounds = "2"``,
    ``standardize = "yes"``) or a number for a switch: pydantic's lax mode would convert
    those, and a typo would pass unseen. Whole numbers still fill float fields and floats
    that are whole numbers int fields (their bounds word the error)."""
    arms = _arms(annotation)
    if isinstance(value, str) and not _takes_text(annotation):
        raise ValueError(f"give a value without quotes, not the text {value!r}")
    switch = arms and all(a in (bool, type(None)) for a in arms)
    if switch and value is not None and not isinstance(value, bool):
        raise ValueError("give true or false")
    if isinstance(value, bool) and not _takes(annotation, bool):
        raise ValueError(f"give a number, not {str(value).lower()}")
    if isinstance(value, list):
        items = [get_args(a)[0] for a in arms if get_origin(a) is list and get_args(a)]
        numbers = bool(items) and not any(_takes_text(t) for t in items)
        if numbers and any(isinstance(v, str) for v in value):
            raise ValueError("give the values without quotes")
        switches = any(_takes(t, bool) for t in items)
        if items and not switches and any(isinstance(v, bool) for v in value):
            raise ValueError("give numbers, not true or false")
    return value


class AsWritten(BaseModel):
    """A model whose fields take values as written (module docstring)."""

    @field_validator("*", mode="before")
    @classmethod
    def _as_written(cls, value: Any, info: ValidationInfo) -> Any:
        field = cls.model_fields.get(info.field_name or "")
        return value if field is None else as_written(field.annotation, value)

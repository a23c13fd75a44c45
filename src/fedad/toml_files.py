"""TOML files of configs: reading one (every problem a one-line error naming the file),
``--set key=value`` overrides, and writing the resolved config back."""

from __future__ import annotations

import copy
import tomllib
from pathlib import Path
from typing import Any

from fedad.core.errors import ConfigError

__all__ = ["MAX_CONFIG_BYTES", "apply_overrides", "dump_toml", "read_toml"]

MAX_CONFIG_BYTES = 16 * 2**20
"""Largest config file read (a config is a few kilobytes; anything bigger is a wrong file)."""


def _parse_value(text: str) -> Any:
    """A TOML value (``3``, ``[0, 1]``, ``"x"``), else the text itself as a string."""
    try:
        parsed = tomllib.loads(f"v = {text}")
    except (tomllib.TOMLDecodeError, RecursionError):
        return text
    return parsed["v"] if list(parsed) == ["v"] else text


def apply_overrides(raw: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply ``key=value`` overrides (dotted keys, TOML values; ``methods.0.params.lr=0.01``)."""
    out = copy.deepcopy(raw)
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"--set '{item}' is not key=value (write e.g. --set rounds=3)")
        key, value = item.split("=", 1)
        parts = [p.strip() for p in key.strip().split(".")]
        if not key.strip():
            raise ConfigError(f"--set '{item}' has no key before '=' (write e.g. --set rounds=3)")
        if not all(parts):
            raise ConfigError(
                f"--set '{item}': key '{key.strip()}' has an empty part between dots "
                "(write dotted keys like --set partition.alpha=0.1)"
            )
        node: Any = out
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            if not isinstance(node, dict | list):
                raise ConfigError(f"--set '{key}': '{parts[i - 1]}' holds a value, not a table")
            if isinstance(node, list):
                if not part.isdigit() or int(part) >= len(node):
                    raise ConfigError(
                        f"--set '{key}': '{part}' is not an index of a list of {len(node)} items"
                    )
                if last:
                    node[int(part)] = _parse_value(value)
                else:
                    node = node[int(part)]
            else:
                if last:
                    node[part] = _parse_value(value)
                    if node is out and part in ("seed", "seeds"):  # one replaces the other
                        node.pop("seeds" if part == "seed" else "seed", None)
                else:
                    node = node.setdefault(part, {})
                    if not isinstance(node, dict | list):
                        raise ConfigError(f"--set '{key}': '{part}' holds a value, not a table")
    return out


def read_toml(path: str | Path) -> dict[str, Any]:
    """Read a TOML file; any problem with the file is a one-line :class:`ConfigError`.

    A missing path, a directory or other non-file, an unreadable or oversized file, bytes
    that are not UTF-8 text and TOML syntax errors are each named with the path.
    """
    p = Path(path)
    try:
        st = p.stat()
    except FileNotFoundError:
        raise ConfigError(
            f"config file '{p}' does not exist (give the path of a TOML file)"
        ) from None
    except OSError as err:
        raise ConfigError(f"cannot read config file '{p}': {err.strerror}") from None
    if p.is_dir():
        raise ConfigError(f"config file '{p}' is a directory (give the path of a TOML file in it)")
    if not p.is_file():
        raise ConfigError(f"config file '{p}' is not a regular file (give the path of a TOML file)")
    if st.st_size > MAX_CONFIG_BYTES:
        raise ConfigError(
            f"config file '{p}' has {st.st_size:,} bytes, more than a config's limit of "
            f"{MAX_CONFIG_BYTES:,} (is it the right file?)"
        )
    try:
        raw = p.read_bytes()
    except PermissionError:
        raise ConfigError(
            f"cannot read config file '{p}': permission denied (check its permissions)"
        ) from None
    except OSError as err:
        raise ConfigError(f"cannot read config file '{p}': {err.strerror}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ConfigError(
            f"config file '{p}' is not UTF-8 text (byte {err.start}: {raw[err.start]:#04x}); "
            "is it a TOML file?"
        ) from None
    try:
        return tomllib.loads(text.removeprefix("\ufeff"))  # a BOM some editors write
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"config file '{p}' is not valid TOML: {err}") from None
    except RecursionError:
        raise ConfigError(f"config file '{p}' nests arrays or tables too deeply") from None


def dump_toml(data: dict[str, Any]) -> str:
    """Write a (nested) dict of plain values as TOML: enough for the resolved config."""
    lines: list[str] = []

    def val(v: Any) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, int | float):
            return repr(v)
        if isinstance(v, str):
            return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
        if isinstance(v, list):
            return "[" + ", ".join(val(x) for x in v) + "]"
        if isinstance(v, dict):
            return "{" + ", ".join(f"{k} = {val(x)}" for k, x in v.items()) + "}"
        raise TypeError(f"cannot write {type(v).__name__} to TOML")

    def table(prefix: str, d: dict[str, Any]) -> None:
        scalars = {k: v for k, v in d.items() if v is not None and not _is_table(v)}
        if prefix:
            lines.append(f"[{prefix}]")
        lines.extend(f"{k} = {val(v)}" for k, v in scalars.items())
        lines.append("")
        for k, v in d.items():
            if isinstance(v, dict) and v is not None and _is_table(v):
                table(f"{prefix}.{k}" if prefix else k, v)
            elif isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
                for item in v:
                    lines.append(f"[[{prefix}.{k}]]" if prefix else f"[[{k}]]")
                    inner = {a: b for a, b in item.items() if b is not None and not _is_table(b)}
                    lines.extend(f"{a} = {val(b)}" for a, b in inner.items())
                    lines.append("")
                    for a, b in item.items():
                        if isinstance(b, dict):
                            sub = f"{prefix}.{k}.{a}" if prefix else f"{k}.{a}"
                            lines.append(f"[{sub}]")
                            lines.extend(f"{x} = {val(y)}" for x, y in b.items() if y is not None)
                            lines.append("")

    table("", data)
    return "\n".join(lines).rstrip() + "\n"


def _is_table(v: Any) -> bool:
    return isinstance(v, dict) or (
        isinstance(v, list) and bool(v) and all(isinstance(x, dict) for x in v)
    )

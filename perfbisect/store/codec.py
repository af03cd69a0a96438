"""Frozen model dataclasses ⇄ JSON-able values, driven by the dataclasses' own type hints.

``encode`` turns dataclasses into dicts, enums into their values and tuples into lists; ``decode``
rebuilds the exact value from the declared field types (a stored outcome loads back as a
``BisectOutcome`` whose ``endpoint_comparison`` is a ``Comparison``, its verdict a ``Verdict``, its
tuples tuples). Keys a newer model no longer has are ignored and fields an older row lacks take
their defaults, so history written by one version stays readable by the next. ``json_part`` is
``encode`` for a part of a row, failing with a ``StoreError`` that names the part.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import math
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from ..errors import StoreError

T = TypeVar("T")


def encode(value: Any, *, for_output: bool = False) -> Any:
    """A JSON-able form of a model value (dataclass, enum, tuple, mapping, scalar).

    For storage (the default) a non-finite float is kept as ``{"__float__": "nan"}`` so ``decode``
    gives it back, and a value of any other type is an error. ``for_output`` (what a command prints
    with --json): a non-finite float becomes null — JSON has no such number, and a consumer's parser
    would reject the whole object — and a value of another type is left for the caller's
    ``json.dumps(default=...)``.
    """
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: encode(getattr(value, f.name), for_output=for_output) for f in dataclasses.fields(value)}
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, Mapping):
        return {str(k): encode(v, for_output=for_output) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [encode(v, for_output=for_output) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        # JSON has no inf/nan; Python's json writes them anyway but other readers choke on them.
        return None if for_output else {"__float__": repr(value)}
    if for_output or value is None or isinstance(value, (str, int, float, bool)):
        return value
    raise TypeError(f"{type(value).__name__} value {value!r} cannot be stored as JSON")


def decode(tp: Any, data: Any) -> Any:
    """Rebuild a ``tp`` (model dataclass, enum or typing form) from ``encode``'s output."""
    if isinstance(data, dict) and set(data) == {"__float__"}:
        return float(data["__float__"])
    if tp is Any or tp is object:
        return data
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if data is None:
            return None
        options = [a for a in args if a is not type(None)]
        return decode(options[0], data) if len(options) == 1 else data
    if data is None:
        return None
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        hints = _field_types(tp)
        names = {f.name for f in dataclasses.fields(tp) if f.init}
        kwargs = {k: decode(hints[k], v) for k, v in data.items() if k in names}
        return tp(**kwargs)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return tp(data)
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(decode(args[0], v) for v in data)
        if args:
            return tuple(decode(a, v) for a, v in zip(args, data, strict=True))
        return tuple(data)
    if origin in (list, Sequence):
        return [decode(args[0] if args else Any, v) for v in data]
    if origin in (dict, Mapping) or tp in (dict, Mapping):
        value_type = args[1] if len(args) == 2 else Any
        return {k: decode(value_type, v) for k, v in data.items()}
    if tp is float and isinstance(data, int) and not isinstance(data, bool):
        return float(data)
    return data


def load(cls: type[T], data: Any) -> T:
    """Typed ``decode`` for a model dataclass: ``load(BisectOutcome, row.outcome)``."""
    return decode(cls, data)


def json_part(name: str, value: Any) -> Any:
    """``encode(value)``, or a StoreError naming ``name`` when it cannot be stored."""
    try:
        return encode(value)
    except TypeError as exc:
        raise StoreError(
            f"The {name} cannot be stored: {exc}. Pass plain JSON values (str, int, float, bool, "
            "None, lists, dicts) or perfbisect.model dataclasses."
        ) from exc


@functools.lru_cache(maxsize=None)
def _field_types(cls: type) -> dict[str, Any]:
    # model.py uses `from __future__ import annotations`: resolve the strings once per class.
    return typing.get_type_hints(cls)

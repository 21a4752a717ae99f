"""Run configuration as data: dataclass defaults < a TOML recipe < command-line flags.

Every pretrain/finetune/embed option is a dataclass field with help text; `add_config_args` turns the fields
into flags (so `--help` is the fields' documentation), `resolve_config` applies the precedence and rejects
unknown keys and wrong types, and `dump_toml` writes the resolved run beside its checkpoints. Bundled recipes
(litebert/configs/NAME.toml) are found by name.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import tomllib
import typing
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any


def add_config_args(parser: argparse.ArgumentParser, cls: type, title: str | None = None) -> None:
    """One `--field-name` flag per dataclass field, with the field's help text. Flags default to SUPPRESS, so
    `resolve_config` sees only what the user typed and a TOML value is overridden only when a flag is given."""
    group = parser.add_argument_group(title or cls.__name__)
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        kind, optional = _unwrap_optional(hints[f.name])
        kw: dict[str, Any] = dict(dest=f.name, default=argparse.SUPPRESS, help=_help_with_default(f))
        if kind is bool:
            kw["action"] = argparse.BooleanOptionalAction
        elif typing.get_origin(kind) is list:
            kw.update(nargs="*", type=typing.get_args(kind)[0])
        else:
            kw.update(type=_none_or(kind) if optional else kind, choices=f.metadata.get("choices"))
            kw["metavar"] = f.name.upper() if kw["choices"] is None else None
        group.add_argument("--" + f.name.replace("_", "-"), **kw)


def _help_with_default(f: dataclasses.Field) -> str:
    """The field's help text with its default shown once: a text that explains the default itself ("(default:
    the model's)") is left as it is, and an empty-string default (nothing given) is not shown."""
    text = f.metadata.get("help", "")
    default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
    if "(default" in text or default == "":
        return text
    return f"{text} (default: {str(default).replace('%', '%%')})"  # argparse %-formats help strings


BUNDLED_CONFIGS = Path(__file__).parent / "configs"


def load_toml(path: str | os.PathLike, sections: tuple[str, ...] | None = None) -> dict[str, Any]:
    """Read a TOML file, or a bundled recipe by name (`demo`, `paper_base`: litebert/configs/NAME.toml); with
    `sections`, any other top-level key is an error."""
    if not os.path.exists(path) and (BUNDLED_CONFIGS / f"{path}.toml").is_file():
        path = BUNDLED_CONFIGS / f"{path}.toml"
    try:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"{path}: not valid TOML ({e})") from None
    if sections is not None:
        unknown = sorted(set(data) - set(sections))
        if unknown:
            raise ValueError(f"{path}: unknown section(s) {unknown}; expected {list(sections)}")
    return data


def resolve_config(cls: type, table: Mapping[str, Any] | None = None,
                   overrides: argparse.Namespace | Mapping[str, Any] | None = None, *, source: str = "config"):
    """cls(**defaults, then `table` (e.g. a TOML section), then `overrides`). Unknown keys are errors; from an
    argparse Namespace only the fields of `cls` are taken (the parser may hold other dataclasses' flags)."""
    hints = typing.get_type_hints(cls)
    values: dict[str, Any] = {}
    for key, value in (table or {}).items():
        if key not in hints:
            raise ValueError(f"{source}: unknown key {key!r} for {cls.__name__} (known: {', '.join(hints)})")
        values[key] = _check_type(value, hints[key], f"{source}: {key}")
    if isinstance(overrides, argparse.Namespace):
        values.update({k: v for k, v in vars(overrides).items() if k in hints})
    else:
        for key, value in (overrides or {}).items():
            if key not in hints:
                raise ValueError(f"unknown {cls.__name__} field {key!r}")
            values[key] = value
    return cls(**values)


def dump_toml(sections: Mapping[str, Any]) -> str:
    """Sections of dataclasses or flat dicts as TOML (None values, which TOML cannot hold, become comments)."""
    lines = []
    for name, obj in sections.items():
        items = dataclasses.asdict(obj) if dataclasses.is_dataclass(obj) else dict(obj)
        lines.append(f"[{name}]")
        for key, value in items.items():
            lines.append(f"# {key} = (none)" if value is None else f"{key} = {_toml_value(value)}")
        lines.append("")
    return "\n".join(lines)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value) if math.isfinite(value) else ("nan" if value != value else ("inf" if value > 0 else "-inf"))
    if isinstance(value, str):
        return json.dumps(value)  # JSON string escapes are valid TOML basic-string escapes
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(str(k))} = {_toml_value(v)}" for k, v in value.items()
                               if v is not None) + "}"
    raise TypeError(f"cannot write {type(value).__name__} to TOML")


def _unwrap_optional(tp: Any) -> tuple[Any, bool]:
    args = typing.get_args(tp)
    if type(None) in args:
        rest = [a for a in args if a is not type(None)]
        return (rest[0] if len(rest) == 1 else tp), True
    return tp, False


def _none_or(kind: type) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        return None if text.lower() in ("none", "null") else kind(text)
    parse.__name__ = kind.__name__
    return parse


def _check_type(value: Any, tp: Any, where: str) -> Any:
    kind, optional = _unwrap_optional(tp)
    if value is None and optional:
        return None
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if typing.get_origin(kind) is list:
        ok = isinstance(value, list)
    elif kind is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    else:
        ok = isinstance(value, kind) if isinstance(kind, type) else True
    if not ok:
        raise ValueError(f"{where} must be {getattr(kind, '__name__', kind)}, got {value!r}")
    return value

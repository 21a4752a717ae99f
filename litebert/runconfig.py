"""Run configuration as data: dataclass defaults < a TOML recipe < command-line flags.

Every option of every verb is a dataclass field with help text; `add_config_args` turns the fields into flags
(so `--help` is the fields' documentation), `resolve_config` applies the precedence and rejects unknown keys
and wrong types, and `dump_toml` writes the resolved run beside its checkpoints. Bundled recipes
(litebert/configs/NAME.toml) are found by name. `verb_parser` + `parse_verb` are the whole command line of
every verb: each config class reads one TOML table (its `toml_section`, else the verb's name).

Field metadata understood here: "help"; "choices"; "metavar"; "repeatable" (a list field given as a repeated
flag); "positional" (a list field that is also the
verb's positional arguments, e.g. `litebert prepare corpus/*.txt`); "required" (must be given, as a flag or in
the TOML; checked by `parse_verb`); "range" (an interval such as "[0, 1)", "(0, inf)" or "[1, 65535]": every
numeric field declares the values it means something for, and `resolve_config` refuses any other value, from a
flag or a TOML file, in one line naming the flag before any work). Options that must agree with each other are
checked by the class's `__post_init__`.
"""

from __future__ import annotations

import argparse
import contextlib
import contextvars
import dataclasses
import errno
import json
import math
import os
import re
import tomllib
import typing
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from litebert.errors import ConfigError


def add_config_args(parser: argparse.ArgumentParser, cls: type, title: str | None = None) -> None:
    """One `--field-name` flag per dataclass field, with the field's help text. Flags default to SUPPRESS, so
    `resolve_config` sees only what the user typed and a TOML value is overridden only when a flag is given.
    A list field with metadata "positional" is the parser's positional arguments instead (zero or more, so a
    TOML can set them too)."""
    group = parser.add_argument_group(title or cls.__name__)
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        kind, optional = _unwrap_optional(hints[f.name])
        kw: dict[str, Any] = dict(default=argparse.SUPPRESS, help=_help_with_default(f))
        if f.metadata.get("positional"):
            if typing.get_origin(kind) is not list:
                raise TypeError(f"{cls.__name__}.{f.name}: only a list field can be positional")
            group.add_argument(f.name, nargs="*", type=typing.get_args(kind)[0], **kw)
            continue
        kw["dest"] = f.name
        if kind is bool:
            kw["action"] = argparse.BooleanOptionalAction
        elif typing.get_origin(kind) is list and f.metadata.get("repeatable"):  # --text a --text b
            kw.update(action="append", type=typing.get_args(kind)[0], metavar=f.metadata.get("metavar"))
        elif typing.get_origin(kind) is list:
            kw.update(nargs="*", type=typing.get_args(kind)[0], metavar=f.metadata.get("metavar"))
        else:
            kw.update(type=_none_or(kind) if optional else kind, choices=f.metadata.get("choices"))
            kw["metavar"] = f.metadata.get("metavar", f.name.upper()) if kw["choices"] is None else None
        group.add_argument("--" + f.name.replace("_", "-"), **kw)


def _help_with_default(f: dataclasses.Field) -> str:
    """The field's help text with its default shown once: a text that explains the default itself ("(default:
    the model's)") is left as it is, and a default that means nothing given ("", None, []) is not shown."""
    text = f.metadata.get("help", "")
    default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
    if "(default" in text or default is None or default == "" or default == []:
        return text
    return f"{text} (default: {str(default).replace('%', '%%')})"  # argparse %-formats help strings


BUNDLED_CONFIGS = Path(__file__).parent / "configs"


def load_toml(path: str | os.PathLike, sections: tuple[str, ...] | None = None) -> dict[str, Any]:
    """Read a TOML file, or a bundled recipe by name (`demo`, `paper_base`: litebert/configs/NAME.toml); with
    `sections`, any other top-level key is an error."""
    if not os.path.exists(path) and (BUNDLED_CONFIGS / f"{path}.toml").is_file():
        path = BUNDLED_CONFIGS / f"{path}.toml"
    if not os.path.exists(path):  # a mistyped recipe name: say which names there are
        bundled = ", ".join(sorted(p.stem for p in BUNDLED_CONFIGS.glob("*.toml")))
        raise FileNotFoundError(errno.ENOENT, f"No such file or directory (nor a bundled recipe: {bundled})",
                                os.fspath(path))
    try:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: not valid TOML ({e})") from None
    except UnicodeDecodeError as e:  # tomllib decodes the bytes itself and lets this through
        raise ConfigError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    if sections is not None:
        loose = sorted(k for k in data if not isinstance(data[k], dict))
        if loose:
            raise ConfigError(f"{path}: {loose} outside any section; put them under one of "
                              f"{', '.join(f'[{name}]' for name in sections)}")
        unknown = sorted(set(data) - set(sections))
        if unknown:
            raise ConfigError(f"{path}: unknown section(s) {unknown}; expected {list(sections)}")
    return data


def resolve_config(cls: type, table: Mapping[str, Any] | None = None,
                   overrides: argparse.Namespace | Mapping[str, Any] | None = None, *, source: str = "config"):
    """cls(**defaults, then `table` (e.g. a TOML section), then `overrides`). Unknown keys are errors; from an
    argparse Namespace only the fields of `cls` are taken (the parser may hold other dataclasses' flags)."""
    hints = typing.get_type_hints(cls)
    values: dict[str, Any] = {}
    for key, value in (table or {}).items():
        if key not in hints and key in getattr(cls, "toml_ignored", ()):
            continue
        if key not in hints:
            raise ConfigError(f"{source}: unknown key {key!r} for {cls.__name__} (known: {', '.join(hints)})")
        values[key] = _check_type(value, hints[key], f"{source}: {key}")
    flags: set[str] = set()
    if isinstance(overrides, argparse.Namespace):
        flags = {k for k in vars(overrides) if k in hints}
        values.update({k: v for k, v in vars(overrides).items() if k in hints})
    else:
        for key, value in (overrides or {}).items():
            if key not in hints:
                raise ConfigError(f"unknown {cls.__name__} field {key!r}")
            values[key] = value
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for key, value in values.items():
        check_range(fields[key], value, flag_name(key) if key in flags else f"{source}: {key}")
    return cls(**values)


def flag_name(field_name: str) -> str:
    return "--" + field_name.replace("_", "-")


def parse_range(spec: str) -> tuple[float, float, bool, bool]:
    """'[0, 1)' -> (0, 1, lower included, upper included); 'inf' bounds are allowed."""
    m = _RANGE.fullmatch(spec.strip())
    if not m:
        raise TypeError(f"not an interval: {spec!r} (write it as [lo, hi], (lo, hi), [lo, hi) or (lo, hi])")
    return float(m.group(2)), float(m.group(3)), m.group(1) == "[", m.group(4) == "]"


_RANGE = re.compile(r"([\[(])\s*(-?inf|[-+0-9.e]+)\s*,\s*(-?inf|[-+0-9.e]+)\s*([\])])")


def in_range(value: float, spec: str) -> bool:
    lo, hi, lo_in, hi_in = parse_range(spec)
    return (lo <= value if lo_in else lo < value) and (value <= hi if hi_in else value < hi)  # NaN: False


def check_range(f: dataclasses.Field, value: Any, name: str) -> None:
    """A value outside the field's declared "range" is a ConfigError naming it: `--beta1 must be in [0, 1), got
    1.5`. None (an optional field left to its default) passes; each element of a list is checked."""
    spec = f.metadata.get("range")
    if spec is None or value is None:
        return
    for v in value if isinstance(value, list) else [value]:
        if isinstance(v, (int, float)) and not isinstance(v, bool) and not in_range(v, spec):
            raise ConfigError(f"{name} must be in {spec}, got {v!r}")


def check_declared(config: Any) -> None:
    """A config built in code held to what its fields declare (metadata "range" and "choices"), as the command
    line and TOML tables are when parsed: a ConfigError naming the option."""
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        check_range(f, value, flag_name(f.name))
        if "choices" in f.metadata and value not in f.metadata["choices"]:
            raise ConfigError(f"{flag_name(f.name)} must be one of {', '.join(map(str, f.metadata['choices']))}, "
                              f"got {value!r}")


def resolve_configs(classes: tuple[type, ...], table: Mapping[str, Any] | None,
                    overrides: argparse.Namespace | None, *, source: str = "config") -> tuple:
    """`resolve_config` for several dataclasses that share one TOML table (e.g. `[prepare]`: the run's
    options and InstanceOptions): each key goes to the class that has it; a key none has is an error."""
    tables: list[dict[str, Any]] = [{} for _ in classes]
    names = [{f.name for f in dataclasses.fields(cls)} for cls in classes]
    for key, value in (table or {}).items():
        owner = next((i for i, known in enumerate(names) if key in known), None)
        if owner is None:
            known = ", ".join(name for names_of_one in names for name in names_of_one)
            raise ConfigError(f"{source}: unknown key {key!r} (known: {known})")
        tables[owner][key] = value
    return tuple(resolve_config(cls, t, overrides, source=source) for cls, t in zip(classes, tables))


def section_of(cls: type, verb: str) -> str:
    """The TOML table a config class reads: its `toml_section` (TrainConfig's is "train", shared by every
    training verb), else the verb's own name (`[prepare]`, `[export]`, ...)."""
    return getattr(cls, "toml_section", None) or verb


def verb_parser(verb: str, description: str | None, groups: Mapping[str, type], *, epilog: str | None = None,
                other_tables: tuple[str, ...] = ()) -> argparse.ArgumentParser:
    """The parser of `litebert VERB`: the module docstring as its description, one flag per field of each
    config class (`groups`: a help title -> the class), and `--config FILE.toml`, whose tables set any of them.
    `other_tables` are tables the verb reads itself (pretrain's [model]) or accepts and ignores (a fine-tuning
    recipe's [train] given to evaluate)."""
    parser = argparse.ArgumentParser(prog=f"litebert {verb}", description=description, epilog=epilog,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    classes = tuple(groups.values())
    tables = list(dict.fromkeys([section_of(cls, verb) for cls in classes] + list(other_tables)))
    parser.add_argument("--config", metavar="FILE.toml", help=(
        f"{', '.join(f'[{t}]' for t in tables)} table{'s' if len(tables) > 1 else ''} of this TOML file (or a "
        "bundled recipe's name) set any option below; flags given here override it; unknown keys are errors"))
    for title, cls in groups.items():
        add_config_args(parser, cls, title)
    parser.set_defaults(_classes=classes, _tables=tuple(tables))
    if _STOP_AT_PARSER.get():
        raise ParserBuilt(parser)
    return parser


class ParserBuilt(Exception):
    """Carries a verb's parser out of the verb under `stop_at_parser` (not a LitebertError: no user sees it)."""

    def __init__(self, parser: argparse.ArgumentParser):
        super().__init__(parser.prog)
        self.parser = parser


_STOP_AT_PARSER = contextvars.ContextVar("stop_at_parser", default=False)


@contextlib.contextmanager
def stop_at_parser() -> Iterator[None]:
    """Within this, `verb_parser` raises ParserBuilt instead of returning: a verb's parser is taken where the verb
    builds it (its first line), so checks of documented command lines parse with the very parser the verb would,
    and no second table of parser factories can drift from the verbs."""
    token = _STOP_AT_PARSER.set(True)
    try:
        yield
    finally:
        _STOP_AT_PARSER.reset(token)


def parse_verb(parser: argparse.ArgumentParser, argv: list[str] | argparse.Namespace,
               defaults: Mapping[type, Callable[[tuple, dict], Mapping[str, Any]]] | None = None) -> tuple:
    """Parse `argv` (or take parsed args) and resolve the parser's config classes, in order, from their
    defaults < `defaults` (a class -> a function of the configs resolved before it and of what the user set for
    the class, by --config or a flag: a fine-tuning task's recipe, scaled to the steps asked for) < the class's
    table in --config < flags. Returns the configs, then the raw tables of the verb's
    `other_tables`. A field with metadata "required" that is still empty is a usage error (exit 2)."""
    args = argv if isinstance(argv, argparse.Namespace) else parser.parse_args(argv)
    verb, classes, tables = parser.prog.split()[-1], args._classes, args._tables
    config = getattr(args, "config", None)
    toml = load_toml(config, tables) if config else {}
    configs: list[Any] = []
    for section in dict.fromkeys(section_of(cls, verb) for cls in classes):
        group = tuple(cls for cls in classes if section_of(cls, verb) == section)
        table = dict(toml.get(section, {}))
        for cls in group:
            if defaults and cls in defaults:
                given = {**table, **{f.name: getattr(args, f.name) for f in dataclasses.fields(cls)
                                     if hasattr(args, f.name)}}
                table = {**defaults[cls](tuple(configs), given), **table}
        configs += resolve_configs(group, table, args, source=f"{config} [{section}]")
    configs.sort(key=lambda c: classes.index(type(c)))
    missing = [f for cls, cfg in zip(classes, configs) for f in dataclasses.fields(cls)
               if f.metadata.get("required") and getattr(cfg, f.name) in (None, "", [])]
    if missing:
        parser.error("the following arguments are required: "
                     + ", ".join(f.name if f.metadata.get("positional") else "--" + f.name.replace("_", "-")
                                 for f in missing)
                     + (" (or set them in --config)" if config else ""))
    refuse_flags_without_their_switch(args, classes, configs, verb)
    own = {section_of(cls, verb) for cls in classes}
    args._given = set(vars(args)) | {key for section in own for key in toml.get(section, {})}
    return (*configs, *(dict(toml.get(t, {})) for t in tables if t not in own))


def refuse_flags_without_their_switch(args: argparse.Namespace, classes: tuple, configs: list, verb: str) -> None:
    """A field whose metadata says "read_with": SWITCH is read only when that field of its config is on
    (--compile-scope without --compile): typed as a flag without it, it would be ignored without a word."""
    for cls, cfg in zip(classes, configs):
        for f in dataclasses.fields(cls):
            switch = f.metadata.get("read_with")
            if switch and hasattr(args, f.name) and not getattr(cfg, switch):
                raise ConfigError(f"{flag_name(f.name)} is read with {flag_name(switch)} only: `litebert {verb}` "
                                  "would ignore it")


def refuse_flags_of_other_modes(args: argparse.Namespace, mode: str, readers: Mapping[str, tuple[str, ...]],
                                verb: str) -> None:
    """A verb with modes (one per call) reads some options in some modes only: a flag typed for another mode
    would be ignored without a word, so it is a ConfigError naming the modes that read it. `readers`: field ->
    the modes that read it, as the message names them (fields not listed are read by every mode). Only flags
    count: a --config TOML may hold every mode's options."""
    positional = {f.name for cls in getattr(args, "_classes", ()) for f in dataclasses.fields(cls)
                  if f.metadata.get("positional")}
    for name in sorted(k for k in vars(args) if not k.startswith("_") and k in readers):
        if mode not in readers[name]:
            shown = f"{name} (the positional arguments)" if name in positional else flag_name(name)
            raise ConfigError(f"{shown} is read with {' or '.join(readers[name])}, not with {mode}: "
                              f"`litebert {verb}` would ignore it")


def given_fields(args: argparse.Namespace) -> set[str]:
    """The fields the user set, by a flag or in --config's tables of the verb (the others are defaults), as
    `parse_verb` found them."""
    return args._given


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
        if ok and typing.get_args(kind):
            return [_check_type(v, typing.get_args(kind)[0], f"{where}[{i}]") for i, v in enumerate(value)]
    elif kind is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    else:
        ok = isinstance(value, kind) if isinstance(kind, type) else True
    if not ok:
        raise ConfigError(f"{where} must be {getattr(kind, '__name__', kind)}, got {value!r}")
    return value

"""Typed configs: dataclasses built from YAML/dicts with every key checked.

An unknown key, a value of the wrong type or a missing required key is a `ConfigError` naming the key's
full path (``train.optimizer.lr``) and, for unknown keys, the keys that exist. Overrides use the same
paths: ``--set optimizer.lr=1e-5``.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import re
import types
import typing
from pathlib import Path

import yaml


class ConfigError(ValueError):
    """One or more problems in a config; ``problems`` lists each with its key path."""

    def __init__(self, *problems: str):
        self.problems = list(problems)
        text = problems[0] if len(problems) == 1 else f"{len(problems)} problems:\n" + "\n".join(
            f"  - {p}" for p in problems)
        super().__init__(text)


def raise_problems(problems: list[str]) -> None:
    """A `ConfigError` listing every problem found, or nothing when there is none."""
    if problems:
        raise ConfigError(*problems)


def _check_type(value, annotation, where: str, problems: list[str]):
    """``value`` converted to ``annotation`` (ints to floats, nested dataclasses built); a problem is appended
    and ``None`` returned when it does not fit."""
    origin = typing.get_origin(annotation)
    if annotation is typing.Any:
        return value
    if origin in (typing.Union, types.UnionType):
        sections = [o for o in typing.get_args(annotation) if dataclasses.is_dataclass(o)]
        if isinstance(value, dict) and len(sections) == 1:  # an optional section: its own keys' problems, named
            return _build(sections[0], value, where, problems)
        for option in typing.get_args(annotation):
            trial: list[str] = []
            converted = _check_type(value, option, where, trial)
            if not trial:
                return converted
        problems.append(f"{where}: {short(repr(value))} is not a {annotation}")
        return None
    if annotation is type(None):
        if value is not None:
            problems.append(f"{where}: expected null, got {short(repr(value))}")
        return None
    if dataclasses.is_dataclass(annotation):
        return _build(annotation, value, where, problems)
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            problems.append(f"{where}: expected a list, got {short(repr(value))}")
            return None
        (item,) = typing.get_args(annotation)[:1] or (typing.Any,)
        items = [_check_type(v, item, f"{where}[{i}]", problems) for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if origin is dict:
        if not isinstance(value, dict):
            problems.append(f"{where}: expected a mapping, got {short(repr(value))}")
            return None
        _, val_t = typing.get_args(annotation) or (str, typing.Any)
        return {k: _check_type(v, val_t, f"{where}.{k}", problems) for k, v in value.items()}
    if annotation is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if annotation in (int, float, str, bool) and not (isinstance(value, annotation)
                                                     and not (annotation is int and isinstance(value, bool))):
        problems.append(f"{where}: expected {annotation.__name__}, got {short(repr(value))}")
        return None
    return value


def _build(cls, data, where: str, problems: list[str]):
    if not isinstance(data, dict):
        problems.append(f"{where}: expected a mapping of keys, got {short(repr(data))}")
        return None
    before = len(problems)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        import difflib

        hints = [f"{k!r} (did you mean {close[0]}?)" if (close := difflib.get_close_matches(str(k), fields, 1, 0.7))
                 else repr(k) for k in unknown]
        problems.append(f"{where}: unknown key(s) {', '.join(hints)}; valid keys are {sorted(fields)}")
    hints = typing.get_type_hints(cls)
    values = {}
    for name, value in data.items():
        if name in fields:
            seen = len(problems)
            converted = _check_type(value, hints[name], f"{where}.{name}", problems)
            if len(problems) == seen:  # a value that did not fit is left to its default, to check the rest
                values[name] = converted
    required = [n for n, f in fields.items() if f.default is dataclasses.MISSING
                and f.default_factory is dataclasses.MISSING]
    missing = [n for n in required if n not in data]
    if missing:  # with the flag that gives each, where a command has one (`field(metadata={"flag": ...})`)
        named = [n + (f" (flag {fields[n].metadata['flag']})" if "flag" in fields[n].metadata else "") for n in missing]
        problems.append(f"{where}: missing required key(s) {', '.join(named)}")
    if any(n not in values for n in required):
        return None
    try:
        built = cls(**values)  # its own checks (`__post_init__`) run even when other keys were wrong
    except (TypeError, ValueError) as e:
        problems.extend(e.problems if isinstance(e, ConfigError) else [f"{where}: {e}"])
        return None
    return None if len(problems) > before else built


def from_dict(cls, data, where: str = "config", overrides: list[str] = ()):
    """``cls(**data)`` with nested dataclasses and type checks; every unknown key, wrong type, missing key and
    invalid value is reported in one `ConfigError`. A problem with a value that ``overrides`` (``key.path=value``,
    applied to ``data`` by `apply_overrides`) set names that ``--set``, not the file ``where``."""
    problems: list[str] = []
    built = _build(cls, data, where, problems)
    raise_problems([blame_override(p, where, overrides) for p in problems])
    return built


def blame_override(problem: str, where: str, overrides: list[str]) -> str:
    """``problem`` with its ``where.key.path`` prefix replaced by the ``--set key.path=value`` that gave the value
    (the last one, as it is the one applied)."""
    for item in reversed(overrides):
        path = item.split("=", 1)[0].strip()
        for sep in (":", "["):
            if problem.startswith(f"{where}.{path}{sep}"):
                return f"--set {short(item)}{problem[len(where) + 1 + len(path):]}"
    return problem


def to_dict(config) -> dict:
    return dataclasses.asdict(config)


def check_override_path(cls, path: str, item: str) -> None:
    """A ``--set`` key that names no field of the config is blamed on ``--set``, not on the config file."""
    import difflib

    for depth, key in enumerate(path.split(".")):
        if not (dataclasses.is_dataclass(cls) and isinstance(cls, type)):
            return  # below a mapping field (e.g. captioner_options): any key
        fields = {f.name for f in dataclasses.fields(cls)}
        if key not in fields:
            section = ".".join(path.split(".")[:depth]) or "the config"
            close = difflib.get_close_matches(key, fields, 1, 0.7)
            raise ConfigError(f"--set {item}: {key!r} is not a key of {section}"
                              + (f" (did you mean {close[0]}?)" if close else f"; valid keys are {sorted(fields)}"))
        cls = typing.get_type_hints(cls)[key]


def apply_overrides(data: dict, overrides: list[str], cls=None) -> dict:
    """``["optimizer.lr=1e-5", "steps=20"]`` applied to a nested dict (values parsed as YAML scalars); with
    ``cls``, every key path is checked against that config dataclass first."""
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override {item!r} must look like key.path=value")
        path, raw = item.split("=", 1)
        if cls is not None:
            check_override_path(cls, path.strip(), item)
        node = data
        *parents, leaf = path.split(".")
        for p in parents:
            node = node.setdefault(p, {})
            if not isinstance(node, dict):
                raise ConfigError(f"override {item!r}: {p} is not a section")
        node[leaf] = parse_yaml(raw, f"--set {short(item)}")
    return data


class ConfigLoader(yaml.SafeLoader):
    """YAML as a config needs it: ``1e-5`` is a number (YAML 1.1 reads a float without a dot as a string), a key
    given twice is an error instead of the last one silently winning."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise ConfigError(f"key {key!r} is given twice (line {key_node.start_mark.line + 1})")
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


ConfigLoader.add_implicit_resolver("tag:yaml.org,2002:float",
                                   re.compile(r"^[-+]?[0-9][0-9_]*(\.[0-9_]*)?[eE][-+]?[0-9]+$"), list("-+0123456789"))
ConfigLoader.add_constructor("tag:yaml.org,2002:map", ConfigLoader.construct_mapping)
MAX_NODES = 100_000  # a config of a few hundred keys; an alias bomb expands to billions


def expanded_size(value, limit: int = MAX_NODES) -> int:
    """The number of values in ``value`` with every alias expanded, counting stops past ``limit``."""
    count, stack = 0, [value]
    while stack and count <= limit:
        item = stack.pop()
        count += 1
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return count


def parse_yaml(text: str, where: str):
    try:
        data = yaml.load(text, Loader=ConfigLoader)
    except ConfigError as e:
        raise ConfigError(f"{where}: {e.problems[0]}") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{where}: not valid YAML ({short(str(e), 300)})") from None
    if expanded_size(data) > MAX_NODES:
        raise ConfigError(f"{where}: expands to more than {MAX_NODES:,} values (YAML aliases nested in aliases); "
                          "a config needs none of that")
    return data


def short(text: str, limit: int = 80) -> str:
    """``text`` cut to ``limit`` characters: a message shows a value, never megabytes of it."""
    return text if len(text) <= limit else f"{text[: limit - 25]}... ({len(text):,} characters)"


def load_yaml(path: str | Path) -> dict:
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"config file not found: {path}")
    data = parse_yaml(path.read_text(encoding="utf-8"), str(path)) or {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of keys")
    return data


def open_clip_model_names() -> set[str]:
    """The model names open_clip knows (its JSON configs and ours), read from disk without importing it."""
    spec = importlib.util.find_spec("open_clip")
    dirs = [Path(loc) / "model_configs" for loc in (spec.submodule_search_locations or [])] if spec else []
    dirs.append(Path(__file__).parent / "model_configs")  # ours: cj-tiny, cj-demo
    return {p.stem for d in dirs for p in d.glob("*.json")}

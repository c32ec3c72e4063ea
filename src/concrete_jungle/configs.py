"""Typed configs: dataclasses built from YAML/dicts with every key checked.

An unknown key, a value of the wrong type or a missing required key is a `ConfigError` naming the key's
full path (``train.optimizer.lr``) and, for unknown keys, the keys that exist. Overrides use the same
paths: ``--set optimizer.lr=1e-5``.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from pathlib import Path

import yaml


class ConfigError(ValueError):
    pass


def _check_type(value, annotation, where: str):
    origin = typing.get_origin(annotation)
    if annotation is typing.Any:
        return value
    if origin in (typing.Union, types.UnionType):
        for option in typing.get_args(annotation):
            try:
                return _check_type(value, option, where)
            except ConfigError:
                continue
        raise ConfigError(f"{where}: {value!r} is not a {annotation}")
    if annotation is type(None):
        if value is None:
            return None
        raise ConfigError(f"{where}: expected null, got {value!r}")
    if dataclasses.is_dataclass(annotation):
        return from_dict(annotation, value, where)
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{where}: expected a list, got {value!r}")
        (item,) = typing.get_args(annotation)[:1] or (typing.Any,)
        items = [_check_type(v, item, f"{where}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping, got {value!r}")
        _, val_t = typing.get_args(annotation) or (str, typing.Any)
        return {k: _check_type(v, val_t, f"{where}.{k}") for k, v in value.items()}
    if annotation is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if annotation in (int, float, str, bool) and not (isinstance(value, annotation)
                                                     and not (annotation is int and isinstance(value, bool))):
        raise ConfigError(f"{where}: expected {annotation.__name__}, got {value!r}")
    return value


def from_dict(cls, data, where: str = "config"):
    """``cls(**data)`` with nested dataclasses, type checks and unknown keys as errors."""
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping of keys, got {data!r}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {unknown}; valid keys are {sorted(fields)}")
    hints = typing.get_type_hints(cls)
    values = {name: _check_type(value, hints[name], f"{where}.{name}") for name, value in data.items()}
    missing = [n for n, f in fields.items() if n not in values and f.default is dataclasses.MISSING
               and f.default_factory is dataclasses.MISSING]
    if missing:
        raise ConfigError(f"{where}: missing required key(s) {missing}")
    try:
        return cls(**values)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"{where}: {e}") from None


def to_dict(config) -> dict:
    return dataclasses.asdict(config)


def apply_overrides(data: dict, overrides: list[str]) -> dict:
    """``["optimizer.lr=1e-5", "steps=20"]`` applied to a nested dict (values parsed as YAML scalars)."""
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override {item!r} must look like key.path=value")
        path, raw = item.split("=", 1)
        node = data
        *parents, leaf = path.split(".")
        for p in parents:
            node = node.setdefault(p, {})
            if not isinstance(node, dict):
                raise ConfigError(f"override {item!r}: {p} is not a section")
        node[leaf] = yaml.safe_load(raw)
    return data


def load_yaml(path: str | Path) -> dict:
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"config file not found: {path}")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML ({e})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of keys")
    return data

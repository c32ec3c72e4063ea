"""Captioners and editors by name: the built-in ones, those installed packages register, any class by path.

A name is resolved in this order:

1. a built-in: captioners ``rules``, ``openai``, ``transformers``; editors ``none``, ``diffusers``;
2. an entry point another installed package declares in its ``pyproject.toml``::

       [project.entry-points."concrete_jungle.captioners"]
       my-llm = "my_package.captioner:MyCaptioner"

   (group ``concrete_jungle.editors`` for editors; the toy world of the demo registers itself this way);
3. a ``package.module:Class`` path to any importable class, nothing installed.

A captioner is a class with a ``name`` and ``rewrite(requests) -> replies`` (see `captioners.Captioner`), an
editor one with ``name``, ``reuses_anchor`` and ``edit(images, prompts, seeds) -> images`` (see
`editors.Editor`); their constructor takes the options as keyword arguments (``--captioner-option k=v``).
Nothing is imported until a plugin is created, so naming one costs nothing.
"""

from __future__ import annotations

import importlib
import inspect
import re
from importlib.metadata import entry_points

GROUPS = {"captioner": "concrete_jungle.captioners", "editor": "concrete_jungle.editors"}
BUILTIN = {
    "captioner": {"rules": "concrete_jungle.plant.captioners.rules:RulesCaptioner",
                  "openai": "concrete_jungle.plant.captioners.openai_api:OpenAICaptioner",
                  "transformers": "concrete_jungle.plant.captioners.transformers_lm:TransformersCaptioner"},
    "editor": {"none": "concrete_jungle.plant.editors:NoEditor",
               "diffusers": "concrete_jungle.plant.editors.diffusers_img2img:DiffusersEditor"},
}
_CLASS_PATH = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")


class PluginError(ValueError):
    """A captioner or editor name that resolves to nothing importable."""


METHODS = {"captioner": "rewrite", "editor": "edit"}  # what each kind must have, besides a ``name``


def registered(kind: str) -> dict[str, str]:
    """Name -> ``module:Class`` of every built-in and installed plugin of ``kind``; a name two installed packages
    both register is an error naming both (one of them would win silently)."""
    found = dict(BUILTIN[kind])
    sources: dict[str, list[str]] = {}
    for ep in entry_points(group=GROUPS[kind]):
        package = getattr(ep.dist, "name", None) or "?"
        sources.setdefault(ep.name, []).append(f"{ep.value} (package {package})")
        found.setdefault(ep.name, ep.value)
    clashes = {name: where for name, where in sources.items() if len(set(where)) > 1}
    if clashes:
        name, where = next(iter(clashes.items()))
        raise PluginError(f"{kind} {name!r} is registered by more than one installed package: {'; '.join(where)}; "
                          "uninstall one, or name the class by its path (package.module:Class)")
    return found


def target(kind: str, name: str) -> str:
    """The ``module:Class`` a name stands for; an error listing the known names when it stands for nothing."""
    known = registered(kind)
    if name in known:
        return known[name]
    if _CLASS_PATH.match(name):
        return name
    raise PluginError(f"{kind} {name!r} is neither known ({', '.join(sorted(known))}) nor a package.module:Class "
                      f"path; install a package that registers it under the entry-point group {GROUPS[kind]!r}")


def load_class(kind: str, name: str) -> type:
    """The plugin's class, imported and checked: a class with the kind's method (``rewrite`` or ``edit``).
    Whatever goes wrong on the way (a missing module, a syntax error in it, a function where a class should
    be) is one `PluginError` naming the plugin."""
    module_name, _, attribute = target(kind, name).partition(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as e:  # noqa: BLE001 - a plugin's module may fail in any way; it is reported, not raised
        where = f" ({e.filename}, line {e.lineno})" if isinstance(e, SyntaxError) else ""
        raise PluginError(f"{kind} {name!r}: cannot import {module_name}: {type(e).__name__}: {e}{where}") from None
    cls = getattr(module, attribute, None)
    if cls is None:
        raise PluginError(f"{kind} {name!r}: {module_name} has no {attribute}")
    method = METHODS[kind]
    if not inspect.isclass(cls):
        raise PluginError(f"{kind} {name!r}: {module_name}:{attribute} is a {type(cls).__name__}, not a class; a "
                          f"{kind} is a class with a name and {method}() (docs/commands.md, 'Your own captioner or "
                          "editor')")
    if not callable(getattr(cls, method, None)):
        raise PluginError(f"{kind} {name!r}: {module_name}:{attribute} has no {method}() method")
    return cls


def create(kind: str, name: str, **options):
    """An instance of the named plugin, built with ``options``."""
    cls = load_class(kind, name)
    try:
        inspect.signature(cls).bind(**options)
    except TypeError as e:
        raise PluginError(f"{kind} {name!r} does not take these options ({e}); check its options") from None
    instance = cls(**options)
    if not isinstance(getattr(instance, "name", None), str) or not instance.name:
        raise PluginError(f"{kind} {name!r} has no name (a string attribute written into every record)")
    return instance

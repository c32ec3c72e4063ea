"""Captioners, editors and pair scorers by name: the built-in ones, those installed packages register, any class by
path.

A name is resolved in this order:

1. a built-in: captioners ``rules``, ``openai``, ``transformers``; editors ``none``, ``diffusers``; scorers
   ``bertscore``, ``dino``, ``open_clip``, ``clip_sim``, ``pixel``;
2. an entry point another installed package declares in its ``pyproject.toml``::

       [project.entry-points."concrete_jungle.captioners"]
       my-llm = "my_package.captioner:MyCaptioner"

   (group ``concrete_jungle.editors`` for editors, ``concrete_jungle.scorers`` for scorers; the toy world of the
   demo registers itself this way);
3. a ``package.module:Class`` path to any importable class, nothing installed.

A captioner is a class with a ``name`` and ``rewrite(requests) -> replies`` (see `captioners.Captioner`), an
editor one with ``name``, ``reuses_anchor`` and ``edit(images, prompts, seeds) -> images`` (see `editors.Editor`;
it may add fields to each record's metadata with ``meta_fields``), a scorer one with ``scores``, ``score(pairs) ->
{score: values}`` and a ``device`` argument (see `plant.scorers.Scorer`); their constructor takes the options as
keyword arguments (``--captioner-option k=v``).
A class may also have a ``check_options(**options)`` classmethod: `check` calls it before a run writes anything,
to fail at once on what would stop the run later (a server that does not answer, weights that cannot be
downloaded) without loading a model; it may return a line telling the user what the options will cost (the
run prints it). Nothing is imported until a plugin is checked or created, so naming one costs nothing.
"""

from __future__ import annotations

import importlib
import inspect
import re
from importlib.metadata import entry_points

GROUPS = {"captioner": "concrete_jungle.captioners", "editor": "concrete_jungle.editors",
          "scorer": "concrete_jungle.scorers"}
BUILTIN = {
    "captioner": {"rules": "concrete_jungle.plant.captioners.rules:RulesCaptioner",
                  "openai": "concrete_jungle.plant.captioners.openai_api:OpenAICaptioner",
                  "transformers": "concrete_jungle.plant.captioners.transformers_lm:TransformersCaptioner"},
    "editor": {"none": "concrete_jungle.plant.editors:NoEditor",
               "diffusers": "concrete_jungle.plant.editors.diffusers_img2img:DiffusersEditor"},
    "scorer": {"bertscore": "concrete_jungle.plant.scorers.bertscore:BERTScoreScorer",
               "dino": "concrete_jungle.plant.scorers.dino:DinoScorer",
               "open_clip": "concrete_jungle.plant.scorers.clip:OpenClipScorer",
               "clip_sim": "concrete_jungle.plant.scorers.clip:ClipSimilarityScorer",
               "pixel": "concrete_jungle.plant.scorers.pixel:PixelScorer"},
}
_CLASS_PATH = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")


class PluginError(ValueError):
    """A captioner or editor name that resolves to nothing importable."""


METHODS = {"captioner": "rewrite", "editor": "edit", "scorer": "score"}  # what each kind must have, besides a ``name``


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
                          f"{kind} is a class with a name and {method}() (docs/commands/plant.md, 'Your own "
                          "captioner or editor')")
    if not callable(getattr(cls, method, None)):
        raise PluginError(f"{kind} {name!r}: {module_name}:{attribute} has no {method}() method")
    return cls


def check_signature(kind: str, name: str, cls: type, options: dict) -> None:
    """The options fit the constructor: a required one that is missing is named as the flag that gives it
    (``--editor-option world=PATH``), one it does not take with the options it does."""
    parameters = inspect.signature(cls).parameters
    takes_any = any(p.kind is p.VAR_KEYWORD for p in parameters.values())
    named = {n: p for n, p in parameters.items() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    unknown = sorted(set(options) - set(named)) if not takes_any else []
    if unknown:
        raise PluginError(f"{kind} {name!r} does not take the option(s) {', '.join(unknown)}; it takes "
                          f"{', '.join(named) or 'none'} (--{kind}-option KEY=VALUE)")
    missing = [n for n, p in named.items() if p.default is p.empty and n not in options]
    if missing:
        flags = " ".join(f"--{kind}-option {n}={placeholder(named[n].annotation)}" for n in missing)
        raise PluginError(f"{kind} {name!r} needs the option(s) {', '.join(missing)}: pass {flags}")


def placeholder(annotation) -> str:
    """What a flag's value stands for, from the parameter's annotation (a string under postponed evaluation)."""
    text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", str(annotation))
    for kind, word in (("Path", "PATH"), ("bool", "true|false"), ("int", "N"), ("float", "NUMBER")):
        if re.search(rf"\b{kind}\b", text):
            return word
    return "VALUE"


def check(kind: str, name: str, options: dict) -> str | None:
    """The named plugin imports, takes ``options`` and passes its own ``check_options`` (if it has one): what a run
    checks before it writes anything, without building the plugin (that may load a model). Returns the note its
    ``check_options`` gave, if any."""
    cls = load_class(kind, name)
    check_signature(kind, name, cls, options)
    check_options = getattr(cls, "check_options", None)
    return check_options(**options) if callable(check_options) else None


def create(kind: str, name: str, **options):
    """An instance of the named plugin, built with ``options``."""
    cls = load_class(kind, name)
    check_signature(kind, name, cls, options)
    instance = cls(**options)
    if not isinstance(getattr(instance, "name", None), str) or not instance.name:
        raise PluginError(f"{kind} {name!r} has no name (a string attribute written into every record)")
    return instance

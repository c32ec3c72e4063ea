"""The model a run starts from (the config's ``model`` section): an open_clip name with a pretrained tag or weights
file, a published checkpoint (``peer:NAME``, `models.pretrained`), a Hub model, or a checkpoint folder of ours.

`start_problems` says what is wrong with a checkpoint folder or a published checkpoint from the disk alone, before
torch is imported (`config.check_config`). A published checkpoint trains from the file in the peers'
folder, or from a local copy that ``model.pretrained`` names; either is checked when it loads (`models.load_peer`:
the published digest, another entry's file, the shapes of the registry's architecture, finite weights).
`start_identity` is what the settings do not show of the start: the digest of the weights it reads. The run records
it in ``<out>/config.json``, a resume compares it (`config.check_resumable`), a grid's cells are keyed by it.
"""

from __future__ import annotations

from pathlib import Path

from ..configs import ConfigError
from ..models.pretrained import PREFIX, ModelError, PeerError, find, hub_files, loadable_weights, peer_dir

UNSET = (None, "", "openai")  # model.pretrained left out (its default) or null: a peer's own file


def is_peer(model) -> bool:
    return (model.name or "").startswith(PREFIX)


def peer_weights_file(model) -> Path | None:
    """The local copy of a published checkpoint's file that ``model.pretrained`` names; None where it is left out
    (the file in the peers' folder)."""
    return None if model.pretrained in UNSET else Path(model.pretrained)


def start_problems(model) -> list[str]:
    """What is wrong with a checkpoint folder to start from (``model.checkpoint``), or with ``model.name:
    peer:NAME``: an unknown name, a checkpoint that cannot load, weights not on disk, a ``model.pretrained`` that
    is neither left out nor a weights file, a ``model.checkpoint`` beside it (torch-free)."""
    if not is_peer(model):
        from ..models.checkpoints import CheckpointError, resolve_checkpoint

        try:
            resolve_checkpoint(model.checkpoint)
        except CheckpointError as e:
            return [f"model.checkpoint: {e}"]
        return []
    try:
        peer = find(model.name)
    except PeerError as e:
        return [f"model.name: {e}"]
    if model.checkpoint is not None:
        return [f"model.name {model.name} and model.checkpoint {model.checkpoint} both name the weights to start "
                "from: give one of them"]
    given = peer_weights_file(model)
    if given is not None and not given.is_file():
        return [f"model.pretrained {model.pretrained}: under model.name {model.name} it names a local copy of "
                f"{peer.method}'s weights file, and " + ("no such file exists" if not given.exists() else
                                                         "this is not a file") + "; leave model.pretrained out to "
                f"use the file in {peer_dir() / peer.name}/"]
    try:
        if loadable_weights(peer, given) is None:
            hub_files(peer.hf_hub, peer)
    except (PeerError, ModelError) as e:
        return [f"model.name: {e}"]
    return []


def start_identity(model) -> dict:
    """What the settings do not show of the weights a run starts from: a checkpoint's digest (weights and config),
    a weights file's sha256, or a published checkpoint's name and the sha256 of the file it loads (a Hub entry's
    from the Hugging Face cache); nothing for a pretrained tag or a random init, which the settings name."""
    from ..records import file_digest

    if model.checkpoint:
        from ..models.checkpoints import checkpoint_digest, resolve_checkpoint

        return {"checkpoint": checkpoint_digest(resolve_checkpoint(model.checkpoint))}
    if is_peer(model):
        peer = find(model.name)
        weights = loadable_weights(peer, peer_weights_file(model)) or hub_files(peer.hf_hub,
                                                                                                   peer)[1]
        return {"peer": peer.name, "weights_sha256": file_digest(weights)}
    if model.pretrained and Path(model.pretrained).is_file():
        return {"weights_sha256": file_digest(model.pretrained)}
    return {}


def check_pretrained(model) -> None:
    """The pretrained tag exists for the model (needs open_clip, so it comes after `start_problems`)."""
    if model.checkpoint is not None or is_peer(model) or \
            model.pretrained in (None, "none") or Path(model.pretrained).is_file():
        return
    import open_clip

    from ..models import factory  # noqa: F401  (registers our model configs, e.g. cj-tiny)

    tags = open_clip.list_pretrained_tags_by_model(model.name)
    if model.pretrained not in tags:
        raise ConfigError(f"model.pretrained {model.pretrained!r} does not exist for {model.name}; known: {tags} "
                          "(or a weights file, or none)")

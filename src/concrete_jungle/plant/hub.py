"""Whether a model a captioner or editor loads from the Hugging Face Hub can be had, checked before a run writes
anything: a local folder, a model in the local cache, or the Hub within reach.

Without the check, a model that is not cached on a machine offline costs the Hub client's retries and ends in a
long traceback about a file the user never named (`model_index.json`); `eval` checks its open_clip weights the
same way (`models.pretrained.check_downloadable`).
"""

from __future__ import annotations

import socket
from pathlib import Path
from urllib.parse import urlparse

from ..errors import PlantError


def check_model_available(model: str, flag: str, probe: str, timeout: float = 3.0) -> None:
    """``model`` (given by ``flag``: ``--editor-model``, or ``--scorer-option bertscore.model=`` for an option
    whose value follows its ``=``) is a local folder, is in the Hugging Face cache (its ``probe`` file, e.g.
    ``config.json``, is), or can be downloaded; else one `PlantError` naming it and what to do."""
    from huggingface_hub import constants, try_to_load_from_cache

    given = f"{flag}{model}" if flag.endswith("=") else f"{flag} {model}"
    local = f"{flag}DIR" if flag.endswith("=") else f"{flag} DIR"

    path = Path(model).expanduser()
    if path.is_dir():
        return
    if path.exists() or model.startswith(("/", ".", "~")):
        raise PlantError(f"{given}: not a folder; pass a model folder or a Hugging Face model id")
    try:
        cached = isinstance(try_to_load_from_cache(model, probe), str)
    except ValueError:  # huggingface_hub's HFValidationError: not a repository id
        raise PlantError(f"{given}: neither a folder nor a Hugging Face model id (owner/name)") from None
    if cached:
        return
    reason = "HF_HUB_OFFLINE is set"
    if not constants.HF_HUB_OFFLINE:
        host = urlparse(constants.ENDPOINT).hostname or "huggingface.co"
        try:
            socket.create_connection((host, 443), timeout=timeout).close()
            return
        except OSError as e:
            reason = f"{host} cannot be reached ({e.strerror or type(e).__name__})"
    raise PlantError(f"{given} is not in the local Hugging Face cache and {reason}: download it once with "
                     f"the network (`huggingface-cli download {model}`; HF_HUB_OFFLINE=1 then uses the cache), or "
                     f"pass a local folder ({local})")

"""The field's published checkpoints by name (``--model peer:NAME``), each with the architecture it truly runs.

Loading another method's weights by path is where numbers go wrong without a word: a fine-tune of OpenAI's ViT-B/32
run as open_clip's ``ViT-B-32`` computes GELU where it was trained with QuickGELU, and every score shifts (the
NegCLIP and CE-CLIP repositories' own evaluation commands do exactly that; sugar-crepe issue #7). The activation
leaves no trace in the weights, so each entry states it, with where it was read: ``architecture`` is the open_clip
model name that builds what the weights were trained as (``-quickgelu`` for every fine-tune of OpenAI's weights),
``start`` the weights the fine-tune began from.

Weights that open_clip's Hub layout holds (``hf_hub``) are found in the Hugging Face cache, like pretrained tags;
the others are one file that the user downloads once into ``peer_dir() / NAME /`` (``$CJ_PEERS_DIR``, by default
``~/.cache/concrete_jungle/peers``). ``sha256`` is the digest the authors published (Hugging Face shows it for
every LFS file); None where no source states one, and then the file is taken as it is, said once. Torch-free:
`missing_message` is the one line a command prints before anything loads. Where pretrained weights of open_clip and
the Hub are found without the network (`cached_weights`, `hub_files`) is said here too, as open_clip's
pretrained module does: an offline run is one line at once rather than the Hub's retries.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from .checkpoints import CONFIG_FILE, WEIGHT_SUFFIXES

PREFIX = "peer:"
HF_HUB = "hf-hub:"
HUB_WEIGHTS = ("open_clip_model.safetensors", "open_clip_pytorch_model.bin")  # what open_clip reads from the Hub


class ModelError(ValueError):
    """A model that cannot be had or loaded as named."""


@dataclass(frozen=True)
class Peer:
    name: str  # what --model peer:NAME takes
    method: str
    paper: str
    repository: str  # the code
    weights: str  # where the authors publish the weights
    architecture: str | None  # the open_clip model name to build; None: not an open_clip model
    start: str  # the weights the fine-tune began from, and where that is stated
    licence: str
    file: str | None = None  # the file to put in peer_dir()/NAME/; None with hf_hub
    hf_hub: str | None = None  # an open_clip Hub repository (open_clip_config.json + weights)
    sha256: str | None = None  # as published; None: no source states one
    note: str = ""  # what else a user must know (why it cannot load, how the file is stored)


OPENAI_LINEAGE = "a fine-tune of OpenAI's weights, which run QuickGELU"
FSC_CLIP_PAPER = ("Preserving Multi-Modal Capabilities of Pre-trained VLMs for Improving Vision-Linguistic "
                  "Compositionality (Oh et al., EMNLP 2024), arXiv:2410.05210")
FSC_CLIP_LICENCE = "the repository's LICENSE is open_clip's (MIT-style); no separate licence for the weights"
FSC_CLIP_NOTE = ("a torch.save pickle with the optimizer state beside the weights (1.82 GB); only its tensors and "
                 "numbers are read, never code")

PEERS: tuple[Peer, ...] = (
    Peer("negclip", "NegCLIP",
         "When and why vision-language models behave like bags-of-words, and what to do about it? (Yuksekgonul et "
         "al., ICLR 2023), openreview.net/forum?id=KRLUvxh8uaX",
         "https://github.com/mertyg/vision-language-models-are-bows",
         "Google Drive file 1ooVVPxB-tvptgmHlIMMFGV3Cg-IrhbRZ (what the repository's model_zoo downloads as "
         "negclip.pth; `gdown 1ooVVPxB-tvptgmHlIMMFGV3Cg-IrhbRZ`)",
         "ViT-B-32-quickgelu",
         f"ViT-B-32 openai (the README's training command: --model ViT-B-32 --pretrained openai): {OPENAI_LINEAGE}",
         "MIT (the repository's; no separate licence for the weights)", file="negclip.pth",
         note="the repository evaluates it as open_clip's ViT-B-32 (GELU); its numbers differ from QuickGELU's"),
    Peer("ce-clip", "CE-CLIP",
         "Contrasting Intra-Modal and Ranking Cross-Modal Hard Negatives to Enhance Visio-Linguistic Compositional "
         "Understanding (Zhang, Awal, Agrawal; CVPR 2024), arXiv:2306.08832",
         "https://github.com/lezhang7/Enhance-FineGrained",
         "https://huggingface.co/le723z/CE_CLIP (CE_CLIP.pt), or Google Drive file 1DWPw3CtGh5cHz9bW_-iXRSG7BBUVl13K",
         "ViT-B-32-quickgelu",
         f"ViT-B-32 openai (scripts/run_multiple_nodes.sh: --pretrained openai --model ViT-B-32): {OPENAI_LINEAGE}",
         "the repository's LICENSE is open_clip's (MIT-style); no separate licence for the weights",
         file="CE_CLIP.pt",
         note="the authors' README names no file; CE_CLIP.pt is the name the Hub repository's file is downloaded "
              "by elsewhere: put the downloaded file there under that name"),
    Peer("fsc-clip", "FSC-CLIP (COCO)", FSC_CLIP_PAPER, "https://github.com/ytaek-oh/fsc-clip",
         "https://huggingface.co/ytaek-oh/fsc-clip/resolve/main/coco_fsc-clip-ViT-B-32.pt",
         "ViT-B-32-quickgelu", f"ViT-B-32 openai (the README's table: openai_coco): {OPENAI_LINEAGE}",
         FSC_CLIP_LICENCE, file="coco_fsc-clip-ViT-B-32.pt",
         sha256="976e43d733d565e67f8857a468f72ac0d7a44aa94390b240fc37621cbdbf136c", note=FSC_CLIP_NOTE),
    Peer("fsc-clip-laioncoco", "FSC-CLIP (LAION-COCO)", FSC_CLIP_PAPER, "https://github.com/ytaek-oh/fsc-clip",
         "https://huggingface.co/ytaek-oh/fsc-clip/resolve/main/laioncoco_fsc-clip-ViT-B-32.pt",
         "ViT-B-32-quickgelu", f"ViT-B-32 openai (the README's table: openai_laioncoco): {OPENAI_LINEAGE}",
         FSC_CLIP_LICENCE, file="laioncoco_fsc-clip-ViT-B-32.pt",
         sha256="808712c5c411fd321752e821fff6e7f9f28d76b74e542f47044f8465e94f1596", note=FSC_CLIP_NOTE),
    Peer("fsc-clip-dcxl", "FSC-CLIP (DataComp-XL start, LAION-COCO)", FSC_CLIP_PAPER,
         "https://github.com/ytaek-oh/fsc-clip",
         "https://huggingface.co/ytaek-oh/fsc-clip/resolve/main/dcxl_fsc-clip-ViT-B-32.pt",
         "ViT-B-32",
         "ViT-B-32 datacomp_xl_s13b_b90k (the README's training command: --pretrained datacomp_xl_s13b_b90k): "
         "trained by open_clip with GELU, so plain ViT-B-32 is right here",
         FSC_CLIP_LICENCE, file="dcxl_fsc-clip-ViT-B-32.pt",
         sha256="f6e6996124a68461bdee8c6a71eb8e9269623a9964984d2d47307e0162f49e5c", note=FSC_CLIP_NOTE),
    Peer("clic-vit-b-32-cogvlm", "CLIC (CogVLM-relabelled LAION)",
         "Advancing Compositional Awareness in CLIP with Efficient Fine-Tuning (Peleg, Singh, Hein; 2025)",
         "https://github.com/AmitPeleg/CLIC", "https://huggingface.co/nmndeep/CLIC-ViT-B-32-224-CogVLM",
         "ViT-B-32-quickgelu",
         f"ViT-B-32 openai (the repository's models.py: MODELKEYS 'ViT-B-32': 'openai'): {OPENAI_LINEAGE}",
         "none stated in the repository", hf_hub="nmndeep/CLIC-ViT-B-32-224-CogVLM",
         note="its Hub config decides what open_clip builds; where it does not record QuickGELU, it is added, "
              "said in one line"),
    Peer("clic-vit-b-32-pixelprose", "CLIC (PixelProse RedCaps)",
         "Advancing Compositional Awareness in CLIP with Efficient Fine-Tuning (Peleg, Singh, Hein; 2025)",
         "https://github.com/AmitPeleg/CLIC", "https://huggingface.co/nmndeep/CLIC-ViT-B-32-224-PixelProse",
         "ViT-B-32-quickgelu",
         f"ViT-B-32 openai (the repository's models.py: MODELKEYS 'ViT-B-32': 'openai'): {OPENAI_LINEAGE}",
         "none stated in the repository", hf_hub="nmndeep/CLIC-ViT-B-32-224-PixelProse",
         note="its Hub config decides what open_clip builds; where it does not record QuickGELU, it is added, "
              "said in one line"),
    Peer("spec-clip", "SPEC",
         "Synthesize, Diagnose, and Optimize: Towards Fine-Grained Vision-Language Understanding (Peng et al., "
         "CVPR 2024), arXiv:2312.00081",
         "https://github.com/wjpoom/SPEC", "https://huggingface.co/wjpoom/SPEC-CLIP-ViT-B-32",
         "ViT-B-32-quickgelu",
         "ViT-B-32 openai (the repository's CLIP baseline, spec/models: variant ViT-B-32, pretrained openai; the "
         f"fine-tune's start is not stated separately): {OPENAI_LINEAGE}",
         "none stated in the repository",
         note="the Hub repository holds one weights file (its name is not stated in the repository): put it in "
              "the folder as it is"),
    Peer("degla", "DeGLA",
         "Decoupled Global-Local Alignment for Improving Compositional Understanding (Hu et al., ACM MM 2025), "
         "arXiv:2504.16801",
         "https://github.com/xiaoxing2001/DeGLA",
         "https://huggingface.co/wsdwJohn1231/DeGLA (or Google Drive file 1YHiBjWroaw8BkN51NgCvfNafv4992XoT)",
         "ViT-B-32-quickgelu",
         f"ViT-B-32 openai (scripts/train_DeGLA.sh: pretrained=openai, teacher ViT-B-32): {OPENAI_LINEAGE}",
         "MIT (the README's)",
         note="the file's name is not stated in the repository: put the downloaded weights file in the folder as "
              "it is"),
    Peer("tripletclip", "TripletCLIP",
         "TripletCLIP: Improving Compositional Reasoning of CLIP via Synthetic Vision-Language Negatives (Patel "
         "et al., NeurIPS 2024)",
         "https://tripletclip.github.io", "https://huggingface.co/TripletCLIP (e.g. CC3M_TripletCLIP_ViTB12)",
         None, "trained from scratch on CC3M or CC12M (no pretrained start)", "none stated on the Hub pages",
         note="its checkpoints are two Hugging Face transformers towers (text-encoder/, vision-encoder/) with custom "
              "code (utils.py), not an open_clip model: concrete-jungle cannot evaluate them"),
)


class PeerError(ValueError):
    """A peer name that is unknown, cannot load, or whose weights are not on disk; the message says what to do."""


def peer_dir() -> Path:
    return Path(os.environ.get("CJ_PEERS_DIR") or Path("~/.cache/concrete_jungle/peers").expanduser())


def find(name: str) -> Peer:
    """The entry ``peer:NAME`` (or NAME) names, or a `PeerError` listing the names there are."""
    key = name.removeprefix(PREFIX).lower()
    for peer in PEERS:
        if peer.name == key:
            return peer
    raise PeerError(f"--model {name}: no published checkpoint of that name; known: "
                    f"{', '.join(PREFIX + p.name for p in PEERS)} (docs/commands/models.md, 'Published checkpoints')")


def by_sha256(digest: str) -> Peer | None:
    return next((p for p in PEERS if p.sha256 == digest), None)


def by_file(path: Path) -> Peer | None:
    """The entry whose weights file (in `peer_dir`) ``path`` is."""
    return next((p for p in PEERS if weights_file(p) == path), None)


def loadable_weights(peer: Peer, given: Path | None = None) -> Path | None:
    """A published checkpoint's local weights file (``given``: a copy of it elsewhere), None for one on the Hub; an
    error where there is none."""
    if peer.architecture is None:
        raise PeerError(f"--model {PREFIX}{peer.name} ({peer.method}) cannot be loaded: {peer.note}")
    if given is not None:
        return given
    if peer.hf_hub:
        return None
    weights = weights_file(peer)
    if weights is None:
        raise PeerError(missing_message(peer))
    return weights


def weights_file(peer: Peer) -> Path | None:
    """Where the peer's one weights file is: its named file in its folder, or, where no name is known, the only
    weights file there; None when absent (or several files leave it open: `missing_message` says so)."""
    folder = peer_dir() / peer.name
    if peer.file:
        path = folder / peer.file
        return path if path.is_file() else None
    found = sorted(p for p in folder.glob("*") if p.is_file() and p.suffix in WEIGHT_SUFFIXES) \
        if folder.is_dir() else []
    return found[0] if len(found) == 1 else None


def missing_message(peer: Peer) -> str:
    """The one line that says what to download and where to put it."""
    folder = peer_dir() / peer.name
    what = peer.file or "its weights file"
    several = folder.is_dir() and len([p for p in folder.glob("*") if p.suffix in WEIGHT_SUFFIXES]) > 1
    digest = f"sha256 {peer.sha256}" if peer.sha256 else "sha256 unknown (no source states one)"
    return (f"--model {PREFIX}{peer.name} ({peer.method}) needs its weights on disk: download {what} from "
            f"{peer.weights} and put it in {folder}/" + (" (it holds several weights files: keep only one)"
                                                           if several and not peer.file else "")
            + f" ({digest}; set CJ_PEERS_DIR to use another folder than {peer_dir()})")


def hub_files(repo: str, peer: Peer | None = None) -> tuple[str | None, str | None]:
    """A Hub model's cached config and weights (None: not cached); an error if one is not and the Hub is unreachable."""
    from huggingface_hub import try_to_load_from_cache

    cached, *weights = (try_to_load_from_cache(repo, f) for f in (CONFIG_FILE, *HUB_WEIGHTS))
    cached, weights = (cached if isinstance(cached, str) else None), next((w for w in weights if isinstance(w, str)),
                                                                          None)
    if cached is None or weights is None:
        named = f"{PREFIX}{peer.name} ({peer.method}, {HF_HUB}{repo})" if peer else f"{HF_HUB}{repo}"
        hub_reachable(f"--model {named}: its config and weights are", f"download them once with `hf download {repo}` "
                      "(then HF_HUB_OFFLINE=1 uses the cache)")
    return cached, weights


def cached_weights(name: str, tag: str) -> str | None:
    """Where open_clip would find the weights of (name, tag) without the network, or None."""
    import os
    from urllib.parse import urlparse

    from open_clip.pretrained import get_pretrained_cfg

    cfg = get_pretrained_cfg(name, tag)
    if cfg.get("file"):
        return cfg["file"] if Path(cfg["file"]).is_file() else None
    if cfg.get("hf_hub"):
        from huggingface_hub import try_to_load_from_cache

        repo, filename = os.path.split(cfg["hf_hub"])
        for candidate in ("open_clip_model.safetensors", filename or "open_clip_pytorch_model.bin"):
            found = try_to_load_from_cache(repo, candidate)
            if isinstance(found, str):
                return found
    if cfg.get("url"):
        path = Path("~/.cache/clip").expanduser() / os.path.basename(urlparse(cfg["url"]).path)
        return str(path) if path.is_file() else None
    return None


def check_downloadable(name: str, tag: str) -> None:
    """Weights that are neither cached nor downloadable are one clear error at once, instead of the hub's retries
    (about a minute offline) ending in a traceback."""
    if not cached_weights(name, tag):
        hub_reachable(f"the {tag!r} weights of {name} are",
                      "they are downloaded once, with the network (then HF_HUB_OFFLINE=1 uses the cache), or pass a "
                      "local weights file, e.g. --pretrained /path/to/open_clip_model.safetensors")


def hub_reachable(what: str, fix: str, timeout: float = 3.0) -> None:
    """Returns when the Hugging Face Hub can be reached; else the one line saying why not and ``fix``."""
    import os
    import socket

    offline = os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes")
    reason = "HF_HUB_OFFLINE is set"
    if not offline:
        try:
            socket.create_connection(("huggingface.co", 443), timeout=timeout).close()
            return
        except OSError as e:
            reason = f"huggingface.co cannot be reached ({e.strerror or type(e).__name__})"
    raise ModelError(f"{what} not in the local cache and {reason}: {fix}")

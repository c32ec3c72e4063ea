"""Argument types and the flag groups several commands share (inputs, sampler, model)."""

from __future__ import annotations

import argparse


def _number(kind, minimum, text: str, strict: bool = False):
    try:
        value = kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a {'whole ' if kind is int else ''}number") from None
    if value < minimum or (strict and value == minimum):
        raise argparse.ArgumentTypeError(f"{text} must be {'>' if strict else '>='} {minimum}")
    return value


def positive_int(text: str) -> int:
    return _number(int, 1, text)


def non_negative_int(text: str) -> int:
    return _number(int, 0, text)


def positive_float(text: str) -> float:
    return _number(float, 0.0, text, strict=True)


def strength(text: str) -> float:
    value = positive_float(text)
    if value > 1:
        raise argparse.ArgumentTypeError(f"{text} must be in (0, 1]")
    return value


def int_list(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(s) for s in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of integers, e.g. 0,1,2") from None
    return values


def positive_int_list(text: str) -> tuple[int, ...]:
    values = int_list(text)
    if any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"{text!r}: every value must be >= 1")
    return values


def key_values(items: list[str], flag: str) -> dict:
    """``["a=1", "b=x"]`` -> {"a": 1, "b": "x"} (values read as YAML scalars)."""
    import yaml

    out = {}
    for item in items:
        if "=" not in item:
            raise ValueError(f"{flag} {item!r} must look like key=value")
        key, value = item.split("=", 1)
        out[key.strip()] = yaml.safe_load(value)
    return out


def _targets(text: str) -> dict[str, float]:
    """``attribute=0.5,object=0.5`` -> {'attribute': 0.5, 'object': 0.5}."""
    try:
        return {k.strip(): float(v) for k, v in (part.split("=") for part in text.split(","))}
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--targets {text!r}: write it as attribute=0.4,object=0.4,relation=0.2") from None


def add_sampler_args(p, required: bool = True) -> None:
    from ..plant.keywords import MODES, POLICIES, SamplerConfig

    default = SamplerConfig()
    p.add_argument("--mode", choices=MODES, required=required, help="hc: high, lc: low, wo: no concreteness preference")
    p.add_argument("--top-k", type=positive_int, default=default.top_k,
                   help="candidates kept by concreteness (default %(default)s)")
    p.add_argument("--temperature", type=positive_float, default=default.temperature,
                   help="softmax temperature (default %(default)s)")
    p.add_argument("--policy", choices=POLICIES, default=default.policy, help="category step (default %(default)s)")
    p.add_argument("--targets", type=_targets, default=None,
                   help="target category shares for the quota, e.g. attribute=0.4,object=0.4,relation=0.2")
    p.add_argument("--lc-softmax", choices=("c", "-c"), default=default.lc_softmax,
                   help="lc samples softmax(c/T) (paper, default) or softmax(-c/T) among its k least concrete")
    p.add_argument("--seed", type=int, default=default.seed,
                   help="seed of every random choice (each sample's is derived from it and the sample id; "
                   "default %(default)s)")
    p.add_argument("--scale", default="brysbaert", help="built-in scale: brysbaert or lancaster-visual")
    p.add_argument("--spacy-model", help="spaCy pipeline name or path (default: an installed English pipeline)")


def sampler_config(args):
    from ..plant.keywords import SamplerConfig

    return SamplerConfig(mode=args.mode, top_k=args.top_k, temperature=args.temperature, policy=args.policy,
                         seed=args.seed, lc_softmax=args.lc_softmax,
                         **({"targets": args.targets} if args.targets else {}))


def add_input_args(p, required: bool = True) -> None:
    from ..sources import FORMATS

    p.add_argument("--captions", nargs="+", metavar="FILE", required=required,
                   help="caption files, stores or directories: Karpathy dataset_*.json, COCO captions_*.json, "
                   "SugarCrepe JSON, JSONL, CSV; WebDataset shards (shards/{000000..000099}.tar), Parquet with "
                   "the images inside, a Hugging Face save_to_disk folder (docs/data.md)")
    p.add_argument("--format", choices=FORMATS, help="input format (default: detected)")
    p.add_argument("--split", help="Karpathy split(s) to read, e.g. train or train,restval (default: all)")
    p.add_argument("--columns", metavar="caption=NAME,image=NAME,id=NAME",
                   help="a store's columns (Parquet, Hugging Face) or JSON caption field (WebDataset) when not "
                   "the defaults (caption/text/txt, image/jpg/img, key/id)")


def column_names(value: str | None) -> dict[str, str]:
    """``--columns caption=text,id=key`` -> {"caption": "text", "id": "key"}."""
    out = {}
    for part in filter(None, (value or "").split(",")):
        name, eq, column = part.partition("=")
        if not eq or not column.strip():
            raise ValueError(f"--columns {value}: write NAME=COLUMN pairs, e.g. caption=text,image=jpg")
        out[name.strip()] = column.strip()
    return out


def add_model_args(p) -> None:
    g = p.add_argument_group("model")
    g.add_argument("--model", help="open_clip model name, e.g. ViT-B-32 (or cj-tiny for smoke tests)")
    g.add_argument("--pretrained", default="openai",
                   help="pretrained tag, a weights file, or none (default %(default)s)")
    g.add_argument("--checkpoint", help="a checkpoint of ours (carries its exact open_clip config): its folder, "
                   "<run>/checkpoints/latest, or a training run's folder")
    g.add_argument("--seed", type=int, default=0, help="seed of a --pretrained none model (default %(default)s)")
    g.add_argument("--device", default=None, help="cuda or cpu (default: cuda when available)")
    g.add_argument("--precision", default="fp32", help="open_clip precision (default fp32, the reference's)")


def check_model_args(args) -> None:
    """The model flags name something that exists (read from disk; open_clip is not imported yet)."""
    from ..configs import open_clip_model_names

    if args.checkpoint:
        from ..models.checkpoints import resolve_checkpoint

        args.checkpoint = str(resolve_checkpoint(args.checkpoint))  # `latest` and run folders too
    elif not args.model:
        raise ValueError("name a model (--model ViT-B-32) or a checkpoint (--checkpoint DIR)")
    elif ":" not in args.model and args.model not in open_clip_model_names():
        raise ValueError(f"--model {args.model!r} is not an open_clip model (see open_clip.list_models())")


def load_model_from_args(args):
    import torch

    from ..models import load_model

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    return load_model(args.model, args.pretrained, args.checkpoint, device=device, precision=args.precision,
                      seed=args.seed), device


def add_print_config(p) -> None:
    p.add_argument("--print-config", action="store_true",
                   help="print the resolved config (the file, flags and --set applied) as YAML and exit: nothing is "
                        "checked, run or written")


def print_config(config, console) -> int:
    """The whole resolved config as YAML on stdout, in the layout a --config file takes."""
    import dataclasses
    import json

    import yaml

    plain = json.loads(json.dumps(dataclasses.asdict(config), default=str))  # tuples as lists, paths as text
    console.print(yaml.safe_dump(plain, sort_keys=False, allow_unicode=True).rstrip(), highlight=False, markup=False,
                  soft_wrap=True)
    return 0

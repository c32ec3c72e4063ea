"""Tiny random-init models built from configs and saved to a directory.

Nothing can be downloaded in tests, benchmarks or the offline demo, so these stand in for Qwen3 and
SDXL-Turbo: real architectures (Llama, SDXL UNet/VAE/CLIP text encoders) at toy sizes, saved with
``save_pretrained`` and loaded back by path through the same ``from_pretrained`` calls users make.
Throughput relative to a reference does not depend on weight values, so they also serve speed checks.
"""

from __future__ import annotations

import json
import string
from pathlib import Path

import torch


def build_tiny_causal_lm(path: str | Path, seed: int = 0, vocab_size: int = 400) -> Path:
    """A 2-layer Llama with a byte-level BPE tokenizer trained on a few captions, and a chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    path = Path(path)
    torch.manual_seed(seed)
    corpus = ["A person wearing a red helmet.", "A cat sitting under a table.", "A woman holding a coffee cup.",
              "Output: a blue car parked in front of a fire hydrant.", string.ascii_letters + string.digits]
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(corpus, trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=["<unk>", "<pad>", "<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", pad_token="<pad>",
                                        bos_token="<s>", eos_token="</s>")
    tokenizer.chat_template = ("{% for m in messages %}<s>{{ m['role'] }}: {{ m['content'] }}</s>{% endfor %}"
                               "{% if add_generation_prompt %}<s>assistant:{% endif %}")
    tokenizer.save_pretrained(path)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
                         bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id)
    LlamaForCausalLM(config).save_pretrained(path)
    return path


def _tiny_clip_tokenizer(path: Path):
    """A CLIP tokenizer over single characters: enough for prompts to tokenize, no merges needed."""
    from transformers import CLIPTokenizer

    chars = list(string.ascii_lowercase + string.digits + ".,!?'-")
    vocab = {"<|startoftext|>": 0, "<|endoftext|>": 1, "!": 2}
    for c in chars:
        vocab.setdefault(c, len(vocab))
        vocab.setdefault(c + "</w>", len(vocab))
    path.mkdir(parents=True, exist_ok=True)
    (path / "vocab.json").write_text(json.dumps(vocab))
    (path / "merges.txt").write_text("#version: 0.2\n")
    return CLIPTokenizer(str(path / "vocab.json"), str(path / "merges.txt"), pad_token="!", model_max_length=77)


def build_tiny_sdxl_img2img(path: str | Path, seed: int = 0) -> Path:
    """An SDXL image-to-image pipeline (UNet, VAE, two CLIP text encoders, Euler-ancestral scheduler as
    SDXL-Turbo uses) at toy sizes."""
    from diffusers import (
        AutoencoderKL,
        EulerAncestralDiscreteScheduler,
        StableDiffusionXLImg2ImgPipeline,
        UNet2DConditionModel,
    )
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTextModelWithProjection

    path = Path(path)
    torch.manual_seed(seed)
    unet = UNet2DConditionModel(
        block_out_channels=(32, 64), layers_per_block=1, sample_size=32, in_channels=4, out_channels=4,
        down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"), up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"),
        attention_head_dim=(2, 4), use_linear_projection=True, addition_embed_type="text_time",
        addition_time_embed_dim=8, transformer_layers_per_block=(1, 1), projection_class_embeddings_input_dim=80,
        cross_attention_dim=64, norm_num_groups=8,
    )
    vae = AutoencoderKL(block_out_channels=[16, 32], in_channels=3, out_channels=3, latent_channels=4,
                        down_block_types=["DownEncoderBlock2D"] * 2, up_block_types=["UpDecoderBlock2D"] * 2,
                        sample_size=64, norm_num_groups=8)
    text_config = CLIPTextConfig(bos_token_id=0, eos_token_id=1, pad_token_id=2, hidden_size=32,
                                 intermediate_size=37, num_attention_heads=4, num_hidden_layers=2,
                                 vocab_size=128, hidden_act="gelu", projection_dim=32, max_position_embeddings=77)
    tokenizer = _tiny_clip_tokenizer(path / "_tok")
    pipe = StableDiffusionXLImg2ImgPipeline(
        vae=vae, text_encoder=CLIPTextModel(text_config), text_encoder_2=CLIPTextModelWithProjection(text_config),
        tokenizer=tokenizer, tokenizer_2=tokenizer, unet=unet,
        scheduler=EulerAncestralDiscreteScheduler(timestep_spacing="trailing"),
    )
    pipe.save_pretrained(path)
    return path


def build_tiny_dinov2(path: str | Path, seed: int = 0) -> Path:
    """A 2-layer DINOv2 with its image processor, for DINOScore."""
    from transformers import BitImageProcessor, Dinov2Config, Dinov2Model

    path = Path(path)
    torch.manual_seed(seed)
    Dinov2Model(Dinov2Config(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                             image_size=32, patch_size=8)).save_pretrained(path)
    BitImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}, do_center_crop=True,
                      image_mean=[0.485, 0.456, 0.406], image_std=[0.229, 0.224, 0.225]).save_pretrained(path)
    return path


def build_tiny_roberta(path: str | Path, seed: int = 0) -> Path:
    """A 2-layer RoBERTa encoder with a byte-level BPE tokenizer, for BERTScore."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, RobertaConfig, RobertaModel

    path = Path(path)
    torch.manual_seed(seed)
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(["A red car on a street.", "A cat sitting under a table.", string.ascii_letters],
                            trainers.BpeTrainer(vocab_size=300,
                                                special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"],
                                                initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>",
                                        unk_token="<unk>", mask_token="<mask>", cls_token="<s>", sep_token="</s>",
                                        model_max_length=512)
    tokenizer.save_pretrained(path)
    RobertaModel(RobertaConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                               intermediate_size=64, max_position_embeddings=600, pad_token_id=1,
                               bos_token_id=0, eos_token_id=2)).save_pretrained(path)
    return path

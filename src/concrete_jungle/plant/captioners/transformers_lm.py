"""In-process batched rewriting with any causal LM from `transformers` (a hub name or a local path).

Left padding so every prompt ends where generation starts; greedy decoding on the first attempt, sampling
with a per-request seed on retries; the tokenizer's chat template when it has one (with Qwen3's
thinking turned off).
"""

from __future__ import annotations

import torch

from ..hub import check_model_available
from ..keywords import sample_rng
from . import Reply, RewriteRequest
from .prompt import build_prompt


class TransformersCaptioner:
    def __init__(
        self,
        model: str,
        batch_size: int = 16,
        max_new_tokens: int = 64,
        device: str | None = None,
        dtype: str = "auto",
        retry_temperature: float = 0.7,
    ):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.name = f"transformers:{model}"
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        torch_dtype = {"auto": (torch.bfloat16 if self.device.startswith("cuda") else torch.float32),
                       "float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]
        self.tokenizer = AutoTokenizer.from_pretrained(model, padding_side="left")
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.model = AutoModelForCausalLM.from_pretrained(model, dtype=torch_dtype).to(self.device).eval()
        self.batch_size = batch_size
        self.max_new_tokens = max_new_tokens
        self.retry_temperature = retry_temperature

    @classmethod
    def check_options(cls, model: str, **_) -> None:
        """The model can be had (a folder, cached, or the Hub in reach), before a run writes anything; nothing is
        loaded."""
        check_model_available(model, "--model", "config.json")

    def close(self) -> None:
        pass

    def _text(self, req: RewriteRequest) -> str:
        prompt = build_prompt(req.caption, req.keyword, req.category, req.mode)
        if self.tokenizer.chat_template:
            return self.tokenizer.apply_chat_template(
                [{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True,
                enable_thinking=False,  # Qwen3's switch; other templates ignore unknown variables
            )
        return prompt

    @torch.inference_mode()
    def rewrite(self, requests: list[RewriteRequest]) -> list[Reply]:
        replies: list[Reply] = []
        for i in range(0, len(requests), self.batch_size):
            chunk = requests[i: i + self.batch_size]
            # a retry samples; greedy decoding would repeat the rejected reply
            sampling = any(r.attempt > 0 for r in chunk)
            if sampling:
                first = chunk[0]
                torch.manual_seed(sample_rng(first.seed, f"{first.id}\x00{first.attempt}").getrandbits(31))
            batch = self.tokenizer([self._text(r) for r in chunk], return_tensors="pt", padding=True).to(self.device)
            out = self.model.generate(
                **batch, max_new_tokens=self.max_new_tokens, do_sample=sampling,
                temperature=self.retry_temperature if sampling else None, top_p=None, top_k=None,
                pad_token_id=self.tokenizer.pad_token_id,
            )
            texts = self.tokenizer.batch_decode(out[:, batch["input_ids"].shape[1]:], skip_special_tokens=True)
            replies.extend(Reply(t) for t in texts)
        return replies

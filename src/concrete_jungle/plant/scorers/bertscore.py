"""``text_sim``: BERTScore F1 of the negative caption (candidate) against the caption (reference), with the
`bert-score` package, as `analyze` computes Table 1's BERTScore (paper: RoBERTa-large, baseline-rescaled)."""

from __future__ import annotations

from . import ScorePair, weights_version


class BERTScoreScorer:
    scores = ("text_sim",)

    def __init__(self, model: str = "roberta-large", num_layers: int | None = None, rescale: bool = True,
                 batch_size: int = 64, device: str = "cpu"):
        from bert_score import BERTScorer

        self.scorer = BERTScorer(model_type=model, num_layers=num_layers, lang="en" if rescale else None,
                                 rescale_with_baseline=rescale, batch_size=batch_size, device=device)
        self.name, self.batch_size = f"bertscore:{model}", batch_size
        # the layer and the rescaling change the numbers, as the weights do (their Hub commit or digest)
        self.version = (f"L{self.scorer.num_layers}{'-rescaled' if rescale else ''}-"
                        f"{weights_version(model, self.scorer._model)}")

    @classmethod
    def check_options(cls, model: str = "roberta-large", num_layers: int | None = None, rescale: bool = True,
                      **_) -> None:
        """bert-score is installed, knows the model's layer (or is told it), and the model can be had."""
        import importlib.util

        from ...errors import PlantError
        from ..hub import check_model_available

        if importlib.util.find_spec("bert_score") is None:
            raise PlantError("scorer bertscore needs the bert-score package: pip install 'concrete-jungle[eval]'")
        from bert_score.utils import model2layers

        if num_layers is None and model not in model2layers:
            raise PlantError(f"scorer bertscore: bert-score does not know the layer of {model}; pass "
                             "--scorer-option bertscore.num_layers=N (scoring.scorers.bertscore.num_layers)")
        check_model_available(model, "--scorer-option bertscore.model=", "config.json")

    def f1(self, candidates: list[str], references: list[str]) -> list[float]:
        return self.scorer.score(candidates, references, batch_size=self.batch_size)[2].tolist()

    def score(self, pairs: list[ScorePair]) -> dict[str, list[float | None]]:
        return {"text_sim": self.f1([p.neg_caption for p in pairs], [p.caption for p in pairs])}

"""The training run's named steps (`train.loop.Run`): called one by one, they train what the loop trains."""

import itertools
import json
import time

import pytest
import torch
from safetensors.torch import load_file

from concrete_jungle.configs import ConfigError
from concrete_jungle.errors import TrainingError
from concrete_jungle.train.config import load_config
from concrete_jungle.train.data import EpochBatches, epoch_batches
from concrete_jungle.train.loop import Run, train


def config(out, data, *overrides):
    return load_config(None, [f"out={out}", "model.name=cj-tiny", "model.pretrained=none", "model.precision=fp32",
                              f"data.concretebatch=['{data}']", "data.workers=0", "optim.lr=0.002",
                              "optim.warmup=2", "batch_size=8", "steps=6", "save_every=0", *overrides])


def weights(out, step):
    return load_file(out / "checkpoints" / f"step-{step:07d}" / "open_clip_model.safetensors")


def started(cfg, resume=None) -> Run:
    steps = Run(cfg, progress=False)
    steps.set_up()
    steps.resume(resume)
    steps.prepare()
    steps.open_logs()
    return steps


def test_steps_called_by_hand_then_resumed_by_the_loop_train_the_loop_s_weights(tmp_path, planted):
    train(config(tmp_path / "a", planted), progress=False)

    cfg = config(tmp_path / "b", planted)
    steps = started(cfg)
    assert (steps.total, steps.steps_per_epoch, steps.step_count) == (6, 6, 0)
    loader = epoch_batches(steps.dataset, EpochBatches(len(steps.dataset), 8, 0, 1, cfg.seed, 0, 0), 0,
                           pin_memory=False)
    for batch in itertools.islice(loader, 3):
        row = steps.step(batch, time.perf_counter())
        steps.log(row)
    assert (row["step"], steps.step_count, steps.step_in_epoch) == (3, 3, 3)
    steps.save("stopped")
    assert json.loads((tmp_path / "b" / "checkpoints" / "latest.json").read_text()) == {
        "name": "step-0000003", "step": 3, "reason": "stopped"}

    rest = started(cfg, resume="latest")
    assert (rest.step_count, rest.epoch, rest.step_in_epoch) == (3, 0, 3)
    assert rest.loop()["step"] == 6
    a, b = weights(tmp_path / "a", 6), weights(tmp_path / "b", 6)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    logged = [json.loads(line)["step"] for line in (tmp_path / "b" / "metrics.jsonl").read_text().splitlines()]
    assert logged == [1, 2, 3, 4, 5, 6]


def test_a_step_whose_loss_is_not_finite_stops_before_the_update(tmp_path, planted):
    steps = started(config(tmp_path, planted))
    before = {k: v.clone() for k, v in steps.model.state_dict().items()}
    with torch.no_grad():
        steps.model.logit_scale.fill_(float("nan"))
    batch = next(iter(epoch_batches(steps.dataset, EpochBatches(len(steps.dataset), 8, 0, 1, 0, 0, 0), 0,
                                    pin_memory=False)))
    with pytest.raises(TrainingError, match="loss is nan at step 1"):
        steps.step(batch, time.perf_counter())
    assert steps.step_count == 0
    after = steps.model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before if k != "logit_scale")
    with pytest.raises(TrainingError, match="no longer finite after step 0"):
        steps.save("periodic")  # non-finite weights are never written
    assert not (tmp_path / "checkpoints").exists()


@pytest.mark.parametrize("overrides, expected", [([], 100.0), (["clamp_logit_scale=null"], None),
                                                 (["clamp_logit_scale=50"], 50.0)])
def test_the_logit_scale_clamp_is_the_recipe_s_setting(tmp_path, planted, overrides, expected):
    """open_clip's trainer clamps the temperature to 100 after each step, TripletCLIP's train.py never does: the
    config says which it follows (clamp_logit_scale, default 100)."""
    steps = started(config(tmp_path, planted, "optim.lr=1e-9", *overrides))
    with torch.no_grad():
        steps.model.logit_scale.fill_(float(torch.tensor(150.0).log()))
    batch = next(iter(epoch_batches(steps.dataset, EpochBatches(len(steps.dataset), 8, 0, 1, 0, 0, 0), 0,
                                    pin_memory=False)))
    steps.step(batch, time.perf_counter())
    temperature = steps.model.logit_scale.exp().item()
    assert temperature == pytest.approx(150.0 if expected is None else expected, rel=1e-5)


def test_the_logit_scale_clamp_must_be_a_temperature():
    with pytest.raises(ConfigError, match="clamp_logit_scale must be a finite number >= 1"):
        load_config(None, ["out=x", "clamp_logit_scale=0.5"])


@pytest.mark.parametrize("trim", [False, True])
def test_a_training_step_gives_a_loss_that_reads_them_each_picture_s_positives_at_their_places(trim):
    """The batch's other positives (some missing, some longer than every caption of the batch) are encoded in the
    step's forward, cut with its captions, and reach CLIC at their (picture, positive) places: its loss equals CLIC
    on features encoded apart, tower by tower."""
    import torch.nn.functional as F

    from concrete_jungle.loss import CLICLoss
    from concrete_jungle.models import load_model
    from concrete_jungle.models.text_encoding import TrimmedTextCLIP
    from concrete_jungle.train.objective import StepContext, training_step

    clip = load_model("cj-tiny", "none", seed=3)
    model = clip.model.eval()
    g = torch.Generator().manual_seed(1)
    caps = [f"a red ball number {i}" for i in range(6)]
    positives = clip.tokenizer([f"{c} on the green grass beside a tall old tree" for c in caps]
                               + [f"{c} in a photo" for c in caps])
    positives = positives.reshape(2, 6, -1).transpose(0, 1).clone()
    has_positive = torch.tensor([[1, 1], [1, 0], [0, 0], [1, 1], [0, 1], [1, 0]], dtype=torch.bool)
    positives[~has_positive] = 0  # a missing one's tokens are zeros, as the batch serves them
    batch = (torch.randn(6, 3, 64, 64, generator=g), torch.zeros(6, 0, 3, 64, 64), clip.tokenizer(caps),
             clip.tokenizer([c.replace("red", "blue") for c in caps])[:, None], torch.full((6, 1), 4.5),
             torch.ones(6, 1, dtype=torch.bool), torch.zeros(6, 1, dtype=torch.bool),
             torch.zeros(6, 1, dtype=torch.bool), positives, has_positive)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    step = StepContext(TrimmedTextCLIP(model) if trim else model, model, CLICLoss(), optimizer, "cpu", trim_text=trim)
    out = training_step(step, batch, 0.0)
    with torch.no_grad():
        images = F.normalize(model.encode_image(batch[0]), dim=-1)
        texts = F.normalize(model.encode_text(torch.cat([batch[2], batch[3][:, 0]])), dim=-1)
        more = F.normalize(model.encode_text(positives.flatten(0, 1)), dim=-1).reshape(6, 2, -1)
        want = CLICLoss()(torch.cat([images, torch.zeros_like(images)]), texts, model.logit_scale.exp(),
                          batch[4], batch[5], batch[6], positive_text_features=more, has_positive=has_positive)
    assert out["contrastive_loss"].item() == pytest.approx(want.item(), abs=1e-5)

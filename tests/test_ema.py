"""The EMA teacher (train/ema.py): its update formula, frozen, its decay's ends, resume from its safetensors
state, damaged or foreign states refused before any change."""

import pytest
import torch
from safetensors.torch import load_file

from concrete_jungle.errors import TrainingError
from concrete_jungle.models import load_model
from concrete_jungle.train.ema import EmaTeacher


def small_model(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.LayerNorm(3), torch.nn.Linear(3, 2)).double()


def train_step(model, seed):
    """Moves every parameter, as an optimizer step would."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=g, dtype=p.dtype))


def test_each_update_is_decay_times_teacher_plus_the_rest_times_the_model():
    model, decay = small_model(), 0.9
    teacher = EmaTeacher(model, decay)
    expected = {k: v.clone() for k, v in model.named_parameters()}
    for step in range(3):
        train_step(model, step)
        teacher.update(model)
        for name, p in model.named_parameters():
            expected[name] = decay * expected[name] + (1 - decay) * p.detach()
    for name, p in teacher.model.named_parameters():
        torch.testing.assert_close(p, expected[name], atol=1e-15, rtol=0)
    assert teacher.updates == 3


def test_the_teacher_is_a_frozen_copy():
    model = small_model()
    teacher = EmaTeacher(model.train(), 0.5)
    assert not teacher.model.training and not any(p.requires_grad for p in teacher.model.parameters())
    assert all(p.requires_grad for p in model.parameters()) and model.training
    train_step(model, 0)  # the model moves, the teacher does not until it is updated
    assert not torch.equal(next(model.parameters()), next(teacher.model.parameters()))


@pytest.mark.parametrize("decay", [0.0, 1.0])
def test_decay_one_keeps_the_start_and_zero_copies_the_model(decay):
    model = small_model()
    start = {k: v.clone() for k, v in model.state_dict().items()}
    teacher = EmaTeacher(model, decay)
    train_step(model, 1)
    teacher.update(model)
    for name, p in teacher.model.state_dict().items():
        assert torch.equal(p, start[name] if decay == 1 else model.state_dict()[name])


def test_a_resumed_teacher_continues_bitwise(tmp_path):
    clip = load_model("cj-tiny", "none", seed=0).model
    teacher = EmaTeacher(clip, 0.99)
    for step in range(2):
        train_step(clip, step)
        teacher.update(clip)
    teacher.save(tmp_path / "ema.safetensors")
    assert load_file(str(tmp_path / "ema.safetensors"))["ema.updates"] == 2
    resumed = EmaTeacher(load_model("cj-tiny", "none", seed=1).model, 0.99)
    resumed.load(tmp_path / "ema.safetensors")
    train_step(clip, 2)
    teacher.update(clip)
    resumed.update(clip)
    assert resumed.updates == teacher.updates == 3
    for (name, a), b in zip(teacher.model.state_dict().items(), resumed.model.state_dict().values()):
        assert torch.equal(a, b), name


def test_damaged_or_foreign_states_are_refused_and_change_nothing(tmp_path):
    teacher = EmaTeacher(small_model(), 0.9)
    before = {k: v.clone() for k, v in teacher.model.state_dict().items()}
    damaged = tmp_path / "damaged.safetensors"
    damaged.write_bytes(b"\x10\x00\x00\x00not a safetensors file")
    with pytest.raises(TrainingError, match="damaged"):
        teacher.load(damaged)
    other = EmaTeacher(torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.LayerNorm(3), torch.nn.Linear(3, 5)), 0.9)
    other.save(tmp_path / "other.safetensors")
    with pytest.raises(TrainingError, match="not the EMA teacher"):
        teacher.load(tmp_path / "other.safetensors")
    for name, v in teacher.model.state_dict().items():
        assert torch.equal(v, before[name])


def test_a_model_that_is_not_the_teachers_is_refused():
    teacher = EmaTeacher(small_model(), 0.9)
    with pytest.raises(ValueError, match="unwrapped"):
        teacher.update(torch.nn.ModuleDict({"wrapped": small_model()}))
    with pytest.raises(ValueError, match="decay"):
        EmaTeacher(small_model(), 1.5)

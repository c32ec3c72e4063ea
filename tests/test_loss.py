"""Cement loss (docs/method.md §5): exactness against open_clip's ClipLoss, closed-form gradients, margins, masks,
data parallel, bad input."""

import warnings

import open_clip
import pytest
import torch
import torch.nn.functional as F

from concrete_jungle.loss import (
    AdaptiveMargin,
    CementLoss,
    InverseMargin,
    StaticMargin,
    hard_negative_diagnostics,
    make_schedule,
)
from data_parallel import WORLD, assert_ranks_match, run_ranks

SCALE = 14.3


def features(n, d=32, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    image = F.normalize(torch.randn(2 * n, d, generator=g, dtype=dtype), dim=1)
    text = F.normalize(image + 0.8 * torch.randn(2 * n, d, generator=g, dtype=dtype), dim=1)
    c = 1 + 4 * torch.rand(n, generator=g, dtype=dtype)
    return image.requires_grad_(), text.requires_grad_(), c


def grads(loss, *tensors):
    return torch.autograd.grad(loss, tensors)


@pytest.mark.parametrize("dtype, tol", [(torch.float64, 1e-12), (torch.float32, 1e-6)])
def test_no_margin_equals_open_clip_cliploss_on_2n(dtype, tol):
    image, text, c = features(16, dtype=dtype)
    ours = CementLoss("infonce")(image, text, SCALE, c)
    ref = open_clip.loss.ClipLoss()(image, text, SCALE)
    assert abs(ours.item() - ref.item()) <= tol
    for g_ours, g_ref in zip(grads(ours, image, text), grads(ref, image, text)):
        torch.testing.assert_close(g_ours, g_ref, atol=tol, rtol=0)


def test_no_negatives_at_all_is_cliploss_over_the_anchors():
    image, text, c = features(12)
    none = torch.zeros(12, dtype=torch.bool)
    for margin in ("infonce", "cement"):
        ours = CementLoss(margin)(image, text, SCALE, c, has_negative=none)
        ref = open_clip.loss.ClipLoss()(image[:12], text[:12], SCALE)
        assert abs(ours.item() - ref.item()) < 1e-12
        for g_ours, g_ref in zip(grads(ours, image, text), grads(ref, image, text)):
            torch.testing.assert_close(g_ours, g_ref, atol=1e-12, rtol=0)


def closed_form_logit_grad(s_margined, valid):
    """docs/method.md §5: dL/dS~ = mean over valid rows of (p - onehot), averaged over both directions."""
    rows = s_margined.shape[0]
    eye = torch.eye(rows, dtype=s_margined.dtype)
    keep = valid.to(s_margined.dtype)[:, None]
    r = valid.sum()
    g_image = (torch.softmax(s_margined, dim=1) - eye) * keep / (2 * r)
    g_text = (torch.softmax(s_margined.T, dim=1) - eye) * keep / (2 * r)
    g = g_image + g_text.T
    g[~valid] = 0
    g[:, ~valid] = 0
    return g


@pytest.mark.parametrize("schedule", ["infonce", "static", "cement", "inverse"])
@pytest.mark.parametrize("with_mask", [False, True])
def test_gradient_equals_the_closed_form(schedule, with_mask):
    n = 10
    image, text, c = features(n, seed=3)
    has_negative = torch.arange(n) % 3 != 0 if with_mask else torch.ones(n, dtype=torch.bool)
    loss = CementLoss(schedule)(image, text, SCALE, c, has_negative=has_negative)
    g_image, g_text = grads(loss, image, text)

    # S~ built by hand from the features, masked entries at -inf
    m = make_schedule(schedule)(c)
    s = SCALE * image.detach() @ text.detach().T
    idx = torch.arange(2 * n)
    s[idx, (idx + n) % (2 * n)] += torch.cat([m, m])
    valid = torch.cat([torch.ones(n, dtype=torch.bool), has_negative])
    s[~valid] = float("-inf")
    s[:, ~valid] = float("-inf")
    s = torch.where(valid[:, None] & valid[None, :], s, torch.full_like(s, -1e30))
    g = closed_form_logit_grad(s, valid)
    # chain rule through S = scale * I T^T
    torch.testing.assert_close(g_image, SCALE * g @ text.detach(), atol=1e-12, rtol=0)
    torch.testing.assert_close(g_text, SCALE * g.T @ image.detach(), atol=1e-12, rtol=0)


def test_masked_loss_equals_the_hand_built_softmax_without_those_rows_and_columns():
    n = 9
    image, text, c = features(n, seed=5)
    has_negative = torch.tensor([1, 0, 1, 1, 0, 0, 1, 1, 1], dtype=torch.bool)
    loss = CementLoss("cement")(image, text, SCALE, c, has_negative=has_negative)

    keep = torch.cat([torch.arange(n), n + torch.nonzero(has_negative).squeeze(1)])
    m = AdaptiveMargin()(c)
    s = SCALE * image @ text.T
    margin = torch.zeros_like(s)
    idx = torch.arange(2 * n)
    margin[idx, (idx + n) % (2 * n)] = torch.cat([m, m])
    sub = (s + margin)[keep][:, keep]  # a smaller softmax: the masked rows and columns are gone
    labels = torch.arange(len(keep))
    expected = (F.cross_entropy(sub, labels) + F.cross_entropy(sub.T, labels)) / 2
    assert abs(loss.item() - expected.item()) < 1e-12
    for a, b in zip(grads(loss, image, text), grads(expected, image, text)):
        torch.testing.assert_close(a, b, atol=1e-12, rtol=0)


def k_negatives(n, k, d=24, seed=0):
    """n anchors with k negatives each, [anchors; negatives] anchor-major, float64, some captions and pictures
    missing (their rows hold noise that must not reach the loss)."""
    g = torch.Generator().manual_seed(seed)
    rows = n * (1 + k)
    image = F.normalize(torch.randn(rows, d, generator=g, dtype=torch.float64), dim=1)
    text = F.normalize(image + 0.8 * torch.randn(rows, d, generator=g, dtype=torch.float64), dim=1)
    c = 1 + 4 * torch.rand(n, k, generator=g, dtype=torch.float64)
    has_negative = torch.rand(n, k, generator=g) > 0.25
    has_image = has_negative & (torch.rand(n, k, generator=g) > 0.4)
    return image.requires_grad_(), text.requires_grad_(), c, has_negative, has_image


def cement_by_the_formula(image, text, c, has_negative, has_image, schedule, entailed=None):
    """docs/method.md §5 written out row by row: each row that has its picture, image to text over the captions
    that exist and text to image over the pictures that exist, m_ak at (a, j) and (j, a); ``entailed`` (n x K):
    the logit of that negative's picture j against its anchor's caption a left out of both sums (row j's image to
    text, row a's text to image)."""
    n, k = c.shape
    out = set() if entailed is None else {(n + a * k + q, a) for a in range(n) for q in range(k)
                                          if entailed[a, q] and has_image[a, q] and has_negative[a, q]}
    rows = n * (1 + k)
    text_ok = [True] * n + has_negative.flatten().tolist()
    image_ok = [True] * n + (has_image & has_negative).flatten().tolist()
    m = schedule(c)
    margin = {}
    for a in range(n):
        for q in range(k):
            margin[(a, n + a * k + q)] = margin[(n + a * k + q, a)] = m[a, q]
    s = SCALE * image @ text.T
    total, count = 0.0, 0
    for i in range(rows):
        if not image_ok[i]:
            continue
        count += 1
        captions = [j for j in range(rows) if text_ok[j] and (i, j) not in out]
        pictures = [j for j in range(rows) if image_ok[j] and (j, i) not in out]
        i2t = torch.stack([s[i, j] + margin.get((i, j), 0.0) for j in captions])
        t2i = torch.stack([s[j, i] + margin.get((j, i), 0.0) for j in pictures])
        total = total - torch.log_softmax(i2t, 0)[captions.index(i)] - torch.log_softmax(t2i, 0)[pictures.index(i)]
    return total / (2 * count)


@pytest.mark.parametrize("schedule", ["infonce", "static", "cement", "inverse"])
@pytest.mark.parametrize("k", [1, 3])
def test_k_negatives_with_missing_captions_and_pictures_equal_the_formula(schedule, k):
    image, text, c, has_negative, has_image = k_negatives(5, k, seed=k)
    ours = CementLoss(schedule)(image, text, SCALE, c, has_negative, has_image)
    reference = cement_by_the_formula(image, text, c, has_negative, has_image, make_schedule(schedule))
    assert abs(ours.item() - reference.item()) < 1e-12
    for a, b in zip(grads(ours, image, text), grads(reference, image, text)):
        torch.testing.assert_close(a, b, atol=1e-12, rtol=0)


@pytest.mark.parametrize("schedule", ["infonce", "static", "cement", "inverse"])
@pytest.mark.parametrize("k, local_loss", [(1, False), (3, False), (3, True)])
def test_entailed_negative_pictures_masked_equal_the_formula_without_their_logits(schedule, k, local_loss):
    image, text, c, has_negative, has_image = k_negatives(6, k, seed=k + 4)
    entailed = torch.rand(6, k, generator=torch.Generator().manual_seed(k)) > 0.4  # some without a picture
    assert (entailed & has_image).any() and (entailed & ~has_image).any()
    loss = CementLoss(schedule, local_loss=local_loss, mask_entailed=True)
    ours = loss(image, text, SCALE, c, has_negative, has_image, anchor_true_of_negative=entailed)
    reference = cement_by_the_formula(image, text, c, has_negative, has_image, make_schedule(schedule), entailed)
    assert abs(ours.item() - reference.item()) < 1e-10
    for a, b in zip(grads(ours, image, text), grads(reference, image, text)):
        torch.testing.assert_close(a, b, atol=1e-10, rtol=0)
    unmasked = cement_by_the_formula(image, text, c, has_negative, has_image, make_schedule(schedule))
    assert abs(ours.item() - unmasked.item()) > 1e-3  # the masked logits mattered


def test_a_missing_row_s_values_never_reach_the_loss():
    image, text, c, has_negative, has_image = k_negatives(4, 2, seed=7)
    loss = CementLoss()(image, text, SCALE, c, has_negative, has_image)
    missing_text = torch.cat([torch.zeros(4, dtype=torch.bool), ~has_negative.flatten()])
    missing_image = torch.cat([torch.zeros(4, dtype=torch.bool), ~(has_image & has_negative).flatten()])
    noisy_image, noisy_text = image.detach().clone(), text.detach().clone()
    noisy_image[missing_image] = 1e6  # not even finite after the scale: masked, never multiplied in
    noisy_text[missing_text] = -3.0
    again = CementLoss()(noisy_image, noisy_text, SCALE, c, has_negative, has_image)
    assert again.item() == loss.item()
    g_image, g_text = grads(loss, image, text)
    assert bool((g_image[missing_image] == 0).all()) and bool((g_text[missing_text] == 0).all())


def test_captions_only_negatives_without_margin_are_negclip_s_batch():
    """No picture of any negative, no margin: image to text over the true and negative captions, text to image over
    the true pictures (NegCLIP's objective, as its trainer builds the batch)."""
    n, k = 6, 2
    image, text, c, has_negative, _ = k_negatives(n, k, seed=2)
    has_negative = torch.ones(n, k, dtype=torch.bool)
    loss = CementLoss("infonce")(image, text, SCALE, c, has_negative, torch.zeros(n, k, dtype=torch.bool))
    i2t = SCALE * image[:n] @ text.T
    t2i = SCALE * text[:n] @ image[:n].T
    labels = torch.arange(n)
    expected = (F.cross_entropy(i2t, labels) + F.cross_entropy(t2i, labels)) / 2
    assert abs(loss.item() - expected.item()) < 1e-12


def test_static_margin_raises_the_hard_negative_gradient_share_monotonically():
    image, text, c = features(64, seed=1)
    shares = [CementLoss(StaticMargin(m))(image, text, SCALE, c, output_dict=True)["hn_grad_share"].item()
              for m in (-2, -1, 0, 0.5, 1, 2, 4)]
    assert all(a < b for a, b in zip(shares, shares[1:])), shares


def test_adaptive_and_inverse_schedules():
    c = torch.tensor([1.0, 3.0, 3.9, 4.0, 4.1, 5.0])
    adaptive, inverse = AdaptiveMargin()(c), InverseMargin()(c)
    torch.testing.assert_close(adaptive[[0, 1, 5]], torch.tensor([-2.0, -2.0, 2.0]), atol=1e-2, rtol=0)
    torch.testing.assert_close(inverse[[0, 1, 5]], torch.tensor([2.0, 2.0, -2.0]), atol=1e-2, rtol=0)
    assert adaptive[3].item() == pytest.approx(0.0) and inverse[3].item() == pytest.approx(0.0)
    assert torch.all(adaptive.diff() > 0) and torch.all(inverse.diff() < 0)
    # the paper's formula written out
    expected = (2 - -2) / (1 + torch.exp((4 - c) / 0.15)) + -2
    torch.testing.assert_close(adaptive, expected)


def test_diagnostics_match_a_direct_computation():
    n = 20
    image, text, c = features(n, seed=2)
    out = CementLoss("cement")(image, text, SCALE, c, output_dict=True)
    m = AdaptiveMargin()(c).detach()
    s = (SCALE * image @ text.T).detach()
    idx = torch.arange(2 * n)
    hard = (idx + n) % (2 * n)
    st = s.clone()
    st[idx, hard] += torch.cat([m, m])
    shares, p_pos, gaps = [], [], []
    for mat, raw in ((st, s), (st.T, s.T)):
        p = torch.softmax(mat, dim=1)
        shares.append(p[idx, hard] / (1 - p[idx, idx]))
        p_pos.append(p[idx, idx])
        gaps.append((raw[idx, idx] - raw[idx, hard])[:n])  # anchors only
    assert out["hn_grad_share"].item() == pytest.approx(torch.cat(shares).mean().item(), rel=1e-12)
    assert out["p_pos"].item() == pytest.approx(torch.cat(p_pos).mean().item(), rel=1e-12)
    assert out["logit_gap"].item() == pytest.approx(torch.cat(gaps).mean().item(), rel=1e-12)
    assert out["margin"].item() == pytest.approx(m.mean().item(), rel=1e-12)
    assert hard_negative_diagnostics(image, text, SCALE, c, margin="cement")["hn_grad_share"] == pytest.approx(
        out["hn_grad_share"].item())


def test_the_gradient_share_of_a_confident_model_in_float32_is_the_float64_share():
    """p_ii rounds to 1 in float32 for a confident model, and 1 - p_ii to 0: the share, computed in log space, stays
    the float64 value (the plain ratio gave values up to 1e27)."""
    n = 16
    image, text, c = features(n, seed=3)
    image = torch.nn.functional.normalize(text + 0.05 * image, dim=1)  # each image close to its own caption
    out = CementLoss("infonce")(image.float(), text.float(), 100.0, c.float(), output_dict=True)
    s = 100.0 * image.double() @ text.double().T
    idx = torch.arange(2 * n)
    hard = (idx + n) % (2 * n)
    shares = []
    for mat in (s, s.T):
        logp = torch.log_softmax(mat, dim=1)
        others = logp.clone()
        others[idx, idx] = float("-inf")
        shares.append((logp[idx, hard] - torch.logsumexp(others, dim=1)).exp())
    assert torch.softmax(s.float(), dim=1)[idx, idx].min() > 1 - 1e-6  # 1 - p_ii is float32 rounding noise
    assert 0 < out["hn_grad_share"].item() < 1
    assert out["hn_grad_share"].item() == pytest.approx(torch.cat(shares).mean().item(), rel=1e-4)


@pytest.mark.parametrize("call, match", [
    (lambda i, t, c: (i[:, :5], t, c), "must have the same shape"),
    (lambda i, t, c: (i[:7], t[:7], c), r"7 rows for 4 anchors; expected n \* \(1 \+ K\) rows"),
    (lambda i, t, c: (i, t, c[:3]), "8 rows for 3 anchors"),
    (lambda i, t, c: (i, t, torch.tensor([1.0, float("nan"), 2.0, 3.0])), "concreteness contains NaN"),
    (lambda i, t, c: (i[0], t[0], c), "must be 2-D"),
])
def test_bad_input_names_the_argument(call, match):
    image, text, c = features(4)
    with pytest.raises(ValueError, match=match):
        bad_image, bad_text, bad_c = call(image, text, c)
        CementLoss()(bad_image, bad_text, SCALE, bad_c)


def test_each_cement_loss_name_is_its_schedule_name_and_the_0_2_0_names_still_work_with_a_warning():
    from concrete_jungle.loss import LOSSES, SCHEDULES, NoMargin
    from concrete_jungle.loss.options import CEMENT_LOSSES, LOSS_NAMES
    from concrete_jungle.train.config import LossConfig
    from concrete_jungle.train.objective import make_loss

    # one table of names from loss.name and `train --loss` to the loss: no name is translated on the way
    assert LOSS_NAMES == (*SCHEDULES, *LOSSES) and tuple(SCHEDULES) == CEMENT_LOSSES
    for name in CEMENT_LOSSES:
        assert type(make_loss(LossConfig(name=name)).schedule) is SCHEDULES[name]
    image, text, c = features(6)
    for old, new, schedule in [("adaptive", "cement", AdaptiveMargin(tau=0.2)), ("none", "infonce", NoMargin())]:
        with pytest.warns(DeprecationWarning, match=f"'{old}' is now called '{new}'"):
            assert make_schedule(old, **vars(schedule)) == schedule
        with pytest.warns(DeprecationWarning):
            loss = CementLoss(old)
        assert loss.schedule == make_schedule(new) and loss(image, text, SCALE, c) == CementLoss(new)(image, text,
                                                                                                   SCALE, c)


def test_bad_mask_and_schedule():
    image, text, c = features(4)
    with pytest.raises(ValueError, match="has_negative must be a bool tensor"):
        CementLoss()(image, text, SCALE, c, has_negative=torch.ones(4))
    with pytest.raises(ValueError, match="not one of"):
        CementLoss("cosine")
    with pytest.raises(ValueError, match="margin schedule 'cement'"):
        CementLoss("cement", m_maxx=3)


def test_unnormalised_features_warn_once():
    image, text, c = features(4)
    loss = CementLoss()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loss(image * 3, text, SCALE, c)
        loss(image * 3, text, SCALE, c)
    assert len([w for w in caught if "not L2-normalised" in str(w.message)]) == 1


# ----------------------------------------------------------------------------- data parallel, 2 CPU processes

N_LOCAL = 6


def _global_batch(k=1):
    g = torch.Generator().manual_seed(11)
    n = WORLD * N_LOCAL
    x_image = torch.randn((1 + k) * n, 10, generator=g)  # [all anchors; all negatives]
    x_text = torch.randn((1 + k) * n, 10, generator=g)
    if k == 1:
        c = 1 + 4 * torch.rand(n, generator=g)
        has_negative = torch.tensor([1, 1, 0, 1, 1, 1, 0, 0, 1, 1, 1, 1], dtype=torch.bool)  # uneven per rank
        return x_image, x_text, c, has_negative, None
    c = 1 + 4 * torch.rand(n, k, generator=g)
    has_negative = torch.rand(n, k, generator=g) > 0.3
    return x_image, x_text, c, has_negative, has_negative & (torch.rand(n, k, generator=g) > 0.5)


def _local(x, rank, k):
    """This rank's [anchors; negatives] rows of a global [anchors; negatives] batch."""
    n_global = WORLD * N_LOCAL
    mine = slice(rank * N_LOCAL, (rank + 1) * N_LOCAL)
    return torch.cat([x[:n_global][mine], x[n_global:].reshape(n_global, k, -1)[mine].reshape(N_LOCAL * k, -1)])


def _model():
    torch.manual_seed(0)
    return torch.nn.ModuleDict({"image": torch.nn.Linear(10, 8), "text": torch.nn.Linear(10, 8)})


def _entailed(k):
    """anchor_true_of_negative of the global batch: true of some negatives with a picture and some without."""
    return torch.rand(WORLD * N_LOCAL, k, generator=torch.Generator().manual_seed(12)) > 0.5


def _step(model, loss_fn, x_image, x_text, c, has_negative, has_image=None, entailed=None):
    image = F.normalize(model["image"](x_image), dim=1)
    text = F.normalize(model["text"](x_text), dim=1)
    loss = loss_fn(image, text, SCALE, c, has_negative=has_negative, has_negative_image=has_image,
                   anchor_true_of_negative=entailed)
    loss.backward()
    return loss.detach(), {k: p.grad.clone() for k, p in model.named_parameters()}


CONFIGS = [(False, True), (True, True), (False, False)]  # (local_loss, gather_with_grad)


def _rank_cases(rank):
    """This rank's loss and gradients for every (k, masked, local_loss, gather_with_grad) (`data_parallel`)."""
    mine = slice(rank * N_LOCAL, (rank + 1) * N_LOCAL)
    for k, masked in ((1, False), (2, False), (2, True)):
        x_image, x_text, c, has_negative, has_image = _global_batch(k)
        for local_loss, gather_with_grad in CONFIGS:
            loss_fn = CementLoss("cement", local_loss=local_loss, gather_with_grad=gather_with_grad,
                                 rank=rank, world_size=WORLD, mask_entailed=masked)
            yield f"k{k}-{masked}-{local_loss}-{gather_with_grad}", _step(
                _model(), loss_fn, _local(x_image, rank, k), _local(x_text, rank, k), c[mine], has_negative[mine],
                None if has_image is None else has_image[mine], _entailed(k)[mine])


@pytest.fixture(scope="module")
def two_process_results(tmp_path_factory):
    """One 2-process gloo run (spawned here) computing the loss and gradients under every config."""
    return run_ranks(tmp_path_factory.mktemp("ddp"), _rank_cases)


@pytest.mark.processes
@pytest.mark.parametrize("k, masked", [(1, False), (2, False), (2, True)])
@pytest.mark.parametrize("local_loss, gather_with_grad", CONFIGS)
def test_two_processes_equal_one_process_on_the_global_batch(two_process_results, local_loss, gather_with_grad, k,
                                                             masked):
    ref_loss, ref_grads = _step(_model(), CementLoss("cement", mask_entailed=masked), *_global_batch(k),
                                _entailed(k))
    assert_ranks_match(two_process_results, f"k{k}-{masked}-{local_loss}-{gather_with_grad}", ref_loss, ref_grads,
                       # float32: with local_loss the ranks' shares are averaged, a few ulps (1e-6 relative) off
                       local_loss, gather_with_grad, loss_tol=dict(atol=1e-6, rtol=1e-6),
                       grad_tol=dict(atol=1e-6, rtol=1e-5))

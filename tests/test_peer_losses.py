"""The field's hard-negative losses (docs/peers.md): each against a direct transcription of its formula on fixed
float64 features (values and gradients), the cases its code treats specially, and, for every loss in LOSSES,
two gloo processes equal one process on the global batch."""

import itertools
import math

import open_clip
import pytest
import torch
import torch.nn.functional as F

from concrete_jungle.loss import (
    LOSSES,
    CEClipLoss,
    CEClipOptions,
    CementLoss,
    CLICLoss,
    CLICOptions,
    NegCLIPLoss,
    NegCLIPOptions,
    TripletCLIPLoss,
)
from concrete_jungle.loss.degla import DeGLALoss, DeGLAOptions
from concrete_jungle.loss.fsc_clip import FSCCLIPLoss, FSCCLIPOptions, calibrated_focal_loss
from data_parallel import WORLD, assert_ranks_match, run_ranks

TOL = dict(atol=1e-6, rtol=0)


def hard_negative_batch(n, k, d=16, seed=0, has_negative=None, has_negative_image=None, missing=float("nan")):
    """Float64 leaves ``[anchors; negatives]`` (row n + a k + j: anchor a's j-th negative), L2-normalised; rows
    that are missing hold ``missing`` (NaN by default: a missing row must never reach the loss)."""
    g = torch.Generator().manual_seed(seed)
    image = F.normalize(torch.randn(n * (1 + k), d, generator=g, dtype=torch.float64), dim=1)
    text = F.normalize(image + 0.8 * torch.randn(n * (1 + k), d, generator=g, dtype=torch.float64), dim=1)
    has_negative = torch.ones(n, k, dtype=torch.bool) if has_negative is None else has_negative
    has_image = has_negative.clone() if has_negative_image is None else has_negative_image & has_negative
    text[n:][~has_negative.flatten()] = missing
    image[n:][~has_image.flatten()] = missing
    scale = torch.tensor(11.3, dtype=torch.float64)
    c = 1 + 4 * torch.rand(n, k, generator=g, dtype=torch.float64)
    return image.requires_grad_(), text.requires_grad_(), scale.requires_grad_(), c, has_negative, has_image


def row(n, k, a, j):
    return n + a * k + j


def lse(values):
    return torch.logsumexp(torch.stack(values), dim=0)


def values_and_grads(loss, image, text, scale):
    return [loss.detach(), *torch.autograd.grad(loss, (image, text, scale))]


def assert_same(ours, reference):
    for got, want in zip(ours, reference):
        assert torch.isfinite(got).all()
        torch.testing.assert_close(got, want, **TOL)


MASKED = torch.tensor([[1, 1, 0], [0, 0, 0], [1, 0, 1], [1, 1, 1], [0, 1, 1]], dtype=torch.bool)  # K = 3
MASKED_IMAGES = torch.tensor([[1, 0, 0], [0, 0, 0], [0, 0, 1], [1, 1, 0], [0, 1, 0]], dtype=torch.bool)


# ----------------------------------------------------------------------------- NegCLIP


def entailed_logits(has_image, entailed):
    """The (picture row, caption row) pairs ``mask_entailed`` removes: each entailed negative picture against its
    anchor's caption."""
    n, k = has_image.shape
    if entailed is None:
        return set()
    return {(row(n, k, a, j), a) for a in range(n) for j in range(k) if entailed[a, j] and has_image[a, j]}


def negclip_reference(image, text, s, has_negative, has_image, negative_images, entailed=None):
    """NegCLIP's batch, row by row: the images that have a caption (anchors, plus the negatives with a picture in
    the later version) against every caption, and their captions against those images; the ``entailed`` logits
    (n x K: the anchor's caption is true of that negative picture) left out of both sums."""
    n, k = has_negative.shape
    out = entailed_logits(has_image, entailed)
    captions = list(range(n)) + [row(n, k, a, j) for a in range(n) for j in range(k) if has_negative[a, j]]
    pairs = list(range(n)) + [row(n, k, a, j) for a in range(n) for j in range(k)
                              if negative_images and has_image[a, j]]
    i2t = [lse([s * image[i] @ text[c] for c in captions if (i, c) not in out]) - s * image[i] @ text[i]
           for i in pairs]
    t2i = [lse([s * text[i] @ image[p] for p in pairs if (p, i) not in out]) - s * text[i] @ image[i]
           for i in pairs]
    return (sum(i2t) / len(pairs) + sum(t2i) / len(pairs)) / 2


@pytest.mark.parametrize("negative_images", [True, False])
@pytest.mark.parametrize("n, k, has_negative, has_image", [
    (6, 1, None, None),
    (5, 3, MASKED, MASKED_IMAGES),
    (4, 2, torch.zeros(4, 2, dtype=torch.bool), None),  # no negative at all
])
def test_negclip_matches_its_formula(negative_images, n, k, has_negative, has_image):
    image, text, s, c, has_negative, has_image = hard_negative_batch(n, k, has_negative=has_negative,
                                                                     has_negative_image=has_image)
    loss = NegCLIPLoss(NegCLIPOptions(negative_images=negative_images))
    ours = values_and_grads(loss(image, text, s, c, has_negative, has_image), image, text, s)
    reference = values_and_grads(negclip_reference(image, text, s, has_negative, has_image, negative_images),
                                 image, text, s)
    assert_same(ours, reference)


def test_negclip_first_version_is_the_released_dense_formula():
    """Images [I], texts [T; T']: CE over the image rows of [I T^T, I T'^T] and over T I^T (released loss.py)."""
    n = 7
    image, text, s, c, has_negative, has_image = hard_negative_batch(n, 1)
    logits_per_image = s * image[:n] @ text.T
    dense = (F.cross_entropy(logits_per_image, torch.arange(n)) + F.cross_entropy(logits_per_image[:, :n].T,
                                                                                   torch.arange(n))) / 2
    ours = NegCLIPLoss(NegCLIPOptions(negative_images=False))(image, text, s, c)
    assert_same(values_and_grads(ours, image, text, s), values_and_grads(dense, image, text, s))


@pytest.mark.parametrize("neighbour_as", ["anchor", "negative"])
def test_negclip_later_version_is_the_released_dense_formula(neighbour_as):
    """The later trainer: images [I; I2], texts [T; T2; T'; T2'] (I2: each image's neighbour, T2 its caption,
    T2' its hard caption), CE over the images against all texts and over [T; T2] against the images. The neighbour
    comes into our layout either as an anchor of its own or as a negative with a picture; both give that loss."""
    b, d = 4, 16
    g = torch.Generator().manual_seed(3)
    parts = [F.normalize(torch.randn(b, d, generator=g, dtype=torch.float64), dim=1) for _ in range(6)]
    i, i2, t, t2, hard, hard2 = (p.requires_grad_() for p in parts)
    s = torch.tensor(9.0, dtype=torch.float64)
    images, texts = torch.cat([i, i2]), torch.cat([t, t2, hard, hard2])
    logits = s * images @ texts.T
    labels = torch.arange(2 * b)
    dense = (F.cross_entropy(logits, labels) + F.cross_entropy((s * texts[:2 * b] @ images.T), labels)) / 2
    unused = torch.zeros(b, d, dtype=torch.float64)  # pictures that do not exist
    if neighbour_as == "anchor":  # 2b anchors, one caption-only negative each
        ours_image, ours_text = torch.cat([i, i2, unused, unused]), torch.cat([t, t2, hard, hard2])
        c, has_image = torch.zeros(2 * b, 1), torch.zeros(2 * b, 1, dtype=torch.bool)
    else:  # b anchors, K = 3: [hard caption, neighbour with its picture, neighbour's hard caption]
        ours_image = torch.cat([i, torch.stack([unused, i2, unused], dim=1).flatten(0, 1)])
        ours_text = torch.cat([t, torch.stack([hard, t2, hard2], dim=1).flatten(0, 1)])
        c, has_image = torch.zeros(b, 3), torch.tensor([[False, True, False]] * b)
    ours = NegCLIPLoss()(ours_image, ours_text, s, c, has_negative_image=has_image)
    leaves = (i, i2, t, t2, hard, hard2)
    assert_same([ours.detach(), *torch.autograd.grad(ours, leaves)],
                [dense.detach(), *torch.autograd.grad(dense, leaves)])


def test_negclip_with_negative_pictures_is_cement_without_margin():
    image, text, s, c, has_negative, has_image = hard_negative_batch(5, 3, has_negative=MASKED,
                                                                     has_negative_image=MASKED_IMAGES, missing=0.0)
    ours = NegCLIPLoss()(image, text, s, c, has_negative, has_image)
    cement = CementLoss("infonce")(image, text, s, c, has_negative, has_image)
    assert_same(values_and_grads(ours, image, text, s), values_and_grads(cement, image, text, s))


def test_negclip_without_negatives_is_open_clip_cliploss_on_the_anchors():
    n = 6
    image, text, s, c, has_negative, has_image = hard_negative_batch(n, 1, has_negative=torch.zeros(n, 1,
                                                                                                   dtype=torch.bool))
    ours = NegCLIPLoss()(image, text, s, c, has_negative)
    clip = open_clip.loss.ClipLoss()(image[:n], text[:n], s)
    assert_same(values_and_grads(ours, image, text, s), values_and_grads(clip, image, text, s))


def test_negclip_ties_and_its_diagnostics():
    """Two anchors with the same picture and a negative caption equal to its anchor's caption: ties in both
    softmaxes, which the formula handles as any logits; the diagnostics are the two directions."""
    n, k = 4, 2
    image, text, s, c, has_negative, has_image = hard_negative_batch(n, k)
    with torch.no_grad():
        image[1] = image[0]
        text[row(n, k, 2, 1)] = text[2]
    out = NegCLIPLoss()(image, text, s, c, has_negative, has_image, output_dict=True)
    reference = negclip_reference(image, text, s, has_negative, has_image, True)
    assert_same(values_and_grads(out["contrastive_loss"], image, text, s),
                values_and_grads(reference, image, text, s))
    assert out["contrastive_loss"].item() == pytest.approx((out["negclip/i2t"] + out["negclip/t2i"]).item() / 2)


def test_negclip_options_reject_a_non_boolean():
    with pytest.raises(ValueError, match="loss.negclip.negative_images"):
        NegCLIPOptions(negative_images="yes")


# ----------------------------------------------------------------------------- TripletCLIP


def tripletclip_released_formula(i, t, i_neg, t_neg, s):
    """negclip(I, T, T') + negclip(I', T', T) as the released loss.py writes it (K = 1, every negative present)."""
    def negclip(x, y, y_other):
        labels = torch.arange(x.shape[0])
        i2t = F.cross_entropy(torch.cat([s * x @ y.T, s * x @ y_other.T], dim=1), labels)
        return (i2t + F.cross_entropy(s * y @ x.T, labels)) / 2
    return negclip(i, t, t_neg) + negclip(i_neg, t_neg, t, )


def tripletclip_reference(image, text, s, has_negative, has_image, entailed=None):
    """The same, row by row, for K negatives some of which lack a caption or a picture: each half (the anchors;
    the negatives with a picture) against every caption, and its captions against its own half's pictures; the
    ``entailed`` logits left out of the sums."""
    n, k = has_negative.shape
    out = entailed_logits(has_image, entailed)
    captions = list(range(n)) + [row(n, k, a, j) for a in range(n) for j in range(k) if has_negative[a, j]]
    total = 0
    for half in (list(range(n)), [row(n, k, a, j) for a in range(n) for j in range(k) if has_image[a, j]]):
        if not half:
            continue
        i2t = [lse([s * image[p] @ text[c] for c in captions if (p, c) not in out]) - s * image[p] @ text[p]
               for p in half]
        t2i = [lse([s * text[p] @ image[q] for q in half if (q, p) not in out]) - s * text[p] @ image[p]
               for p in half]
        total = total + (sum(i2t) / len(half) + sum(t2i) / len(half)) / 2
    return total


def test_tripletclip_is_the_released_formula():
    n = 6
    image, text, s, c, has_negative, has_image = hard_negative_batch(n, 1)
    ours = TripletCLIPLoss()(image, text, s, c)
    released = tripletclip_released_formula(image[:n], text[:n], image[n:], text[n:], s)
    assert_same(values_and_grads(ours, image, text, s), values_and_grads(released, image, text, s))


@pytest.mark.parametrize("n, k, has_negative, has_image", [
    (5, 3, MASKED, MASKED_IMAGES),
    (5, 3, MASKED, torch.zeros(5, 3, dtype=torch.bool)),  # captions only: the first half alone
    (4, 2, torch.zeros(4, 2, dtype=torch.bool), None),  # no negative at all
])
def test_tripletclip_matches_its_formula_with_k_negatives_and_masks(n, k, has_negative, has_image):
    image, text, s, c, has_negative, has_image = hard_negative_batch(n, k, has_negative=has_negative,
                                                                     has_negative_image=has_image)
    out = TripletCLIPLoss()(image, text, s, c, has_negative, has_image, output_dict=True)
    reference = tripletclip_reference(image, text, s, has_negative, has_image)
    assert_same(values_and_grads(out["contrastive_loss"], image, text, s),
                values_and_grads(reference, image, text, s))
    assert out["contrastive_loss"].item() == pytest.approx(
        (out["tripletclip/true_pairs"] + out["tripletclip/negative_pairs"]).item())


def test_tripletclip_without_negative_pictures_is_negclip_first_version():
    image, text, s, c, has_negative, _ = hard_negative_batch(5, 3, has_negative=MASKED)
    no_pictures = torch.zeros(5, 3, dtype=torch.bool)
    ours = TripletCLIPLoss()(image, text, s, c, has_negative, no_pictures)
    negclip = NegCLIPLoss(NegCLIPOptions(negative_images=False))(image, text, s, c, has_negative, no_pictures)
    assert_same(values_and_grads(ours, image, text, s), values_and_grads(negclip, image, text, s))


# ----------------------------------------------------------------------------- CE-CLIP


def ce_clip_reference(image, text, s, has_negative, tau, options):
    """CE-CLIP's loss of one step, term by term, with the thresholds ``tau`` (one per slot) that step uses."""
    n, k = has_negative.shape
    anchors = list(range(n))
    negatives = [row(n, k, a, j) for a in range(n) for j in range(k) if has_negative[a, j]]
    captions = anchors + (negatives if options.hard_negatives else [])
    positive = [s * image[a] @ text[a] for a in anchors]
    i2t = [lse([s * image[a] @ text[c] for c in captions]) - positive[a] for a in anchors]
    t2i = [lse([s * text[a] @ image[b] for b in anchors]) - positive[a] for a in anchors]
    itc = (sum(i2t) / n + sum(t2i) / n) / 2
    imc = sum(lse([positive[a]] + [s * text[a] @ text[m] for m in negatives]) - positive[a] for a in anchors) / n
    cmr = 0
    for a in anchors:
        for j in range(k):
            if has_negative[a, j]:
                x = tau[j] + s * image[a] @ text[row(n, k, a, j)] - positive[a]
                cmr = cmr + torch.where(x > 0, x, 0.0)  # a hinge exactly at 0 is inactive, as torch.relu
    cmr = cmr / (n * k)
    return itc + options.imc_weight * imc + options.cmr_weight * cmr


def ce_clip_next_thresholds(image, text, s, has_negative, tau, options):
    """tau after a step, as the released get_cmr_loss and train.py compute it."""
    n, k = has_negative.shape
    with torch.no_grad():
        positive = [float(s * image[a] @ text[a]) for a in range(n)]
        new = []
        for j in range(k):
            hard = {a: float(s * image[a] @ text[row(n, k, a, j)]) for a in range(n) if has_negative[a, j]}
            if options.threshold == "fixed":
                value = tau[j]
            elif options.threshold == "mean":
                value = sum(positive) / n - sum(hard.values()) / len(hard) if hard else tau[j]
            else:
                value = max(positive[a] - hard[a] if a in hard else 0.0 for a in range(n)) / 5
            if options.threshold != "fixed" and options.threshold_upper_bound is not None:
                value = min(max(value, 0.0), options.threshold_upper_bound)
            new.append(value)
    return new


@pytest.mark.parametrize("options", [
    CEClipOptions(),
    CEClipOptions(threshold="max"),
    CEClipOptions(threshold="fixed", fixed_threshold=1.5),
    CEClipOptions(hard_negatives=False, imc_weight=0.7, cmr_weight=1.1, threshold_upper_bound=None),
    CEClipOptions(threshold_upper_bound=0.5),
])
@pytest.mark.parametrize("n, k, has_negative", [(6, 4, None), (5, 3, MASKED)])
def test_ce_clip_matches_its_formula_over_three_steps(options, n, k, has_negative):
    """Three training steps on different batches: each step's value and gradients, and the thresholds it leaves."""
    loss = CEClipLoss(options)
    tau = [options.fixed_threshold if options.threshold == "fixed" else 0.0] * k
    for step in range(3):
        image, text, s, c, has_negative, _ = hard_negative_batch(n, k, seed=step, has_negative=has_negative)
        ours = values_and_grads(loss(image, text, s, c, has_negative), image, text, s)
        reference = ce_clip_reference(image, text, s, has_negative, tau, options)
        assert_same(ours, values_and_grads(reference, image, text, s))
        tau = ce_clip_next_thresholds(image, text, s, has_negative, tau, options)
        torch.testing.assert_close(loss.thresholds, torch.tensor(tau, dtype=torch.float64), **TOL)
    if options.threshold != "fixed":
        assert any(t != 0 for t in tau)  # the thresholds did adapt


def test_ce_clip_hinge_at_a_tie_is_inactive():
    """A negative caption equal to its caption with tau = 0: the hinge sits exactly at 0 and passes no gradient."""
    n, k = 4, 2
    image, text, s, c, has_negative, _ = hard_negative_batch(n, k)
    with torch.no_grad():
        text[row(n, k, 1, 0)] = text[1]
    options = CEClipOptions(threshold="fixed", fixed_threshold=0.0, imc_weight=0.0)
    ours = values_and_grads(CEClipLoss(options)(image, text, s, c), image, text, s)
    reference = ce_clip_reference(image, text, s, has_negative, [0.0] * k, options)
    assert_same(ours, values_and_grads(reference, image, text, s))


def test_ce_clip_slot_without_a_negative_keeps_its_threshold():
    n, k = 5, 2
    loss = CEClipLoss()
    image, text, s, c, has_negative, _ = hard_negative_batch(n, k, seed=1)
    loss(image, text, s, c, has_negative)
    first = loss.thresholds.clone()
    no_second = torch.tensor([[True, False]] * n)
    image, text, s, c, has_negative, _ = hard_negative_batch(n, k, seed=2, has_negative=no_second)
    loss(image, text, s, c, has_negative)
    assert loss.thresholds[1] == first[1] and torch.isfinite(loss.thresholds).all()
    assert loss.thresholds[0] != first[0]


def test_ce_clip_thresholds_resume_from_the_state_dict_and_stay_in_eval():
    n, k = 5, 4
    batches = [hard_negative_batch(n, k, seed=seed) for seed in range(3)]
    run = CEClipLoss()
    for image, text, s, c, *_ in batches[:2]:
        run(image, text, s, c)
    resumed = CEClipLoss()
    resumed.load_state_dict(run.state_dict())
    image, text, s, c, *_ = batches[2]
    torch.testing.assert_close(resumed(image, text, s, c), run(image, text, s, c), atol=0, rtol=0)
    kept = resumed.thresholds.clone()
    resumed.eval()
    resumed(image, text, s, c)
    assert torch.equal(resumed.thresholds, kept)


def test_ce_clip_refuses_a_change_of_k():
    loss = CEClipLoss()
    image, text, s, c, *_ = hard_negative_batch(4, 2)
    loss(image, text, s, c)
    image, text, s, c, *_ = hard_negative_batch(4, 3)
    with pytest.raises(ValueError, match="K = 3"):
        loss(image, text, s, c)


@pytest.mark.parametrize("key, value", [("imc_weight", -1.0), ("cmr_weight", float("nan")),
                                        ("threshold", "median"), ("threshold_upper_bound", -2.0),
                                        ("hard_negatives", 1)])
def test_ce_clip_options_name_the_bad_key(key, value):
    with pytest.raises(ValueError, match=f"loss.ce_clip.{key}"):
        CEClipOptions(**{key: value})


@pytest.mark.parametrize("loss_class", [NegCLIPLoss, TripletCLIPLoss, CEClipLoss])
def test_negclip_tripletclip_ce_clip_under_amp_sum_in_float32(loss_class):
    """bfloat16 features (CPU autocast): the loss and its terms come out in float32, near the float32 loss."""
    image, text, s, c, has_negative, has_image = hard_negative_batch(6, 3, has_negative=MASKED[[0, 2, 3, 4, 0, 2]],
                                                                     missing=0.0)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        low = loss_class()(image.detach().bfloat16(), text.detach().bfloat16(), 30.0, c, has_negative, has_image,
                           output_dict=True)
    full = loss_class()(image.detach().float(), text.detach().float(), 30.0, c, has_negative, has_image)
    assert all(value.dtype == torch.float32 for value in low.values())
    assert low["contrastive_loss"].item() == pytest.approx(full.item(), rel=2e-2)


# ----------------------------------------------------------------------------- FSC-CLIP


def fsc_tokens(n, k, has_negative, patches=5, length=6, d=16, seed=1):
    """Raw (un-normalised) patch features of the n anchor pictures and token features of every caption, as
    FSC-CLIP's model returns them, with a token mask; a missing caption's tokens are NaN."""
    g = torch.Generator().manual_seed(seed)
    image_tokens = torch.randn(n, patches, d, generator=g, dtype=torch.float64)
    text_tokens = torch.randn(n * (1 + k), length, d, generator=g, dtype=torch.float64)
    mask = torch.rand(n * (1 + k), length, generator=g) > 0.4
    mask[:, -1] = True  # the end-of-text token always counts
    text_tokens[n:][~has_negative.flatten()] = float("nan")
    return image_tokens.requires_grad_(), text_tokens.requires_grad_(), mask


def calibrated_focal_reference(z, gamma, eps):
    """The paper's hard-negative choice: sum_j y_j (1 - p_j)^gamma (-log p_j) over the positive (z[0]) and the
    M negatives that exist, y_0 = 1 - eps + eps / (M + 1), y_k = eps / (M + 1)."""
    m = len(z) - 1
    log_p = [zj - lse(z) for zj in z]
    y = [1 - eps + eps / (m + 1)] + [eps / (m + 1)] * m
    return sum(yj * (1 - lp.exp()) ** gamma * -lp for yj, lp in zip(y, log_p))


def local_score_reference(patches, tokens, mask, s, normalizer, sparsify):
    """g(a, c): each counted token's patches weighted by their similarity to it (plain numbers: no gradient),
    min-max rescaled (all alike: equal weights; sparsify: below 1/P dropped) or softmaxed, summed to 1; the
    weighted mean of the patches, normalised, against the normalised token; log-sum-exp over the tokens."""
    n_patches = patches.shape[0]
    scores = []
    for t in range(tokens.shape[0]):
        if not mask[t]:
            continue
        similarity = [float(tokens[t].detach() @ patches[p].detach()) for p in range(n_patches)]
        if normalizer == "softmax":
            weights = torch.softmax(torch.tensor(similarity, dtype=torch.float64), dim=0).tolist()
        else:
            low, high = min(similarity), max(similarity)
            weights = [(x - low) / (high - low) if high > low else 1.0 for x in similarity]
            if sparsify:
                weights = [0.0 if x < 1 / n_patches else x for x in weights]
            weights = [x / sum(weights) for x in weights]
        grouped = sum(weights[p] * patches[p] for p in range(n_patches))
        scores.append(s * (grouped / grouped.norm()) @ (tokens[t] / tokens[t].norm()))
    return lse(scores)


def fsc_clip_reference(image, text, s, has_negative, options, patches, tokens, mask):
    """CLIP over the anchors + w_g mean ell(global logits) + w_l mean ell(local scores), the means over the
    anchors with at least one negative; each anchor's choice is its caption against its own negatives."""
    n, k = has_negative.shape
    i2t = [lse([s * image[a] @ text[b] for b in range(n)]) - s * image[a] @ text[a] for a in range(n)]
    t2i = [lse([s * text[a] @ image[b] for b in range(n)]) - s * text[a] @ image[a] for a in range(n)]
    total = (sum(i2t) / n + sum(t2i) / n) / 2
    gamma = options.focal_gamma if options.focal else 0.0
    anchors = [a for a in range(n) if has_negative[a].any()]
    own = {a: [a] + [row(n, k, a, j) for j in range(k) if has_negative[a, j]] for a in anchors}
    if options.global_negatives and anchors:
        total = total + options.global_weight * sum(
            calibrated_focal_reference([s * image[a] @ text[c] for c in own[a]], gamma, options.label_smoothing)
            for a in anchors) / len(anchors)
    if options.local_negatives and anchors:
        total = total + options.local_weight * sum(calibrated_focal_reference(
            [local_score_reference(patches[a], tokens[c], mask[c], s, options.sim_normalizer, options.sim_sparsify)
             for c in own[a]], gamma, options.label_smoothing) for a in anchors) / len(anchors)
    return total


def fsc_values_and_grads(loss, image, text, s, patches, tokens):
    return [loss.detach(), *torch.autograd.grad(loss, (image, text, s, patches, tokens), allow_unused=True,
                                                materialize_grads=True)]


FSC_OPTIONS = [
    FSCCLIPOptions(),
    FSCCLIPOptions(focal=False),
    FSCCLIPOptions(label_smoothing=0.0),
    FSCCLIPOptions(global_negatives=False),
    FSCCLIPOptions(local_negatives=False),
    FSCCLIPOptions(sim_normalizer="softmax", focal_gamma=0.5, label_smoothing=0.3),
    FSCCLIPOptions(sim_sparsify=True, global_weight=1.0, local_weight=0.5),
]


@pytest.mark.parametrize("options", FSC_OPTIONS)
@pytest.mark.parametrize("n, k, has_negative", [
    (6, 1, None),
    (5, 3, MASKED),  # K = 3 as FSC-CLIP trains, anchor 1 without any negative
    (4, 2, torch.zeros(4, 2, dtype=torch.bool)),  # no negative at all
])
def test_fsc_clip_matches_its_formula(options, n, k, has_negative):
    image, text, s, c, has_negative, _ = hard_negative_batch(n, k, has_negative=has_negative)
    patches, tokens, mask = fsc_tokens(n, k, has_negative)
    out = FSCCLIPLoss(options)(image, text, s, c, has_negative, output_dict=True, image_tokens=patches,
                               text_tokens=tokens, text_token_mask=mask)
    reference = fsc_clip_reference(image, text, s, has_negative, options, patches, tokens, mask)
    assert_same(fsc_values_and_grads(out["contrastive_loss"], image, text, s, patches, tokens),
                fsc_values_and_grads(reference, image, text, s, patches, tokens))
    expected = out["fsc_clip/clip"] + options.global_weight * out.get("fsc_clip/global", 0) + \
        options.local_weight * out.get("fsc_clip/local", 0)
    assert out["contrastive_loss"].item() == pytest.approx(float(expected))


@pytest.mark.parametrize("options", [o for o in FSC_OPTIONS if o.local_negatives])
@pytest.mark.parametrize("n, k, has_negative, length", [
    (6, 1, None, 6),
    (5, 3, MASKED, 6),
    # more pictures than one pass of `GroupedCosine` (16), the last one partial, positions no caption counts
    (19, 2, torch.rand(19, 2, generator=torch.Generator().manual_seed(4)) > 0.3, 9),
])
def test_fsc_clip_local_loss_and_its_gradients_equal_the_transcription_to_1e_10(options, n, k, has_negative,
                                                                                 length):
    """The local loss's cosines are computed in passes with a hand-written gradient (`GroupedCosine`): the
    transcription's averaged patches, values and gradients, to 1e-10."""
    image, text, s, c, has_negative, _ = hard_negative_batch(n, k, has_negative=has_negative)
    patches, tokens, mask = fsc_tokens(n, k, has_negative, length=length)
    mask[:, 5], mask[:, 6:] = True, False  # no work and no gradient after the last position any caption counts
    options = FSCCLIPOptions(**{**options.__dict__, "global_negatives": False})
    ours = FSCCLIPLoss(options)(image, text, s, c, has_negative, image_tokens=patches, text_tokens=tokens,
                                text_token_mask=mask)
    reference = fsc_clip_reference(image, text, s, has_negative, options, patches, tokens, mask)
    for got, want in zip(fsc_values_and_grads(ours, image, text, s, patches, tokens),
                         fsc_values_and_grads(reference, image, text, s, patches, tokens)):
        assert torch.isfinite(got).all()
        torch.testing.assert_close(got, want, atol=1e-10, rtol=0)


def fsc_clip_released_formula(image, text, s, patches, tokens, mask, options):
    """Global_HNLoss and Local_HNLoss as the released loss.py computes them, densely (one process, every negative
    present, K negatives per caption, focal loss with label smoothing, min-max patch weights)."""
    n, k = patches.shape[0], text.shape[0] // patches.shape[0] - 1
    labels = torch.arange(n)
    clip = (F.cross_entropy(s * image[:n] @ text[:n].T, labels) + F.cross_entropy(s * text[:n] @ image[:n].T,
                                                                                  labels)) / 2
    eps, gamma = options.label_smoothing, options.focal_gamma
    targets = torch.full((n, 1 + k), eps / (1 + k), dtype=image.dtype)
    targets[:, 0] += 1 - eps

    def choice(logits):  # _focal_loss_with_nsr
        nll = -F.log_softmax(logits, dim=-1)
        return (targets * nll * (1 - torch.exp(-nll)) ** gamma).sum(-1).mean()

    captions = torch.cat([text[:n, None], text[n:].reshape(n, k, -1)], dim=1)
    global_loss = choice(s * torch.einsum("bd,bld->bl", image[:n], captions))
    caption_tokens = torch.cat([tokens[:n, None], tokens[n:].reshape(n, k, *tokens.shape[1:])], dim=1)
    caption_mask = torch.cat([mask[:n, None], mask[n:].reshape(n, k, -1)], dim=1)
    scores = []
    for j in range(1 + k):  # get_per_token_visual_patches, get_aggregated_local_score
        sim = torch.einsum("btd,bpd->btp", caption_tokens[:, j], patches).detach()
        sim_max, sim_min = sim.max(dim=-1, keepdim=True)[0], sim.min(dim=-1, keepdim=True)[0]
        sim = (sim - sim_min) / (sim_max - sim_min)
        sim = sim / sim.sum(dim=-1, keepdim=True)
        grouped = F.normalize(torch.einsum("btp,bpd->btd", sim, patches), dim=-1)
        local = s * (grouped * F.normalize(caption_tokens[:, j], dim=-1)).sum(-1)
        scores.append(torch.logsumexp(local + torch.where(caption_mask[:, j], 0.0, float("-inf")), dim=1))
    local_loss = choice(torch.stack(scores, dim=1))
    return clip + options.global_weight * global_loss + options.local_weight * local_loss


def test_fsc_clip_with_every_negative_is_the_released_dense_formula():
    n, k = 6, 3
    image, text, s, c, has_negative, _ = hard_negative_batch(n, k)
    patches, tokens, mask = fsc_tokens(n, k, has_negative)
    options = FSCCLIPOptions()
    ours = FSCCLIPLoss(options)(image, text, s, c, image_tokens=patches, text_tokens=tokens, text_token_mask=mask)
    released = fsc_clip_released_formula(image, text, s, patches, tokens, mask, options)
    assert_same(fsc_values_and_grads(ours, image, text, s, patches, tokens),
                fsc_values_and_grads(released, image, text, s, patches, tokens))

def test_fsc_clip_without_negatives_is_open_clip_cliploss_on_the_anchors():
    n = 5
    image, text, s, c, has_negative, _ = hard_negative_batch(n, 2, has_negative=torch.zeros(n, 2, dtype=torch.bool))
    patches, tokens, mask = fsc_tokens(n, 2, has_negative)
    ours = FSCCLIPLoss()(image, text, s, c, has_negative, image_tokens=patches, text_tokens=tokens,
                         text_token_mask=mask)
    clip = open_clip.loss.ClipLoss()(image[:n], text[:n], s)
    assert_same(values_and_grads(ours, image, text, s), values_and_grads(clip, image, text, s))


def test_fsc_clip_reuses_its_token_gradients_memory_only_when_nothing_else_holds_it():
    """`GradientMemory`: the token features' gradients are written into the last step's memory once that
    gradient is dropped, never while it, or a view of it, is still held, nor into a gradient being accumulated."""
    n, k = 6, 2
    image, text, s, c, has_negative, _ = hard_negative_batch(n, k)
    patches, tokens, mask = fsc_tokens(n, k, has_negative)
    loss = FSCCLIPLoss()

    def step():
        loss(image, text, s, c, has_negative, image_tokens=patches, text_tokens=tokens,
             text_token_mask=mask).backward()

    step()
    first, first_patches = tokens.grad.clone(), patches.grad.clone()
    step()  # accumulated into the gradient held
    assert torch.equal(tokens.grad, 2 * first) and torch.equal(patches.grad, 2 * first_patches)
    held, view = patches.grad, tokens.grad[:2]
    tokens.grad = patches.grad = None
    step()
    assert torch.equal(held, 2 * first_patches) and torch.equal(view, 2 * first[:2])
    assert torch.equal(tokens.grad, first) and tokens.grad.data_ptr() != view.data_ptr()
    del held, view
    memory = tokens.grad.data_ptr(), patches.grad.data_ptr()
    tokens.grad = patches.grad = None
    others = torch.empty_like(tokens), torch.empty_like(patches)  # would take memory given back to the allocator
    step()
    assert (tokens.grad.data_ptr(), patches.grad.data_ptr()) == memory
    assert all(other.data_ptr() not in memory for other in others)
    assert torch.equal(tokens.grad, first) and torch.equal(patches.grad, first_patches)


def test_fsc_clip_keeps_each_forward_s_averaged_patches_until_its_backward():
    """The averaged patches the forward pass keeps for the backward (`GradientMemory`'s "grouped"): a second
    forward before the first's backward takes new memory, so each backward reads its own; the gradients are those
    of each step run alone."""
    n, k = 6, 2
    image, text, s, c, has_negative, _ = hard_negative_batch(n, k)
    patches, tokens, mask = fsc_tokens(n, k, has_negative)
    other_patches = (patches.detach() * 0.5 + 0.1).requires_grad_()
    leaves = (image, text, patches, other_patches, tokens)

    def grads(loss, *calls):
        for leaf in leaves:
            leaf.grad = None
        outs = [loss(image, text, s, c, has_negative, image_tokens=p, text_tokens=tokens, text_token_mask=mask)
                for p in calls]
        for out in reversed(outs):  # the second forward's backward first
            out.backward()
        return [leaf.grad.clone() for leaf in leaves[:-1] if leaf.grad is not None]

    alone = grads(FSCCLIPLoss(), patches)[2], grads(FSCCLIPLoss(), other_patches)[2]
    kept = FSCCLIPLoss()
    together = grads(kept, patches, other_patches)
    assert torch.equal(together[2], alone[0]) and torch.equal(together[3], alone[1])


def test_fsc_clip_ties_a_negative_equal_to_its_caption_and_patches_all_alike():
    """A negative identical to its caption scores exactly as the caption: with cross-entropy and no smoothing the
    choice costs log 2. A picture whose patches are all the same gives every token min-max weights 0 / 0: they
    are equal weights, as the formula's limit, never NaN."""
    n, k = 4, 1
    image, text, s, c, has_negative, _ = hard_negative_batch(n, k)
    patches, tokens, mask = fsc_tokens(n, k, has_negative)
    with torch.no_grad():
        text[row(n, k, 2, 0)] = text[2]
        tokens[row(n, k, 2, 0)] = tokens[2]
        mask[row(n, k, 2, 0)] = mask[2]
        patches[1] = patches[1, :1]
    options = FSCCLIPOptions(focal=False, label_smoothing=0.0)
    loss = FSCCLIPLoss(options)
    out = loss(image, text, s, c, output_dict=True, image_tokens=patches, text_tokens=tokens, text_token_mask=mask)
    reference = fsc_clip_reference(image, text, s, has_negative, options, patches, tokens, mask)
    assert_same(fsc_values_and_grads(out["contrastive_loss"], image, text, s, patches, tokens),
                fsc_values_and_grads(reference, image, text, s, patches, tokens))
    only_tie = torch.tensor([[False], [False], [True], [False]])
    tied = loss(image, text, s, c, only_tie, output_dict=True, image_tokens=patches, text_tokens=tokens,
                text_token_mask=mask)
    assert tied["fsc_clip/global"].item() == pytest.approx(math.log(2), abs=1e-12)
    assert tied["fsc_clip/local"].item() == pytest.approx(math.log(2), abs=1e-12)


def test_fsc_clip_focal_term_of_a_saturated_choice_has_a_finite_gradient():
    """float32, gamma < 1, a positive far ahead of its negative: p rounds towards 1, and (1 - p)^gamma must not turn
    the gradient into 0 * inf."""
    logits = torch.tensor([[60.0, -60.0, float("-inf")], [3.0, 1.0, 2.0]], requires_grad=True)
    present = torch.tensor([[True, True, False], [True, True, True]])
    loss = calibrated_focal_loss(logits, present, gamma=0.5, smoothing=0.02).sum()
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(logits.grad).all()
    assert logits.grad[0, 2] == 0


def test_fsc_clip_needs_token_features_only_with_its_local_loss():
    image, text, s, c, has_negative, _ = hard_negative_batch(4, 1)
    assert FSCCLIPLoss().needs == {"image_tokens", "text_tokens", "text_token_mask"}
    with pytest.raises(ValueError, match="local_negatives"):
        FSCCLIPLoss()(image, text, s, c)
    without = FSCCLIPLoss(FSCCLIPOptions(local_negatives=False))
    assert without.needs == frozenset() and torch.isfinite(without(image, text, s, c))


@pytest.mark.parametrize("key, value", [("focal_gamma", -1.0), ("global_weight", float("nan")),
                                        ("label_smoothing", 1.0), ("sim_normalizer", "max"), ("focal", 1),
                                        ("local_weight", float("inf"))])
def test_fsc_clip_options_name_the_bad_key(key, value):
    with pytest.raises(ValueError, match=f"loss.fsc_clip.{key}"):
        FSCCLIPOptions(**{key: value})
    with pytest.raises(ValueError, match="sim_sparsify"):
        FSCCLIPOptions(sim_normalizer="softmax", sim_sparsify=True)


# ----------------------------------------------------------------------------- DeGLA


def teacher_batch(image, text, has_negative, seed=2):
    """A teacher's normalised features of the same rows: near the model's, NaN where a row is missing."""
    g = torch.Generator().manual_seed(seed)
    n = has_negative.shape[0]
    noise = lambda x: F.normalize(torch.nan_to_num(x.detach()) + 0.3 * torch.randn(  # noqa: E731
        x.shape, generator=g, dtype=x.dtype), dim=1)
    teacher_image, teacher_text = noise(image), noise(text)
    teacher_image[n:] = float("nan")  # DeGLA has no negative pictures: the teacher's are never read
    teacher_text[n:][~has_negative.flatten()] = float("nan")
    return teacher_image, teacher_text


def degla_reference(image, text, s, has_negative, options, teacher_image, teacher_text):
    """NegCLIP (anchor pictures against every caption, anchor captions against the anchor pictures)
    + w_igc IGC + w_tgc TGC + w_d sum of squared distances to the teacher; IGC and TGC are means over the anchors
    with a negative, each choosing its caption among its own negatives (TGC: against the teacher's caption, at the
    fixed scale tau)."""
    n, k = has_negative.shape
    negatives = {a: [row(n, k, a, j) for j in range(k) if has_negative[a, j]] for a in range(n)}
    captions = list(range(n)) + [c for a in range(n) for c in negatives[a]]
    i2t = [lse([s * image[a] @ text[c] for c in captions]) - s * image[a] @ text[a] for a in range(n)]
    t2i = [lse([s * text[a] @ image[b] for b in range(n)]) - s * text[a] @ image[a] for a in range(n)]
    total = (sum(i2t) / n + sum(t2i) / n) / 2
    anchors = [a for a in range(n) if negatives[a]]
    tau = options.tgc_scale
    if anchors:
        igc = [lse([s * image[a] @ text[c] for c in [a] + negatives[a]]) - s * image[a] @ text[a] for a in anchors]
        tgc = [lse([tau * text[a] @ teacher_text[a]] + [tau * text[a] @ text[c] for c in negatives[a]])
               - tau * text[a] @ teacher_text[a] for a in anchors]
        total = total + options.igc_weight * sum(igc) / len(anchors) + options.tgc_weight * sum(tgc) / len(anchors)
    distill = sum(((image[a] - teacher_image[a]) ** 2).sum() for a in range(n)) + \
        sum(((text[c] - teacher_text[c]) ** 2).sum() for c in captions)
    return total + options.distill_weight * distill


DEGLA_OPTIONS = [DeGLAOptions(), DeGLAOptions(igc_weight=0.0), DeGLAOptions(tgc_weight=0.0, tgc_scale=3.0),
                 DeGLAOptions(distill_weight=0.0), DeGLAOptions(igc_weight=0.7, tgc_weight=0.4, distill_weight=0.05),
                 DeGLAOptions(igc_weight=0.0, tgc_weight=0.0, distill_weight=0.0)]


@pytest.mark.parametrize("options", DEGLA_OPTIONS)
@pytest.mark.parametrize("n, k, has_negative", [
    (6, 1, None),
    (5, 3, MASKED),
    (6, 4, None),  # K = 4 as DeGLA trains
    (4, 2, torch.zeros(4, 2, dtype=torch.bool)),
])
def test_degla_matches_its_formula(options, n, k, has_negative):
    image, text, s, c, has_negative, _ = hard_negative_batch(n, k, has_negative=has_negative)
    teacher_image, teacher_text = teacher_batch(image, text, has_negative)
    out = DeGLALoss(options)(image, text, s, c, has_negative, output_dict=True,
                             teacher_image_features=teacher_image, teacher_text_features=teacher_text)
    reference = degla_reference(image, text, s, has_negative, options, teacher_image, teacher_text)
    assert_same(values_and_grads(out["contrastive_loss"], image, text, s),
                values_and_grads(reference, image, text, s))


def degla_released_formula(image, text, s, teacher_image, teacher_text, options):
    """CLIPloss_DeGLA as the released loss.py computes it, densely (one process; K = 1, where its text-grounded
    mask, tiled K times, and its image-grounded mask, interleaved, pick the same columns)."""
    n = image.shape[0]
    labels = torch.arange(n)
    logits = s * image @ text.T
    total = (F.cross_entropy(logits, labels) + F.cross_entropy((s * text @ image.T)[:n], labels)) / 2
    only_own = torch.full((n, n), float("-inf"), dtype=image.dtype).fill_diagonal_(0)
    text_local = options.tgc_scale * text[:n] @ torch.cat([teacher_text[:n], text[n:]]).T
    total = total + options.tgc_weight * F.cross_entropy(text_local + torch.cat([only_own, only_own], 1), labels)
    total = total + options.igc_weight * F.cross_entropy(logits + torch.cat([only_own, only_own], 1), labels)
    distill = F.mse_loss(image, teacher_image, reduction="sum") + F.mse_loss(text, teacher_text, reduction="sum")
    return total + options.distill_weight * distill


def test_degla_with_one_negative_is_the_released_dense_formula():
    n = 6
    image, text, s, c, has_negative, _ = hard_negative_batch(n, 1)
    teacher_image, teacher_text = teacher_batch(image, text, has_negative)
    options = DeGLAOptions(distill_weight=0.05)
    ours = DeGLALoss(options)(image[:2 * n], text, s, c, teacher_image_features=teacher_image[:n],
                              teacher_text_features=teacher_text)
    released = degla_released_formula(image[:n], text, s, teacher_image[:n], teacher_text, options)
    assert_same(values_and_grads(ours, image, text, s), values_and_grads(released, image, text, s))


def test_degla_reads_no_gradient_from_its_teacher_and_needs_only_what_its_terms_read():
    image, text, s, c, has_negative, _ = hard_negative_batch(4, 2)
    teacher_image, teacher_text = (t.requires_grad_() for t in teacher_batch(image, text, has_negative))
    loss = DeGLALoss()(image, text, s, c, teacher_image_features=teacher_image, teacher_text_features=teacher_text)
    loss.backward()
    assert teacher_image.grad is None and teacher_text.grad is None
    assert DeGLALoss().needs == {"teacher_image_features", "teacher_text_features"}
    assert DeGLALoss(DeGLAOptions(distill_weight=0.0)).needs == {"teacher_text_features"}
    assert DeGLALoss(DeGLAOptions(distill_weight=0.0, tgc_weight=0.0)).needs == frozenset()
    with pytest.raises(ValueError, match="teacher_text_features"):
        DeGLALoss()(image, text, s, c)


@pytest.mark.parametrize("key, value", [("igc_weight", -0.1), ("tgc_scale", 0.0), ("distill_weight", float("nan")),
                                        ("ema_decay", 1.5)])
def test_degla_options_name_the_bad_key(key, value):
    with pytest.raises(ValueError, match=f"loss.degla.{key}"):
        DeGLAOptions(**{key: value})


# ----------------------------------------------------------------------------- every loss: missing rows


# ----------------------------------------------------------------------------- CLIC


def positives_batch(n, p, d=16, seed=3, has_positive=None, missing=float("nan")):
    """The other P - 1 positive captions of n pictures (float64 leaves, L2-normalised; a missing one holds
    ``missing``) and which exist (n x (P - 1); some missing by default)."""
    g = torch.Generator().manual_seed(seed)
    features = F.normalize(torch.randn(n, p - 1, d, generator=g, dtype=torch.float64), dim=2)
    if has_positive is None:
        has_positive = torch.rand(n, p - 1, generator=g) > 0.3
    features[~has_positive] = missing
    return features.requires_grad_(), has_positive


def clic_released(images, positives, negative, s, o=CLICOptions()):
    """CLIC's released ``CLIPLoss`` (losses.py at dc845c7: ``_compute_loss_with_hard_negatives`` with
    hard_negatives_separate and uni_modal_loss) on one process, on its batch as its train.py concatenates it:
    B pictures, texts [p_1 (B rows); ...; p_P; the negatives (B)]; logits as its models.py makes them."""
    b, p = positives.shape[:2]
    texts = torch.cat([positives[:, i] for i in range(p)] + [negative])
    logits_per_image, logits_per_text = s * images @ texts.T, s * texts @ images.T
    labels = torch.arange(b)
    negative_logits = logits_per_image[labels, labels + p * b]
    i2t, t2i, sneg = [], [], []
    for i in range(p):
        i2t.append(F.cross_entropy(logits_per_image[:, i * b:(i + 1) * b], labels))
        own = logits_per_image[labels, labels + i * b]
        sneg.append(F.cross_entropy(torch.stack([own, negative_logits], dim=1), torch.zeros(b, dtype=torch.long)))
        t2i.append(F.cross_entropy(logits_per_text[i * b:(i + 1) * b], labels))
    contrastive = (sum(i2t) / p + sum(t2i) / p) / 2
    uni = F.mse_loss(texts[:b], texts[b:2 * b], reduction="none").sum(dim=1).mean()
    return o.contrastive_weight * contrastive + o.negative_weight * sum(sneg) / p + o.uni_weight * uni


def clic_reference(images, captions, exists, negatives, has_negative, s, o=CLICOptions()):
    """Our formula row by row (the module docstring): every mean over the (picture, positive) pairs that exist;
    ``captions`` n x P x D (positive 0 the anchor's), ``negatives`` n x K x D."""
    n, p = exists.shape
    pairs = [(a, i) for a in range(n) for i in range(p) if exists[a, i]]
    i2t = [lse([s * images[a] @ captions[b, i] for b in range(n) if exists[b, i]]) - s * images[a] @ captions[a, i]
           for a, i in pairs]
    t2i = [lse([s * captions[a, i] @ images[b] for b in range(n)]) - s * images[a] @ captions[a, i]
           for a, i in pairs]
    chosen = [(a, i) for a, i in pairs if has_negative[a].any()]
    neg = [lse([s * images[a] @ captions[a, i]] + [s * images[a] @ negatives[a, j] for j in range(negatives.shape[1])
                                                   if has_negative[a, j]]) - s * images[a] @ captions[a, i]
           for a, i in chosen]
    uni = [(captions[a, 0] - captions[a, 1]).pow(2).sum() for a in range(n) if p > 1 and exists[a, 1]]
    total = o.contrastive_weight * (sum(i2t) / len(pairs) + sum(t2i) / len(pairs)) / 2
    total = total + o.negative_weight * (sum(neg) / len(chosen) if chosen else 0)
    return total + o.uni_weight * (sum(uni) / len(uni) if uni else 0)


CLIC_OPTIONS = [CLICOptions(), CLICOptions(contrastive_weight=1.0, negative_weight=0.0, uni_weight=0.3),
                CLICOptions(negative_weight=2.0, uni_weight=0.0)]


@pytest.mark.parametrize("options", CLIC_OPTIONS)
@pytest.mark.parametrize("n, p, seed", [(6, 4, 0), (5, 2, 1), (8, 3, 2)])
def test_clic_is_the_released_loss_on_its_batch(options, n, p, seed):
    """One negative and every positive present (CLIC's batch): the value and gradients of the released code's
    dense formula, to 1e-6 in float64."""
    image, text, s, c, has_negative, has_image = hard_negative_batch(n, 1, seed=seed)
    more, has_positive = positives_batch(n, p, seed=seed, has_positive=torch.ones(n, p - 1, dtype=torch.bool))
    ours = CLICLoss(options)(image, text, s, c, has_negative, has_image, positive_text_features=more,
                             has_positive=has_positive)
    want = clic_released(image[:n], torch.cat([text[:n, None], more], dim=1), text[n:], s, options)
    assert_same([ours.detach(), *torch.autograd.grad(ours, (image, text, s, more))],
                [want.detach(), *torch.autograd.grad(want, (image, text, s, more))])


@pytest.mark.parametrize("options", CLIC_OPTIONS)
@pytest.mark.parametrize("local_loss", [False, True])
def test_clic_masks_missing_positives_and_negatives_as_its_formula_says(options, local_loss):
    """K = 3 negatives and P = 4 positives, some of each missing (holding NaN): the formula row by row, values and
    gradients; what a missing row holds reaches neither."""
    n, k = MASKED.shape
    image, text, s, c, has_negative, has_image = hard_negative_batch(n, k, has_negative=MASKED)
    more, has_positive = positives_batch(n, 4, seed=4)
    assert not has_positive.all() and has_positive[:, 0].any()
    loss = CLICLoss(options, local_loss=local_loss)
    ours = loss(image, text, s, c, has_negative, has_image, positive_text_features=more, has_positive=has_positive)
    clean = torch.nan_to_num(more, nan=0.0)
    exists = torch.cat([torch.ones(n, 1, dtype=torch.bool), has_positive], dim=1)
    negatives = torch.nan_to_num(text[n:], nan=0.0).reshape(n, k, -1)
    want = clic_reference(image[:n], torch.cat([text[:n, None], clean], dim=1), exists, negatives, has_negative, s,
                          options)
    got = [ours.detach(), *torch.autograd.grad(ours, (image, text, s, more), allow_unused=True,
                                               materialize_grads=True)]
    assert all(torch.isfinite(g).all() for g in got)
    want_grads = torch.autograd.grad(want, (image, text, s, more), allow_unused=True, materialize_grads=True)
    for g, w in zip(got, [want.detach(), *want_grads]):
        torch.testing.assert_close(torch.nan_to_num(g), torch.nan_to_num(w), **TOL)


def test_clic_a_positive_set_no_picture_has_leaves_a_finite_gradient():
    """A batch where no picture has its third positive (a set of columns with no caption): finite gradients."""
    n = 4
    image, text, s, c, has_negative, has_image = hard_negative_batch(n, 1)
    more, has_positive = positives_batch(n, 3, has_positive=torch.tensor([[1, 0]] * n, dtype=torch.bool))
    loss = CLICLoss()(image, text, s, c, has_negative, has_image, positive_text_features=more,
                      has_positive=has_positive)
    assert all(torch.isfinite(g).all() for g in torch.autograd.grad(loss, (image, text, more)))


def test_clic_s_uni_modal_term_refuses_a_batch_with_one_positive_per_picture():
    n = 3
    image, text, s, c, has_negative, has_image = hard_negative_batch(n, 1)
    with pytest.raises(ValueError, match="uni_weight: 0"):
        CLICLoss()(image, text, s, c, has_negative, has_image)
    assert torch.isfinite(CLICLoss(CLICOptions(uni_weight=0.0))(image, text, s, c, has_negative, has_image))


@pytest.mark.parametrize("key, value", [("contrastive_weight", -1.0), ("negative_weight", float("nan")),
                                        ("uni_weight", True)])
def test_clic_options_name_the_bad_key(key, value):
    with pytest.raises(ValueError, match=f"loss.clic.{key}"):
        CLICOptions(**{key: value})


def missing_rows_filled(fill):
    """The K = 3 batch with missing captions and pictures (MASKED, MASKED_IMAGES), every missing row of the
    features, of the token features and of the teacher's features holding ``fill``; the rows that exist are the
    same for every ``fill``."""
    n, k = MASKED.shape
    image, text, s, c, has_negative, has_image = hard_negative_batch(n, k, has_negative=MASKED,
                                                                     has_negative_image=MASKED_IMAGES, missing=fill)
    patches, tokens, mask = fsc_tokens(n, k, has_negative)
    with torch.no_grad():
        tokens[n:][~has_negative.flatten()] = fill
    teacher_image, teacher_text = teacher_batch(torch.nan_to_num(image, nan=0.0), text, has_negative)
    teacher_image[n:], teacher_text[n:][~has_negative.flatten()] = fill, fill
    positives, has_positive = positives_batch(n, 3, missing=fill)
    extras = {"image_tokens": patches, "text_tokens": tokens, "text_token_mask": mask,
              "teacher_image_features": teacher_image, "teacher_text_features": teacher_text,
              "positive_text_features": positives, "has_positive": has_positive}
    return (image, text, s, patches, tokens, positives), (c, has_negative, has_image), extras


EVERY_LOSS = {"cement": lambda **kw: CementLoss("cement", **kw), "infonce": lambda **kw: CementLoss("infonce", **kw),
              "static": lambda **kw: CementLoss("static", **kw),
              "inverse": lambda **kw: CementLoss("inverse", **kw),
              **{name: cls for name, (cls, _) in LOSSES.items()}}


@pytest.mark.parametrize("fill", [float("nan"), 1e6])
@pytest.mark.parametrize("name", EVERY_LOSS)
def test_every_loss_s_value_and_gradients_ignore_what_a_missing_row_holds(name, fill):
    """layout.py's promise: a missing row's values reach neither the loss nor its gradient, so NaN or 1e6 there
    gives exactly the zero-filled batch's value and gradients (Cement's matrix product once turned NaN into NaN
    gradients of every row)."""
    results = []
    for value in (0.0, fill):
        leaves, (c, has_negative, has_image), extras = missing_rows_filled(value)
        loss = EVERY_LOSS[name]()
        wanted = {key: extras[key] for key in getattr(loss, "needs", ())}
        out = loss(*leaves[:3], c, has_negative, has_image, **wanted)
        results.append([out.detach(), *torch.autograd.grad(out, leaves, allow_unused=True, materialize_grads=True)])
    for got, want in zip(*reversed(results)):
        assert torch.isfinite(got).all()
        assert torch.equal(got, want)


# ----------------------------------------------------------------------------- every loss: entailed pictures

# anchor_true_of_negative of the MASKED batch (K = 3): true of negatives with a picture and of some without one
# (a caption-only negative has no picture logit to mask)
ENTAILED_K3 = torch.tensor([[1, 1, 0], [0, 1, 0], [0, 0, 1], [1, 1, 1], [0, 1, 1]], dtype=torch.bool)
READS_NEGATIVE_PICTURES = ("cement", "infonce", "static", "inverse", "negclip", "tripletclip")


@pytest.mark.parametrize("loss, reference, reads_pictures", [
    (lambda **kw: NegCLIPLoss(**kw), lambda *a, **kw: negclip_reference(*a, negative_images=True, **kw), True),
    (lambda **kw: NegCLIPLoss(NegCLIPOptions(negative_images=False), **kw),
     lambda *a, **kw: negclip_reference(*a, negative_images=False, **kw), False),
    (lambda **kw: TripletCLIPLoss(**kw), tripletclip_reference, True)], ids=["negclip", "negclip_v1", "tripletclip"])
@pytest.mark.parametrize("local_loss", [False, True])
def test_entailed_negative_pictures_masked_equal_the_formula_without_their_logits(loss, reference, reads_pictures,
                                                                                  local_loss):
    n, k = MASKED.shape
    image, text, s, c, has_negative, has_image = hard_negative_batch(n, k, has_negative=MASKED,
                                                                     has_negative_image=MASKED_IMAGES)
    ours = loss(mask_entailed=True, local_loss=local_loss)(image, text, s, c, has_negative, has_image,
                                                           anchor_true_of_negative=ENTAILED_K3)
    want = reference(image, text, s, has_negative, has_image, entailed=ENTAILED_K3)
    assert_same(values_and_grads(ours, image, text, s), values_and_grads(want, image, text, s))
    unmasked = reference(image, text, s, has_negative, has_image)
    # the mask changes a loss that reads the pictures (NegCLIP's first version reads none: nothing to mask)
    assert (abs(ours.item() - unmasked.item()) > 1e-3) is reads_pictures


def entailed_logit_at(image, text, s, picture, caption, value):
    """``image`` with row ``picture`` moved along the one direction orthogonal to every caption but ``caption``,
    as a function of the step t (a leaf): at t = 1 the logit s <v_picture, t_caption> is ``value``, and every other
    logit is unchanged (to rounding)."""
    others = torch.cat([text[:caption], text[caption + 1:]]).detach()
    basis, _ = torch.linalg.qr(others.T)  # d x (rows - 1): d > rows leaves a direction orthogonal to all of them
    target = text[caption].detach()
    direction = target - basis @ (basis.T @ target)
    direction = direction / direction.norm()
    step = (value / s.detach() - image[picture].detach() @ target) / (direction @ target)
    t = torch.ones((), dtype=image.dtype, requires_grad=True)
    moved = image.detach().clone()
    return t, lambda t: torch.cat([moved[:picture], (moved[picture] + t * step * direction)[None],
                                   moved[picture + 1:]])


@pytest.mark.filterwarnings("ignore:.*not L2-normalised")
@pytest.mark.parametrize("name", EVERY_LOSS)
def test_a_masked_entailed_logit_of_1e6_changes_no_loss_and_gets_no_gradient(name):
    """Anchor 1's first negative picture is entailed; its logit against anchor 1's caption is pushed to 1e6 alone:
    with mask_entailed the loss is what it was and that logit's direction gets no gradient. Without the mask the
    losses that read negative pictures explode (the control)."""
    n, k = 4, 2
    image, text, s, c, has_negative, has_image = hard_negative_batch(n, k, d=16)
    entailed = torch.zeros(n, k, dtype=torch.bool)
    entailed[1, 0] = True
    patches, tokens, mask = fsc_tokens(n, k, has_negative)
    teacher_image, teacher_text = teacher_batch(image.detach(), text.detach(), has_negative)
    positives, has_positive = positives_batch(n, 2)
    t, pushed = entailed_logit_at(image, text, s, row(n, k, 1, 0), 1, 1e6)
    assert (s * pushed(t) @ text.T)[row(n, k, 1, 0), 1].item() == pytest.approx(1e6)
    extras = {"image_tokens": patches, "text_tokens": tokens, "text_token_mask": mask,
              "teacher_image_features": teacher_image, "teacher_text_features": teacher_text,
              "positive_text_features": positives, "has_positive": has_positive}

    def value(mask_entailed, at):
        loss = EVERY_LOSS[name](mask_entailed=mask_entailed)
        wanted = {key: extras[key] for key in getattr(loss, "needs", ())}
        return loss(pushed(at), text, s, c, has_negative, has_image, anchor_true_of_negative=entailed, **wanted)

    masked = value(True, t)
    (gradient,) = torch.autograd.grad(masked, t)
    assert masked.item() == pytest.approx(value(True, torch.zeros(())).item(), abs=1e-6)
    assert abs(gradient.item()) < 1e-6
    assert (value(False, t).item() > 1e4) is (name in READS_NEGATIVE_PICTURES)


@pytest.mark.parametrize("name", EVERY_LOSS)
def test_without_mask_entailed_the_field_changes_nothing_bitwise(name):
    """anchor_true_of_negative given to a loss without mask_entailed (or to a loss that reads no negative picture,
    with it) is the loss without it: the same values and gradients bit for bit."""
    leaves, (c, has_negative, has_image), extras = missing_rows_filled(0.0)
    results = []
    for masks, given in ((False, None), (False, ENTAILED_K3), (name not in READS_NEGATIVE_PICTURES, ENTAILED_K3)):
        loss = EVERY_LOSS[name](mask_entailed=masks)
        wanted = {key: extras[key] for key in getattr(loss, "needs", ())}
        out = loss(*leaves[:3], c, has_negative, has_image, anchor_true_of_negative=given, **wanted)
        results.append([out.detach(), *torch.autograd.grad(out, leaves, allow_unused=True, materialize_grads=True)])
    for other in results[1:]:
        assert all(torch.equal(a, b) for a, b in zip(results[0], other))


# ----------------------------------------------------------------------------- every loss: data parallel

N_LOCAL = 4
K = 2
DIM = 8
TOKENS = 3
# rank 0 anchors 0-3, rank 1 anchors 4-7; uneven on purpose (rank 1 holds fewer negatives and pictures)
HAS_NEGATIVE = torch.tensor([[1, 1], [1, 0], [0, 1], [1, 1], [0, 0], [1, 0], [0, 0], [1, 1]], dtype=torch.bool)
HAS_NEGATIVE_IMAGE = torch.tensor([[1, 0], [1, 0], [0, 1], [0, 1], [0, 0], [0, 0], [0, 0], [1, 0]], dtype=torch.bool)
# anchor_true_of_negative: true of some negatives with a picture on each rank, and of some without one (not masked)
ENTAILED = torch.tensor([[1, 0], [0, 0], [0, 1], [0, 1], [0, 0], [1, 0], [0, 0], [1, 1]], dtype=torch.bool)
# (local_loss, gather_with_grad); local_loss without gather_with_grad loses the gradient of the keys, as in open_clip
CONFIGS = [(False, True), (True, True), (False, False)]
# P = 3 positives per picture: the anchor's caption and two more, some missing on each rank
HAS_POSITIVE = torch.tensor([[1, 1], [1, 0], [0, 0], [1, 1], [1, 1], [0, 1], [1, 0], [1, 1]], dtype=torch.bool)
PER_PICTURE = ("positive_text", "has_positive")  # one row per anchor, not [anchors; negatives]


def _global_batch():
    """Raw float64 inputs of the global batch (rows [all anchors; all negatives]) and of every extra."""
    g = torch.Generator().manual_seed(11)
    rows, f64 = WORLD * N_LOCAL * (1 + K), torch.float64
    raw = {"image": torch.randn(rows, 10, generator=g, dtype=f64),
           "text": torch.randn(rows, 10, generator=g, dtype=f64),
           "image_tokens": torch.randn(rows, TOKENS, 10, generator=g, dtype=f64),
           "text_tokens": torch.randn(rows, TOKENS + 1, 10, generator=g, dtype=f64),
           "text_token_mask": torch.rand(rows, TOKENS + 1, generator=g) > 0.3,
           "teacher_image_features": F.normalize(torch.randn(rows, DIM, generator=g, dtype=f64), dim=1),
           "teacher_text_features": F.normalize(torch.randn(rows, DIM, generator=g, dtype=f64), dim=1),
           "positive_text": torch.randn(WORLD * N_LOCAL, 2, 10, generator=g, dtype=f64), "has_positive": HAS_POSITIVE}
    raw["text_token_mask"][:, 0] = True
    c = 1 + 4 * torch.rand(WORLD * N_LOCAL, K, generator=g, dtype=f64)
    return raw, c


def _model():
    torch.manual_seed(0)
    return torch.nn.ModuleDict({"image": torch.nn.Linear(10, DIM), "text": torch.nn.Linear(10, DIM)}).double()


def _step(model, loss_fn, raw, c, has_negative, has_image, entailed=None):
    """Two training steps (a loss may carry state from one to the next); the losses and the summed gradients."""
    features = {"image": F.normalize(model["image"](raw["image"]), dim=-1),
                "text": F.normalize(model["text"](raw["text"]), dim=-1),
                "image_tokens": F.normalize(model["image"](raw["image_tokens"]), dim=-1),
                "text_tokens": F.normalize(model["text"](raw["text_tokens"]), dim=-1),
                "positive_text_features": F.normalize(model["text"](raw["positive_text"]), dim=-1)}
    extras = {name: features[name] if name in features else raw[name] for name in getattr(loss_fn, "needs", ())}
    losses = []
    for _ in range(2):
        loss = loss_fn(features["image"], features["text"], 1 / 0.07, c, has_negative, has_image,
                       anchor_true_of_negative=entailed, **extras)
        loss.backward(retain_graph=True)
        losses.append(loss.detach())
    return torch.stack(losses), {k: p.grad.clone() for k, p in model.named_parameters()}


def _local(x, rank):
    """This rank's rows of a global [anchors; negatives] tensor (anchors r n.., their negatives contiguous)."""
    n_global = WORLD * N_LOCAL
    anchors = x[:n_global][rank * N_LOCAL:(rank + 1) * N_LOCAL]
    negatives = x[n_global:][rank * N_LOCAL * K:(rank + 1) * N_LOCAL * K]
    return torch.cat([anchors, negatives])


def _rank_cases(rank):
    """This rank's losses and gradients for every loss of LOSSES, masked or not, under every config
    (`data_parallel`)."""
    raw, c = _global_batch()
    mine = slice(rank * N_LOCAL, (rank + 1) * N_LOCAL)
    local_raw = {name: x[mine] if name in PER_PICTURE else _local(x, rank) for name, x in raw.items()}
    for (name, (loss_class, options_class)), masked in itertools.product(LOSSES.items(), (False, True)):
        for local_loss, gather_with_grad in CONFIGS:
            loss_fn = loss_class(options_class(), local_loss=local_loss, gather_with_grad=gather_with_grad,
                                 rank=rank, world_size=WORLD, mask_entailed=masked)
            yield f"{name}-{masked}-{local_loss}-{gather_with_grad}", _step(
                _model(), loss_fn, local_raw, c[mine], HAS_NEGATIVE[mine], HAS_NEGATIVE_IMAGE[mine], ENTAILED[mine])


@pytest.fixture(scope="module")
def two_process_results(tmp_path_factory):
    """One 2-process gloo run (spawned here) computing every loss in LOSSES under every config."""
    return run_ranks(tmp_path_factory.mktemp("ddp"), _rank_cases)


@pytest.mark.processes
@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("local_loss, gather_with_grad", CONFIGS)
@pytest.mark.parametrize("name", sorted(LOSSES))
def test_two_processes_equal_one_process_on_the_global_batch(two_process_results, name, local_loss,
                                                             gather_with_grad, masked):
    loss_class, options_class = LOSSES[name]
    raw, c = _global_batch()
    ref_losses, ref_grads = _step(_model(), loss_class(options_class(), mask_entailed=masked), raw, c,
                                  HAS_NEGATIVE, HAS_NEGATIVE_IMAGE, ENTAILED)
    assert torch.isfinite(ref_losses).all() and not math.isclose(ref_losses[0].item(), 0.0)
    assert_ranks_match(two_process_results, f"{name}-{masked}-{local_loss}-{gather_with_grad}", ref_losses, ref_grads,
                       local_loss, gather_with_grad, loss_tol=TOL, grad_tol=TOL)

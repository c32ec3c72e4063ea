"""TripletCLIP's loss (Patel et al., NeurIPS 2024, github.com/tripletclip/TripletCLIP): NegCLIP's objective twice,
once for the true pairs with the negative captions as extra columns, once for the negative pairs (a negative
caption and the picture generated from it) with the true captions as extra columns.

Released code (``src/openclip/src/loss.py`` at ee60e93, 2024-11-30; the same at HEAD abbf81c)::

    negclip(X, Y, Y') = ( CE([s X Y^T, s X Y'^T], diag) + CE(s Y X^T, diag) ) / 2
    L = negclip(I, T, T') + negclip(I', T', T)

so each half's text-to-image softmax runs over its own half's images only (a true caption never sees a negative
picture as a column, and a negative caption never sees a true picture), while both image-to-text softmaxes run over
every caption. On our layout (anchors, then K negatives each, some missing), with A the anchor rows and P the
negatives that have a caption and a picture (M = |P|, C every caption that exists):

    L_A = ( mean_{a in A} -log softmax_{c in C}(s <v_a, t_c>)[a]
          + mean_{a in A} -log softmax_{b in A}(s <t_a, v_b>)[a] ) / 2
    L_P = the same with P for A (0 when M = 0: then L = L_A, NegCLIP's first version)
    L   = L_A + L_P

The sum (not the mean) of the halves is the released code's; with K = 1 and every negative present this is it
term for term. A negative caption without a picture is only a column, as in NegCLIP.
"""

from __future__ import annotations

from .layout import HardNegativeLoss
from .options import TripletCLIPOptions
from .peer_batch import mean_term, pair_nll, read_batch


class TripletCLIPLoss(HardNegativeLoss):
    """TripletCLIP's loss on the hard-negative batch (see the module docstring); ``output_dict`` adds its halves,
    "tripletclip/true_pairs" (L_A) and "tripletclip/negative_pairs" (L_P), whose sum is the loss."""

    options_class = TripletCLIPOptions

    def forward(self, image_features, text_features, logit_scale, concreteness, has_negative=None,
                has_negative_image=None, output_dict=False, anchor_true_of_negative=None, **extras):
        batch = read_batch(self, image_features, text_features, logit_scale, concreteness, has_negative,
                           has_negative_image, anchor_true_of_negative)
        captions = batch.layout.text_valid
        halves = []
        for pairs in (batch.anchors, batch.layout.image_valid & ~batch.anchors):
            count = int(pairs.sum())
            i2t, t2i, _ = pair_nll(batch, logit_scale, pairs, captions)
            halves.append((mean_term(i2t, count, batch.share) + mean_term(t2i, count, batch.share)) / 2)
        loss = halves[0] + halves[1]
        if not output_dict:
            return loss
        return {"contrastive_loss": loss, "tripletclip/true_pairs": halves[0].detach(),
                "tripletclip/negative_pairs": halves[1].detach()}

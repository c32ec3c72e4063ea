"""NegCLIP's loss (Yuksekgonul et al., ICLR 2023, github.com/vinid/neg_clip): CLIP's loss over a batch that also
holds hard-negative captions, which only ever appear as image-to-text columns.

Its released trainer (``src/training/train.py``; ``src/open_clip/loss.py`` keeps open_clip's ClipLoss and takes
``logits_per_text[:len(logits_per_image)]``) builds the batch in one of two ways:

- first version (commits c406529..e0a9a78, 2022-08/09): images ``[I]``, texts ``[T; T']``;
- later version (branch ``neg_images``, 0130c6f, merged at HEAD e680f8e, 2023-02): every image brings a similar
  image (a nearest neighbour) with its own caption and hard caption: images ``[I; I2]``, texts ``[T; T2; T'; T2']``.

Both are one formula: every image that has a caption in the batch is a row of an image-to-text softmax over all
the captions, and every such caption a row of a text-to-image softmax over those images; a caption without a
picture (a hard negative) is only ever a column. On our layout (`layout`: anchors, then K negatives each) a
negative with a picture is such an image with its caption, and ``negative_images`` chooses the version:

    P = anchors (+ negatives with a picture, if negative_images),  C = every caption that exists
    L = ( mean_{i in P} -log softmax_{c in C}(s <v_i, t_c>)[i]
        + mean_{i in P} -log softmax_{j in P}(s <t_i, v_j>)[i] ) / 2

With negative pictures this is InfoNCE over every pair (Cement without margin); without, the first version's loss.
"""

from __future__ import annotations

from .layout import HardNegativeLoss
from .options import NegCLIPOptions
from .peer_batch import mean_term, pair_nll, read_batch


class NegCLIPLoss(HardNegativeLoss):
    """NegCLIP's loss on the hard-negative batch (see the module docstring); ``output_dict`` adds the two
    directions, "negclip/i2t" and "negclip/t2i" (their mean is the loss)."""

    options_class = NegCLIPOptions

    def forward(self, image_features, text_features, logit_scale, concreteness, has_negative=None,
                has_negative_image=None, output_dict=False, anchor_true_of_negative=None, **extras):
        batch = read_batch(self, image_features, text_features, logit_scale, concreteness, has_negative,
                           has_negative_image, anchor_true_of_negative)
        layout = batch.layout
        pairs = layout.image_valid if self.options.negative_images else batch.anchors
        count = int(pairs.sum())
        i2t, t2i, _ = pair_nll(batch, logit_scale, pairs, layout.text_valid)
        i2t, t2i = mean_term(i2t, count, batch.share), mean_term(t2i, count, batch.share)
        loss = (i2t + t2i) / 2
        if not output_dict:
            return loss
        return {"contrastive_loss": loss, "negclip/i2t": i2t.detach(), "negclip/t2i": t2i.detach()}

"""Plain image–caption pairs for training (``data.pairs``): the anchor caption of each sample of caption files with
an image folder, or of stores that hold their images (`sources`, `stores`); no hard negative. Read by the
training set (`train_data`) and by the image cache of a store (`image_cache`)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from ..errors import TrainingError


class PairsDataset:
    """Plain image-caption pairs (the anchor caption of each sample); they have no hard negative. The captions and
    images come from caption files with an image folder, or from stores that hold both (`sources`, `stores`;
    ``images`` then defaults to the stores' folder).

    A missing or hostile image file (a FIFO, a bomb, 1 x 60000) is found from its header and skipped before the
    first step. A file whose header reads but whose pixels do not (a truncated JPEG), or an image inside a store
    (not read twice), is checked when its batch is decoded: one that fails is replaced by the next pair that decodes
    (a batch cannot be one short: every rank's batch has one shape), and the skip is printed and appended to
    ``skip_log`` with its reason. The same happens at the same place after ``--resume``: the pairs and their order do
    not change."""

    def __init__(self, caption_files: list[str], images: str | None, split: str | None = None,
                 skip_log: Path | None = None):
        from ..images import header_problem
        from ..sources import anchor_caption, expand_paths, join_under, read_samples
        from ..sources.stores import is_located, store_root

        self.root = Path(images) if images else store_root(expand_paths(caption_files))
        if self.root is None:
            raise TrainingError("data.pairs: name the folder of their images with data.pairs_images (only stores "
                                "in one folder hold their own)")
        # an image name that leaves the image folder is an error (sources.join_under), not a silent skip
        items = [(s.image, anchor_caption(s.captions)) for s in read_samples(caption_files, split=split)
                 if not s.error and s.image and anchor_caption(s.captions)]
        files = {name: None if is_located(name) else join_under(self.root, name) for name, _ in items}
        problems = {name: header_problem(path) if path else None for name, path in files.items()}
        self.skipped = {str(files[name]): why for name, why in problems.items() if why}
        self.items = [(name, caption) for name, caption in items if not problems[name]]
        self.skip_log = skip_log
        for why in list(self.skipped.values())[:5]:
            print(f"data.pairs: skipped: {why}", file=sys.stderr)
        if self.skipped:
            print(f"data.pairs: {len(items) - len(self.items)} of {len(items)} pairs skipped ({len(self.skipped)} "
                  "images)", file=sys.stderr)

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        from ..images import ImageRejected
        from ..sources.stores import StoreError, read_named

        for k in range(len(self.items)):
            name, caption = self.items[(i + k) % len(self.items)]
            try:
                image = read_named(self.root, name)[0].convert("RGB")
                break
            except (ImageRejected, StoreError) as e:  # a truncated file, a damaged store member
                self._skipped_at_its_step(i, (i + k + 1) % len(self.items), str(e))
        else:
            raise TrainingError("data.pairs: no image of the pairs decodes")
        return {"image": image, "caption": caption, "neg_image": image, "neg_caption": caption,
                "concreteness": 0.0, "has_negative": False}

    def _skipped_at_its_step(self, pair: int, instead: int, why: str) -> None:
        print(f"data.pairs: skipped: {why}; pair {instead} takes its place in the batch", file=sys.stderr)
        if self.skip_log is not None:  # one short line per skip: appends of DataLoader workers do not interleave
            self.skip_log.parent.mkdir(parents=True, exist_ok=True)
            with open(self.skip_log, "a", encoding="utf-8") as f:
                f.write(json.dumps({"pair": pair, "instead": instead, "reason": why}) + "\n")

"""Plain image–caption pairs for training (``data.pairs``): the anchor caption of each sample of caption files with
an image folder, or of stores that hold their images (`sources`, `stores`); no hard negative; every sample skipped
printed, counted and logged with its reason. Read by the training set (`train_data`) and by the image cache of a
store (`image_cache`)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from ..errors import TrainingError


class PairsDataset:
    """Plain image-caption pairs (the anchor caption of each sample); they have no hard negative. The captions and
    images come from caption files with an image folder, or from stores that hold both (`sources`, `stores`;
    ``images`` then defaults to the stores' folder).

    A sample the readers skip (a malformed record, a caption that is not UTF-8, a sample of a damaged shard and the
    shard's damage report, a failed download), or one without an image or caption, is skipped when read: each is
    counted and printed (a store's damage report always, the others up to five) and appended to ``skip_log`` as
    ``{"id", "reason"}``, as the plant's rejects are. A missing or hostile image file (a FIFO, a bomb, 1 x 60000) is
    found from its header and skipped the same way before the first step. A file whose header reads but whose pixels
    do not (a truncated JPEG), or an image inside a store (not read twice), is checked when its batch is decoded:
    one that fails is replaced by the next pair that decodes (a batch cannot be one short: every rank's batch has
    one shape), and the skip is printed and appended to ``skip_log`` with its reason. The same happens at the same
    place after ``--resume``: the pairs and their order do not change, and a skip already logged is not logged
    again."""

    def __init__(self, caption_files: list[str], images: str | None, split: str | None = None,
                 skip_log: Path | None = None):
        from ..images import header_problem
        from ..sources import anchor_caption, expand_paths, join_under, read_samples
        from ..sources.stores import is_located, store_root

        self.root = Path(images) if images else store_root(expand_paths(caption_files))
        if self.root is None:
            raise TrainingError("data.pairs: name the folder of their images with data.pairs_images (only stores "
                                "hold their own)")
        self.skip_log = skip_log
        samples = list(read_samples(caption_files, split=split))
        read, unread = [], []
        for s in samples:
            caption = anchor_caption(s.captions) if s.error is None else None
            why = s.error or ("no image named" if not s.image else None) or ("no caption text" if not caption else None)
            if why:
                unread.append({"id": s.id, "reason": why})
            else:
                read.append((s.id, s.image, caption))
        self._report_unread(unread, len(samples))
        # an image name that leaves the image folder is an error (sources.join_under), not a silent skip
        files = {name: None if is_located(name) else join_under(self.root, name) for _, name, _ in read}
        problems = {name: header_problem(path) if path else None for name, path in files.items()}
        self.skipped = {str(files[name]): why for name, why in problems.items() if why}
        self.items = [(name, caption) for _, name, caption in read if not problems[name]]
        for why in list(self.skipped.values())[:5]:
            print(f"data.pairs: skipped: {why}", file=sys.stderr)
        if self.skipped:
            print(f"data.pairs: {len(read) - len(self.items)} of {len(read)} pairs skipped ({len(self.skipped)} "
                  "images)", file=sys.stderr)
        self._log_once(unread + [{"id": sid, "reason": problems[name]} for sid, name, _ in read if problems[name]])

    def _report_unread(self, unread: list[dict], total: int) -> None:
        """Print the samples skipped when read: every store's damage report (an id with ``#``: ``00000.tar#damaged``),
        the others up to five, and their count."""
        shown = [u for u in unread if "#" in u["id"]] + [u for u in unread if "#" not in u["id"]][:5]
        for skip in shown:
            print(f"data.pairs: skipped {skip['id']}: {skip['reason']}", file=sys.stderr)
        if unread:
            where = f"; each with its reason in {self.skip_log}" if self.skip_log else ""
            print(f"data.pairs: {len(unread)} of {total} samples skipped when read{where}", file=sys.stderr)

    def _log_once(self, skips: list[dict]) -> None:
        """Append the skips found when reading to ``skip_log``, those not there yet (a resumed run reads the same
        skips again); one process writes them (rank 0 under torchrun), before any DataLoader worker appends."""
        if self.skip_log is None or not skips or os.environ.get("RANK", "0") != "0":
            return
        lines = [json.dumps(skip) + "\n" for skip in skips]
        logged = set(self.skip_log.read_text(encoding="utf-8").splitlines(keepends=True)) \
            if self.skip_log.is_file() else set()
        self.skip_log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.skip_log, "a", encoding="utf-8") as f:
            f.write("".join(line for line in lines if line not in logged))

    def __len__(self):
        return len(self.items)

    def negatives_per_record(self) -> int:
        return 0

    def has_negative_pictures(self) -> bool:
        return False

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
        return {"image": image, "caption": caption, "negatives": [], "has_negative": False}

    def _skipped_at_its_step(self, pair: int, instead: int, why: str) -> None:
        print(f"data.pairs: skipped: {why}; pair {instead} takes its place in the batch", file=sys.stderr)
        if self.skip_log is not None:  # one short line per skip: appends of DataLoader workers do not interleave
            self.skip_log.parent.mkdir(parents=True, exist_ok=True)
            with open(self.skip_log, "a", encoding="utf-8") as f:
                f.write(json.dumps({"pair": pair, "instead": instead, "reason": why}) + "\n")

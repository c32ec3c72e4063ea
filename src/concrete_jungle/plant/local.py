"""The local engine: the whole part in this process, a thread rewriting the next batch while this one is edited."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from .captioners import make_captioner
from .editors import make_editor
from .scoring import PairScorers, scoring_device


def extractor(config) -> None:
    """Keyword candidates are found in this process (`keyword_job.run_keywords`'s own workers)."""
    return None


def process(plant, batches, n_done: int, total: int) -> tuple[str, str]:
    """Rewrite and edit ``batches`` (an iterable of (shard, records, last of shard), read as they are taken) and
    write them in order with `Plant.write_results`; the captioner works on the next batch in a background thread
    while the current batch is edited. Returns (captioner, editor) names."""
    from tqdm import tqdm

    c = plant.config
    captioner = plant.given_captioner or make_captioner(c.captioner, **c.captioner_options)
    editor = plant.given_editor or make_editor(c.editor, **c.editor_options)
    # scorers load only for pairs to make (a re-plant that only re-gates needs none), on the editor's device
    scorers = PairScorers(c.scoring, scoring_device(c.scoring, editor)) if c.scoring and len(batches) else None
    plant.write_config(captioner.name, editor.name)
    bar = tqdm(total=total, initial=n_done, desc=f"plant {c.mode} {c.part}", unit="sample",
               disable=not plant.progress, dynamic_ncols=True)
    work = iter(batches)
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="captioner") as pool:
        current = next(work, None)
        future = pool.submit(plant.rewrite, captioner, current[1]) if current is not None else None

        def results():
            nonlocal current, future
            while current is not None:
                shard, batch, last_of_shard = current
                rewritten = future.result()
                # the next batch's captions are made while this batch's images are edited
                current = next(work, None)
                future = pool.submit(plant.rewrite, captioner, current[1]) if current is not None else None
                yield shard, last_of_shard, plant.edit(shard, batch, rewritten, editor, captioner.name, scorers)

        try:
            plant.write_results(results(), bar)
        finally:
            if future is not None:
                future.cancel()
            bar.close()
    close = getattr(captioner, "close", None)  # optional: a captioner with nothing to release has none
    if callable(close):
        close()
    return captioner.name, editor.name

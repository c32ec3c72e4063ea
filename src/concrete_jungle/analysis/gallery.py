"""A static gallery page of hard negatives, to judge them by eye before training on them.

``concrete-jungle gallery D_hc D_lc --out gallery/`` writes ``index.html``, ``gallery.css``, ``gallery.js``
and 256 px JPEG thumbnails: one row per sampled anchor id, one card per dataset (the anchor and every negative
of its record side by side, the captions with a word-level diff, category, concreteness, the adaptive margin, and
an analysis run's per-pair scores with ``--stats``, the scores the plant recorded on the pair with ``plant --score``).
A negative without a picture (a caption, as imported from
NegCLIP or CE-CLIP) is its caption beside a "no picture" box, never another picture in its place; with K > 1
negatives the anchor's caption marks the words any of them changes, each negative's the words it puts there.
Opens from disk; no server, no CDN. The page is written only into a folder holding nothing but an earlier page of
its own (replaced with ``overwrite``): any other file there, an ``index.html`` of a web site say, is named and
kept.

Captions are untrusted text: everything is HTML-escaped when the page is written, and the script only
reads ``data-*`` attributes and toggles visibility — it never inserts text as HTML.
"""

from __future__ import annotations

import difflib
import html
import itertools
import json
import random
import re
from pathlib import Path

from PIL import Image

from ..concretebatch import index_shards, negative_members, negatives_of, read_member, shard_urls
from ..records import atomic_write_text, mean_median

THUMB = 256


# a word (inner apostrophes kept: "dog's") or one mark of punctuation, with the spaces before it
TOKEN = re.compile(r"(\s*)(\w+(?:['’]\w+)*|[^\w\s])")


def word_diff(before: str, after: str) -> tuple[str, str]:
    """Both captions as escaped HTML, the words that differ wrapped in <mark class="del"> / <mark class="ins">.
    Punctuation is compared on its own, so ``cup;`` against ``mug;`` marks the word and leaves the semicolon."""
    a = [m.groups() for m in TOKEN.finditer(before)]
    b = [m.groups() for m in TOKEN.finditer(after)]
    left, right = [], []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(a=[t for _, t in a], b=[t for _, t in b],
                                                      autojunk=False).get_opcodes():
        left.append(joined(a[i1:i2], None if op == "equal" else "del"))
        right.append(joined(b[j1:j2], None if op == "equal" else "ins"))
    return "".join(left).lstrip(), "".join(right).lstrip()


def changed_in_any(before: str, afters: list[str]) -> str:
    """``before`` as escaped HTML, the words that any caption of ``afters`` changes wrapped in <mark class="del">
    (with one caption: `word_diff`'s left side)."""
    a = [m.groups() for m in TOKEN.finditer(before)]
    changed = set()
    for after in afters:
        b = [m.group(2) for m in TOKEN.finditer(after)]
        for op, i1, i2, _, _ in difflib.SequenceMatcher(a=[t for _, t in a], b=b, autojunk=False).get_opcodes():
            if op != "equal":
                changed.update(range(i1, i2))
    runs = [list(run) for _, run in itertools.groupby(range(len(a)), key=changed.__contains__)]
    return "".join(joined([a[i] for i in run], "del" if run[0] in changed else None) for run in runs).lstrip()


def joined(tokens: list[tuple[str, str]], mark: str | None) -> str:
    """Tokens (spaces before, text) as escaped HTML, a run of spaces as one; ``mark``: wrapped in a <mark> of that
    class, the space before the first token left outside it."""
    if not tokens:
        return ""
    text = html.escape(tokens[0][1] + "".join((" " if space else "") + t for space, t in tokens[1:]))
    return (" " if tokens[0][0] else "") + (f'<mark class="{mark}">{text}</mark>' if mark else text)


def adaptive_margin(c: float) -> float:
    """What Cement's default adaptive schedule gives a keyword of concreteness c (docs/method.md §5)."""
    import torch

    from ..loss import AdaptiveMargin

    return float(AdaptiveMargin()(torch.tensor([c]))[0])


def thumbnail(data: bytes, where: str, path: Path) -> None:
    from ..concretebatch import picture

    with picture(data, where) as im:
        if max(im.size) * 2 <= THUMB:  # tiny images (the toy world's 64 px): enlarge with crisp pixels
            k = THUMB // max(im.size)
            im = im.resize((im.width * k, im.height * k), Image.Resampling.NEAREST)
        im.thumbnail((THUMB, THUMB))
        im.save(path, "JPEG", quality=85)


def dataset_summary(root: Path, records: list[dict]) -> dict:
    """The dataset's summary.json when present (it counts rejects), else what the records tell."""
    path = root / "summary.json"
    if path.exists():
        return json.loads(path.read_text())
    values = [r["concreteness"] for r in records]
    mean, median = mean_median(values)
    cats = {}
    for r in records:
        cats[r["category"]] = cats.get(r["category"], 0) + 1
    return {"ok": len(records), "mean_concreteness": mean, "median_concreteness": median,
            "category_shares": {k: v / len(records) for k, v in cats.items()}, "rejects_by_reason": {}}


def load_dataset(root: Path, partial: bool = False) -> tuple[list[dict], dict[str, dict]]:
    """(metadata of every record, tar locations by sample id); ``partial``: the finished shards of an unfinished
    or unmerged dataset. A record's metadata gains its captions and ``shown_negatives``: per negative its caption,
    the member holding its picture (None: it has none), its concreteness and keyword."""
    locations = index_shards(shard_urls(root, partial=partial))
    metas, by_id = [], {}
    for loc in locations:
        meta = json.loads(read_member(loc["json"]))
        negatives = negatives_of(meta, loc, lambda ext: read_member(loc[ext]).decode("utf-8"),
                                 lambda ext, k: ext)  # the picture is read when its thumbnail is made
        entries = meta.get("negatives") or [{}]
        for k, negative in enumerate(negatives):
            negative["keyword"] = entries[k].get("keyword", meta.get("keyword") if k == 0 else None)
        meta["caption"] = read_member(loc["txt"]).decode("utf-8")
        meta["neg_caption"] = negatives[0]["caption"]
        meta["shown_negatives"] = negatives
        metas.append(meta)
        by_id[meta["id"]] = loc
    return metas, by_id


def build_gallery(datasets: list[str | Path], out: str | Path, sample: int = 200, seed: int = 0,
                  sort: str = "concreteness", filters: dict[str, str] | None = None,
                  stats: str | Path | None = None, overwrite: bool = False, partial: bool = False) -> Path:
    """Write the page of ``datasets`` into ``out``; its index.html. ``overwrite``: replace a page ``out`` holds;
    ``partial``: show the finished shards of datasets still being planted."""
    check_out_folder(Path(out), overwrite)
    if sort not in ("concreteness", "category", "random"):
        raise ValueError(f"--sort {sort!r} is not one of concreteness, category, random")
    filters = filters or {}
    unknown = set(filters) - {"category", "mode"}
    if unknown:
        raise ValueError(f"--filter keys {sorted(unknown)} are not supported; use category=… or mode=…")
    if stats and not Path(stats).is_file():
        raise ValueError(f"--stats {stats} not found; it is the stats.json of `concrete-jungle analyze`")
    roots = [Path(d) for d in datasets]
    loaded = [load_dataset(r, partial) for r in roots]  # every dataset is read before anything is written
    # an analysis stats.json keeps per-pair scores under "pairs": {dataset: {id: {score: value}}}
    scores = json.loads(Path(stats).read_text()).get("pairs", {}) if stats else {}
    # anchors: ids of the first dataset of which some dataset's record passes the filters, sampled with the seed
    meta_by_id = [{m["id"]: m for m in metas} for metas, _ in loaded]
    check_filter_values(filters, [metas for metas, _ in loaded])
    passes = lambda m: m is not None and all(str(m.get(k)) == v for k, v in filters.items())  # noqa: E731
    first = [m for m in loaded[0][0] if any(passes(by_id.get(m["id"])) for by_id in meta_by_id)]
    if not first:
        raise ValueError(f"no anchor of {roots[0]} passes --filter {filters} in any dataset; nothing to show")
    out = Path(out)
    (out / "thumbs").mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    chosen = first if len(first) <= sample else rng.sample(first, sample)
    # a row's concreteness is the mean over its cards: the datasets of one anchor perturb different keywords
    row_c = {m["id"]: sum(cs) / len(cs) for m in chosen
             if (cs := [by_id[m["id"]]["concreteness"] for by_id in meta_by_id if m["id"] in by_id])}
    if sort == "concreteness":
        chosen.sort(key=lambda m: -row_c[m["id"]])
    elif sort == "category":
        chosen.sort(key=lambda m: (m["category"], -m["concreteness"]))
    else:
        rng.shuffle(chosen)

    names = [r.name for r in roots]
    rows, categories, written = [], set(), set()
    for n, anchor in enumerate(chosen):
        cards, texts = [], []
        for d, (_, locs) in enumerate(loaded):
            m = meta_by_id[d].get(anchor["id"])
            if m is None:
                cards.append('<div class="card missing">not in this dataset</div>')
                continue
            stem = f"{n:05d}-{d}"
            pictures = [("jpg", "a")] + [(neg["image"], thumb_end(k)) for k, neg in enumerate(m["shown_negatives"])
                                         if neg["image"] is not None]
            for member, end in pictures:
                location = locs[m["id"]][member]
                thumbnail(read_member(location), f"{member} of {m['id']} in {location[0]}",
                          out / "thumbs" / f"{stem}-{end}.jpg")
                written.add(f"{stem}-{end}.jpg")
            cards.append(card(m, names[d], stem, scores.get(names[d], {}).get(m["id"])))
            categories.add(m["category"])
            texts.append(" ".join([m["caption"], *(neg["caption"] for neg in m["shown_negatives"])]))
        # each card carries its own category and concreteness (the datasets of one anchor differ in both);
        # the page's filters show a row when one of its cards passes them
        rows.append(f'<section class="row" tabindex="0" data-c="{row_c[anchor["id"]]:.3f}" '
                    f'data-text="{html.escape(" ".join(texts).lower(), quote=True)}">'
                    f'<h2>{html.escape(anchor["id"])}</h2><div class="cards">{"".join(cards)}</div></section>')

    headers = "".join(header(name, dataset_summary(root, metas)) for name, root, (metas, _) in
                      zip(names, roots, loaded))
    atomic_write_text(out / "index.html", PAGE.format(
        title=html.escape(" · ".join(names)), headers=headers, rows="\n".join(rows), count=len(rows),
        options="".join(f'<option value="{html.escape(c)}">{html.escape(c)}</option>' for c in sorted(categories)),
        sorts=sort_options(sort, seed)))
    atomic_write_text(out / "gallery.css", CSS)
    atomic_write_text(out / "gallery.js", JS)
    for old in (out / "thumbs").glob("*.jpg"):  # an earlier, larger page's thumbnails
        if old.name not in written:
            old.unlink()
    return out / "index.html"


def sort_options(sort: str, seed: int) -> str:
    """The page's sort box: first, selected, the order the page was written in (``--sort``), which the script
    restores; then the concreteness orders it can sort into, less the one the page already has."""
    written = {"concreteness": "concreteness ↓", "category": "category, then concreteness ↓",
               "random": f"random (seed {seed})"}[sort]
    others = [(value, label) for value, label in (("c-desc", "concreteness ↓"), ("c-asc", "concreteness ↑"))
              if label != written]
    return f'<option value="" selected>{written}</option>' + "".join(
        f'<option value="{value}">{label}</option>' for value, label in others)


THUMB_NAME = re.compile(r"\d{5,}-\d+-(?:a|n\d*)\.jpg")


def thumb_end(k: int) -> str:
    """The end of the thumbnail name of a record's k-th negative (0-based), after its members' names: ``n`` for the
    first (``neg.jpg``), ``n2`` for the second (``neg2.jpg``), ..."""
    return negative_members(k)[0].removesuffix(".jpg").replace("neg", "n", 1)


def is_page(path: Path) -> bool:
    """Whether ``path`` is a page this module wrote (their first bytes are the same)."""
    start = PAGE[:PAGE.index("{title}")].encode()
    try:
        with open(path, "rb") as f:
            return f.read(len(start)) == start
    except OSError:
        return False


def check_out_folder(out: Path, overwrite: bool) -> None:
    """``out`` may hold a page of ours (its index.html, styles, script and thumbnails): replaced with ``overwrite``,
    else refused. Any other file is refused, named, and kept; hidden files (the lock) are not looked at."""
    if not out.is_dir():
        return
    page = out / "index.html"
    ours = is_page(page)
    mine = {page, out / "gallery.css", out / "gallery.js"} if ours else set()
    entries = [p for p in sorted(out.iterdir()) if not p.name.startswith(".")]
    if (out / "thumbs").is_dir():  # a stopped run leaves thumbnails without a page: they are replaced
        entries.remove(out / "thumbs")
        entries += [p for p in sorted((out / "thumbs").iterdir())
                    if not p.name.startswith(".") and not (THUMB_NAME.fullmatch(p.name) and p.is_file())]
    stray = next((p for p in entries if p not in mine or not p.is_file()), None)
    if stray is not None:
        raise ValueError(f"--out {out} holds {stray}, which `concrete-jungle gallery` did not write; it is kept: "
                         "write the gallery to a new or empty folder")
    if ours and not overwrite:
        raise ValueError(f"--out {out} holds a gallery page already ({page}); pass --overwrite to replace it, or "
                         "choose another --out")


def check_filter_values(filters: dict[str, str], datasets: list[list[dict]]) -> None:
    """A filter value no record has (``category=relations``) is a typo, not an empty page."""
    for key, value in filters.items():
        present = sorted({str(m.get(key)) for metas in datasets for m in metas})
        if value not in present:
            raise ValueError(f"--filter {key}={value}: no record has {key} {value!r}; the datasets hold "
                             f"{', '.join(present)}")


# per-pair scores of an analysis (stats.json), in words
SCORE_LABELS = {"i2t": "I2T right (reference CLIP)", "t2i": "T2I right (reference CLIP)",
                "logit_gap": "logit gap S[i,i] - S[i,i']", "clip_l": "text-text cosine (t, t')",
                "clip_v": "image-image cosine (v, v')", "dino": "DINOScore (v, v')", "bertscore": "BERTScore F1",
                "edit_distance": "word edit distance", "negative_picture": "negative picture (first negative)"}
SHOWN_ELSEWHERE = ("concreteness", "negatives")  # a card shows them from the record itself
# the scores the plant recorded on the pair (`plant --score`, in the record's json), in words
PLANTED_LABELS = {"text_sim": "text_sim: BERTScore F1 (t, t')", "image_sim": "image_sim: DINO cosine (v, v')",
                  "agreement": "agreement (the smaller margin)",
                  "agreement_anchor": "agreement_anchor s(v,t) - s(v,t')",
                  "agreement_negative": "agreement_negative s(v',t') - s(v',t)"}


def card(m: dict, dataset: str, stem: str, pair_scores: dict | None) -> str:
    negatives = m["shown_negatives"]
    facts = [("dataset", dataset), ("category", m["category"]), ("concreteness", f"{m['concreteness']:.2f}"),
             ("keyword", m["keyword"]), ("adaptive margin", f"{adaptive_margin(m['concreteness']):+.2f}")]
    pictured = sum(neg["image"] is not None for neg in negatives)
    if len(negatives) > 1 or not pictured:  # with K > 1 the concreteness, keyword and margin above are the first's
        facts.append(("negatives", f"{len(negatives)} ({pictured} with a picture)"))
    if m.get("neg_image_is_anchor"):
        facts.append(("negative image", "the anchor (text-only)"))
    for k, v in (m.get("scores") or {}).items():  # n/a: a score this pair cannot have (text-only negative)
        facts.append((f"plant {PLANTED_LABELS.get(k, k)}", "n/a" if v is None else f"{v:.3f}"))
    for k, v in (pair_scores or {}).items():
        if k in SHOWN_ELSEWHERE or v is None:  # shown above / not measured
            continue
        shown = ("yes" if v else "no") if isinstance(v, bool) else f"{v:.3f}" if isinstance(v, float) else str(v)
        facts.append((SCORE_LABELS.get(k, k.replace("_", " ")), shown))
    dl = "".join(f"<dt>{html.escape(k)}</dt><dd>{html.escape(str(v))}</dd>" for k, v in facts)
    if len(negatives) == 1:
        before, after = word_diff(m["caption"], negatives[0]["caption"])
        shown = [negative_figure(negatives[0], "hard negative", after, f"{stem}-n", None)]
    else:
        before = changed_in_any(m["caption"], [neg["caption"] for neg in negatives])
        shown = [negative_figure(neg, f"hard negative {k + 1} of {len(negatives)}",
                                 word_diff(m["caption"], neg["caption"])[1], f"{stem}-{thumb_end(k)}",
                                 f"keyword {neg['keyword']} · c {neg['concreteness']:.2f} · margin "
                                 f"{adaptive_margin(neg['concreteness']):+.2f}")
                 for k, neg in enumerate(negatives)]
    return (f'<article class="card" data-category="{html.escape(m["category"])}" data-c="{m["concreteness"]:.3f}">'
            f'<div class="pair"><figure><div class="side">anchor</div><img src="thumbs/{stem}-a.jpg" alt="anchor">'
            f'<figcaption class="anchor">{before}</figcaption></figure>{"".join(shown)}</div><dl>{dl}</dl>'
            '</article>')


def negative_figure(negative: dict, side: str, caption: str, thumb: str, facts: str | None) -> str:
    """One negative of a card: its thumbnail, or a "no picture" box for a caption without one (never another
    picture in its place); its caption as marked HTML; ``facts``: a line under it (keyword and concreteness)."""
    picture = (f'<img src="thumbs/{thumb}.jpg" alt="{html.escape(side)}">' if negative["image"] is not None else
               '<div class="nopic" role="img" aria-label="no picture">no picture: this negative is a caption '
               'only</div>')
    below = f'<p class="negfacts">{html.escape(facts)}</p>' if facts else ""
    return (f'<figure><div class="side">{html.escape(side)}</div>{picture}<figcaption class="negative">{caption}'
            f'</figcaption>{below}</figure>')


def header(name: str, s: dict) -> str:
    fmt = lambda v: "-" if v is None else f"{v:.2f}" if isinstance(v, float) else str(v)  # noqa: E731
    shares = ", ".join(f"{html.escape(k)} {v:.0%}" for k, v in (s.get("category_shares") or {}).items())
    rejects = ", ".join(f"{html.escape(k)}: {v}" for k, v in (s.get("rejects_by_reason") or {}).items()) or "none"
    return (f'<div class="summary"><h3>{html.escape(name)}</h3><p>{fmt(s.get("ok"))} pairs · mean c '
            f'{fmt(s.get("mean_concreteness"))} · median c {fmt(s.get("median_concreteness"))}</p>'
            f'<p>{shares}</p><p>rejects: {rejects}</p></div>')


PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>ConcreteBatch gallery: {title}</title>
<link rel="stylesheet" href="gallery.css"></head>
<body>
<header><h1>ConcreteBatch gallery</h1><div class="summaries">{headers}</div>
<form id="controls" onsubmit="return false">
<label>category <select id="category"><option value="">all</option>{options}</select></label>
<label>concreteness <input id="cmin" type="number" step="0.1" value="1"> to
<input id="cmax" type="number" step="0.1" value="5"></label>
<label>search <input id="search" type="search" placeholder="words in any caption"></label>
<label>sort <select id="sort">{sorts}</select></label>
<span id="shown">{count}</span> of {count} shown · keys: j / k next / previous</form></header>
<main id="rows">
{rows}
</main>
<script src="gallery.js"></script>
</body></html>
"""

CSS = """body{font:14px system-ui,sans-serif;margin:0;background:#f6f6f4;color:#222}
header{position:sticky;top:0;background:#fff;border-bottom:1px solid #ddd;padding:8px 16px;z-index:1}
h1{font-size:18px;margin:0 0 6px}.summaries{display:flex;gap:24px;flex-wrap:wrap}.summary p{margin:2px 0}
.summary h3{margin:4px 0;font-size:14px}form{margin-top:6px;display:flex;gap:16px;flex-wrap:wrap;align-items:center}
.row{padding:8px 16px;border-bottom:1px solid #e4e4e0}.row:focus{outline:3px solid #4a7;background:#eef8f1}
.row h2{font-size:12px;color:#777;margin:0 0 4px}.cards{display:flex;gap:16px;overflow-x:auto}
.card{background:#fff;border:1px solid #ddd;border-radius:6px;padding:8px;min-width:540px;flex:none}
.card.missing{min-width:120px;color:#999}.card.dim{opacity:.3}.pair{display:flex;gap:8px}figure{margin:0;width:256px}
img{width:256px;height:auto;display:block;border-radius:4px}figcaption{margin-top:4px}
mark.del{background:#fbd3d0;text-decoration:line-through}mark.ins{background:#cdeccd}
dl{display:grid;grid-template-columns:max-content auto;gap:2px 10px;margin:6px 0 0;font-size:12px}
dt{color:#777}dd{margin:0}input[type=number]{width:4.5em}
.side{font-size:11px;font-weight:600;text-transform:uppercase;letter-spacing:.04em;color:#666;margin:0 0 2px}
.nopic{width:256px;height:128px;display:flex;align-items:center;justify-content:center;text-align:center;
border:2px dashed #bbb;border-radius:4px;color:#888;font-size:12px;box-sizing:border-box;padding:8px}
.negfacts{margin:2px 0 0;font-size:12px;color:#555}
"""

JS = """// Filters, sort and keyboard navigation. Reads data-* attributes only; never writes HTML.
(function () {
  const rows = Array.from(document.querySelectorAll('.row'));
  const main = document.getElementById('rows');
  const el = (id) => document.getElementById(id);
  // a card passes when its own category and concreteness do; a row shows when a card passes and its
  // captions hold the search text; cards that do not pass are dimmed, not hidden, to keep datasets aligned
  function apply() {
    const cat = el('category').value, q = el('search').value.toLowerCase().trim();
    const lo = parseFloat(el('cmin').value || '1'), hi = parseFloat(el('cmax').value || '5');
    let shown = 0;
    for (const r of rows) {
      let any = false;
      for (const card of r.querySelectorAll('.card[data-category]')) {
        const c = parseFloat(card.dataset.c);
        const pass = (!cat || card.dataset.category === cat) && c >= lo && c <= hi;
        card.classList.toggle('dim', !pass);
        any = any || pass;
      }
      const ok = any && (!q || r.dataset.text.includes(q));
      r.hidden = !ok;
      if (ok) shown++;
    }
    el('shown').textContent = String(shown);
  }
  function sort() {
    const how = el('sort').value;
    const sorted = rows.slice();
    if (how) sorted.sort((a, b) => (how === 'c-desc' ? -1 : 1) * (parseFloat(a.dataset.c) - parseFloat(b.dataset.c)));
    for (const r of sorted) main.appendChild(r);
  }
  for (const id of ['category', 'cmin', 'cmax', 'search']) {
    el(id).addEventListener('input', apply);
    el(id).addEventListener('change', apply);
  }
  el('sort').addEventListener('change', sort);
  document.addEventListener('keydown', (e) => {
    if (e.target.tagName === 'INPUT' || (e.key !== 'j' && e.key !== 'k')) return;
    const visible = Array.from(main.querySelectorAll('.row')).filter((r) => !r.hidden);
    const at = visible.indexOf(document.activeElement);
    const next = visible[Math.max(0, Math.min(visible.length - 1, at + (e.key === 'j' ? 1 : -1)))];
    if (next) { next.focus(); next.scrollIntoView({block: 'nearest'}); }
  });
  apply();
})();
"""

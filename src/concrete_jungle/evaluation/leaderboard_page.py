"""The leaderboard as one static page, ``leaderboard.html`` beside ``leaderboard.md`` (`eval --models`): the table
of headline numbers with the difference from the reference and its 95 % interval, sortable by any column (click its
name), raw or chance-normalised (a toggle), each benchmark's blind baseline and bag-of-words-identical share where
its results hold them, and a drill-down per benchmark to its subsets.

One file that opens from disk: no server, no CDN, nothing fetched; its Content-Security-Policy lets only its own
inline script and style run (by their hashes) and forbids every request. Model labels and benchmark or subset names
are untrusted text: the data is embedded as JSON with ``<``, ``>`` and ``&`` written as ``\\u003c``, ``\\u003e``
and ``\\u0026`` (nothing in it can close the script element), and the script writes every string with
``textContent``, never as HTML.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json

from .chance import normalised


def points(value: float | None) -> float | None:
    return None if value is None else 100 * value


def difference(d: dict | None, scale: float | None) -> dict | None:
    """A difference from the reference in points, its interval and verdict, each multiplied by ``scale`` (1 for the
    raw scores; 1 / (1 - chance) for the chance-normalised ones: normalising is linear, so the interval maps
    exactly); None where there is none or no scale."""
    if d is None or scale is None:
        return None
    ci = None if d["ci95"] is None else [scale * d["ci95"][0], scale * d["ci95"][1]]
    return {"estimate": scale * d["estimate"], "ci95": ci, "verdict": d["verdict"]}


def page_data(board: dict) -> dict:
    """What the page shows, from `leaderboard.table`'s board: scores in points, raw and chance-normalised."""
    reference = board["reference"]
    kinds = list(dict.fromkeys(b["kind"] for b in board["benchmarks"]))
    benchmarks = []
    for b in board["benchmarks"]:
        bow = b.get("bag_of_words")
        chance = board["cells"][reference][b["name"]]["chance"]
        benchmarks.append({"name": b["name"], "kind": b["kind"], "headlines": b["headlines"], "items": b["items"],
                           "chance": points(chance),
                           "bow": {"identical": sum(c["bow_identical"] for c in bow.values()), "subsets": bow}
                           if bow else None})
    models = []
    for m in board["models"]:
        cells = []
        for b in board["benchmarks"]:
            c = board["cells"][m["label"]][b["name"]]
            chance, blind = c["chance"], c["blind"]
            same_chance = chance is not None and chance < 1 and \
                chance == board["cells"][reference][b["name"]]["chance"]
            blind_subsets = c.get("blind_subsets") or {}
            cells.append({"raw": points(c["value"]), "normalised": points(c["normalised"]),
                          "delta_raw": difference(c.get("difference"), 1.0),
                          "delta_normalised": difference(c.get("difference"), 1 / (1 - chance) if same_chance
                                                         else None),
                          "blind_raw": points(blind) if isinstance(blind, float) else blind,
                          "blind_normalised": points(normalised(blind, chance)) if isinstance(blind, float)
                          else blind,
                          # by name: the order a result read back from its file has (JSON written sorted)
                          "subsets": [[k, points(v), points(blind_subsets.get(k))]
                                      for k, v in sorted(c["subsets"].items())]})
        means = [board["means"][m["label"]].get(kind, {}) for kind in kinds]
        models.append({"label": m["label"], "model": m["model"], "cells": cells,
                       "means": [{"raw": points(p.get("mean")), "normalised": points(p.get("normalised_mean"))}
                                 for p in means]})
    return {"reference": reference, "benchmarks": benchmarks, "models": models,
            "kinds": [{"name": kind, "over": [b["name"] for b in board["benchmarks"] if b["kind"] == kind]}
                      for kind in kinds]}


def embedded_json(data: dict) -> str:
    """``data`` as JSON that is safe inside a <script> element: no ``<``, ``>`` or ``&`` (so no ``</script>``, no
    ``<!--``), nor the two line separators some parsers end a line at."""
    text = json.dumps(data, ensure_ascii=False, allow_nan=False)
    for char, escape in (("&", "\\u0026"), ("<", "\\u003c"), (">", "\\u003e"), ("\u2028", "\\u2028"),
                         ("\u2029", "\\u2029")):
        text = text.replace(char, escape)
    return text


def csp_hash(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode("ascii") + "'"


def page(board: dict) -> str:
    """The page's HTML: the data (`page_data`) as escaped JSON, the script that draws it, the notes in words."""
    reference = html.escape(board["reference"])
    notes = (f"Each cell: the benchmark's headline number (%); for every model after {reference} (the reference), "
             f"under it its difference Δ from {reference} in points with the 95 % interval (paired bootstrap, "
             f"{board['resamples']} resamples of the images, seed {board['seed']}: the intervals of "
             "<code>concrete-jungle eval --compare</code>), ▲ / ▼ where the interval lies above / below 0; then "
             "the blind baseline: the model's own text tower choosing against the mean picture of the benchmark "
             "(n/a where a caption chooses among pictures: a blind model can only guess there). Chance-normalised: "
             "(score − chance) / (100 − chance) × 100, 0 at chance and 100 perfect (docs/method.md §7); its Δ and "
             "interval are the raw ones divided by (1 − chance), exact since the map is linear. Means: the mean "
             "over each kind's benchmarks of their headline numbers (the benchmarks named under each). "
             "Bag-of-words identical: the items whose caption and negative hold the same words, order aside, "
             "which a text encoder that ignores word order cannot tell apart. Subsets show raw scores only "
             "(chance levels are computed for the headline metrics).")
    return PAGE.format(csp=f"default-src 'none'; script-src {csp_hash(JS)}; style-src {csp_hash(CSS)}; "
                       "img-src 'none'; connect-src 'none'; form-action 'none'; base-uri 'none'",
                       css=CSS, js=JS, data=embedded_json(page_data(board)), reference=reference, notes=notes)


def write_page(board: dict, path) -> None:
    from ..records import atomic_write_text

    atomic_write_text(path, page(board))


PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{csp}">
<title>Leaderboard</title>
<style>{css}</style></head>
<body>
<header><h1>Leaderboard</h1>
<p>Reference: <b>{reference}</b>. Click a column's name to sort by it (again: the other way).</p>
<fieldset id="mode"><legend>scores</legend>
<label><input type="radio" name="mode" id="mode-raw" value="raw" checked> raw (%)</label>
<label><input type="radio" name="mode" id="mode-normalised" value="normalised"> chance-normalised
(0 chance, 100 perfect)</label></fieldset></header>
<main>
<table id="board"><thead></thead><tbody></tbody></table>
<p class="notes">{notes}</p>
<h2>Subsets</h2>
<div id="subsets"></div>
</main>
<script type="application/json" id="board-data">{data}</script>
<script>{js}</script>
</body></html>
"""

CSS = """body{font:14px system-ui,sans-serif;margin:0;background:#f6f6f4;color:#222}
header{background:#fff;border-bottom:1px solid #ddd;padding:10px 18px}h1{font-size:20px;margin:0 0 4px}
header p{margin:2px 0 8px}main{padding:12px 18px}fieldset{border:1px solid #ccc;border-radius:6px;display:inline-flex;
gap:18px;padding:4px 12px}legend{font-size:12px;color:#666}
table{border-collapse:collapse;background:#fff;font-variant-numeric:tabular-nums}
th,td{border:1px solid #ddd;padding:6px 10px;vertical-align:top}thead th{background:#eef1f4;text-align:center}
th.label{text-align:left;max-width:22em;overflow-wrap:anywhere}
button.sort{font:inherit;font-weight:600;border:0;background:none;cursor:pointer;padding:0;color:#123}
button.sort:hover{text-decoration:underline}.arrow{color:#36c;margin-left:4px}
.facts{font-size:11px;font-weight:normal;color:#555;margin-top:3px}.facts a{color:#36c}
td.score{text-align:right;min-width:8.5em}.value{font-size:15px;font-weight:600}
.delta,.blind{font-size:11px;color:#555;white-space:nowrap}.delta.higher{color:#1a7f37;font-weight:600}
.delta.lower{color:#c62828;font-weight:600}td.mean{background:#f7f9fb}.model{font-size:11px;font-weight:normal;color:#777}
.notes{max-width:80em;font-size:12px;color:#444;line-height:1.45}details{margin:6px 0;background:#fff;
border:1px solid #ddd;border-radius:6px;padding:6px 10px}summary{cursor:pointer;font-weight:600}
details table{margin-top:6px}details td{text-align:right}details th{text-align:left}
"""

JS = """// Draws the leaderboard from the embedded data; every string is written as text (textContent), never as HTML.
(function () {
  'use strict';
  const data = JSON.parse(document.getElementById('board-data').textContent);
  const make = (tag, text, cls) => {
    const e = document.createElement(tag);
    if (text !== undefined && text !== null) e.textContent = text;
    if (cls) e.className = cls;
    return e;
  };
  const fixed = (v) => (v === null || v === undefined ? '\\u2013' : v.toFixed(2));
  const signed = (v) => (v < 0 ? '\\u2212' : '+') + Math.abs(v).toFixed(2);
  const marks = {higher: ' \\u25b2', lower: ' \\u25bc'};
  const columns = [{label: 'model'}]
    .concat(data.benchmarks.map((b, i) => ({label: b.name, bench: i})))
    .concat(data.kinds.map((k, i) => ({label: k.name + ' mean', mean: i})));
  let mode = 'raw', sortBy = null, descending = true;

  function score(model, col) {
    if (col.bench !== undefined) return model.cells[col.bench][mode];
    if (col.mean !== undefined) return model.means[col.mean][mode];
    return null;
  }
  function order() {
    const models = data.models.slice();
    if (sortBy === null) return models;
    const col = columns[sortBy], sign = descending ? -1 : 1;
    models.sort((a, b) => {
      if (col.bench === undefined && col.mean === undefined) return sign * a.label.localeCompare(b.label);
      const x = score(a, col), y = score(b, col);
      if (x === null || y === null) return (x === null) - (y === null);  // no value: last either way
      return sign * (x - y);
    });
    return models;
  }
  function headerCell(col, i) {
    const th = make('th');
    const button = make('button', col.label, 'sort');
    button.type = 'button';
    button.addEventListener('click', () => {
      descending = sortBy === i ? !descending : i !== 0;
      sortBy = i;
      draw();
    });
    th.appendChild(button);
    if (sortBy === i) {
      th.setAttribute('aria-sort', descending ? 'descending' : 'ascending');
      button.appendChild(make('span', descending ? '\\u25bc' : '\\u25b2', 'arrow'));
    }
    const facts = [];
    if (col.bench !== undefined) {
      const b = data.benchmarks[col.bench];
      facts.push(b.headlines.join(' + ') + (b.headlines.length > 1 ? ' (mean)' : '') + ', ' + b.items + ' items');
      if (b.chance !== null) facts.push('chance ' + fixed(mode === 'raw' ? b.chance : 0));
      if (b.bow) facts.push('bag-of-words identical ' + b.bow.identical + ' of ' + b.items + ' (' +
                            (100 * b.bow.identical / b.items).toFixed(1) + ' %)');
    } else if (col.mean !== undefined) {
      facts.push('over ' + data.kinds[col.mean].over.join(', '));
    }
    for (const f of facts) th.appendChild(make('div', f, 'facts'));
    if (col.bench !== undefined) {
      const link = make('a', 'subsets');
      link.href = '#subsets-' + col.bench;
      link.addEventListener('click', () => { document.getElementById('subsets-' + col.bench).open = true; });
      const div = make('div', null, 'facts');
      div.appendChild(link);
      th.appendChild(div);
    }
    return th;
  }
  function scoreCell(model, col) {
    const td = make('td', null, col.mean !== undefined ? 'score mean' : 'score');
    td.appendChild(make('div', fixed(score(model, col)), 'value'));
    if (col.bench === undefined) return td;
    const cell = model.cells[col.bench], d = cell['delta_' + mode];
    if (model.label !== data.reference) {
      const text = d === null ? '\\u0394 \\u2013' : '\\u0394 ' + signed(d.estimate) + ' ' +
        (d.ci95 === null ? '(no interval)' : '[' + signed(d.ci95[0]) + ', ' + signed(d.ci95[1]) + ']') +
        (marks[d.verdict] || '');
      td.appendChild(make('div', text, 'delta' + (d && marks[d.verdict] ? ' ' + d.verdict : '')));
    }
    const blind = cell['blind_' + mode];
    if (blind !== null) td.appendChild(make('div', 'blind ' + (typeof blind === 'number' ? fixed(blind) : 'n/a'),
                                            'blind'));
    return td;
  }
  function draw() {
    const head = make('tr');
    columns.forEach((col, i) => head.appendChild(headerCell(col, i)));
    document.querySelector('#board thead').replaceChildren(head);
    const rows = order().map((model) => {
      const tr = make('tr', null, model.label === data.reference ? 'reference' : '');
      const label = make('th', null, 'label');
      label.appendChild(make('span', model.label, 'name'));
      if (model.label === data.reference) label.appendChild(make('span', ' (reference)', 'model'));
      if (model.model && model.model !== model.label) label.appendChild(make('div', model.model, 'model'));
      tr.appendChild(label);
      for (const col of columns.slice(1)) tr.appendChild(scoreCell(model, col));
      return tr;
    });
    document.querySelector('#board tbody').replaceChildren(...rows);
  }
  function subsets() {
    const holder = document.getElementById('subsets');
    data.benchmarks.forEach((b, i) => {
      const details = make('details');
      details.id = 'subsets-' + i;
      const count = data.models[0].cells[i].subsets.length;
      details.appendChild(make('summary', b.name + ' \\u2014 ' + count + (count === 1 ? ' metric' : ' metrics') +
                               ' (%; blind in brackets)'));
      const table = make('table'), head = make('tr');
      head.appendChild(make('th', 'metric'));
      for (const m of data.models) head.appendChild(make('th', m.label));
      if (b.bow) head.appendChild(make('th', 'bag-of-words identical'));
      table.appendChild(head);
      data.models[0].cells[i].subsets.forEach(([metric], row) => {
        const tr = make('tr');
        tr.appendChild(make('th', metric));
        for (const m of data.models) {
          const [, value, blind] = m.cells[i].subsets[row] || [metric, null, null];
          tr.appendChild(make('td', fixed(value) + (blind === null ? '' : ' (' + fixed(blind) + ')')));
        }
        if (b.bow) {
          const split = b.bow.subsets[metric];
          tr.appendChild(make('td', split ? split.bow_identical + ' of ' + (split.bow_identical + split.bow_differs)
                                  : ''));
        }
        table.appendChild(tr);
      });
      details.appendChild(table);
      holder.appendChild(details);
    });
  }
  for (const input of document.querySelectorAll('input[name=mode]')) {
    input.addEventListener('change', () => { mode = input.value; draw(); });
  }
  subsets();
  draw();
})();
"""

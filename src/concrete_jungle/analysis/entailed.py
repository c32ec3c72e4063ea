"""Negatives still true of their anchor, per dataset and edit kind, for `analyze` (docs/method.md §3, "Entailed
negatives"): how many negatives' ``anchor_true_of_negative`` is true, false or unknown (not decided, or a dataset
made before the field existed), and what decided them.

A negative's edit kind is its own ``kind`` (an imported negative: swap, hard image, ...), else its record's ``edit``
(the gate's positive control: add_att, swap_obj, ...), else its record's ``category`` (a planted keyword's:
attribute, object, relation).
"""

from __future__ import annotations

import json

STATES = ("true", "false", "unknown")


def state(value) -> str:
    return "unknown" if value is None else "true" if value else "false"


def negative_entries(meta: dict) -> list[tuple[str, str, str | None]]:
    """(edit kind, state, decider) of each negative of a record's metadata; a record without ``negatives`` holds
    one negative, undecided."""
    from ..concretebatch import anchor_truth

    entries = meta.get("negatives") or [{}]
    out = []
    for k, entry in enumerate(entries):
        kind = entry.get("kind") or meta.get("edit") or meta.get("category") or "none"
        value, how = anchor_truth(entry, meta.get("id"), k)  # a damaged value is an error, not counted
        out.append((str(kind), state(value), None if how is None else json.dumps(how, sort_keys=True)))
    return out


def counts_row(counter: dict[str, int]) -> dict:
    n = sum(counter.values())
    return {"negatives": n, **{s: counter.get(s, 0) for s in STATES},
            **{f"share_{s}": counter.get(s, 0) / n if n else None for s in STATES}}


def entailed_shares(metas: list[dict]) -> dict:
    """Over every negative of these records: counts and shares of true / false / unknown, in all (``all``) and per
    edit kind (``by_kind``), and how many negatives each decider decided (``deciders``: its record as JSON)."""
    total: dict[str, int] = {}
    kinds: dict[str, dict[str, int]] = {}
    deciders: dict[str, int] = {}
    for meta in metas:
        for kind, s, how in negative_entries(meta):
            total[s] = total.get(s, 0) + 1
            kinds.setdefault(kind, {})
            kinds[kind][s] = kinds[kind].get(s, 0) + 1
            if how is not None:
                deciders[how] = deciders.get(how, 0) + 1
    return {"all": counts_row(total), "by_kind": {k: counts_row(v) for k, v in sorted(kinds.items())},
            "deciders": dict(sorted(deciders.items()))}


def entailed_markdown(shares: dict[str, dict]) -> str:
    """The report's section: per dataset, a row for all its negatives and one per edit kind."""
    lines = ["## Negatives still true of their anchor", "",
             "Per negative, `anchor_true_of_negative`: whether the anchor's caption is still true of the negative's "
             "picture (a false negative for the image side of the loss), as its decider recorded it; unknown where "
             "none decided (docs/method.md §3).", "",
             "| dataset | edit kind | negatives | true | false | unknown | share true |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    for name, table in shares.items():
        for kind, row in [("all", table["all"]), *table["by_kind"].items()]:
            share = "-" if row["share_true"] is None else f"{row['share_true']:.1%}"
            lines.append(f"| {name} | {kind} | {row['negatives']} | {row['true']} | {row['false']} | "
                         f"{row['unknown']} | {share} |")
    decided = {name: table["deciders"] for name, table in shares.items() if table["deciders"]}
    if decided:
        lines += ["", "Decided by: " + "; ".join(f"{name}: " + ", ".join(f"`{how}` ({n})" for how, n in d.items())
                                                for name, d in decided.items())]
    return "\n".join(lines)


def entailed_sentence(name: str, row: dict) -> str:
    """One line for the console: a dataset's counts."""
    share = "" if row["share_true"] is None else f" ({row['share_true']:.1%})"
    return (f"{name}: the anchor's caption is true of {row['true']} of {row['negatives']} negative pictures{share}, "
            f"false of {row['false']}, unknown for {row['unknown']}")

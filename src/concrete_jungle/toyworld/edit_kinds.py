"""Each planted record's edit kind and the test subset that edit matches.

The toy editor records on every record it draws the slot its keyword came from, ``edit_kind`` in the record's
metadata (`rewrite.ToyEditor.meta_fields`): colour, texture, size, shape, relation, light or mood. `EDIT_KIND_SUBSET`
names the test subset that changes the same slot (`build.SUBSETS`, `attributes.ATTRIBUTE_SUBSETS`), so a dataset's
matched outcome is the mean of the subsets of the kinds its records make; `edit_kind_counts` counts them.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import DatasetError

EDIT_KIND_SUBSET = {"colour": "replace_att", "texture": "replace_att", "size": "replace_size", "shape": "replace_obj",
                    "relation": "replace_rel", "light": "replace_light", "mood": "replace_mood"}


def edit_kind_counts(dataset_dir: str | Path) -> dict[str, int]:
    """The kept records of a ConcreteBatch per edit kind (each record's ``edit_kind``), in `EDIT_KIND_SUBSET`'s
    order, every kind present (0 where none); a record without the field (a dataset not drawn by the toy editor, or
    drawn before it recorded the field) is an error naming it."""
    from ..concretebatch import iter_records

    counts = dict.fromkeys(EDIT_KIND_SUBSET, 0)
    for record in iter_records(dataset_dir):
        kind = record["meta"].get("edit_kind")
        if kind not in counts:
            what = "has no edit_kind" if kind is None else f"has edit_kind {kind!r}, not one of {', '.join(counts)}"
            raise DatasetError(f"{dataset_dir}: record {record['meta'].get('id')!r} {what}; plant it again with the "
                               "toy editor (--editor toyworld), which records each record's edit kind")
        counts[kind] += 1
    return counts

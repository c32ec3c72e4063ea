"""One module per benchmark (clip_benchmark's shape), each reading its files under the data root and scoring them:
``load_root(root, skip_missing)`` (or the reader `names.BENCHMARKS` gives), ``evaluate(encoder, data)`` and
``item_chances(data)``. `names.benchmark_module` is the one place a benchmark's name becomes its module; the
machinery they share (encoding, choices, two-by-two items, checks, chance, validity) sits one level up, in
`evaluation`. Nothing is imported here: each module imports torch and open_clip, and is imported where it is used.
"""

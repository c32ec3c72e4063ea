"""Benchmark names, importable without torch (the CLI's help lists them)."""

BENCHMARKS = ("sugarcrepe", "sugarcrepe_pp", "winoground", "retrieval", "linear_probe", "coco_probe", "vtab")

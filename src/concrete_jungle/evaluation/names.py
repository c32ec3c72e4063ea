"""Benchmark names, importable without torch (the CLI's help lists them)."""

BENCHMARKS = ("sugarcrepe", "sugarcrepe_pp", "winoground", "aro", "aro_order", "valse", "whatsup", "retrieval",
              "coco_retrieval", "zeroshot", "linear_probe", "coco_probe", "vtab")

#!/usr/bin/env bash
# The GPU acceptance run as one command on an H200 machine (about 8 minutes, each part under its own time limit,
# most important first).
#
#   bash benchmarks/gpu_check.sh prepare
#       here, once per checkout: .whl/ gets the wheels the device image lacks (open_clip, ftfy, wcwidth, webdataset,
#       braceexpand, diffusers, for its Python 3.12) and .gpu_check/D_hc a small toy-world ConcreteBatch. Both are
#       git-ignored; together about 10 MB. Copy the checkout with both to the GPU machine.
#   bash benchmarks/gpu_check.sh
#       there (Python 3.12 with torch, no internet needed); then put the numbers into docs/benchmarks.md and
#       the README.
#
# What it writes to $OUT:
#   gpu.txt            the GPU, driver and torch version
#   train_step.txt     benchmarks/train_step.py: ViT-B-32, N = 1024 anchors (2N images and texts), bf16, batches on
#                      the GPU: ms/step against open_clip_train, pairs/s, model FLOPs utilisation (goal >= 35 %)
#   train_step_captions.txt  the same with the toy world's captions: ours encodes them at their length
#                      (models/text_encoding.py), open_clip_train at 77 tokens (goal <= 0.80)
#   train_cached.txt   benchmarks/train_data_path.py: `train()` end to end on a synthetic COCO-size ConcreteBatch read
#                      from the image cache, against the same step on GPU-resident batches (goal >= 0.90), MFU
#   editor.txt         benchmarks/editor_throughput.py: the diffusers editor with SDXL-Turbo's full-size
#                      architecture at 512 px, fp16, batches 1-16: pictures/s and hours for COCO Karpathy train
#   trainer_cuda.txt   `train()` on CUDA: 40 steps straight against 20 + resume + 20 on the toy ConcreteBatch
# DEVICE, MODEL, N and PRECISION change the setting; the dry run on a CPU (tiny models, about 3 minutes):
#   DEVICE=cpu MODEL=cj-tiny N=16 PRECISION=fp32 bash benchmarks/gpu_check.sh
set -uo pipefail
cd "$(dirname "$0")/.."

if [ "${1:-}" = prepare ]; then
  set -e
  rm -rf .whl .gpu_check && mkdir -p .whl .gpu_check
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl \
    open_clip_torch=="$(python3 -c 'import open_clip; print(open_clip.__version__)')" ftfy wcwidth \
    webdataset=="$(python3 -c 'import importlib.metadata as m; print(m.version("webdataset"))')" braceexpand \
    diffusers=="$(python3 -c 'import diffusers; print(diffusers.__version__)')"
  world=$(mktemp -d)
  python3 -c "import sys; from concrete_jungle.toyworld.build import WorldConfig, build_world
build_world(sys.argv[1], WorldConfig(train=300, test=20), progress=False)" "$world"
  concrete-jungle plant --captions "$world/captions.jsonl" --images "$world/images" --out .gpu_check/D_hc \
    --mode hc --captioner toyworld --editor toyworld --editor-option "world=$world" --no-progress
  cp "$world/captions.jsonl" .gpu_check/captions.jsonl
  rm -rf "$world"
  du -sh .whl .gpu_check
  exit 0
fi

DEVICE=${DEVICE:-cuda} MODEL=${MODEL:-ViT-B-32} N=${N:-1024} PRECISION=${PRECISION:-amp_bf16}
OUT=${OUT:-runs/gpu_check}
mkdir -p "$OUT"
[ -d .whl ] && [ -d .gpu_check/D_hc ] && [ -f .gpu_check/captions.jsonl ] || { echo "run 'bash benchmarks/gpu_check.sh prepare' first" >&2; exit 2; }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/gpu_check_site \
  .whl/*.whl || exit 1
export PYTHONPATH=$PWD/src:/tmp/gpu_check_site PYTHONUNBUFFERED=1
status=0
if [ "$DEVICE" = cpu ]; then  # the dry run: tiny sizes, so that every part runs in a few minutes
  editor=(--tiny --size 64 --batch-sizes 1,2 --pictures 4) steps=8
else
  editor=(--batch-sizes 1,8,16 --pictures 48) steps=30
fi

{ nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>/dev/null
  python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"; } | tee "$OUT/gpu.txt"

timeout 100 python3 benchmarks/train_step.py --model "$MODEL" --n "$N" --device "$DEVICE" --precision "$PRECISION" \
  --steps 5 --rounds 3 2>&1 | tee "$OUT/train_step.txt" || status=1

timeout 60 python3 benchmarks/train_step.py --model "$MODEL" --n "$N" --device "$DEVICE" --precision "$PRECISION" \
  --steps 3 --rounds 3 --captions .gpu_check/captions.jsonl 2>&1 | tee "$OUT/train_step_captions.txt" || status=1

timeout 130 python3 benchmarks/train_data_path.py --model "$MODEL" --n "$N" --device "$DEVICE" \
  --precision "$PRECISION" --steps "$steps" --path cache 2>&1 | tee "$OUT/train_cached.txt" || status=1

timeout 140 python3 benchmarks/editor_throughput.py --device "$DEVICE" "${editor[@]}" 2>&1 | tee "$OUT/editor.txt" \
  || status=1

timeout 50 python3 - "$DEVICE" "$PRECISION" <<'EOF' 2>&1 | tee "$OUT/trainer_cuda.txt" || status=1
import json, math, statistics, sys, tempfile
from concrete_jungle.train.loop import train
from concrete_jungle.train.config import load_config

device, precision = sys.argv[1:]
root = tempfile.mkdtemp()
base = ["model.name=cj-demo", "model.pretrained=none", f"model.precision={precision}", f"device={device}",
        "data.concretebatch=['.gpu_check/D_hc']", "data.workers=4", "optim.lr=0.002", "optim.warmup=5",
        "batch_size=64", "steps=40", "save_every=20"]
train(load_config(None, base + [f"out={root}/straight"]), progress=False)
resumed = load_config(None, base + [f"out={root}/resumed"])
train(resumed, progress=False, stop_at=20)
train(resumed, progress=False, resume="latest")
rows = {k: [json.loads(line) for line in open(f"{root}/{k}/metrics.jsonl")] for k in ("straight", "resumed")}
loss = {k: [r["loss"] for r in v] for k, v in rows.items()}
first, last = statistics.mean(loss["straight"][:5]), statistics.mean(loss["straight"][-5:])
gap = max(abs(a - b) for a, b in zip(loss["straight"], loss["resumed"]))
print(f"{device} {precision}: steps {len(loss['straight'])} and {len(loss['resumed'])}; "
      f"loss {first:.4f} (first 5) -> {last:.4f} (last 5); straight vs 20 + resume + 20: max |loss difference| "
      f"{gap:.2e}; median {statistics.median(r['samples_per_s'] for r in rows['straight']):.0f} anchors/s (cj-demo)")
assert all(math.isfinite(x) for v in loss.values() for x in v) and last < first
assert [r["step"] for r in rows["resumed"]] == list(range(1, 41))
EOF
exit $status

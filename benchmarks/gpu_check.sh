#!/usr/bin/env bash
# The book on a CUDA machine, in one run (see the README, "On a GPU"):
#   bash benchmarks/gpu_check.sh OUTDIR
# 1. the unit and widget tests with ATTENTION_BOOK_DEVICE=cuda (tests/widgets/test_cuda.py switches
#    every widget CPU -> CUDA -> CPU), and every chapter under strict nbval with the widgets on CUDA,
#    side by side; 2. then, alone on the machine, the benchmark's attention, memory, widget and
#    training sections on the CPU and on CUDA, into OUTDIR/bench (merge them with
#    `python benchmarks/run.py --gpu-results OUTDIR/bench/results.json`).
# Uses the python on PATH (PYTHON=... to choose), with this checkout's src/ first on PYTHONPATH.
set -u
out=${1:?usage: bash benchmarks/gpu_check.sh OUTDIR}
python=${PYTHON:-python3}
cd "$(dirname "$0")/.."
mkdir -p "$out"
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
"$python" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'torch finds no CUDA device here')" || exit 2
ATTENTION_BOOK_DEVICE=cuda "$python" -m pytest tests/unit tests/widgets -n 6 -q -p no:cacheprovider -o addopts= -rfE \
    > "$out/tests.log" 2>&1 &
for chapter in notebooks/[0-9][0-9]_*.ipynb; do
    name=$(basename "$chapter" .ipynb)
    ATTENTION_BOOK_DEVICE=cuda OMP_NUM_THREADS=1 "$python" -m pytest --nbval --nbval-current-env \
        --nbval-sanitize-with nbval_sanitize.cfg -p no:cacheprovider -q -o addopts= -rfE "$chapter" \
        > "$out/nbval_$name.log" 2>&1 &
done
wait
"$python" benchmarks/run.py --only attention memory widgets training --devices cpu cuda --skip-browser \
    --out "$out/bench" > "$out/bench.log" 2>&1
status=0
for log in "$out"/tests.log "$out"/nbval_*.log; do
    summary=$(tail -n 1 "$log")
    echo "$(basename "$log"): $summary"
    case "$summary" in *failed*|*error*) status=1 ;; esac
done
echo "bench: $(tail -n 1 "$out/bench.log" | cut -c1-100) -> $out/bench/RESULTS.md"
exit $status

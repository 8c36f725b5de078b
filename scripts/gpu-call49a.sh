#!/usr/bin/env bash
# Session 49's first GPU call: where the fast scorer's and the tensor-core attention's instructions
# go, per SASS instruction (this machine has no cuobjdump): each kernel's SASS (cuobjdump) and ncu's
# source counters (instructions executed and stall samples a SASS line) on one launch in the batch
# 64 / 1M step, plus that step's time on main.
#   mkdir -p .dcx && tar -xJf .devcarry/t.tar.xz -C .dcx && OUT=$OUT bash .dcx/gpu-call49a.sh
set -u
. "$(dirname "$0")/gpu-call-lib.sh"  # $O, BUDGET, step, run.txt
cat > /tmp/sass_fun.py <<'PY'
import re, shutil, subprocess, sys
tool = shutil.which("cuobjdump") or "/usr/local/cuda/bin/cuobjdump"
sass = subprocess.run([tool, "-sass", sys.argv[1]], capture_output=True, text=True).stdout
for part in re.split(r"\n\s+Function : ", sass):
    name = part.split("\n", 1)[0]
    if re.search(sys.argv[2], name):
        print("Function :", part)
PY
B=./dsv41_cuda_bench
ARGS="--kernels engine --iters 1 --topk-hints 1 --batches 64 --contexts 1048576"
step ab.txt 60 30 $B --kernels engine --iters 10 --topk-hints 1 --batches 64 --contexts 1048576
step sass_approx.txt 90 30 python3 /tmp/sass_fun.py $B 'approx_kernel'
step sass_attn.txt 90 30 python3 /tmp/sass_fun.py $B 'attn_tensor_kernel'
for k in approx_kernel attn_tensor_kernel; do
  step ncu_$k.txt 150 60 ncu --clock-control none --section SourceCounters --section WarpStateStats --section LaunchStats --import-source no -k regex:$k --launch-skip 1 --launch-count 1 -o /tmp/rep_$k $B $ARGS
  step src_$k.csv 90 20 ncu -i /tmp/rep_$k.ncu-rep --page source --print-source sass --csv
  step det_$k.csv 60 10 ncu -i /tmp/rep_$k.ncu-rep --page details --csv
done
gzip -9 "$O"/sass_*.txt "$O"/src_*.csv 2>/dev/null
exit 0

#!/usr/bin/env bash
# Session 48's fourth GPU call: e2m1x8_to_s8 (mma.cuh) with the code as prmt's selector, against
# var/E0 (index_refine.cu and index_scores_int.cu compiled with mma.cuh as in e564dff): the index,
# selection and refine tests and the whole GPU suite on the build, the batch 64 / 1M step alternated
# three times, ncu's time and instruction count of the fast scorer, and its SASS opcode counts
# (cuobjdump, which this machine lacks).
#   mkdir -p .dcx && tar -xJf .devcarry/t.tar.xz -C .dcx && OUT=$OUT bash .dcx/gpu-call48d.sh
set -u
. "$(dirname "$0")/gpu-call-lib.sh"  # $O, BUDGET, step, run.txt
# SASS opcode counts of each approx_kernel instantiation of a binary (cuobjdump from the CUDA toolkit).
cat > /tmp/sass_ops.py <<'PY'
import collections, re, shutil, subprocess, sys
tool = shutil.which("cuobjdump") or "/usr/local/cuda/bin/cuobjdump"
sass = subprocess.run([tool, "-sass", sys.argv[1]], capture_output=True, text=True).stdout
for part in re.split(r"\n\s+Function : ", sass):
    name = part.split("\n", 1)[0]
    if "approx_kernel" not in name:
        continue
    ops = collections.Counter(m.group(2) for m in re.finditer(r"/\*[0-9a-f]{4,}\*/\s+(@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_]*)", part))
    print(name, sum(ops.values()), ops.most_common(24))
PY
step tests.txt 150 60 ./dsv41_cuda_tests --gtest_filter='*Index*:*Topk*:*Refine*'
ab_step . var/E0
ab_step . var/E0
for b in . var/E0; do
  step ncu_$(basename $b).txt 100 40 ncu --clock-control none --metrics gpu__time_duration.sum,smsp__inst_executed.sum,sm__inst_executed_pipe_alu.avg.pct_of_peak_sustained_active -k regex:'approx_kernel' --launch-count 8 $b/dsv41_cuda_bench --kernels engine --iters 1 --topk-hints 1 --batches 64 --contexts 1048576
  step sass_$(basename $b).txt 90 30 python3 /tmp/sass_ops.py "$b/dsv41_cuda_bench"
done
step tests_all.txt 240 100 ./dsv41_cuda_tests --gtest_brief=1
exit 0

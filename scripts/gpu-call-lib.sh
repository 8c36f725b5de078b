# Sourced by the one-call GPU scripts (gpu-topk-hints.sh, gpu-variants45.sh, gpu-scorer45.sh, gpu-call4*.sh) from
# the extracted carry folder they run in: the Debian libraries beside the binaries, $O for what comes
# back ($OUT), a time budget for the call, `step`, and run.txt (date, GPU, driver, clocks, cores).
cd "$(dirname "${BASH_SOURCE[0]}")"
export LD_LIBRARY_PATH=lib
O="${OUT:-/tmp/out}"; mkdir -p "$O"
BUDGET="${BUDGET:-560}"
t0=$(date +%s)
el() { echo $(( $(date +%s) - t0 )); }
step() {  # step FILE LIMIT_S MIN_LEFT_S cmd...: appends cmd's output to $O/FILE unless past the budget
  local file=$1 lim=$2 need=$3; shift 3
  if [ $(( $(el) + need )) -gt "$BUDGET" ]; then echo "=== skipped at $(el) s: $*" >> "$O/$file"; return; fi
  echo "=== $(date -u +%T) $*" >> "$O/$file"
  timeout "$lim" stdbuf -oL "$@" >> "$O/$file" 2>&1
  echo "=== rc $? at $(el) s" >> "$O/$file"
}
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv; nproc; } > "$O/run.txt" 2>&1
# The top-k and filter-and-refine tests of test binary $1, to tests.txt.
selection_tests() {
  step tests.txt 150 60 "$1" --gtest_filter='DeviceKernelsCuda.Topk*:TopkCuda.*:IndexRefineCuda.*:CudaBackend.IndexRefine*'
}
# The kernel-level step at batch 64 / 1M on the engine's kernels (hints on) of each build folder given
# (its dsv41_cuda_bench), the list alternated twice, to ab.txt.
ab_step() {
  local i b
  for i in 1 2; do
    for b in "$@"; do step ab.txt 60 30 "$b/dsv41_cuda_bench" --kernels engine --iters 10 --topk-hints 1 --batches 64 --contexts 1048576; done
  done
}
# The scorer's ncu time and instruction count (first launches of approx_kernel at batch 64 / 1M) of
# each build folder given, to ncu_NAME.txt.
scorer_ncu() {
  local b
  for b in "$@"; do
    step "ncu_$(basename "$b").txt" 100 40 ncu --clock-control none --metrics gpu__time_duration.sum,smsp__inst_executed.sum \
      -k regex:approx_kernel --launch-count 6 "$b/dsv41_cuda_bench" --kernels engine --iters 1 --topk-hints 1 \
      --batches 64 --contexts 1048576
  done
}
# Everything under $O as one archive in DEST (a call returns at most 8 files), ab.txt beside it.
archive_results() {  # archive_results DEST NAME
  tar -czf "$1/$2.tgz" -C "$O" .
  cp "$O/ab.txt" "$1/" 2>/dev/null || true
}
# ncu's source counters (SASS lines with their executions and stall samples) on one launch of the
# kernels matching REGEX in the batch 64 / 1M step of this build, as $O/NAME_src.csv.
sass_profile() {  # sass_profile REGEX NAME
  step "ncu_$2.txt" 120 50 ncu --section SourceCounters --import-source no -k "regex:$1" --launch-skip 1 \
    --launch-count 1 -o "/tmp/rep_$2" ./dsv41_cuda_bench --kernels engine --iters 1 --topk-hints 1 --batches 64 \
    --contexts 1048576
  [ -f "/tmp/rep_$2.ncu-rep" ] && ncu -i "/tmp/rep_$2.ncu-rep" --page source --print-source sass --csv > "$O/$2_src.csv" 2>&1
}

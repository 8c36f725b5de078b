# Sourced by the one-call GPU scripts (gpu-topk-hints.sh, gpu-variants45.sh, gpu-scorer45.sh) from
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

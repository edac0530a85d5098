#!/usr/bin/env bash
# The prepared GPU check (issue 10, part 4): on a machine with an NVIDIA GPU and its driver,
# build tessel, run the op tests and the PyTorch parity tests on cuda:0, time gemm against cuBLAS
# and a training step of gpt_mini and resnet18 against PyTorch on the same GPU, and print one
# table. Everything runs under one deadline (--minutes, default 8); a step that does not fit is
# reported as skipped, not waited for.
#
#   scripts/gpu_check.sh                 # from the repository root
#   scripts/gpu_check.sh --dry-run       # any machine: checks that every step's command exists
#   scripts/gpu_check.sh --build-dir build-gpu --minutes 8
#
# Needs: the NVIDIA driver (libcuda), the CUDA toolkit's NVRTC (libnvrtc) and cuBLAS (libcublas)
# for the gemm peer, cmake, ninja, a C++20 compiler and the Debian packages scripts/setup.sh
# lists for building (installed with apt-get when missing and root, where a registry is
# reachable), python3 with torch built for CUDA for the PyTorch columns. Prints each step's log
# tail when it fails; the logs stay in BUILD_DIR/gpu_check/.
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
root=$(pwd)
build="build-gpu"
minutes=8
dry_run=0
python=${TESSEL_PYTHON:-python3}
while [[ $# -gt 0 ]]; do
  case "$1" in
    --dry-run) dry_run=1 ;;
    --build-dir) build="$2"; shift ;;
    --minutes) minutes="$2"; shift ;;
    --python) python="$2"; shift ;;
    -h | --help) sed -n '2,17p' "$0"; exit 0 ;;
    *) echo "gpu_check: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done

start=$(date +%s)
deadline=$((start + minutes * 60))
logs="$build/gpu_check"
bin="$build/tessel"
mkdir -p "$logs"
rows=()  # "step|result|seconds|detail"

left() { echo $((deadline - $(date +%s))); }
add_row() { rows+=("$1|$2|$3|$4"); }

# run STEP BUDGET_SECONDS COMMAND...: runs with a timeout of min(budget, time left), logs to
# $logs/STEP.log; in a dry run only checks that the command's program exists.
run() {
  local step=$1 budget=$2
  shift 2
  local t0 rc limit
  t0=$(date +%s)
  if [[ $dry_run -eq 1 ]]; then
    dry_check "$step" "$@"
    return $?
  fi
  limit=$(left)
  ((budget < limit)) && limit=$budget
  if ((limit < 5)); then
    add_row "$step" "skipped" 0 "out of time (--minutes $minutes)"
    return 1
  fi
  timeout --kill-after=10 "$limit" "$@" > "$logs/$step.log" 2>&1
  rc=$?
  if [[ $rc -eq 124 || $rc -eq 137 ]]; then
    add_row "$step" "TIMEOUT" $(($(date +%s) - t0)) "after ${limit}s; log $logs/$step.log"
  elif [[ $rc -ne 0 ]]; then
    add_row "$step" "FAILED" $(($(date +%s) - t0)) "exit $rc; log $logs/$step.log"
    echo "---- $step failed; the end of its log:" >&2
    tail -n 25 "$logs/$step.log" >&2
  else
    add_row "$step" "ok" $(($(date +%s) - t0)) "$(summary "$step")"
  fi
  return "$rc"
}

# The dry run's check of one step: the program is there (or is one the build step makes), and a
# program already built accepts the arguments (gtest: the filter names tests; tessel: --help).
dry_check() {
  local step=$1
  shift
  if [[ "$1" == "$build"/* && ! -x "$1" ]]; then
    add_row "$step" "after build" 0 "$*"
  elif ! command -v "$1" > /dev/null 2>&1; then
    if [[ "$step" == gpu ]]; then
      add_row "$step" "not here" 0 "$1: needed on the GPU machine"
      return 0
    fi
    add_row "$step" "MISSING" 0 "$1 not found: $*"
    return 1
  elif [[ "$1" == *_tests ]]; then
    local count
    count=$("$@" --gtest_list_tests 2> /dev/null | grep -c '^  ')
    add_row "$step" "would run" 0 "$count tests: $*"
    [[ $count -gt 0 ]] || { rows[-1]="$step|MISSING|0|no test matches: $*"; return 1; }
  elif [[ "$1" == "$bin" ]]; then
    # The subcommand's help lists every option passed (a parent's help would list none).
    local help option
    help=$("$@" --help 2>&1)
    for option in "$@"; do
      if [[ "$option" == --* && "$help" != *"$option"* ]]; then
        add_row "$step" "MISSING" 0 "this tessel has no '$*' (no $option)"
        return 1
      fi
    done
    add_row "$step" "would run" 0 "$*"
  else
    add_row "$step" "would run" 0 "$*"
  fi
}

# One line about a finished step, from its log.
summary() {
  local log="$logs/$1.log"
  case "$1" in
    gpu) head -n 1 "$log" ;;
    op_tests | parity_tests | graph_tests | fake_driver_tests | ptxas_tests) grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$log" | tr '\n' ' ' ;;
    *) echo "log $log" ;;
  esac
}

# ---- 1. the machine --------------------------------------------------------------------------
if [[ $dry_run -eq 0 ]] && ! command -v nvidia-smi > /dev/null 2>&1; then
  echo "gpu_check: nvidia-smi is not here: no NVIDIA driver, so no GPU to check (try --dry-run)" >&2
  exit 1
fi
run gpu 30 nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader

# ---- 2. build tools and libraries ---------------------------------------------------------------
need_packages=()
for tool in cmake:cmake ninja:ninja-build c++:g++ pkg-config:pkg-config; do
  command -v "${tool%%:*}" > /dev/null 2>&1 || need_packages+=("${tool#*:}")
done
for pkg in libcli11-dev libtomlplusplus-dev nlohmann-json3-dev libfmt-dev libgtest-dev zlib1g-dev; do
  dpkg-query -W -f='${Status}' "$pkg" 2> /dev/null | grep -q "install ok installed" ||
    need_packages+=("$pkg")
done
if [[ ${#need_packages[@]} -gt 0 ]]; then
  if [[ $(id -u) -eq 0 ]]; then
    run packages 150 bash -c "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install \
      -y -qq --no-install-recommends ${need_packages[*]}"
  else
    add_row packages "MISSING" 0 "not root: apt-get install ${need_packages[*]}"
  fi
else
  add_row packages "ok" 0 "cmake, ninja, c++, the libraries scripts/setup.sh lists for the build"
fi

# ---- 3. build ---------------------------------------------------------------------------------
jobs=$(nproc)
run configure 60 cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DTESSEL_WERROR=OFF
run build 240 cmake --build "$build" -j "$jobs" --target tessel_cli tessel_ops_tests \
  tessel_nn_tests tessel_runtime_tests tessel_graph_tests

# ---- 4. tests on cuda:0 -------------------------------------------------------------------------
# TESSEL_TEST_DEVICES keeps the device loops of the op tests to the GPU (the CPU is checked in CI).
export TESSEL_TEST_DEVICES=cuda:0
run runtime_tests 60 "$build/src/runtime/tessel_runtime_tests" --gtest_filter='Cuda*:Device*'
run op_tests 150 "$build/src/ops/tessel_ops_tests" --gtest_brief=1
run parity_tests 90 "$build/src/nn/tessel_nn_tests" --gtest_filter='*Parity*' --gtest_brief=1
# Generated (fused) kernels against the unfused ops on the GPU (graph/, docs/DESIGN.md).
run graph_tests 120 "$build/src/graph/tessel_graph_tests" --gtest_brief=1

# ---- 5. speed against the peers on the same GPU ------------------------------------------------
run gemm_vs_cublas 90 "$bin" bench cuda-gemm --device cuda:0 --reps 10 --json
printf '[target]\ndevice = "cuda:0"\n' > "$logs/cuda0.toml"  # PyTorch follows tessel to the GPU
run train_vs_pytorch 150 "$bin" bench train --config "$logs/cuda0.toml" \
  --workloads gpt_mini,resnet18 --steps 10 --warmup 3 --python "$python" --json

# ---- 6. one table -------------------------------------------------------------------------------
echo
echo "# tessel GPU check: $(date -u +%Y-%m-%dT%H:%M:%SZ), $(($(date +%s) - start)) s of ${minutes} min" \
  "$([[ $dry_run -eq 1 ]] && echo '(dry run: nothing was run)')"
printf '%-18s %-10s %6s  %s\n' step result secs detail
for row in "${rows[@]}"; do
  IFS='|' read -r step result secs detail <<< "$row"
  printf '%-18s %-10s %6s  %s\n' "$step" "$result" "$secs" "${detail:0:150}"
done
if [[ $dry_run -eq 0 ]]; then
  for log in gemm_vs_cublas train_vs_pytorch; do
    [[ -s "$logs/$log.log" ]] || continue
    echo
    "$python" - "$logs/$log.log" << 'EOF' || grep '^{' "$logs/$log.log"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
if rows and "shape" in rows[0]:
    print(f"{'gemm MxNxK':<18} {'dtype':<5} {'tessel GF/s':>12} {'cuBLAS GF/s':>12} {'ratio':>7}")
    for r in rows:
        print(f"{r['shape']:<18} {r['dtype']:<5} {r['tessel_gflops']:>12.1f} "
              f"{r['cublas_gflops']:>12.1f} {r['ratio']:>7.3f}")
else:
    print(f"{'workload':<10} {'impl':<8} {'step ms':>9} {'throughput':>12} {'unit':<10}")
    for r in rows:
        if "throughput" in r:
            print(f"{r['workload']:<10} {r['impl']:<8} {r['step_ms']:>9.2f} "
                  f"{r['throughput']:>12.0f} {r['unit']:<10}")
        else:
            print(f"{r['workload']:<10} {r['impl']:<8} {'-':>9} {'-':>12} "
                  f"{r.get('error', r.get('note', ''))[:60]}")
EOF
  done
fi
failed=0
for row in "${rows[@]}"; do
  [[ "$row" == *"|FAILED|"* || "$row" == *"|TIMEOUT|"* || "$row" == *"|MISSING|"* ]] && failed=1
done
exit "$failed"

#!/usr/bin/env bash
# tests/native/run_sanitizers.sh: builds and runs the native tests under ASan+UBSan and under TSan.
#
# Usage: tests/native/run_sanitizers.sh [asan|tsan]...   (default: both)
# Build dirs: build-asan, build-tsan (at the repository root). Needs cmake, ninja, gcc,
# libgtest-dev. Exits non-zero when a build fails or any test (or sanitizer report) fails.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
variants=("$@")
[ ${#variants[@]} -eq 0 ] && variants=(asan tsan)
jobs="$(nproc 2>/dev/null || echo 2)"

# Every report is fatal, so that ctest sees it as a failure.
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}"
export TSAN_OPTIONS="${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1}"

# TSan maps its shadow memory at fixed addresses; kernels with high mmap randomisation
# (vm.mmap_rnd_bits > 28) make it fail with "unexpected memory mapping". Running the tests with
# ASLR disabled (setarch -R) avoids that without changing the system.
tsan_works() {
  local dir="$1"
  local probe="$dir/tsan_probe"
  printf '#include <thread>\nint main(){int x=0; std::thread t([&]{x=1;}); t.join(); return x-1;}\n' \
    > "$probe.cpp"
  g++ -fsanitize=thread -O1 -g "$probe.cpp" -o "$probe" -pthread >/dev/null 2>&1 || return 2
  "$probe" >/dev/null 2>&1
}

build() {
  local dir="$1" sanitize="$2"
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DFRAMESCOPE_BUILD_PYTHON=OFF -DFRAMESCOPE_BUILD_TESTS=ON \
    -DFRAMESCOPE_SANITIZE="$sanitize" >/dev/null
  ninja -C "$dir"
}

status=0
for v in "${variants[@]}"; do
  case "$v" in
    asan)
      echo "=== ASan + UBSan (build-asan) ==="
      build build-asan address,undefined
      ctest --test-dir build-asan --output-on-failure -j "$jobs" || status=1
      ;;
    tsan)
      echo "=== TSan (build-tsan) ==="
      mkdir -p build-tsan
      wrapper=()
      if ! tsan_works build-tsan; then
        if command -v setarch >/dev/null && setarch "$(uname -m)" -R true 2>/dev/null; then
          echo "TSan cannot map its shadow memory here; running the tests with setarch -R"
          wrapper=(setarch "$(uname -m)" -R)
        else
          echo "TSan does not work on this kernel and setarch -R is unavailable;" \
               "lower vm.mmap_rnd_bits (sysctl -w vm.mmap_rnd_bits=28) and retry" >&2
          status=1
          continue
        fi
      fi
      # gtest_discover_tests runs the binaries at build time, so the wrapper applies there too.
      "${wrapper[@]}" bash -c "set -euo pipefail; $(declare -f build); build build-tsan thread"
      "${wrapper[@]}" ctest --test-dir build-tsan --output-on-failure -j "$jobs" || status=1
      ;;
    *)
      echo "unknown variant '$v' (asan|tsan)" >&2
      exit 2
      ;;
  esac
done
exit "$status"

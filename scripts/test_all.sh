#!/usr/bin/env bash
# scripts/test_all.sh: installs what the tests need and runs every test (C++ and Python).
#
# Native GoogleTest suite (plain, ASan+UBSan, TSan), then pytest on every CPython 3.10-3.13 that
# pyenv has (or on `python3` alone when there is no pyenv). Installs apt packages when run as
# root and they are missing, and pip packages into one virtual environment per Python. Ends with the last pytest run's
# summary line; exits non-zero if any suite failed.
#
# Environment: FRAMESCOPE_PYTHONS="/path/python ..." to choose interpreters,
#              FRAMESCOPE_SKIP_SANITIZERS=1 to skip the sanitizer builds.
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
jobs="$(nproc 2>/dev/null || echo 2)"
status=0
recap=()

step() { printf '\n=== %s ===\n' "$*"; }

# ---- system packages ------------------------------------------------------------------------
# chromium: tests/test_report.py loads the HTML report in headless Chromium (on 3.11)
# openmpi-bin, libopenmpi-dev: tests/test_launchers.py runs a two-rank mpi4py job (on 3.11)
apt_packages=(build-essential cmake ninja-build zlib1g-dev libgtest-dev libbenchmark-dev chromium
              openmpi-bin libopenmpi-dev)
missing=()
for p in "${apt_packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  step "apt-get install ${missing[*]}"
  if [ "$(id -u)" = 0 ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq && apt-get install -y -qq "${missing[@]}" >/dev/null || status=1
  else
    sudo apt-get update -qq && sudo apt-get install -y -qq "${missing[@]}" >/dev/null || status=1
  fi
fi

# ---- interpreters ---------------------------------------------------------------------------
pythons=()
if [ -n "${FRAMESCOPE_PYTHONS:-}" ]; then
  read -r -a pythons <<<"$FRAMESCOPE_PYTHONS"
elif command -v pyenv >/dev/null; then
  for v in $(pyenv versions --bare | grep -E '^3\.(10|11|12|13)\.[0-9]+$' | sort -V); do
    pythons+=("$(pyenv root)/versions/$v/bin/python")
  done
fi
[ ${#pythons[@]} -eq 0 ] && pythons=(python3)

# ---- native tests ---------------------------------------------------------------------------
step "native tests (GoogleTest)"
if cmake -S . -B build-native -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
     -DFRAMESCOPE_BUILD_PYTHON=OFF -DFRAMESCOPE_BUILD_TESTS=ON >/dev/null &&
   ninja -C build-native >/dev/null; then
  if ctest --test-dir build-native -j "$jobs" 2>&1 | tail -3; then
    recap+=("native: $(ctest --test-dir build-native -N | tail -1) ok")
  else
    recap+=("native: FAILED"); status=1
  fi
else
  recap+=("native: BUILD FAILED"); status=1
fi
if [ "${FRAMESCOPE_SKIP_SANITIZERS:-0}" != 1 ]; then
  step "native tests under sanitizers"
  mkdir -p build-native
  if tests/native/run_sanitizers.sh asan tsan >build-native/sanitizers.log 2>&1; then
    recap+=("sanitizers (asan+ubsan, tsan): ok")
  else
    recap+=("sanitizers: FAILED (build-native/sanitizers.log)"); status=1
  fi
  grep -E '^===|tests passed|tests failed|setarch' build-native/sanitizers.log
fi

# ---- Python tests, per interpreter ----------------------------------------------------------
# Each Python gets its own virtual environment (.venvs/pyX.Y, scripts/dev_env.sh): the tests and
# what they need are installed there, never into the base interpreters.
last_summary=""
for base_py in "${pythons[@]}"; do
  version="$("$base_py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
  step "Python $version ($base_py)"
  # Heavy tests run on one version each: torch (where a local CPU wheel exists, 3.11 here),
  # the browser tests and the launcher tests (torchrun, mpirun + mpi4py) on 3.11, the notebook
  # tests (a real kernel) and mypy --strict over src on 3.12.
  extra=()
  [ "$version" = 3.11 ] && extra+=("torch==2.13.0" mpi4py)
  [ "$version" = 3.12 ] && extra+=(nbclient nbformat ipykernel mypy uvloop)
  if ! py="$(scripts/dev_env.sh "$base_py" "${extra[@]}" | tail -1)"; then
    echo "installing into the $version venv failed; retrying without torch"
    if ! py="$(scripts/dev_env.sh "$base_py" | tail -1)"; then
      recap+=("python $version: INSTALL FAILED"); status=1; continue
    fi
  fi
  log="build-py$version/pytest.log"
  mkdir -p "build-py$version"
  "$py" -m pytest tests -q -p no:cacheprovider 2>&1 | tee "$log" | tail -15
  rc="${PIPESTATUS[0]}"
  last_summary="$(tail -1 "$log")"
  recap+=("python $version: $last_summary")
  [ "$rc" -eq 0 ] || status=1
done

step "summary"
printf '%s\n' "${recap[@]}"
[ "$status" -eq 0 ] && echo "all suites passed" || echo "SOME SUITES FAILED"
echo "$last_summary"
exit "$status"

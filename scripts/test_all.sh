#!/usr/bin/env bash
# scripts/test_all.sh: installs what the tests need and runs every test (C++ and Python).
#
# Native GoogleTest suite (plain, ASan+UBSan, TSan), then pytest on every CPython 3.10-3.13 that
# pyenv has (or on `python3` alone when there is no pyenv). Installs apt packages when run as
# root and they are missing, and pip packages into one virtual environment per Python. Ends with the last pytest run's
# summary line; exits non-zero if any suite failed.
#
# System packages (apt): installed when missing, as root, or through sudo when there is one;
# else the script says which to install and fails. Without pyenv that includes python3,
# python3-dev and python3-venv. `scripts/test_all.sh --system-packages` does only that step.
#
# torch==2.13.0 (3.11) comes from pip's configured sources: on the project's machines a local
# CPU wheel (torch-2.13.0+cpu, in pip's find-links folder); elsewhere set
# PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu for PyTorch's CPU wheel (PyPI's own
# Linux wheel is the much larger CUDA build).
#
# Environment: FRAMESCOPE_PYTHONS="/path/python ..." to choose interpreters,
#              FRAMESCOPE_SKIP_SANITIZERS=1 to skip the sanitizer builds.
set -uo pipefail

only_system_packages=0
case "${1:-}" in
  --system-packages) only_system_packages=1 ;;
  "") ;;
  *) echo "usage: scripts/test_all.sh [--system-packages]" >&2; exit 2 ;;
esac

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
jobs="$(nproc 2>/dev/null || echo 2)"
status=0
recap=()

step() { printf '\n=== %s ===\n' "$*"; }

# ---- system packages ------------------------------------------------------------------------
# chromium: tests/export/test_report.py loads the HTML report in headless Chromium (on 3.11)
# openmpi-bin, libopenmpi-dev: tests/processes/test_launchers.py runs a two-rank mpi4py job (on 3.11)
# gdb: tests/attach/test_attach.py attaches to running processes with it (every version); util-linux's
# setpriv runs a process as another user there
apt_packages=(build-essential cmake ninja-build zlib1g-dev libgtest-dev libbenchmark-dev chromium
              openmpi-bin libopenmpi-dev gdb util-linux)
# Without pyenv (and without FRAMESCOPE_PYTHONS) the tests run on the system's python3: it needs
# its headers (python3-dev) to build the extension and venv (python3-venv) for the test venv.
if [ -z "${FRAMESCOPE_PYTHONS:-}" ] && ! command -v pyenv >/dev/null; then
  apt_packages+=(python3 python3-dev python3-venv)
fi
missing=()
for p in "${apt_packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  step "apt-get install ${missing[*]}"
  if [ "$(id -u)" = 0 ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq && apt-get install -y -qq "${missing[@]}" >/dev/null || status=1
  elif command -v sudo >/dev/null; then
    sudo apt-get update -qq && sudo apt-get install -y -qq "${missing[@]}" >/dev/null || status=1
  else
    echo "test_all.sh: these system packages are missing: ${missing[*]}"
    echo "test_all.sh: not root and no sudo to install them: as root, run"
    echo "    apt-get install ${missing[*]}"
    echo "test_all.sh: (or run this script as root), then run it again"
    status=1
  fi
fi
if [ "$only_system_packages" = 1 ]; then
  [ "$status" -eq 0 ] && echo "test_all.sh: the system packages are installed"
  exit "$status"
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
if [ ${#pythons[@]} -eq 0 ]; then
  if ! command -v python3 >/dev/null; then
    echo "test_all.sh: no python3 and no pyenv: install python3 python3-dev python3-venv (apt)," \
         "or set FRAMESCOPE_PYTHONS to interpreters of 3.10-3.13" >&2
    exit 1
  fi
  pythons=(python3)
fi

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
  [ "$version" = 3.11 ] && extra+=("torch==2.13.0" mpi4py torch-tb-profiler HolisticTraceAnalysis)
  [ "$version" = 3.12 ] && extra+=(nbclient nbformat ipykernel mypy pyarrow duckdb "dask[distributed]" pandas uvloop)
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

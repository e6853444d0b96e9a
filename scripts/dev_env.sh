#!/usr/bin/env bash
# scripts/dev_env.sh: creates (or refreshes) the test virtual environment of one Python and
# installs framescope into it, incrementally (the build directory is kept between runs).
#
# Usage: scripts/dev_env.sh PYTHON [extra pip packages...]
#   PYTHON: an interpreter path, or a version such as 3.12 (looked up under pyenv).
# Prints the venv's python path on its last line. The venv lives in .venvs/pyX.Y at the
# repository root (git-ignored); the base interpreter is never installed into.
# Environment: FRAMESCOPE_VENV_DIR overrides .venvs; FRAMESCOPE_NO_INSTALL=1 skips installing
# framescope itself (deps only).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
base="$1"; shift || true
if [[ "$base" != */* ]]; then
  v="$(pyenv versions --bare 2>/dev/null | grep -E "^${base//./\\.}\.[0-9]+$" | sort -V | tail -1 || true)"
  [ -n "$v" ] || { echo "dev_env.sh: no pyenv Python $base" >&2; exit 2; }
  base="$(pyenv root)/versions/$v/bin/python"
fi
version="$("$base" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
venv="${FRAMESCOPE_VENV_DIR:-$root/.venvs}/py$version"
if [ ! -x "$venv/bin/python" ]; then
  "$base" -m venv "$venv" >&2
fi
py="$venv/bin/python"
# What building and testing framescope needs; `extra` adds per-version packages (torch on 3.11).
deps=(pip nanobind scikit-build-core pytest ninja cmake greenlet perfetto protobuf jsonschema "$@")
stamp="$venv/.framescope-deps"
want="$(printf '%s\n' "${deps[@]}" | sort | tr '\n' ' ')"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  "$py" -m pip install -q --disable-pip-version-check -U "${deps[@]}" >&2
  echo "$want" >"$stamp"
fi
if [ "${FRAMESCOPE_NO_INSTALL:-0}" != 1 ]; then
  (cd "$root" && "$py" -m pip install -q --disable-pip-version-check --no-build-isolation . \
     -Cbuild-dir="build-py$version") >&2
fi
echo "$py"

"""scripts/test_all.sh on a fresh Debian: it names or installs everything the tests need,
python3 with its headers and venv included when there is no pyenv, and never calls a sudo that
is not there. A fresh machine is played by dpkg itself reading an empty package database
(DPKG_ADMINDIR) and, for "not root", by a real unprivileged user (setpriv)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Iterator

import pytest

from tests.support.subprocesses import REPO_ROOT

SCRIPT = REPO_ROOT / "scripts" / "test_all.sh"
README = REPO_ROOT / "README.md"


def _empty_dpkg_database(tmp_path: Path) -> Path:
    admin = tmp_path / "dpkg"
    (admin / "info").mkdir(parents=True)
    (admin / "updates").mkdir()
    (admin / "status").write_text("")
    return admin


@pytest.fixture
def open_dir() -> Iterator[Path]:
    """A folder another user can enter (pytest's tmp_path is under a root-only one)."""
    path = Path(tempfile.mkdtemp(prefix="framescope-fresh-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _run_as_nobody(where: Path, path: str) -> subprocess.CompletedProcess[str]:
    # The script reads nothing else in --system-packages mode: a copy nobody can read will do.
    (where / "scripts").mkdir()
    shutil.copy(SCRIPT, where / "scripts" / "test_all.sh")
    admin = _empty_dpkg_database(where)
    for p in (where / "scripts", admin, admin / "info", admin / "updates"):
        p.chmod(0o755)
    (admin / "status").chmod(0o644)
    (where / "scripts" / "test_all.sh").chmod(0o755)
    env = {"PATH": path, "DPKG_ADMINDIR": str(admin), "HOME": str(where), "LANG": "C"}
    return subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                           "bash", str(where / "scripts" / "test_all.sh"),
                           "--system-packages"], capture_output=True, text=True, env=env,
                          cwd=where, timeout=120)


needs_root = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None
                                or shutil.which("dpkg") is None,
                                reason="needs root (to become another user), setpriv and dpkg")


@needs_root
def test_not_root_without_sudo_says_what_to_install(open_dir: Path) -> None:
    # /usr/bin:/bin: no pyenv, and no sudo (a base image has none)
    assert not any(os.access(os.path.join(d, "sudo"), os.X_OK) for d in ("/usr/bin", "/bin")), \
        "this test needs a machine without /usr/bin/sudo"
    out = _run_as_nobody(open_dir, "/usr/bin:/bin")
    text = out.stdout + out.stderr
    assert out.returncode == 1, text
    assert "sudo: command not found" not in text and "sudo:" not in text, text
    assert "not root and no sudo" in text, text
    (line,) = [ln for ln in text.splitlines() if ln.strip().startswith("apt-get install")]
    for package in ("python3", "python3-dev", "python3-venv", "build-essential", "cmake",
                    "ninja-build", "zlib1g-dev", "libgtest-dev", "libbenchmark-dev"):
        assert package in line.split(), (package, line)


@needs_root
def test_with_pyenv_the_system_python_is_not_required(open_dir: Path) -> None:
    pyenv_bin = open_dir / "pyenv-bin"
    pyenv_bin.mkdir()
    pyenv = shutil.which("pyenv")
    if pyenv is None:
        pytest.skip("no pyenv on this machine")
    # a copy: the installed one is under /root, which the other user cannot enter (only its
    # presence on PATH counts in --system-packages mode)
    shutil.copy(os.path.realpath(pyenv), pyenv_bin / "pyenv")
    (pyenv_bin / "pyenv").chmod(0o755)
    pyenv_bin.chmod(0o755)
    out = _run_as_nobody(open_dir, f"{pyenv_bin}:/usr/bin:/bin")
    text = out.stdout + out.stderr
    (line,) = [ln for ln in text.splitlines() if ln.strip().startswith("apt-get install")]
    assert "python3-dev" not in line.split() and "cmake" in line.split(), line


def test_readme_lists_what_the_tests_install() -> None:
    readme = README.read_text()
    setup = readme[: readme.index("---")]  # the opening section, under the two commands
    for name in ("pytest", "nanobind", "scikit-build-core", "greenlet", "perfetto", "protobuf",
                 "jsonschema", "nbclient", "ipykernel", "mypy", "mpi4py", "torch==2.13.0",
                 "python3-dev", "python3-venv", "download.pytorch.org/whl/cpu", "sudo"):
        assert name in setup, name
    assert setup.startswith("# framescope\n\n```bash\npip install . && framescope run "
                            "examples/demo.py\nscripts/test_all.sh\n```")
    # and what scripts/dev_env.sh installs is all named there
    dev_env = (REPO_ROOT / "scripts" / "dev_env.sh").read_text()
    deps_line = [ln for ln in dev_env.splitlines() if ln.startswith("deps=(")][0]
    for dep in deps_line[len("deps=("):].split():
        if dep.startswith(("pip", '"$@"')):
            continue
        assert dep in setup, dep

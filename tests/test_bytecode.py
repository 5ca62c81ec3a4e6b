"""The bytecode prefix that sandboxed workers read (``harness.sandbox.bytecode``): the parent
compiles the packages workers import into it once per version, and the harness each time."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

from harness.sandbox import bytecode

ROOT = Path(__file__).resolve().parents[1]


def _warm(prefix: Path, packages: Path) -> subprocess.CompletedProcess:
    """warm() in a fresh interpreter that finds the test package ``kpwarm`` in ``packages``."""
    code = "from harness.sandbox import bytecode; print(bytecode.warm(packages=('kpwarm',)))"
    env = {**os.environ, "PYTHONPATH": f"{packages}{os.pathsep}{ROOT}",
           "PYTHONPYCACHEPREFIX": str(prefix)}  # fmt: skip
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          check=True, timeout=300)  # fmt: skip


def _cached(prefix: Path, source: Path) -> Path:
    """Where Python reads ``source``'s bytecode under ``prefix``."""
    saved = sys.pycache_prefix
    sys.pycache_prefix = str(prefix)
    try:
        return Path(importlib.util.cache_from_source(str(source)))
    finally:
        sys.pycache_prefix = saved


def test_packages_are_compiled_into_the_prefix_once_and_the_harness_every_time(tmp_path):
    package = tmp_path / "site" / "kpwarm"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("VALUE = 1\n")
    (package / "deep.py").write_text("def f():\n    return 2\n")
    prefix = tmp_path / "prefix"

    first = _warm(prefix, tmp_path / "site")
    assert first.stdout.strip() == "['kpwarm', 'harness']"
    assert "compiling kpwarm's bytecode" in first.stderr
    for source in (package / "__init__.py", package / "deep.py", ROOT / "harness" / "evaluate.py"):
        assert _cached(prefix, source).is_file(), source
    [marker] = (prefix / bytecode.MARKERS).glob("kpwarm-unversioned-*")
    assert marker.read_text().strip() == str(package)

    _cached(prefix, package / "deep.py").unlink()
    again = _warm(prefix, tmp_path / "site")  # the marker stands for this version: not again
    assert again.stdout.strip() == "['harness']" and "compiling" not in again.stderr
    assert not _cached(prefix, package / "deep.py").exists()


def test_no_prefix_means_nothing_to_do_and_an_unwritable_one_is_said(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPYCACHEPREFIX"}
    plain = subprocess.run([sys.executable, "-c", "from harness.sandbox import bytecode; "
                            "print(bytecode.warm())"], env={**env, "PYTHONPATH": str(ROOT)},
                           capture_output=True, text=True, check=True, timeout=60)  # fmt: skip
    assert plain.stdout.strip() == "[]" and not plain.stderr  # bytecode beside the sources
    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    done = _warm(blocked / "prefix", tmp_path)
    assert done.stdout.strip() == "[]"
    assert (
        "no bytecode written under" in done.stderr and "workers compile from source" in done.stderr
    )


def test_a_pull_requests_compileall_in_the_working_folder_does_not_run(tmp_path):
    """The parent works in the pull request's checkout (the action's measure job): a
    compileall.py there, run with the parent's environment, would read its secrets."""
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    stolen = tmp_path / "stolen"
    (checkout / "compileall.py").write_text(
        "import os, pathlib\n"
        f"pathlib.Path({str(stolen)!r}).write_text(os.environ.get('OPENAI_API_KEY', 'none'))\n"
    )
    code = "from harness.sandbox import bytecode; print(bytecode.warm(packages=()))"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONPYCACHEPREFIX": str(tmp_path / "prefix"),
           "OPENAI_API_KEY": "sk-secret"}  # fmt: skip
    done = subprocess.run([sys.executable, "-c", code], cwd=checkout, env=env,
                          capture_output=True, text=True, check=True, timeout=300)  # fmt: skip
    assert done.stdout.strip() == "['harness']"
    assert not stolen.exists()
    assert _cached(tmp_path / "prefix", ROOT / "harness" / "evaluate.py").is_file()

#!/usr/bin/env bash
# The wheels a CUDA machine without a package index needs for bench/gpu_run.sh: the packages
# its Python 3.12 lacks (pydantic, click and pytest for kernelpilot and its tests; PyGithub and
# its own for the bot's commands; matplotlib's stack for the nightly's plots), downloaded into
# .whl/ (git-ignored) to be copied along with the checkout. Also .whl-core/ (the same without
# matplotlib's) and .sbx/ (bubblewrap, see below). Run on a machine with internet access, from
# the repository root.
set -euo pipefail
rm -rf .whl && mkdir -p .whl
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
  --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any -d .whl \
  "pydantic==2.*" "pydantic-core" "annotated-types" "typing-inspection" "typing-extensions" \
  "click==8.*" "junit-xml==1.9" "six" "pytest==8.*" "pluggy" "iniconfig" "packaging" \
  "PyGithub==2.*" "requests" "urllib3" "charset-normalizer" "idna" "certifi" "PyJWT" \
  "cryptography" "cffi" "pycparser" "PyNaCl" \
  "matplotlib" "numpy" "pillow" "fonttools" "kiwisolver" "contourpy" "cycler" "pyparsing" \
  "python-dateutil"
# pydantic pins the exact pydantic-core it needs: keep only that one.
core=$(unzip -p .whl/pydantic-2*.whl '*/METADATA' | sed -n 's/^Requires-Dist: pydantic-core==\([0-9.]*\).*/\1/p')
find .whl -name 'pydantic_core-*' ! -name "pydantic_core-${core}-*" -delete
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
  --implementation cp --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl \
  "pydantic-core==${core}"
ls .whl && du -sh .whl
# .whl-core/: the same without matplotlib's stack (about 11 MB instead of 50), where the wheels
# and the build cache must travel together in little space: KP_WHEELS=.whl-core bench/gpu_run.sh
rm -rf .whl-core && mkdir -p .whl-core
find .whl -type f -name '*.whl' ! -name 'matplotlib-*' ! -name 'numpy-*' ! -name 'pillow-*' \
  ! -name 'fonttools-*' ! -name 'kiwisolver-*' ! -name 'contourpy-*' ! -name 'cycler-*' \
  ! -name 'pyparsing-*' ! -name 'python_dateutil-*' -exec cp {} .whl-core/ \;
du -sh .whl-core
# .sbx/: bubblewrap for the sandbox (harness/sandbox/bubblewrap.py), where the GPU machine has none:
# this machine's bwrap and the libraries it links, behind a wrapper that finds them.
if command -v bwrap >/dev/null; then
  rm -rf .sbx && mkdir -p .sbx/bin .sbx/lib
  cp "$(command -v bwrap)" .sbx/lib/bwrap.real
  ldd "$(command -v bwrap)" | awk '/=> \// {print $3}' | grep -E 'libselinux|libcap|libpcre2' \
    | xargs -r -I{} cp {} .sbx/lib/
  printf '#!/bin/sh\nhere=$(dirname "$(readlink -f "$0")")/../lib\nLD_LIBRARY_PATH="$here" exec "$here/bwrap.real" "$@"\n' > .sbx/bin/bwrap
  chmod +x .sbx/bin/bwrap
fi

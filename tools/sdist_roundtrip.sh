#!/usr/bin/env bash
# Packaging round trip: build the sdist, install it in a fresh venv, import synet there, and
# build + run the downstream Cython extension (tests/test_downstream.py) against that install.
#
#     bash tools/sdist_roundtrip.sh
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
PY="${PYTHON:-python3}"
"$PY" -m venv "$WORK/build-env"
"$WORK/build-env/bin/python" -m pip install --quiet --upgrade pip build twine
# build from a clean export of the tree (no in-place .so or generated .c)
tar -C "$ROOT" --exclude=build --exclude=dist --exclude='*.so' --exclude='synet/_*.c' --exclude='synet/capi.c' --exclude=.git \
    --exclude='*.egg-info' -cf - . | (mkdir "$WORK/src" && tar -C "$WORK/src" -xf -)
"$WORK/build-env/bin/python" -m build --sdist --outdir "$WORK/dist" "$WORK/src" > "$WORK/build.log"
SDIST="$(ls "$WORK"/dist/synet-*.tar.gz)"
"$WORK/build-env/bin/python" -m twine check "$SDIST"
LISTING="$(tar tzf "$SDIST")"
for member in synet/_gather.pyx synet/_gather.pxd synet/bf16.pxd synet/capi.pxd synet/_quantized_add.pyx synet/src/common.h \
              synet/src/deconvolution.c synet/_deconvolution.pyx synet/_deconvolution_plan.py setup.py pyproject.toml; do
    grep -q "/$member\$" <<< "$LISTING" || { echo "sdist lacks $member"; exit 1; }
done
"$PY" -m venv "$WORK/user-env"
"$WORK/user-env/bin/python" -m pip install --quiet --upgrade pip
"$WORK/user-env/bin/python" -m pip install --quiet "$SDIST" pytest hypothesis Cython "setuptools>=77"
cd "$WORK"  # not the checkout: import the installed package
"$WORK/user-env/bin/python" -c "import synet; synet.show_config(); import synet._selftest as s; assert s.selftest()"
"$WORK/user-env/bin/python" -m pytest -q -p no:cacheprovider "$WORK/src/tests/test_downstream.py"
echo "sdist round trip: OK"

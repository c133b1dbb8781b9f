#!/usr/bin/env bash
# The NVRTC 13.0 wheel from PyPI in a venv at VENV (created if missing), with --tools also
# cuobjdump and nvdisasm; prints the wheel's CUDA folder (its lib/ and bin/). Used by .ci/run,
# scripts/sass.sh and scripts/build-gpu-bundle.sh, so that all three compile with one NVRTC.
#   scripts/nvrtc-venv.sh VENV [--tools]
set -euo pipefail
V=${1:?VENV}
pkgs="nvidia-cuda-nvrtc==13.0.88"
[ "${2:-}" = --tools ] && pkgs="$pkgs nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm"
[ -x "$V/bin/pip" ] || python3 -m venv "$V"
# shellcheck disable=SC2086 # the package list splits on purpose
"$V/bin/pip" install --quiet --disable-pip-version-check $pkgs >&2
"$V/bin/python" -c 'import os, nvidia; print(os.path.join(list(nvidia.__path__)[0], "cu13"))'

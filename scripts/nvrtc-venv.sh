#!/usr/bin/env bash
# The NVRTC 13.0 wheel from PyPI in a venv at VENV (created if missing), with --tools also
# cuobjdump and nvdisasm, with --nvcc also nvcc 13.0 and what it needs to build a CUDA program
# (NVVM, the runtime's headers and static library, CCCL; scripts/micro/build.sh); prints the
# wheels' CUDA folder (its lib/ and bin/). Used by .ci/run, scripts/sass.sh and
# scripts/build-gpu-bundle.sh, so that all three compile with one NVRTC.
#   scripts/nvrtc-venv.sh VENV [--tools] [--nvcc]
set -euo pipefail
V=${1:?VENV}
pkgs="nvidia-cuda-nvrtc==13.0.88"
for opt in "${@:2}"; do
  case $opt in
    --tools) pkgs="$pkgs nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm" ;;
    --nvcc) pkgs="$pkgs nvidia-cuda-nvcc==13.0.88 nvidia-nvvm==13.0.88 nvidia-cuda-crt==13.0.88"
      pkgs="$pkgs nvidia-cuda-runtime==13.0.96 nvidia-cuda-cccl==13.0.85" ;;
    *) echo "nvrtc-venv.sh: unknown option $opt" >&2; exit 1 ;;
  esac
done
[ -x "$V/bin/pip" ] || python3 -m venv "$V"
# shellcheck disable=SC2086 # the package list splits on purpose
"$V/bin/pip" install --quiet --disable-pip-version-check $pkgs >&2
"$V/bin/python" -c 'import os, nvidia; print(os.path.join(list(nvidia.__path__)[0], "cu13"))'

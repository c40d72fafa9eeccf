#!/usr/bin/env bash
# Builds pipetwin's CUDA path on a GPU machine that has a CUDA toolkit and a
# Python with the torch wheel, but not the Debian -dev packages that
# scripts/setup.sh installs: those are unpacked (dpkg -x) under a prefix
# instead, and CMake, pkg-config, the compiler and the loader are pointed
# there. The normal build (scripts/build.sh) is untouched.
#
#   scripts/gpu_build.sh PREFIX [BUILD_DIR [TARGET...]]
#
#   PREFIX                where the packages are (or are unpacked): PREFIX/usr/...
#   BUILD_DIR             default build-gpu; TARGETs default: pipetwin test_exec_cuda
#   PIPETWIN_GPU_DEBS     a folder: its *.deb are unpacked into PREFIX first, and
#                         its *.tar.xz (extra shared libraries in a top folder) into
#                         PREFIX/usr/lib/x86_64-linux-gnu
#   PIPETWIN_VENV         the virtualenv holding torch (default /opt/torch/.venv)
#   TORCH_CUDA_ARCH_LIST  default 9.0 (Hopper)
#
# Writes BUILD_DIR/env.sh: source it before running the binaries (LD_LIBRARY_PATH).
set -euo pipefail
cd "$(dirname "$0")/.."

PREFIX="${1:?usage: scripts/gpu_build.sh PREFIX [BUILD_DIR [TARGET...]]}"
BUILD_DIR="${2:-build-gpu}"
shift $(( $# >= 2 ? 2 : 1 ))
TARGETS=("$@")
[ ${#TARGETS[@]} -gt 0 ] || TARGETS=(pipetwin test_exec_cuda)
VENV="${PIPETWIN_VENV:-/opt/torch/.venv}"
export TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-9.0}"
ARCH=x86_64-linux-gnu

if [ -n "${PIPETWIN_GPU_DEBS:-}" ]; then
  mkdir -p "$PREFIX/usr/lib/$ARCH"
  for f in "$PIPETWIN_GPU_DEBS"/*.deb; do dpkg -x "$f" "$PREFIX"; done
  for f in "$PIPETWIN_GPU_DEBS"/*.tar.xz; do
    if [ -e "$f" ]; then tar xJf "$f" -C "$PREFIX/usr/lib/$ARCH" --strip-components=1; fi
  done
  # pkg-config files name /usr: make them name the prefix.
  find "$PREFIX" -name '*.pc' -exec sed -i "s#=/usr#=$PREFIX/usr#" {} +
fi

export PKG_CONFIG_PATH="$PREFIX/usr/lib/$ARCH/pkgconfig:$PREFIX/usr/share/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
export CMAKE_PREFIX_PATH="$PREFIX/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
export LD_LIBRARY_PATH="$PREFIX/usr/lib/$ARCH${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# Headers that targets do not name (torch's own include <nlohmann/json.hpp>).
export CPATH="$PREFIX/usr/include${CPATH:+:$CPATH}"
export LIBRARY_PATH="$PREFIX/usr/lib/$ARCH${LIBRARY_PATH:+:$LIBRARY_PATH}"

args=(-S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPIPETWIN_VENV="$VENV"
      -DCMAKE_POLICY_VERSION_MINIMUM=3.5)
[ -x "$VENV/bin/python" ] || args+=(-DPIPETWIN_PYTHON="$VENV/bin/python3")
if [ ! -x /usr/local/cuda/bin/nvcc ] && command -v nvcc >/dev/null; then
  nvcc="$(command -v nvcc)"
  args+=(-DCMAKE_CUDA_COMPILER="$nvcc" -DCUDAToolkit_ROOT="$(dirname "$(dirname "$nvcc")")")
fi
# The toolkit's own NCCL (for tests/deps only) may be missing: take the wheel's.
if ! ls /usr/local/cuda/lib*/libnccl.so* >/dev/null 2>&1; then
  nv="$("${VENV}/bin/python3" -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))')/nvidia/nccl"
  args+=(-DPIPETWIN_NCCL_LIBRARY="$nv/lib/libnccl.so.2" -DPIPETWIN_NCCL_INCLUDE_DIR="$nv/include")
fi

cmake "${args[@]}"
cmake --build "$BUILD_DIR" -j "$(nproc)" --target "${TARGETS[@]}"

cat >"$BUILD_DIR/env.sh" <<EOF
export LD_LIBRARY_PATH="$LD_LIBRARY_PATH"
EOF
echo "[gpu_build] built ${TARGETS[*]} in $BUILD_DIR; source $BUILD_DIR/env.sh before running them"

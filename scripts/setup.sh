#!/usr/bin/env bash
# Installs what pipetwin needs and is missing: Debian packages and a Python
# virtualenv (LibTorch from the PyPI torch wheel, matplotlib) kept outside the
# source tree. Idempotent; prints nothing when everything is already there.
set -euo pipefail

TORCH_VERSION="2.13.0"
PIPETWIN_VENV="${PIPETWIN_VENV:-$HOME/.cache/pipetwin/venv}"

APT_PACKAGES=(
  build-essential cmake ninja-build pkg-config git
  ccache  # both builds compile through it (CMakeLists.txt): a fresh clone reuses earlier compiles
  libsimgrid-dev libboost-graph-dev libgtest-dev libgmock-dev libbenchmark-dev
  libyaml-cpp-dev nlohmann-json3-dev libcli11-dev libeigen3-dev
  libspdlog-dev libfmt-dev libgloo-dev
  zlib1g-dev  # calibration/: torch.profiler's gzipped traces (*.pt.trace.json.gz)
  iproute2  # tests/exec: two network namespaces joined by a veth pair
  clang libclang-rt-14-dev llvm  # scripts/sanitize.sh: ASan/UBSan/libFuzzer runtimes, llvm-symbolizer
)

log() { echo "[setup] $*" >&2; }

missing_apt() {
  local pkg
  for pkg in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || echo "$pkg"
  done
}

install_apt() {
  local missing
  missing=$(missing_apt)
  [ -z "$missing" ] && return 0
  # shellcheck disable=SC2086  # word splitting joins the list on one line
  log "installing Debian packages: $(echo $missing | tr '\n' ' ')"
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  # shellcheck disable=SC2086
  $sudo apt-get install -y -qq --no-install-recommends $missing >/dev/null
}

venv_ok() {
  [ -x "$PIPETWIN_VENV/bin/python" ] &&
    # The installed metadata alone: no torch import, fast.
    "$PIPETWIN_VENV/bin/python" -c 'import sys; from importlib import metadata as m; sys.exit(0 if m.version("torch") == sys.argv[1] and m.version("matplotlib") and m.version("pandas") else 1)' "$TORCH_VERSION" 2>/dev/null
}

install_venv() {
  venv_ok && return 0
  log "preparing the Python virtualenv at $PIPETWIN_VENV (torch==$TORCH_VERSION, matplotlib, pandas)"
  local python="${PYTHON:-python3}"
  if [ ! -x "$PIPETWIN_VENV/bin/python" ]; then
    mkdir -p "$(dirname "$PIPETWIN_VENV")"
    "$python" -m venv "$PIPETWIN_VENV"
  fi
  "$PIPETWIN_VENV/bin/pip" install --quiet --disable-pip-version-check --progress-bar off \
    "torch==$TORCH_VERSION" matplotlib numpy pandas
  venv_ok || { log "error: torch $TORCH_VERSION is not importable from $PIPETWIN_VENV"; exit 1; }
}

install_apt
install_venv

#!/bin/sh
# Installs what sluice needs from Debian's packages, only what is missing.
# As root it runs apt-get; otherwise it prints the exact command and fails.
# CUDA (nvcc, cuBLAS, NCCL) is optional and never installed here; OpenMPI
# is installed so the executor's multi-process runs are tested.
set -eu
pkgs="build-essential pkg-config libjansson-dev libgsl-dev libopenblas-dev \
libcriterion-dev gnuplot-nox libopenmpi-dev openmpi-bin"
missing=""
for p in $pkgs; do
    st=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
    case "$st" in
        *"install ok installed"*) ;;
        *) missing="$missing $p" ;;
    esac
done
[ -z "$missing" ] && exit 0
if [ "$(id -u)" = 0 ]; then
    echo "deps: installing$missing" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    # shellcheck disable=SC2086
    apt-get install -y -qq --no-install-recommends $missing >/dev/null
else
    echo "deps: missing Debian packages:$missing" >&2
    echo "deps: run: sudo apt-get install -y$missing" >&2
    exit 1
fi

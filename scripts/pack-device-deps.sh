#!/usr/bin/env bash
# Packs what the GPU machine needs to build ringside into .device-deps/ (git-ignored). That
# machine has the CUDA toolkit, CMake and ninja, but no MPI, no apt and no network, so this runs
# here: `apt-get download` fetches the Debian packages and `dpkg -x` unpacks them, without
# installing anything. The device run carries the folder (carry: [".device-deps"]) and
# scripts/gpu-check.sh points CMake at it. Header-only packages and the reference BLAS (one
# shared library needing only libc) keep it about 7 MiB, inside the 64 MiB a run may carry.
#
# Usage: scripts/pack-device-deps.sh            (re-run to refresh; it starts from scratch)
set -euo pipefail
cd "$(dirname "$0")/.."

DEST=.device-deps
PACKAGES=(
  librandom123-dev nlohmann-json3-dev libcli11-dev catch2   # headers (and CMake configs)
  libbenchmark-dev libbenchmark1debian                      # Google Benchmark (ringside bench)
  libblas3 libblas-dev                                      # the reference BLAS, for the CPU reference
  zlib1g-dev                                                # gzipped traces (zlib.h, libz)
)
LIMIT_MIB=32  # the rest of the 64 MiB is the working tree's

rm -rf "$DEST"
mkdir -p "$DEST/debs"
# As root, apt-get download warns that its sandbox user cannot write here: harmless.
if ! (cd "$DEST/debs" && apt-get download "${PACKAGES[@]}" 2>&1 | grep -v "Download is performed unsandboxed"); then
  echo "pack-device-deps: apt-get download failed; run 'apt-get update' first (sudo when not root)" >&2
  exit 1
fi
for deb in "$DEST"/debs/*.deb; do dpkg -x "$deb" "$DEST"; done
rm -rf "$DEST/debs" "$DEST/usr/share/doc" "$DEST/usr/share/man" "$DEST/usr/share/lintian"

size=$(du -sm "$DEST" | cut -f1)
echo "pack-device-deps: ${#PACKAGES[@]} packages unpacked into $DEST ($size MiB)"
if ((size > LIMIT_MIB)); then
  echo "pack-device-deps: $DEST is over $LIMIT_MIB MiB: the device run could not carry it with the tree" >&2
  exit 1
fi

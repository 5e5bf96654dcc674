#!/usr/bin/env bash
# Prints the smallest address-space limit (ulimit -v, KiB, to within 4 MiB) under which
# COMMAND... exits 0: what a program maps at its start (its shared libraries differ between
# builds: with the CUDA toolkit, cuBLAS alone maps half a gigabyte). Tests of the address-space
# refusals set their limits above it, so that they refuse or run for the job's own need.
# Each try has 20 s (a program that spins under a tight limit is a failed try, not a hang).
#   start_limit.sh ringside --version
set -u
lo=10000 hi=16000000
# (Below the limit a program may die before main, by a signal: bash's own line about it is muted.)
fits() { { (ulimit -v "$1" && exec timeout 20 "${@:2}") > /dev/null 2>&1; } 2> /dev/null; }
fits "$hi" "$@" || { echo "start_limit.sh: '$*' fails even under ulimit -v $hi" >&2; exit 1; }
while ((hi - lo > 4096)); do
  mid=$(((lo + hi) / 2))
  if fits "$mid" "$@"; then hi=$mid; else lo=$mid; fi
done
echo "$hi"

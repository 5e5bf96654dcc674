#!/usr/bin/env bash
# expect_error.sh [--rc N] PATTERN COMMAND...: passes when COMMAND exits non-zero (exactly N
# with --rc) and its output (stdout + stderr) matches the extended regex PATTERN.
want_rc=
if [[ $1 == --rc ]]; then want_rc=$2; shift 2; fi
pattern=$1
shift
out=$("$@" 2>&1)
rc=$?
echo "$out"
if [[ $rc -eq 0 ]]; then echo "expect_error: '$*' exited 0; expected a failure"; exit 1; fi
if [[ -n $want_rc && $rc -ne $want_rc ]]; then echo "expect_error: exit $rc; expected $want_rc"; exit 1; fi
if ! grep -Eq -- "$pattern" <<<"$out"; then echo "expect_error: output does not match /$pattern/"; exit 1; fi
echo "expect_error: exit $rc and /$pattern/ as expected"

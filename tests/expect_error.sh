#!/usr/bin/env bash
# expect_error.sh PATTERN COMMAND...: passes when COMMAND exits non-zero and its output
# (stdout + stderr) matches the extended regex PATTERN.
pattern=$1
shift
out=$("$@" 2>&1)
rc=$?
echo "$out"
if [[ $rc -eq 0 ]]; then echo "expect_error: '$*' exited 0; expected a failure"; exit 1; fi
if ! grep -Eq -- "$pattern" <<<"$out"; then echo "expect_error: output does not match /$pattern/"; exit 1; fi
echo "expect_error: exit $rc and /$pattern/ as expected"

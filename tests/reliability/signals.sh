# Issue 57: every signal whose default action ends the process, not only INT, TERM and HUP
# (outputs.sh has those), sent in the middle of a write, leaves no temporary
# (NAME.XXXXXX.partial) and no dump staging directory behind, keeps the old file whole, and
# still ends the process as that signal would have (exit 128 + its number).
source "$(dirname "$0")/lib.sh"
ulimit -c 0  # SIGQUIT and the faults would dump core
# Job control: a script's background commands otherwise start with SIGINT and SIGQUIT ignored,
# and an ignored signal is left so (ringside's handler is only where the action is the default).
set -m

"$RS" model --strategy ring --ranks 2 "${SMALL[@]}" --trace big.json > /dev/null
cp big.json big.copy
for sig in QUIT USR1 USR2 ALRM PIPE VTALRM PROF XCPU RTMIN; do
  "$RS" model --strategy ring --ranks 64 --seq 1048576 --trace big.json > /dev/null 2>&1 &
  pid=$!
  for _ in $(seq 600); do compgen -G "big.json.*.partial" > /dev/null && break; sleep 0.05; done
  kill -$sig $pid
  wait $pid
  rc=$?
  check "SIG$sig during the write: the process ends by it (exit $rc)" test $rc -eq $((128 + $(kill -l $sig)))
  check "SIG$sig during the write: no temporary left" no_partials .
  check "SIG$sig during the write: the old file is whole" cmp -s big.json big.copy
done

# A dump's staging directory, under signals that are not INT, TERM or HUP.
"$RS" reference "${SMALL[@]}" --seed 1 --dump d1 > /dev/null
cp -r d1 d1.copy
for sig in QUIT USR1 ALRM; do signal_during_dump $sig; done

finish

# Shared by the reliability trials (tests/reliability/*.sh): a scratch directory, and
# assertions that count failures instead of stopping at the first, so one run lists them all.
#   expect RC PATTERN COMMAND...   COMMAND exits RC and its output (stdout + stderr) matches PATTERN
#   check WHAT COMMAND...          COMMAND succeeds
#   finish                         prints the count; the script's exit status
set -u
RS=$(realpath "$1")
WORK=$(mktemp -d "${TMPDIR:-/tmp}/ringside-trial.XXXXXX")
trap 'chmod -R u+w "$WORK" 2>/dev/null; rm -rf "$WORK"' EXIT
cd "$WORK" || exit 1
SMALL=(--seq 48 --hidden 32 --heads 4 --kv-heads 2 --ffn 64)
fails=0
tried=0

expect() {
  local rc=$1 pattern=$2 out got
  shift 2
  tried=$((tried + 1))
  out=$("$@" 2>&1)
  got=$?
  if [[ $got -ne $rc ]] || ! grep -Eq -- "$pattern" <<<"$out"; then
    echo "FAIL: $(cut -c 1-160 <<<"$*") -> exit $got (want $rc), output (want /$pattern/):"
    tail -n 5 <<<"$out" | sed 's/^/    /'
    fails=$((fails + 1))
  else
    echo "ok:   $(cut -c 1-160 <<<"$*") -> $got"
  fi
}

check() {
  local what=$1
  shift
  tried=$((tried + 1))
  if "$@"; then echo "ok:   $what"; else echo "FAIL: $what"; fails=$((fails + 1)); fi
}

# A file is a valid JSON document (with python3's own parser, not ours).
valid_json() { python3 -c 'import json, sys; json.load(open(sys.argv[1]))' "$1" 2>/dev/null; }
# No temporary of an output is left in a directory.
no_partials() { ! compgen -G "$1/*.partial" >/dev/null; }

# Signal $1 while `reference --seq 4096` stages a dump into d1, which holds an earlier dump of
# SMALL (s = 48) copied to d1.copy: no staging directory is left, and d1 is the old dump or the
# new one whole.
signal_during_dump() {
  local sig=$1 pid
  "$RS" reference --seq 4096 --dump d1 > /dev/null 2>&1 &
  pid=$!
  for _ in $(seq 600); do compgen -G "d1/.ringside-staging.*" > /dev/null && break; sleep 0.02; done
  kill -"$sig" $pid
  wait $pid
  check "SIG$sig during a dump: no staging directory left" bash -c '! compgen -G "d1/.ringside-staging.*" > /dev/null'
  check "SIG$sig during a dump: the old dump, or the new one whole" bash -c '
    s=$(python3 -c "import json; print(json.load(open(\"d1/manifest.json\"))[\"config\"][\"s\"])")
    [ "$s" = 48 ] && diff -r d1 d1.copy > /dev/null || [ "$s" = 4096 ]'
}

finish() {
  echo "$tried tried, $fails failed"
  [[ $fails -eq 0 ]]
}

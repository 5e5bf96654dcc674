#!/usr/bin/env bash
# Outputs never destroy what is there and never leave half a file (issue 15), tried on every
# output of the ringside command: outputs.sh RINGSIDE.
#   - a character device or a FIFO is written through and stays what it was;
#   - a directory or a socket is refused before any work (exit 2);
#   - a write that fails partway (a file-size limit) leaves the old file whole, no temporary;
#   - concurrent writers of one name each leave a whole file of their own;
#   - outputs and inputs are told apart by what they name, however spelt;
#   - the name checked is the name written (a 253-character name works, 256 is refused early).
source "$(dirname "$0")/lib.sh"

# --- every output, at a character device of our own (mknod), a directory, and a socket.
if mknod null c 1 3 2>/dev/null; then DEV=$WORK/null; else DEV=/dev/null; fi
mkdir adir
python3 -c 'import socket, sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])' sock
"$RS" compare "${SMALL[@]}" --ranks 2 --strategies ring --trace good.json > /dev/null || echo "setup: compare failed"
for target in "$DEV" adir sock; do
  case $target in
    adir) rc=2 why="it is a directory" ;;
    sock) rc=2 why="it is a socket" ;;
    *) rc=0 why="" ;;
  esac
  expect $rc "$why" "$RS" compare "${SMALL[@]}" --ranks 2 --trace "$target"
  expect $rc "$why" "$RS" compare "${SMALL[@]}" --ranks 2 --json "$target"
  expect $rc "$why" "$RS" run --strategy ring "${SMALL[@]}" --ranks 2 --trace "$target"
  expect $rc "$why" "$RS" model --strategy ring --ranks 2 "${SMALL[@]}" --trace "$target"
  expect $rc "$why" "$RS" lesson 2 --no-pause --trace "$target"
  expect $rc "$why" "$RS" lesson 2 --no-pause --trace lesson.json --json "$target"
  expect $rc "$why" "$RS" trace-stats good.json --json "$target"
done
check "the device is still a character device" test -c "$DEV"
check "the directory is still a directory" test -d adir
check "the socket is still a socket" test -S sock
# Refused before any work: no table was printed.
expect 2 "^ringside: --trace: cannot write adir: it is a directory" "$RS" compare "${SMALL[@]}" --trace adir
# --dump takes a directory: anything else is refused before the run.
expect 2 "--dump: $DEV is not a directory" "$RS" run --strategy ring "${SMALL[@]}" --ranks 2 --dump "$DEV"
expect 2 "--dump: sock is not a directory" "$RS" reference "${SMALL[@]}" --dump sock
check "the device survived --dump" test -c "$DEV"

# --- a FIFO whose reader comes after the run has started: the run does not wait for it.
mkfifo pipe
"$RS" compare "${SMALL[@]}" --ranks 2 --json pipe > fifo.out 2>&1 &
writer=$!
for _ in $(seq 100); do grep -q "verdict" fifo.out && break; sleep 0.2; done
check "the run reached its table with no reader on the FIFO" grep -q "verdict" fifo.out
cat pipe > from-pipe.json
wait $writer
check "the run writing the FIFO exited 0" test $? -eq 0
check "the FIFO carried the whole JSON" valid_json from-pipe.json
check "the FIFO is still a FIFO" test -p pipe

# --- standard output by name: the JSON alone on stdout, the report on stderr.
"$RS" compare "${SMALL[@]}" --ranks 2 --json /dev/stdout 2> report.txt > stdout.json
check "--json /dev/stdout is JSON alone" valid_json stdout.json
check "the report went to stderr" grep -q "verdict" report.txt

# --- standard output and error under other names: by identity, never replaced.
ln -s /dev/stdout so
ln -s /dev/stderr se
"$RS" compare "${SMALL[@]}" --ranks 2 --json so 2> /dev/null > so.json
check "a symlink to /dev/stdout carries the JSON alone" valid_json so.json
(cd /dev && "$RS" compare "${SMALL[@]}" --ranks 2 --json stdout 2> /dev/null) > rel.json
check "./stdout from /dev carries the JSON alone" valid_json rel.json
"$RS" compare "${SMALL[@]}" --ranks 2 --json /proc/thread-self/fd/1 2> /dev/null > tself.json
check "/proc/thread-self/fd/1 carries the JSON alone" valid_json tself.json
echo keep > kept.txt
{ "$RS" compare "${SMALL[@]}" --ranks 2 --json so 2> /dev/null; echo after; } >> kept.txt
check "stdout appended to a file keeps what was there and what follows" bash -c 'head -1 kept.txt | grep -qx keep && tail -1 kept.txt | grep -qx after'
echo keep > err.txt
ino=$(stat -c %i err.txt)
"$RS" compare "${SMALL[@]}" --ranks 2 --json se 2>> err.txt > /dev/null
check "stderr through a symlink is appended to, not replaced" bash -c "test \$(stat -c %i err.txt) = $ino && head -1 err.txt | grep -qx keep"
expect 2 "--trace /dev/stdout and --json /dev/stdout name the same file" bash -c "set -o pipefail; '$RS' compare ${SMALL[*]} --ranks 2 --trace /dev/stdout --json /dev/stdout | cat"
expect 2 "--json: cannot write /dev/stdout: standard output is closed" bash -c "exec '$RS' compare ${SMALL[*]} --ranks 2 --json /dev/stdout >&-"
echo x > readonly.txt
expect 2 "--json: cannot write /dev/stdout: standard output is open for reading only" \
  bash -c "exec '$RS' compare ${SMALL[*]} --ranks 2 --json /dev/stdout 1< readonly.txt"
if command -v setsid > /dev/null; then
  expect 2 "--json: cannot write /dev/tty: No such device or address" setsid -w "$RS" compare "${SMALL[@]}" --ranks 2 --json /dev/tty
fi

# --- symlinks: a dangling one's output goes to its target, as a redirection's would.
ln -s new.json dangling
expect 2 "--trace dangling and --json new.json name the same file" "$RS" compare "${SMALL[@]}" --ranks 2 --trace dangling --json new.json
expect 0 "trace: dangling" "$RS" compare "${SMALL[@]}" --ranks 2 --strategies ring --trace dangling
check "the link stays a link, its target holds the trace" bash -c 'test -L dangling && python3 -c "import json; json.load(open(\"new.json\"))"'
ln -s /nonexistent-dir/x.json nowhere
expect 2 "--trace: cannot write nowhere: the directory /nonexistent-dir does not exist" "$RS" compare "${SMALL[@]}" --trace nowhere
check "the dangling link is still a link" test -L nowhere

# --- a write that fails partway: a file-size limit (ulimit -f, in 1 KiB blocks).
cp good.json good.copy
"$RS" compare "${SMALL[@]}" --ranks 2 --json good-json.json > /dev/null
cp good-json.json good-json.copy
"$RS" trace-stats good.json --json stats.json > /dev/null
cp stats.json stats.copy
expect 1 "cannot write good.json: File too large" bash -c "ulimit -f 64; exec '$RS' compare ${SMALL[*]} --ranks 2 --strategies ring --trace good.json"
expect 1 "cannot write good-json.json: File too large" bash -c "ulimit -f 8; exec '$RS' compare ${SMALL[*]} --ranks 2 --json good-json.json"
expect 1 "cannot write stats.json: File too large" bash -c "ulimit -f 1; exec '$RS' trace-stats good.json --json stats.json"
check "the old trace survived" cmp -s good.json good.copy
check "the old --json survived" cmp -s good-json.json good-json.copy
check "the old trace-stats --json survived" cmp -s stats.json stats.copy
check "no temporary left" no_partials .

# --- concurrent writers of one name, three rounds: both succeed, the file is one of theirs.
for round in 1 2 3; do
  "$RS" run --strategy ring "${SMALL[@]}" --ranks 2 --seed 11 --trace both.json > a.out 2>&1 &
  a=$!
  "$RS" run --strategy ring "${SMALL[@]}" --ranks 2 --seed 22 --trace both.json > b.out 2>&1 &
  b=$!
  wait $a; ra=$?
  wait $b; rb=$?
  check "round $round: both writers exited 0" test $ra -eq 0 -a $rb -eq 0
  check "round $round: the file is one writer's whole trace" python3 -c '
import json, sys
seed = json.load(open(sys.argv[1]))["otherData"]["config"]["seed"]
sys.exit(0 if seed in (11, 22) else 1)' both.json
done
check "no temporary left by the concurrent writers" no_partials .

# --- path aliases: outputs against each other and against the inputs.
mkdir sub
expect 2 "--trace ./same.json and --json same.json name the same file" "$RS" compare "${SMALL[@]}" --json same.json --trace ./same.json
expect 2 "--trace x.json and --json sub/../x.json name the same file" "$RS" compare "${SMALL[@]}" --json sub/../x.json --trace x.json
ln -s good.json link.json
expect 2 "--json link.json would replace the input good.json" "$RS" trace-stats good.json --json link.json
expect 2 "--json ./good.json would replace the input good.json" "$RS" trace-stats good.json --json ./good.json
expect 2 "--trace sub/../good.json would replace the input --from good.json" "$RS" model --from good.json --trace sub/../good.json
expect 2 "--trace l.json and --json ./l.json name the same file" "$RS" lesson 1 --no-pause --trace l.json --json ./l.json
expect 2 "--json /dev/fd/3 would replace the input good.json" bash -c "exec '$RS' trace-stats good.json --json /dev/fd/3 3>> good.json"
check "the inputs are untouched" cmp -s good.json good.copy
expect 0 "json: " "$RS" compare "${SMALL[@]}" --ranks 2 --json /dev/null --trace /dev/null

# --- a run ended by a signal while writing leaves no temporary, and the old file whole.
"$RS" model --strategy ring --ranks 2 "${SMALL[@]}" --trace big.json > /dev/null
cp big.json big.copy
for sig in TERM HUP; do
  "$RS" model --strategy ring --ranks 64 --seq 1048576 --trace big.json > /dev/null 2>&1 &
  pid=$!
  for _ in $(seq 600); do compgen -G "big.json.*.partial" > /dev/null && break; sleep 0.05; done
  kill -$sig $pid
  wait $pid
  check "SIG$sig during the write: no temporary left" no_partials .
  check "SIG$sig during the write: the old file is whole" cmp -s big.json big.copy
done

# --- a dump is whole or not at all: a failed one leaves the old, two never mix.
"$RS" reference "${SMALL[@]}" --seed 1 --dump d1 > /dev/null
cp -r d1 d1.copy
expect 1 "File too large" bash -c "ulimit -f 8; exec '$RS' reference ${SMALL[*]} --seed 2 --dump d1"
check "the failed re-dump left the old dump as it was" diff -r d1 d1.copy
"$RS" reference "${SMALL[@]}" --seed 2 --dump d2.ref > /dev/null
for round in 1 2; do
  "$RS" reference "${SMALL[@]}" --seed 1 --dump both > /dev/null &
  "$RS" reference "${SMALL[@]}" --seed 2 --dump both > /dev/null &
  wait
  check "round $round: two dumps into one directory: one whole dump" bash -c '
    seed=$(python3 -c "import json; print(json.load(open(\"both/manifest.json\"))[\"config\"][\"seed\"])")
    ref=$([ "$seed" = 1 ] && echo d1.copy || echo d2.ref)
    for f in both/*.npy; do cmp -s "$f" "$ref/${f#both/}" || exit 1; done'
done
mkdir -p dx/x.npy
expect 2 "--dump: cannot write dx/x.npy: it is not a regular file" "$RS" run --strategy ring "${SMALL[@]}" --ranks 2 --dump dx
mkdir dp && mkfifo dp/out.npy && ln -s ../good.copy dp/x.npy
expect 2 "--dump: cannot write dp/(out|x).npy: it is not a regular file" "$RS" reference "${SMALL[@]}" --dump dp
check "the dump's FIFO and symlink are as they were" bash -c 'test -p dp/out.npy && test -L dp/x.npy'
ln -s nothere dangling-dump
expect 2 "--dump: dangling-dump is a symlink to nothing \(nothere\)" "$RS" reference "${SMALL[@]}" --dump dangling-dump
# A signal while the dump is staged removes the staging directory; the old dump stays whole.
for sig in TERM HUP; do signal_during_dump $sig; done
# An append-only or immutable file is refused before the work, where chattr works here.
echo '{}' > appendonly.json
if chattr +a appendonly.json 2> /dev/null; then
  expect 2 "--json: cannot write appendonly.json: it is append-only or immutable" "$RS" trace-stats good.json --json appendonly.json
  chattr -a appendonly.json
fi

# --- the lesson's default directory, where it cannot be made: exit 2, before the work.
mkdir lessoncwd && touch lessoncwd/out
expect 2 "--trace: cannot create the directory out/lessons for the lesson's trace" bash -c "cd lessoncwd && exec '$RS' lesson 2 --no-pause"

# --- a file only its owner may replace (another user's, in a sticky directory like /tmp):
# refused before the work, not after it. Root may replace anything, so the trial runs as nobody.
if [[ $(id -u) -eq 0 ]]; then
  chmod 755 "$WORK"
  mkdir sticky && chmod 1777 sticky && echo '{}' > sticky/f.json && chmod 666 sticky/f.json
  expect 2 "--json: cannot write $WORK/sticky/f.json: it belongs to another user in a sticky directory" \
    setpriv --reuid=65534 --regid=65534 --clear-groups "$RS" compare "${SMALL[@]}" --ranks 2 --json "$WORK/sticky/f.json"
  check "the other user's file is as it was" grep -qx '{}' sticky/f.json
fi

# --- issue 41: two outputs to standard output when it is a terminal (script(1) gives one) are
# refused as for a pipe or a file; a pipe whose reader goes away early is an error naming the
# output, exit 1, not a silent SIGPIPE (141); a full file system fails the write, exit 1,
# and leaves the old file whole.
expect 2 "--trace /dev/stdout and --json /dev/stdout name the same file" \
  script -qec "'$RS' compare ${SMALL[*]} --ranks 2 --json /dev/stdout --trace /dev/stdout" /dev/null
expect 2 "--trace /dev/stderr and --json /dev/stdout name the same file" \
  script -qec "'$RS' compare ${SMALL[*]} --ranks 2 --json /dev/stdout --trace /dev/stderr" /dev/null
expect 2 "name the same file" script -qec "'$RS' compare ${SMALL[*]} --ranks 2 --json /dev/stderr --trace /dev/stdout" /dev/null
mkfifo early.fifo
(head -c 100 early.fifo > /dev/null &)
expect 1 "^ringside: error: --trace: cannot write early.fifo: Broken pipe" "$RS" compare "${SMALL[@]}" --ranks 2 --trace early.fifo
expect 1 "^ringside: error: --json: cannot write /dev/stdout: Broken pipe" \
  bash -c "'$RS' plan --preset llama3-8b --seq 8192 --gpus 4 --hw h100-nvlink --top 1 --json /dev/stdout 2>&1 >&3 | cat; exit \${PIPESTATUS[0]}" 3> >(head -c 100 > /dev/null)
mkdir tiny
if mount -t tmpfs -o size=1M tmpfs tiny 2> /dev/null; then
  echo '{"old": true}' > tiny/plan.json
  head -c 1000000 /dev/zero > tiny/filler  # about 40 KiB left; the plan's JSON is 70 KiB
  expect 1 "^ringside: error: --json: cannot write tiny/plan.json: No space left on device" \
    "$RS" plan --preset llama3-8b --seq 8192 --gpus 4 --hw h100-nvlink --top 1 --json tiny/plan.json
  check "the old file is whole" grep -qx '{"old": true}' tiny/plan.json
  check "no temporary left on the full file system" no_partials tiny
  umount tiny
else
  echo "skipped: the full file system (mounting a tmpfs needs root and CAP_SYS_ADMIN)"
fi

# --- the name checked is the name written.
long=$(printf 'n%.0s' $(seq 253))
expect 0 "trace: $long" "$RS" compare "${SMALL[@]}" --ranks 2 --strategies ring --trace "$long"
check "a 253-character trace name was written whole" valid_json "$long"
expect 2 "File name too long" "$RS" compare "${SMALL[@]}" --ranks 2 --trace "${long}nnn"
check "no temporary left" no_partials .
finish

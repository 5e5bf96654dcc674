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
check "the inputs are untouched" cmp -s good.json good.copy
expect 0 "json: " "$RS" compare "${SMALL[@]}" --ranks 2 --json /dev/null --trace /dev/null

# --- the name checked is the name written.
long=$(printf 'n%.0s' $(seq 253))
expect 0 "trace: $long" "$RS" compare "${SMALL[@]}" --ranks 2 --strategies ring --trace "$long"
check "a 253-character trace name was written whole" valid_json "$long"
expect 2 "File name too long" "$RS" compare "${SMALL[@]}" --ranks 2 --trace "${long}nnn"
check "no temporary left" no_partials .
finish

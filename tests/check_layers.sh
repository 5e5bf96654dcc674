#!/usr/bin/env bash
# No include runs back up the layers: a file may include its own layer and those below it.
#   kernels < core < trace < device < comm < layer < parallel < run < check < model < lessons < cli, viz
# (cli and viz on top, neither including the other). core/error.h, the error types, is below all.
set -euo pipefail
cd "$(dirname "$0")/.."
rank() {
  case "$1" in
    kernels) echo 0 ;; core) echo 1 ;; trace) echo 2 ;; device) echo 3 ;; comm) echo 4 ;; layer) echo 5 ;;
    parallel) echo 6 ;; run) echo 7 ;; check) echo 8 ;; model) echo 9 ;; lessons) echo 10 ;; cli|viz) echo 11 ;; *) echo -1 ;;
  esac
}
bad=0 checked=0
while IFS= read -r file; do
  case "$file" in
    src/*) from=$(echo "$file" | cut -d/ -f2) ;;
    *) from=$(echo "$file" | cut -d/ -f1) ;;
  esac
  from_rank=$(rank "$from")
  while IFS= read -r inc; do
    to=$(echo "$inc" | cut -d/ -f1)
    to_rank=$(rank "$to")
    [ "$to_rank" -lt 0 ] || [ "$inc" = core/error.h ] && continue
    checked=$((checked + 1))
    if [ "$to_rank" -gt "$from_rank" ] || { [ "$to_rank" -eq 11 ] && [ "$to" != "$from" ]; }; then
      echo "layering: $file ($from) includes $inc ($to)"
      bad=$((bad + 1))
    fi
  done < <(grep -ho '^#include "[^"]*"' "$file" | sed 's/#include "\(.*\)"/\1/')
done < <(find src kernels lessons viz -name '*.h' -o -name '*.cpp' -o -name '*.cu' | sort)
echo "checked $checked includes; $bad run back up the layers"
[ "$bad" -eq 0 ]

#!/usr/bin/env bash
# Run one test file over and over, PARALLEL copies at a time, to measure how often a timing-dependent
# test fails under load; keeps the pytest base directory (logs, cluster run dirs) of each failing run.
#   scripts/repeat-test.sh tests/integration/test_restart.py ROUNDS PARALLEL OUT_DIR
# Prints one line per round: failures so far and the load average.
set -u
test_file=$1; rounds=$2; parallel=$3; out=$4
mkdir -p "$out"
cd "$(dirname "$0")/.."
for round in $(seq 1 "$rounds"); do
  for copy in $(seq 1 "$parallel"); do
    ( PYTHONPATH=. timeout 300 python3 -m pytest "$test_file" -x -q -s -p no:cacheprovider \
        --basetemp="$out/$round-$copy" > "$out/$round-$copy.log" 2>&1
      echo "rc=$?" >> "$out/$round-$copy.log" ) &
  done
  wait
  for copy in $(seq 1 "$parallel"); do
    grep -q "^rc=0$" "$out/$round-$copy.log" && rm -rf "${out:?}/$round-$copy"
  done
  echo "round $round: $(grep -l '^rc=[1-9]' "$out"/*.log 2>/dev/null | wc -l) failed so far; load $(cut -d' ' -f1 /proc/loadavg)"
done

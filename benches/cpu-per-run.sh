#!/usr/bin/env bash
# CPU per backlog run of orderly and the Go design on one topic the harness already filled.
#
#   benches/cpu-per-run.sh TOPIC [RUNS] [FAIL_MOD]
#
# TOPIC: a topic of a harness run, e.g. bench-<stamp>-s1-1k-4 (`cargo xtask kafka tool topics
# --bootstrap-server {bootstrap} --list`); its records are read by a fresh group per run. Needs the
# release builds the harness made (target/release/bench-orderly, benches/peers/go-seed/target/
# go-seed) and the running broker (`cargo xtask kafka status`). Prints per run and system the wall
# time and CPU seconds (user, system) from /usr/bin/time, then the time from the first record
# handed to a handler to the last completion and to the end of the run (from the handler log).
set -euo pipefail
topic=${1:?topic}
runs=${2:-3}
fail_mod=${3:-10}
. "$(dirname "$0")/topic-run.sh"
topic_run_setup "$topic" cpu.dlq
records=${RECORDS:-50000}
span() {
  python3 - "$log" <<'PY'
import sys
first = end = None
done = []
for line in open(sys.argv[1]):
    if line.startswith('#'):
        for kv in line[1:].split():
            k, _, v = kv.partition('=')
            if k == 'first_us': first = int(v)
            if k == 'end_us': end = int(v)
    else:
        p = line.split()
        if len(p) >= 6: done.append(int(p[5]))
print(f"records {len(done)}, last completion {(max(done) - first) / 1000:.1f} ms, end {(end - first) / 1000:.1f} ms")
PY
}
for i in $(seq "$runs"); do
  printf 'orderly  run %s: ' "$i"
  /usr/bin/time -f '%e s wall, %U s user, %S s system' "$root/target/release/bench-orderly" \
    --bootstrap "$bootstrap" --topic "$topic" --group "cpu-o-$i-$$" --dlq-topic "$dlq" \
    --records "$records" --fail-mod "$fail_mod" --log "$log" 2>&1 >/dev/null | tail -1
  span
  printf 'go-seed  run %s: ' "$i"
  /usr/bin/time -f '%e s wall, %U s user, %S s system' "$root/benches/peers/go-seed/target/go-seed" \
    -bootstrap "$bootstrap" -topic "$topic" -group "cpu-g-$i-$$" -records "$records" \
    -fail-mod "$fail_mod" -work-us 0 -log "$log" 2>&1 >/dev/null | tail -1
  span
done

#!/usr/bin/env bash
# S1 under a small partition budget, so partitions pause and resume while they run: the fetch
# long-poll toward a broker leading a paused partition at 500 ms (the behaviour before
# `FetchConfig::paused_max_wait`) against the default (20 ms), alternating.
#
#   benches/paused-resume.sh TOPIC [RUNS] [BUDGET_BYTES]
#
# TOPIC: an S1 topic of a harness run, e.g. bench-<stamp>-s1-3 (`cargo xtask kafka tool topics
# --bootstrap-server {bootstrap} --list`); its records are read by a fresh group per run. Needs
# the release build the harness made (target/release/bench-orderly) and the running broker
# (`cargo xtask kafka status`). Prints per run the time from the first record handed to a
# handler to the end of the run, and that time over the floor the run's drawn backoffs impose.
set -euo pipefail
topic=${1:?topic}
runs=${2:-3}
budget=${3:-262144}
. "$(dirname "$0")/topic-run.sh"
topic_run_setup "$topic" resume.dlq
span() {
  python3 - "$log" <<'PY'
import sys
h = {}
n = 0
for line in open(sys.argv[1]):
    if line.startswith('#'):
        h = dict(kv.split('=', 1) for kv in line[1:].split())
    else:
        n += 1
t = (int(h['end_us']) - int(h['first_us'])) / 1000
floor = int(h.get('drawn_floor_us', 0)) / 1000
print(f"records {n}, {t:.1f} ms, drawn floor {floor:.1f} ms, ratio {t / floor:.3f}" if floor else f"records {n}, {t:.1f} ms")
PY
}
for i in $(seq "$runs"); do
  for wait in 500 default; do
    extra=()
    [ "$wait" = default ] || extra=(--paused-max-wait-ms "$wait")
    printf 'run %s, paused long-poll %-7s: ' "$i" "$wait"
    "$root/target/release/bench-orderly" --bootstrap "$bootstrap" --topic "$topic" \
      --group "resume-$wait-$i-$$" --dlq-topic "$dlq" --records 50000 --fail-mod 10 \
      --partition-budget-bytes "$budget" "${extra[@]}" --log "$log" >/dev/null 2>&1
    span
  done
done

#!/usr/bin/env bash
# Interleaved A/B of S1 runs: which of several bench-orderly builds or settings comes closer to
# the retry-policy floor on the same topic.
#
#   benches/ab-s1.sh TOPIC RUNS 'COMMAND A' 'COMMAND B' ...
#
# TOPIC: an S1 topic of a harness run, e.g. bench-<stamp>-s1-0 (`cargo xtask bench --scenario S1
# --systems orderly --reps 1 --no-write` makes one; `cargo xtask kafka tool topics
# --bootstrap-server {bootstrap} --list` lists them). Each COMMAND is a bench-orderly binary,
# optionally behind environment settings. Round i runs every command once, in the order given, so
# machine noise hits all alike; each run reads the topic in a fresh group (50,000 records, 10 %
# failing on their first attempt, the shared retry policy). Prints, per command, the median of
# (run time ÷ the floor the run's own drawn backoffs impose), the median retry lateness in the
# first 50 ms and after (µs, bench-orderly's stderr), and every run's ratio. Needs the running
# broker (`cargo xtask kafka start`).
set -euo pipefail
topic=${1:?usage: benches/ab-s1.sh TOPIC RUNS COMMAND...}
runs=${2:?usage: benches/ab-s1.sh TOPIC RUNS COMMAND...}
shift 2
[ $# -gt 0 ] || { echo "usage: benches/ab-s1.sh TOPIC RUNS COMMAND..." >&2; exit 2; }
. "$(dirname "$0")/topic-run.sh"
topic_run_setup "$topic" ab.dlq
work=$(mktemp -d)
trap 'rm -rf "$work" "$log"' EXIT
for i in $(seq "$runs"); do
  for j in $(seq $#); do
    cmd=${!j}
    # shellcheck disable=SC2086 # COMMAND is meant to be split into words
    /usr/bin/time -o "$work/time" -f '%U %S' $cmd --bootstrap "$bootstrap" --topic "$topic" \
      --group "ab-s1-$$-$i-$j" --dlq-topic "$dlq" --records 50000 --fail-mod 10 \
      --log "$log" >/dev/null 2>"$work/err" || { cat "$work/err" >&2; exit 1; }
    python3 - "$log" "$work/err" "$(tail -1 "$work/time")" >>"$work/res.$j" <<'PY'
import re, sys
h = {}
for line in open(sys.argv[1]):
    if line.startswith('#'):
        h = dict(kv.split('=', 1) for kv in line[1:].split() if '=' in kv)
        break
t = int(h['end_us']) - int(h['first_us'])
err = open(sys.argv[2]).read()
m = re.search(r'first 50 ms: n=\d+ mean=([\d.]+); after: n=\d+ mean=([\d.]+)', err)
early, after = (m.group(1), m.group(2)) if m else ('nan', 'nan')
cpu = sum(float(x) for x in sys.argv[3].split())
print(t / int(h['drawn_floor_us']), early, after, cpu, t / 1000)
PY
  done
done
for j in $(seq $#); do
  python3 - "${!j}" "$work/res.$j" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[2])]
col = lambda k: [float(r[k]) for r in rows]
print(f"{sys.argv[1]}\n  median {statistics.median(col(0)):.3f}x the drawn floor, run {statistics.median(col(4)):.1f} ms, "
      f"lateness first 50 ms {statistics.median(col(1)):.0f} us, after {statistics.median(col(2)):.1f} us, "
      f"CPU {statistics.median(col(3)):.2f} s; runs: {', '.join(f'{r:.3f}' for r in col(0))}")
PY
done

#!/usr/bin/env bash
# Interleaved A/B of S3-shaped orderly runs: which of several bench-orderly builds or settings is
# faster over the same topic.
#
#   benches/ab-s3.sh RUNS 'COMMAND A' 'COMMAND B' ...
#
# Each COMMAND is a bench-orderly binary, optionally behind environment settings, e.g.
#   benches/ab-s3.sh 5 /tmp/bench-orderly-before target/release/bench-orderly
#   benches/ab-s3.sh 4 'env ORDERLY_BENCH_WORKERS=8 target/release/bench-orderly' \
#                      'env ORDERLY_BENCH_WORKERS=2 target/release/bench-orderly'
# Round i runs every command once, in the order given, so machine noise hits all alike. Every
# run consumes the topic `profile-s3` (1,000,000 records of 100 bytes, 10,000 sessions, 12
# partitions, no failures, no handler work; `benches/profile-s3.sh` creates it) in a fresh group.
# Prints, per command, the median records/s (first handler call to the end of the run, as the
# harness counts S3), the median user CPU seconds, and every run's records/s. Needs the running
# broker (`cargo xtask kafka start`).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
runs=${1:?usage: benches/ab-s3.sh RUNS COMMAND...}
shift
[ $# -gt 0 ] || { echo "usage: benches/ab-s3.sh RUNS COMMAND..." >&2; exit 2; }
bootstrap=$(cd "$root" && cargo xtask kafka status 2>/dev/null | sed -n 's/.*bootstrap=\([^ ]*\).*/\1/p')
: "${bootstrap:?no broker running (cargo xtask kafka start)}"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for i in $(seq "$runs"); do
  for j in $(seq $#); do
    cmd=${!j}
    # shellcheck disable=SC2086 # COMMAND is meant to be split into words
    /usr/bin/time -o "$work/time" -f '%U' $cmd --bootstrap "$bootstrap" --topic profile-s3 \
      --group "ab-$$-$i-$j" --dlq-topic profile-s3.dlq --records 1000000 --fail-mod 0 \
      --log "$work/log" >/dev/null 2>"$work/err" || { cat "$work/err" >&2; exit 1; }
    python3 - "$work/log" "$(tail -1 "$work/time")" >>"$work/res.$j" <<'PY'
import sys
for line in open(sys.argv[1]):
    if line.startswith('#'):
        d = dict(kv.split('=', 1) for kv in line[1:].split() if '=' in kv)
        print(int(1e6 / ((int(d['end_us']) - int(d['first_us'])) / 1e6)), sys.argv[2])
        break
PY
  done
done
for j in $(seq $#); do
  python3 - "${!j}" "$work/res.$j" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[2])]
rate = [int(r[0]) for r in rows]
user = [float(r[1]) for r in rows]
print(f"{sys.argv[1]}\n  median {statistics.median(rate):,.0f} records/s, user CPU {statistics.median(user):.2f} s; runs: {', '.join(f'{r:,}' for r in rate)}")
PY
done

#!/usr/bin/env bash
# Where an S3-shaped run of orderly spends its CPU.
#
#   benches/profile-s3.sh [BENCH_ORDERLY] [RUNS]
#
# Fills a topic once (1,000,000 records of 100 bytes, 10,000 sessions, 12 partitions, like S3;
# named profile-s3 and reused by later calls), then runs BENCH_ORDERLY (default
# target/release/bench-orderly, which `cargo xtask bench` builds) over it RUNS times (default 3)
# with no failures and no handler work, printing wall time, CPU seconds and records/s per run;
# then once more under `perf record` (DWARF call graphs) and prints the top exclusive entries and
# the top inclusive entries of orderly's own code. To compare two commits, build bench-orderly at
# each (`cargo build --release -p orderly-benches --bin bench-orderly`), copy the binaries aside
# and run this script with each on the same topic. Needs the running broker (`cargo xtask kafka
# start`) and perf.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${1:-$root/target/release/bench-orderly}
runs=${2:-3}
topic=profile-s3
bootstrap=$(cd "$root" && cargo xtask kafka status 2>/dev/null | sed -n 's/.*bootstrap=\([^ ]*\).*/\1/p')
: "${bootstrap:?no broker running (cargo xtask kafka start)}"
tool() { (cd "$root" && cargo xtask kafka tool topics --bootstrap-server '{bootstrap}' "$@"); }
if ! tool --list 2>/dev/null | grep -qx "$topic"; then
  tool --create --topic "$topic" --partitions 12 --replication-factor 1 >/dev/null
  tool --create --topic "$topic.dlq" --partitions 1 --replication-factor 1 >/dev/null
  "$root/target/release/bench-load" --bootstrap "$bootstrap" --topic "$topic" --sessions 10000 \
    --records 1000000
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
rate() {
  python3 - "$1" <<'PY'
import sys
for line in open(sys.argv[1]):
    if line.startswith('#'):
        d = dict(kv.split('=', 1) for kv in line[1:].split() if '=' in kv)
        print(f"  {1e6 / ((int(d['end_us']) - int(d['first_us'])) / 1e6):,.0f} records/s")
        break
PY
}
for i in $(seq "$runs"); do
  printf 'run %s: ' "$i"
  /usr/bin/time -f '%e s wall, %U s user, %S s system' "$bin" --bootstrap "$bootstrap" \
    --topic "$topic" --group "profile-$i-$$" --dlq-topic "$topic.dlq" --records 1000000 \
    --fail-mod 0 --log "$work/log" 2>&1 >/dev/null | tail -1
  rate "$work/log"
done
perf record -q -F 700 --call-graph dwarf,16384 -o "$work/perf.data" -- "$bin" \
  --bootstrap "$bootstrap" --topic "$topic" --group "profile-perf-$$" --dlq-topic "$topic.dlq" \
  --records 1000000 --fail-mod 0 --log "$work/log" >/dev/null 2>&1
perf script -i "$work/perf.data" 2>/dev/null | python3 -c '
import collections, re, sys
samples = sys.stdin.read().split("\n\n")
total = 0
leaf, incl = collections.Counter(), collections.Counter()
for s in samples:
    lines = [l.strip() for l in s.strip().split("\n")[1:] if l.strip()]
    if not lines:
        continue
    total += 1
    frames = [re.sub(r"\+0x[0-9a-f]+.*", "", l.split(" ", 1)[-1])[:100] for l in lines]
    leaf[frames[0]] += 1
    for f in set(frames):
        incl[f] += 1
print(f"perf: {total} samples")
print("top exclusive entries:")
for f, n in leaf.most_common(15):
    print(f"  {100 * n / total:5.1f} %  {f}")
print("top inclusive entries of orderly code:")
ours = [(f, n) for f, n in incl.most_common() if f.startswith(("orderly_", "<orderly_", "core::ptr::drop_in_place<orderly"))]
for f, n in ours[:15]:
    print(f"  {100 * n / total:5.1f} %  {f}")
'

#!/usr/bin/env bash
# Startup and footprint of `orderly` builds, side by side on one broker (BENCHMARKS.md quotes it).
#
#   cargo xtask kafka start
#   cargo xtask dist                                   # the static musl binaries
#   cargo build --release -p orderly-cli                # the glibc build, for comparison
#   benches/footprint.sh target/x86_64-unknown-linux-musl/dist/orderly target/release/orderly
#
# For every binary and each of --reps runs (default 3): RSS of an idle consumer (joined, nothing to
# consume, 10 s after start), then the backlog scenario (`orderly run`: --records records over
# --sessions sessions, 12 partitions, 10 % transient and 0.1 % permanent failures) with its
# throughput from the first record handed to a handler, the time from process start to that first
# record, and the peak RSS (VmHWM, read from /proc until the process exits). Prints one row per run.
set -euo pipefail
cd "$(dirname "$0")/.."

records=200000
sessions=1000
reps=3
bins=()
while [ $# -gt 0 ]; do
  case "$1" in
    --records) records=$2; shift 2 ;;
    --sessions) sessions=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    *) bins+=("$1"); shift ;;
  esac
done
[ ${#bins[@]} -gt 0 ] || { echo "usage: $0 [--records N] [--sessions S] [--reps R] BIN..." >&2; exit 2; }

bs=$(cargo xtask kafka start 2>/dev/null | tail -1)
export ORDERLY_BOOTSTRAP=$bs
stamp=$(date +%s)
topic() { cargo xtask kafka tool topics --bootstrap-server '{bootstrap}' --create --topic "$1" --partitions "$2" >/dev/null; }

work=footprint-$stamp
topic "$work" 12
topic "$work.dlq" 3
idle=footprint-idle-$stamp
topic "$idle" 12
topic "$idle.dlq" 3
"${bins[0]}" seed --topic "$work" --records "$records" --sessions "$sessions" >/dev/null

kib() { awk -v k="$1" '$1 == k":" { print $2 }' "/proc/$2/status" 2>/dev/null || true; }

echo "| binary | run | idle RSS (MiB) | records/s from first record | start to first record (s) | peak RSS (MiB), $sessions sessions |"
echo "|---|---|---|---|---|---|"
for bin in "${bins[@]}"; do
  for rep in $(seq 1 "$reps"); do
    # Idle: joined to a group on an empty topic.
    RUST_LOG=warn "$bin" run --topic "$idle" --group "idle-$stamp-$rep-$RANDOM" --dlq-topic "$idle.dlq" >/dev/null 2>&1 &
    pid=$!
    sleep 10
    idle_kib=$(kib VmRSS $pid)
    kill -INT $pid; wait $pid || true

    # Backlog: every record, peak RSS polled until exit.
    out=$(mktemp)
    RUST_LOG=warn "$bin" run --topic "$work" --group "work-$stamp-$rep-$RANDOM" --dlq-topic "$work.dlq" \
      --records "$records" --transient-pct 10 --permanent >"$out" 2>&1 &
    pid=$!
    peak=0
    while kill -0 $pid 2>/dev/null; do
      v=$(kib VmHWM $pid); [ -n "$v" ] && [ "$v" -gt "$peak" ] && peak=$v
      sleep 0.05
    done
    wait $pid || { cat "$out" >&2; exit 1; }
    rate=$(grep -o '[0-9]* records/s from the first record' "$out" | awk '{print $1}')
    wall=$(grep -o 'wall time *[0-9.]*[mµn]*s' "$out" | awk '{print $3}')
    first=$(grep -o 'end of the run ([0-9.]*[mµn]*s' "$out" | sed 's/.*(//')
    to_s() { case "$1" in *ms) awk -v v="${1%ms}" 'BEGIN{print v/1000}';; *µs) echo 0;; *s) echo "${1%s}";; esac; }
    startup=$(awk -v w="$(to_s "$wall")" -v f="$(to_s "$first")" 'BEGIN{printf "%.2f", w-f}')
    rm -f "$out"
    printf '| %s | %d | %.1f | %s | %s | %.1f |\n' "$bin" "$rep" "$(awk -v k="$idle_kib" 'BEGIN{print k/1024}')" \
      "$rate" "$startup" "$(awk -v k="$peak" 'BEGIN{print k/1024}')"
  done
done

#!/usr/bin/env bash
# Startup, footprint and allocators of `orderly` builds, side by side on one broker
# (BENCHMARKS.md, "Static binaries, the allocator, start-up and footprint").
#
#   benches/footprint.sh --build                 # build the three variants below, then measure
#   benches/footprint.sh NAME=BIN [NAME=BIN...]  # measure binaries built before
#
# --build builds, from the current tree, into target/footprint/:
#   musl          cargo build --profile dist --target x86_64-unknown-linux-musl -p orderly-cli
#                 --features alloc-system (musl's own allocator, mallocng)
#   musl-dlmalloc the same without the feature: what `cargo xtask dist` ships since the figures
#                 chose it (the pure-Rust dlmalloc port)
#   glibc         cargo build --release -p orderly-cli (glibc's malloc, dynamically linked)
#
# Set-up: one broker (`cargo xtask kafka start`, reused if running), a 12-partition topic filled
# once with --records records over --sessions sessions by `orderly seed` (key = session, 100-byte
# value, headers event-id and seq). Then --reps rounds; each round runs every variant once, in an
# order rotated per round so that machine noise hits every variant alike:
#   idle     `orderly run` joined to a group on an empty 12-partition topic; VmRSS 10 s after start.
#   backlog  `orderly run` consuming the whole backlog in a fresh group (10 % transient failures
#            retried with backoff, 0.1 % permanent ones written to the DLQ, order checked), under
#            /usr/bin/time: records/s from the first record handed to a handler to the final
#            commit's acknowledgement (the LeaveGroup after it not counted), CPU seconds (user +
#            sys) per million records, peak RSS (the kernel's maximum resident set, ru_maxrss:
#            exact, not polled), and the time from exec to the first record handed to a handler
#            (wall time measured here, minus the two spans `orderly run` reports after that record:
#            to the final commit, then leaving the group; it includes connecting, metadata, the
#            group join, the offset fetch and the first fetch).
# The 1-minute load average is recorded before every backlog run. A run whose report is not
# "OK: order held, nothing lost" fails the script. Prints every run, then the medians per variant.
set -euo pipefail
cd "$(dirname "$0")/.."

records=1000000
sessions=1000
reps=3
build=0
specs=()
while [ $# -gt 0 ]; do
  case "$1" in
    --records) records=$2; shift 2 ;;
    --sessions) sessions=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    --build) build=1; shift ;;
    -h|--help) sed -n '2,30p' "$0"; exit 0 ;;
    *=*) specs+=("$1"); shift ;;
    *) echo "unknown argument $1 (NAME=BIN, --build, --records, --sessions, --reps)" >&2; exit 2 ;;
  esac
done

out_dir=${CARGO_TARGET_DIR:-target}/footprint
mkdir -p "$out_dir"
if [ $build = 1 ]; then
  musl=x86_64-unknown-linux-musl
  tdir=${CARGO_TARGET_DIR:-target}
  cargo build --locked --profile dist --target $musl -p orderly-cli --bin orderly --features alloc-system
  cp "$tdir/$musl/dist/orderly" "$out_dir/orderly-musl"
  cargo build --locked --profile dist --target $musl -p orderly-cli --bin orderly
  cp "$tdir/$musl/dist/orderly" "$out_dir/orderly-musl-dlmalloc"
  cargo build --locked --release -p orderly-cli --bin orderly
  cp "$tdir/release/orderly" "$out_dir/orderly-glibc"
  specs+=("musl=$out_dir/orderly-musl" "musl-dlmalloc=$out_dir/orderly-musl-dlmalloc" "glibc=$out_dir/orderly-glibc")
fi
[ ${#specs[@]} -gt 0 ] || { echo "usage: $0 --build | NAME=BIN... [--records N] [--sessions S] [--reps R]" >&2; exit 2; }
names=(); bins=()
for s in "${specs[@]}"; do
  names+=("${s%%=*}"); bins+=("${s#*=}")
  [ -x "${s#*=}" ] || { echo "not an executable: ${s#*=}" >&2; exit 2; }
done
n=${#names[@]}

# XTASK=path/to/xtask runs a built xtask binary instead of `cargo xtask` (no cargo lock taken
# while other builds run in the same target directory).
xtask() { if [ -n "${XTASK:-}" ]; then "$XTASK" "$@"; else cargo xtask "$@"; fi; }
bs=$(xtask kafka start | tail -1)
export ORDERLY_BOOTSTRAP=$bs
stamp=$(date +%s)
topic() { xtask kafka tool topics --bootstrap-server '{bootstrap}' --create --topic "$1" --partitions "$2" >/dev/null; }
work=footprint-$stamp
idle=footprint-idle-$stamp
topic "$work" 12; topic "$work.dlq" 3; topic "$idle" 12; topic "$idle.dlq" 3
echo "seeding $records records over $sessions sessions into $work ($bs)" >&2
RUST_LOG=warn "${bins[0]}" seed --topic "$work" --records "$records" --sessions "$sessions" >/dev/null

# Converts Rust's Debug form of a Duration (1.23s, 456.7ms, 89µs) to seconds.
to_s() { case "$1" in *ms) awk -v v="${1%ms}" 'BEGIN{print v/1000}' ;; *µs|*ns) echo 0 ;; *s) echo "${1%s}" ;; esac; }
kib() { awk -v k="$1" '$1 == k":" { print $2 }' "/proc/$2/status" 2>/dev/null || true; }

rows=$(mktemp)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp" "$rows"' EXIT
echo "| round | variant | load (1 min) | idle RSS MiB | records/s | CPU s per 1M records | peak RSS MiB | exec to first record s |"
echo "|---|---|---|---|---|---|---|---|"
for rep in $(seq 1 "$reps"); do
  for k in $(seq 0 $((n - 1))); do
    i=$(( (k + rep - 1) % n ))
    name=${names[$i]}; bin=${bins[$i]}

    # Idle: joined to a group on an empty topic, 10 s after exec.
    RUST_LOG=warn "$bin" run --topic "$idle" --group "idle-$stamp-$rep-$name" --dlq-topic "$idle.dlq" >/dev/null 2>&1 &
    pid=$!
    sleep 10
    idle_kib=$(kib VmRSS $pid)
    kill -INT $pid
    for _ in $(seq 1 100); do kill -0 $pid 2>/dev/null || break; sleep 0.1; done
    kill -KILL $pid 2>/dev/null || true
    wait $pid 2>/dev/null || true

    # Backlog: every record, under /usr/bin/time.
    load=$(cut -d' ' -f1 /proc/loadavg)
    t0=$(date +%s%N)
    RUST_LOG=warn /usr/bin/time -o "$tmp/time" -f '%M %U %S' \
      "$bin" run --topic "$work" --group "work-$stamp-$rep-$name" --dlq-topic "$work.dlq" \
      --records "$records" --transient-pct 10 --permanent >"$tmp/out" 2>"$tmp/err" \
      || { cat "$tmp/out" "$tmp/err" >&2; exit 1; }
    t1=$(date +%s%N)
    grep -q 'verdict *OK' "$tmp/out" || { cat "$tmp/out" >&2; echo "run failed: $name" >&2; exit 1; }
    rate=$(grep -o '[0-9]* records/s from the first record' "$tmp/out" | awk '{print $1}')
    to_commit=$(grep -o 'final commit acknowledged ([0-9.]*[mµn]*s' "$tmp/out" | sed 's/.*(//')
    leaving=$(grep -o 'leaving the group took [0-9.]*[mµn]*s' "$tmp/out" | awk '{print $NF}')
    read -r peak_kib user sys < "$tmp/time"
    startup=$(awk -v w="$(( (t1 - t0) / 1000000 ))" -v c="$(to_s "$to_commit")" -v l="$(to_s "$leaving")" \
      'BEGIN{printf "%.2f", w/1000 - c - l}')
    cpu=$(awk -v u="$user" -v s="$sys" -v r="$records" 'BEGIN{printf "%.2f", (u + s) * 1000000 / r}')
    idle_mib=$(awk -v k="$idle_kib" 'BEGIN{printf "%.1f", k/1024}')
    peak_mib=$(awk -v k="$peak_kib" 'BEGIN{printf "%.1f", k/1024}')
    echo "| $rep | $name | $load | $idle_mib | $rate | $cpu | $peak_mib | $startup |"
    echo "$name $load $idle_mib $rate $cpu $peak_mib $startup" >> "$rows"
  done
done

median() { sort -g | awk '{v[NR]=$1} END {if (NR%2) print v[(NR+1)/2]; else print (v[NR/2]+v[NR/2+1])/2}'; }
echo
echo "Medians of $reps runs ($records records, $sessions sessions, 12 partitions, broker $bs):"
echo
echo "| variant | binary bytes | idle RSS MiB | records/s | CPU s per 1M records | peak RSS MiB | exec to first record s | load (1 min) during its runs |"
echo "|---|---|---|---|---|---|---|---|"
for i in $(seq 0 $((n - 1))); do
  name=${names[$i]}
  col() { awk -v n="$name" -v c="$1" '$1 == n { print $c }' "$rows" | median; }
  loads=$(awk -v n="$name" '$1 == n { print $2 }' "$rows" | sort -g | awk 'NR==1{lo=$1} {hi=$1} END{print lo "-" hi}')
  printf '| %s | %s | %s | %s | %s | %s | %s | %s |\n' "$name" "$(stat -c %s "${bins[$i]}")" \
    "$(col 3)" "$(col 4)" "$(col 5)" "$(col 6)" "$(col 7)" "$loads"
done

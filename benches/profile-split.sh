#!/usr/bin/env bash
# Where the product binary's CPU goes on a backlog of a scenario's shape: who spends it (thread,
# engine stage) and on what kind of work (kernel, copies, reference counts, clock reads, ...).
#
#   benches/profile-split.sh RECORDS SESSIONS FAIL_MOD [ORDERLY_RUN_ARGS...]
#
# e.g. S1-1k: `benches/profile-split.sh 200000 1000 10`; S3-100us:
# `benches/profile-split.sh 1000000 10000 0 --work-us 100`. Writes a topic like the harness
# (12 partitions, bench-load), runs `target/release/orderly run` (default flags, plus the extra
# arguments) over it once under `perf record` (DWARF call graphs, 1,500 Hz) through
# benches/ab-peers.sh, which also prints the run's records/s, its CPU seconds and the broker's,
# then splits the samples two ways (each sums to 100 %):
#
# - by stage: the first of these found on the sample's stack: the handler itself, a worker
#   finishing records and starting the next, a worker taking records in, the rest of a worker
#   (running a record's attempts and retries, its clock reads), the fetch thread (requests,
#   decoding), the dispatch loop (routing, commits), the timer thread, anything else;
# - by kind of work: the sample's leaf function (kernel; memory copies; page faults counted
#   apart from the rest of the kernel; `Bytes` and `Arc` reference counts; clock reads; the
#   allocator; CRC; everything else in user space).
#
# Needs perf, the running broker (`cargo xtask kafka start`) and the release builds (`cargo build
# --release -p orderly-cli --bin orderly`, `-p orderly-benches --bin bench-load`).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
usage="usage: benches/profile-split.sh RECORDS SESSIONS FAIL_MOD [ORDERLY_RUN_ARGS...]"
records=${1:?$usage}
sessions=${2:?$usage}
fail_mod=${3:?$usage}
shift 3
command -v perf >/dev/null || { echo "perf is not installed" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# ab-peers.sh gives a command whose line names "product" the product's arguments.
cat >"$work/perf-product" <<EOF
#!/bin/sh
exec perf record -q -F 1500 --call-graph dwarf,16384 -o "$work/perf.data" "$root/target/release/orderly" "\$@"
EOF
chmod +x "$work/perf-product"
"$root/benches/ab-peers.sh" 1 "$records" "$sessions" "$fail_mod" "$work/perf-product run $*"
perf script -i "$work/perf.data" -F comm,ip,sym 2>/dev/null | python3 -c '
import collections, re, sys
STAGES = [
    ("handler (the synthetic workload)", lambda c, s: any("synthetic" in f or "Handler::handle" in f for f in s)),
    ("worker: finish a record, start the next", lambda c, s: any("::on_finished" in f for f in s)),
    ("worker: take records in", lambda c, s: any("::on_msg" in f for f in s)),
    ("worker: run a record (attempt, retries, its clock reads)", lambda c, s: any("worker::" in f for f in s)),
    ("fetch thread (requests, decoding)", lambda c, s: c.startswith("orderly-fetch")),
    ("dispatch loop (routing, commits)", lambda c, s: any("Engine<H,D>::run" in f or "engine::dispatch" in f for f in s)),
    ("timer thread", lambda c, s: c.startswith("orderly-timer")),
    ("other (runtime, start-up, the report)", lambda c, s: True),
]
KINDS = [
    ("page faults", lambda ip, s: any("page_fault" in f for f in s[:12])),
    ("kernel (network, scheduling, futex)", lambda ip, s: ip.startswith("ffffffff")),
    ("memory copies (memcpy, memmove)", lambda ip, s: re.search(r"__mem(cpy|move)", s[0])),
    ("reference counts (Bytes, Arc)", lambda ip, s: re.search(r"bytes::bytes::(shared|promotable)|Arc<.*>::drop_slow|Arc<.*>::clone", s[0])),
    ("clock reads", lambda ip, s: "clock_gettime" in s[0]),
    ("allocator", lambda ip, s: re.search(r"_int_(malloc|free|realloc)|libc_(malloc|free|realloc)|malloc_consolidate|sysmalloc|unlink_chunk", s[0])),
    ("CRC-32C", lambda ip, s: "crc32c" in s[0]),
    ("rest of user space", lambda ip, s: True),
]
stage, kind, leaf = collections.Counter(), collections.Counter(), collections.Counter()
total = 0
for block in sys.stdin.read().split("\n\n"):
    lines = [l for l in block.split("\n") if l.strip()]
    if len(lines) < 2:
        continue
    comm = lines[0].split()[0]
    frames = [l.strip().split(None, 1) for l in lines[1:]]
    ip = frames[0][0]
    syms = [re.sub(r"\+0x[0-9a-f]+$|::h[0-9a-f]{16}$", "", f[1] if len(f) > 1 else "?") for f in frames]
    total += 1
    stage[next(n for n, t in STAGES if t(comm, syms))] += 1
    kind[next(n for n, t in KINDS if t(ip, syms))] += 1
    leaf[syms[0][:100]] += 1
print(f"perf: {total} samples")
for title, cats, counts in (("by stage", STAGES, stage), ("by kind of work", KINDS, kind)):
    print(title + ":")
    for n, _ in cats:
        print(f"  {100 * counts[n] / max(total, 1):5.1f} %  {n}")
print("top leaf functions:")
for f, n in leaf.most_common(15):
    print(f"  {100 * n / total:5.1f} %  {f}")
'

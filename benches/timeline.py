#!/usr/bin/env python3
"""How evenly a backlog run completed its records (S3, BENCHMARKS.md).

    python3 benches/timeline.py LOG [BUCKET_MS]

Reads a handler log (the harness's, or the one `benches/ab-s3.sh` and `benches/profile-s3.sh`
write: one line per completion, the completion µs last; a `#` line with `first_us`) and prints the
records completed in each BUCKET_MS window (default 50) from the first handler call, then the
spread: the mean, the slowest and fastest full window, and the rate each stands for. A run whose
windows swing far around the mean was starved part of the time (the engine waited for records),
not slow throughout.
"""
import collections
import statistics
import sys

if len(sys.argv) < 2:
    sys.exit(__doc__)
path = sys.argv[1]
bucket_us = int(float(sys.argv[2]) * 1000) if len(sys.argv) > 2 else 50_000
first = None
done = []
for line in open(path):
    if line.startswith('#'):
        head = dict(kv.split('=', 1) for kv in line[1:].split() if '=' in kv)
        first = int(head.get('first_us', 0)) or None
        continue
    parts = line.split()
    if len(parts) >= 6:
        done.append(int(parts[-1]))
if not done:
    sys.exit(f"{path}: no completions")
start = first if first is not None else min(done)
counts = collections.Counter((t - start) // bucket_us for t in done)
last = max(counts)
for k in range(last + 1):
    print(f"{k * bucket_us / 1000:8.0f} ms  {counts.get(k, 0):8,}")
# The last window is cut short by the end of the run; leave it out of the spread.
full = [counts.get(k, 0) for k in range(last)]
if full:
    per_s = 1e6 / bucket_us
    print(f"windows of {bucket_us / 1000:g} ms: mean {statistics.mean(full):,.0f} "
          f"({statistics.mean(full) * per_s:,.0f} records/s), slowest {min(full):,} "
          f"({min(full) * per_s:,.0f}/s), fastest {max(full):,} ({max(full) * per_s:,.0f}/s)")

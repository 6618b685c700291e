#!/usr/bin/env python3
"""What a retry costs each system in a backlog run (the S1 floor, BENCHMARKS.md).

    python3 benches/retry-gaps.py target/bench-runs/<stamp>/*-s1-*-s1-*.log

Reads the harness's handler logs (one line per completion: session, seq, event id, attempt,
CreateTime, completion µs). Within each session, the gap between consecutive completions is
averaged separately for records done on the first attempt and for retried ones; their difference
is the cost of one retry, to compare with the drawn backoff (500 µs on average for S1's first
retry: full jitter over 1 ms).

For orderly, also prints the line `bench-orderly` leaves in the run's `.stderr` file next to the
log: how late each retry started, measured in the handler as retry start − failure − the backoff
the engine drew for it (`Attempt::backoff`), so the drawn delay is taken out exactly; and the same
for the retries that started in each 5 ms step of the run's first 60 ms.
"""
import collections
import os
import sys

for path in sys.argv[1:]:
    sessions = collections.defaultdict(list)
    for line in open(path):
        if line.startswith('#'):
            continue
        p = line.split()
        if len(p) < 6:
            continue
        sessions[p[0]].append((int(p[1]), int(p[3]), int(p[5])))
    first, retried = [], []
    for v in sessions.values():
        v.sort()
        for a, b in zip(v, v[1:]):
            (retried if b[1] > 1 else first).append(b[2] - a[2])
    if not first or not retried:
        print(f"{path}: no retried records")
        continue
    f = sum(first) / len(first)
    r = sum(retried) / len(retried)
    print(f"{path}: first-try gap {f:.1f} µs (n={len(first)}), retried gap {r:.1f} µs "
          f"(n={len(retried)}), cost of one retry {r - f:.0f} µs")
    err = path[:-len('.log')] + '.stderr' if path.endswith('.log') else None
    if err and os.path.exists(err):
        for line in open(err):
            if line.startswith('retry lateness'):  # both lines: totals, and by start time
                print(f"    {line.strip()}")

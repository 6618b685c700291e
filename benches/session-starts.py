#!/usr/bin/env python3
"""When each session of a backlog run started and ended (the S1 floor, BENCHMARKS.md).

    python3 benches/session-starts.py target/bench-runs/<stamp>/*-s1-[0-9]-s1-orderly.log

Reads the harness's handler logs (one line per completion: session, seq, event id, attempt,
CreateTime, completion µs; a `# ... first_us=... end_us=...` header). For each run prints the
latest first completion of any session (how long the last session to start waited after the
first), the shutdown (last completion → end_us) and each session as `key:start/end` in ms after
the run's first completion, sorted by start. The run lasts at least as long as the slowest
session's own chain plus its start, so a late start adds to the run time one for one.
"""
import sys

for path in sys.argv[1:]:
    header, start, end = {}, {}, {}
    for line in open(path):
        if line.startswith('#'):
            header = dict(kv.split('=', 1) for kv in line[1:].split() if '=' in kv)
            continue
        p = line.split()
        if len(p) < 6:
            continue
        s, done = p[0], int(p[5])
        start[s] = min(start.get(s, done), done)
        end[s] = max(end.get(s, done), done)
    if not start or 'first_us' not in header:
        print(f"{path}: no completions or no header")
        continue
    first = int(header['first_us'])
    last = max(end.values())
    order = sorted(start, key=start.get)
    print(f"{path}: last session started {(start[order[-1]] - first) / 1e3:.1f} ms after the first; "
          f"run {(int(header['end_us']) - first) / 1e3:.1f} ms, shutdown {(int(header['end_us']) - last) / 1e3:.1f} ms")
    print("   " + " ".join(f"{s}:{(start[s] - first) / 1e3:.1f}/{(end[s] - first) / 1e3:.0f}" for s in order))

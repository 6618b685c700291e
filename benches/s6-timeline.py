#!/usr/bin/env python3
"""When each process of an S6 run handled records: first and last completion per process.

    python3 benches/s6-timeline.py target/bench-runs/<run>/ SYSTEM

Reads the handler logs of one system's S6 run (`*-s6-*-SYSTEM-p<slot>-<n>.log`; `n` counts the
processes in start order) and prints, per process, how many records it completed and its first
and last completion in seconds after the run's first completion. A process started after a kill
that completes nothing for a long time shows how long the group left its partitions unowned.
"""
import glob
import os
import re
import sys


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    rows = []
    for path in glob.glob(os.path.join(sys.argv[1], f"*-s6-*-{sys.argv[2]}-p*-*.log")):
        m = re.search(r"-p(\d+)-(\d+)\.log$", path)
        done = []
        for line in open(path):
            parts = line.split()
            if not line.startswith("#") and len(parts) >= 6:
                done.append(int(parts[5]))
        if m and done:
            rows.append((int(m.group(2)), int(m.group(1)), len(done), min(done), max(done)))
    if not rows:
        sys.exit("no S6 logs of that system in that directory")
    t0 = min(r[3] for r in rows)
    print("process  slot  records  first s  last s")
    for n, slot, count, first, last in sorted(rows):
        print(f"{n:>7}  {slot:>4}  {count:>7}  {(first - t0) / 1e6:>7.1f}  {(last - t0) / 1e6:>6.1f}")


if __name__ == "__main__":
    main()

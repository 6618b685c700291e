#!/usr/bin/env python3
"""Call counts from a callgrind output file: how often each function was called, most first.

    python3 benches/callgrind-calls.py callgrind.out.N [TOP] [SUBSTRING]

callgrind_annotate shows instructions per function but not how many times it ran; this sums the
`calls=` lines of the file per callee. Dividing the count of
`orderly_engine::worker::process::{{closure}}` (one poll of a record's future) by the records
handled gives polls per record. TOP (default 30) limits the rows; SUBSTRING keeps only functions
whose name contains it.
"""
import collections
import re
import sys


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 30
    want = sys.argv[3] if len(sys.argv) > 3 else ""
    names, calls, callee = {}, collections.Counter(), None
    for line in open(sys.argv[1], errors="replace"):
        m = re.match(r"^(c?fn)=\((\d+)\)(?: (.*))?$", line.rstrip("\n"))
        if m:
            kind, ident, name = m.groups()
            if name:
                names[ident] = name
            callee = ident if kind == "cfn" else None
            continue
        m = re.match(r"^calls=(\d+)", line)
        if m and callee is not None:
            calls[callee] += int(m.group(1))
            callee = None
    rows = [(n, names.get(i, "?")) for i, n in calls.most_common()]
    for n, name in [r for r in rows if want in r[1]][:top]:
        print(f"{n:>12,}  {name[:160]}")


if __name__ == "__main__":
    main()

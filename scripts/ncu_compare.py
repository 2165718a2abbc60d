#!/usr/bin/env python3
"""Compares two `ncu --print-summary per-kernel` logs of the same workload: per kernel name, the
number of launches and the summed GPU time in each, largest differences first.
Usage: scripts/ncu_compare.py NEW.txt BASELINE.txt"""
import re
import sys


def totals(path):
    """{kernel: [launches, total us]} from ncu's per-kernel summary."""
    result, kernel, count = {}, None, 0
    for line in open(path, errors="replace"):
        m = re.match(r"\s{2}(\S.*?)\s+\(\d+, \d+, \d+\)x\(\d+, \d+, \d+\), .*Invocations (\d+)", line)
        if m:
            name = m.group(1).replace("<unnamed>::", "").replace("(anonymous namespace)::", "")
            kernel, count = re.sub(r"\(.*", "", name)[:60], int(m.group(2))
            continue
        m = re.match(r"\s+gpu__time_duration\.sum\s+(\S+)\s+\S+\s+(\S+)", line)
        if m and kernel:
            unit, avg = m.group(1), float(m.group(2).replace(",", ""))
            scale = {"ns": 1e-3, "usecond": 1.0, "us": 1.0, "nsecond": 1e-3, "msecond": 1e3, "ms": 1e3}.get(unit, 1.0)
            entry = result.setdefault(kernel, [0, 0.0])
            entry[0] += count
            entry[1] += count * avg * scale
            kernel = None
    return result


new, old = totals(sys.argv[1]), totals(sys.argv[2])
print(f"total: new {sum(v[1] for v in new.values()):.1f} us in {sum(v[0] for v in new.values())} launches, "
      f"baseline {sum(v[1] for v in old.values()):.1f} us in {sum(v[0] for v in old.values())} launches")
rows = []
for k in set(new) | set(old):
    n, o = new.get(k, [0, 0.0]), old.get(k, [0, 0.0])
    rows.append((n[1] - o[1], k, n, o))
for d, k, n, o in sorted(rows, key=lambda r: -abs(r[0]))[:24]:
    print(f"{d:+8.1f} us  {k:60s} new {n[0]:3d} x {n[1]:7.1f} us  base {o[0]:3d} x {o[1]:7.1f} us")

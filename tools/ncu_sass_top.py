#!/usr/bin/env python3
"""ncu_sass_top.py CSV [N] — the N SASS instructions of an Nsight Compute
source page (`ncu --import R --page source --csv --print-source sass`) with
the most warp-stall samples, each with its share of all samples and its
largest stall reasons; then the samples summed by opcode and by reason.
Column names differ between ncu versions: sample columns are found by
their names ("Warp Stall Sampling (All Samples)" or similar, and the
per-reason "stall_*" columns when present)."""
import csv
import re
import sys
from collections import defaultdict


def num(s):
    try:
        return float(str(s).replace(",", ""))
    except ValueError:
        return 0.0


def main():
    path, n = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 40
    with open(path, newline="") as f:
        rows = [r for r in csv.reader(f)]
    hi = next((i for i, r in enumerate(rows) if any("Source" in c for c in r) and len(r) > 3), None)
    if hi is None:
        print("ncu_sass_top: no header row found; first lines:", rows[:3])
        return
    head, body = rows[hi], [r for r in rows[hi + 1:] if len(r) == len(rows[hi])]
    col = {h: i for i, h in enumerate(head)}
    src = next(i for h, i in col.items() if h.strip() in ("Source", "# Source") or h.endswith("Source"))
    allc = next((i for h, i in col.items() if re.search(r"Warp Stall Sampling \(All", h)), None)
    if allc is None:
        print("ncu_sass_top: no stall-sampling column; columns:", head)
        return
    reasons = [(h, i) for h, i in col.items() if re.match(r"(?i)^stall_|^smsp__pcsamp", h) or "Stall" in h and i != allc
               and "Sampling" not in h]
    tot = sum(num(r[allc]) for r in body) or 1.0
    print(f"{len(body)} SASS lines, {tot:.0f} stall samples; columns with reasons: {len(reasons)}")
    top = sorted(range(len(body)), key=lambda k: -num(body[k][allc]))[:n]
    for k in top:
        r = body[k]
        rs = sorted(((num(r[i]), h) for h, i in reasons), reverse=True)[:3]
        why = ", ".join(f"{h.replace('stall_', '')} {v:.0f}" for v, h in rs if v > 0)
        print(f"{k:5d} {100 * num(r[allc]) / tot:5.1f}%  {r[src].strip()[:70]:70s} {why}")
    by_op = defaultdict(float)
    for r in body:
        op = r[src].strip().split()
        op = [t for t in op if not t.startswith("@")]
        by_op[op[0] if op else "?"] += num(r[allc])
    print("by opcode:", ", ".join(f"{o} {100 * v / tot:.1f}%" for o, v in sorted(by_op.items(), key=lambda x: -x[1])[:16]))
    if reasons:
        by_r = {h: sum(num(r[i]) for r in body) for h, i in reasons}
        print("by reason:", ", ".join(f"{h} {100 * v / tot:.1f}%" for h, v in sorted(by_r.items(), key=lambda x: -x[1])[:14]))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""ncu_runs — median duration of each run of consecutive launches of one
kernel in an Nsight Compute CSV (`--csv --print-units base --metrics
gpu__time_duration.sum`), for runs of at least MIN launches: a test's
timing loops (a graph of 20 calls of one op) come out one line each.
MIN 0: one line a kernel name, over all its launches.

    python3 tools/ncu_runs.py ncu.csv [MIN]
"""
import sys

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from ncu_summary import kernels, short  # noqa: E402


def main():
    path, least = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 5
    runs = []
    for k in kernels(path):
        t = k.get("gpu__time_duration.sum")
        if t is None:
            continue
        name = short(k["name"])
        if least == 0:  # one run a name
            hit = [r for r in runs if r[0] == name]
        else:  # consecutive launches
            hit = runs[-1:] if runs and runs[-1][0] == name else []
        if hit:
            hit[0][1].append(t / 1e3)
        else:
            runs.append((name, [t / 1e3]))
    for name, v in runs:
        if len(v) >= max(least, 1):
            print(f"  {len(v):4d} x {name}: median {sorted(v)[len(v) // 2]:.1f} us")


if __name__ == "__main__":
    main()

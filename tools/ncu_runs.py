#!/usr/bin/env python3
"""ncu_runs — median duration of each run of consecutive launches of one
kernel in an Nsight Compute CSV (`--csv --print-units base --metrics
gpu__time_duration.sum`), for runs of at least MIN launches: a test's
timing loops (a graph of 20 calls of one op) come out one line each.
MIN 0: one line a kernel name, over all its launches. With --all, every
other metric of the CSV as well (its median over the run's launches):
e.g. the SM clock, cycles, L2 sectors and DRAM bytes side by side.
--grep RE keeps the kernels whose short name matches RE.

    python3 tools/ncu_runs.py ncu.csv [MIN] [--all] [--grep RE]
"""
import re
import sys

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from ncu_summary import kernels, short  # noqa: E402

# short labels of the metrics the device scripts ask for (others: as named)
LABEL = {
    "sm__cycles_elapsed.avg.per_second": ("MHz", 1e-6),
    "sm__cycles_elapsed.max": ("kcyc", 1e-3),
    "lts__t_sectors_op_read.sum": ("L2rdMB", 32e-6),
    "lts__t_sectors_op_write.sum": ("L2wrMB", 32e-6),
    "lts__t_sector_hit_rate.pct": ("L2hit%", 1.0),
    "dram__bytes_read.sum": ("DRrdMB", 1e-6),
    "dram__bytes_write.sum": ("DRwrMB", 1e-6),
}


def med(v):
    v = sorted(v)
    return v[len(v) // 2]


def main():
    args = sys.argv[1:]
    every = "--all" in args
    pat = None
    if "--grep" in args:
        i = args.index("--grep")
        pat = re.compile(args[i + 1])
        del args[i:i + 2]
    args = [a for a in args if a != "--all"]
    path, least = args[0], int(args[1]) if len(args) > 1 else 5
    runs = []
    for k in kernels(path):
        if k.get("gpu__time_duration.sum") is None:
            continue
        name = short(k["name"])
        if pat and not pat.search(name):
            continue
        if least == 0:  # one run a name
            hit = [r for r in runs if r[0] == name]
        else:  # consecutive launches
            hit = runs[-1:] if runs and runs[-1][0] == name and runs[-1][2] == k["grid"] else []
        if hit:
            hit[0][1].append(k)
        else:
            runs.append((name, [k], k["grid"]))
    for name, ks, grid in runs:
        if len(ks) < max(least, 1):
            continue
        line = f"  {len(ks):4d} x {name} grid {grid}: median {med([k['gpu__time_duration.sum'] for k in ks]) / 1e3:.1f} us"
        if every:
            names = [m for m in ks[0] if m not in ("name", "grid", "block", "gpu__time_duration.sum")]
            for m in names:
                lab, sc = LABEL.get(m, (m, 1.0))
                line += f" {lab} {med([k.get(m, 0.0) for k in ks]) * sc:.1f}"
        print(line)


if __name__ == "__main__":
    main()

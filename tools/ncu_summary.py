#!/usr/bin/env python3
"""ncu_summary — time per kernel of each forward pass in an Nsight Compute CSV.

Input: `ncu --csv --print-units base --metrics gpu__time_duration.sum,
dram__bytes_read.sum,dram__bytes_write.sum ...` of `vllm run` or `vllm bench`
(scripts/gpu_ncu.sh). The kernels are cut into steps after each step's
last kernel, its argmax or sampler (k_argmax, k_argmax_finish, k_sample,
k_sample_cl; a run of them ends one step): the first step is the prefill,
the later ones decode steps (the first decode step runs eagerly, later ones
are graph replays, profiled node by node). Without such kernels (logits to
the host) the cut falls at each token embedding (k_embed) instead, which
also splits a step at its logit-row gather (an EMBED over x; session 24
found the old cut showed only a step's head as "the last"). Prints, for the prefill and for the last decode
step, the kernels grouped by (short) name: count, total us, share, and the
DRAM GB/s they reached; then the total of each forward.

    python3 tools/ncu_summary.py ncu.csv[.gz]
"""
import csv
import gzip
import re
import sys
from collections import OrderedDict


def rows(path):
    op = gzip.open if path.endswith(".gz") else open
    with op(path, "rt", errors="replace") as f:
        lines = [ln for ln in f if ln.startswith('"')]
    rd = csv.reader(lines)
    head = None
    for r in rd:
        if r and r[0] == "ID":
            head = {k: i for i, k in enumerate(r)}
            continue
        if head and len(r) == len(head):
            yield head, r


def short(name):
    n = re.sub(r"\(.*", "", name)  # drop the argument list
    n = re.sub(r"^void ", "", n)
    n = n.replace("__nv_bfloat16", "bf16")
    return n[:90]


def kernels(path):
    ks = OrderedDict()
    for h, r in rows(path):
        kid = int(r[h["ID"]])
        k = ks.setdefault(kid, {"name": r[h["Kernel Name"]], "grid": r[h.get("Grid Size", 0)],
                                "block": r[h.get("Block Size", 0)]})
        try:
            v = float(r[h["Metric Value"]].replace(",", ""))
        except ValueError:
            continue
        k[r[h["Metric Name"]]] = v
    return list(ks.values())


def table(title, ks):
    tot = sum(k.get("gpu__time_duration.sum", 0) for k in ks)
    print(f"\n{title}: {len(ks)} kernels, {tot / 1e3:.1f} us")
    g = OrderedDict()
    for k in ks:
        e = g.setdefault(short(k["name"]), [0, 0.0, 0.0, k["grid"], k["block"]])
        e[0] += 1
        e[1] += k.get("gpu__time_duration.sum", 0)
        e[2] += k.get("dram__bytes_read.sum", 0) + k.get("dram__bytes_write.sum", 0)
    for n, (c, t, b, grid, block) in sorted(g.items(), key=lambda x: -x[1][1]):
        print(f"  {t / 1e3:10.1f} us {100 * t / max(tot, 1):5.1f}%  x{c:<4d} {t / c / 1e3:8.2f} us/call "
              f"{b / max(t, 1):7.0f} GB/s  grid {grid} block {block}  {n}")
    return tot


END = re.compile(r"\bk_(argmax|argmax_finish|sample|sample_cl)\b")


def steps(ks):
    """The kernels cut into steps: after a run of END kernels, or (none in
    the profile) before each k_embed."""
    fw, cur = [], []
    if any(END.search(short(k["name"])) for k in ks):
        for i, k in enumerate(ks):
            cur.append(k)
            nxt = ks[i + 1] if i + 1 < len(ks) else None
            if END.search(short(k["name"])) and not (nxt and END.search(short(nxt["name"]))):
                fw.append(cur)
                cur = []
    else:
        for k in ks:
            if "k_embed" in k["name"] and cur:
                fw.append(cur)
                cur = []
            cur.append(k)
    if cur:
        fw.append(cur)
    return fw


def main():
    ks = kernels(sys.argv[1])
    if not ks:
        print("no kernels in", sys.argv[1])
        return
    fw = steps(ks)
    tots = [sum(k.get("gpu__time_duration.sum", 0) for k in f) / 1e3 for f in fw]
    print("steps (us):", ", ".join(f"{t:.1f}" for t in tots))
    table("prefill (forward 0)", fw[0])
    if len(fw) > 1:
        table(f"decode step (forward {len(fw) - 1}, the last)", fw[-1])
        # the first layer of the last step in order, to see the sequence
        print("\nlast step, first 14 kernels in order:")
        for k in fw[-1][:14]:
            t = k.get("gpu__time_duration.sum", 0)
            b = k.get("dram__bytes_read.sum", 0) + k.get("dram__bytes_write.sum", 0)
            print(f"  {t / 1e3:8.2f} us {b / max(t, 1):7.0f} GB/s  grid {k['grid']}  {short(k['name'])}")


if __name__ == "__main__":
    main()

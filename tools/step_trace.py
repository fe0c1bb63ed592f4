#!/usr/bin/env python3
"""step_trace — a summary of a VLLM_STEP_TRACE=1 log (stderr of `vllm
bench` / `serve` / `run`): the model's step lines ("step trace: T tokens:
forward queued in ... ms, ids queued ... later, waited ... ms; enqueue
start -> ids ... ms; host: OP ms / calls, ...; longest OP ms").

Prints the steps grouped by token count (count, mean enqueue -> ids, mean
forward queued, mean waited) and the steps whose host was held: forward
queued over HELD ms (default 5) while the wait for the device after it was
short, i.e. the enqueue itself waited for the device, with the op of the
longest call (session 23: a GEMM shape's first call at a new row count).

    python3 tools/step_trace.py LOG [--held MS] [--list N]
"""
import re
import sys

STEP = re.compile(
    r"^step trace: (\d+) tokens: forward queued in ([\d.]+) ms, ids queued ([\d.]+) ms later, "
    r"waited ([\d.]+) ms; enqueue start -> ids ([\d.]+) ms(?:; host: (.*))?$")
LONGEST = re.compile(r"longest ([a-z_0-9]+) ([\d.]+) ms")


def parse(lines):
    """The step lines as dicts: tokens, queued, later, waited, total (ms),
    host (the summary text or ''), longest ((op, ms) or None)."""
    steps = []
    for line in lines:
        m = STEP.match(line.rstrip("\n"))
        if not m:
            continue
        host = m.group(6) or ""
        lm = LONGEST.search(host)
        steps.append({"tokens": int(m.group(1)), "queued": float(m.group(2)), "later": float(m.group(3)),
                      "waited": float(m.group(4)), "total": float(m.group(5)), "host": host,
                      "longest": (lm.group(1), float(lm.group(2))) if lm else None})
    return steps


def held(steps, ms):
    """The steps whose enqueue held the host over ms while the wait after
    it stayed under a tenth of the enqueue (the device was waited inside)."""
    return [(i, s) for i, s in enumerate(steps) if s["queued"] > ms and s["waited"] < 0.1 * s["queued"]]


def summary(steps, held_ms=5.0, n_list=12):
    out = []
    by = {}
    for s in steps:
        by.setdefault(s["tokens"], []).append(s)
    out.append(f"{len(steps)} steps")
    out.append("tokens  steps  mean enqueue->ids  mean queued  mean waited (ms)")
    for t in sorted(by, reverse=True):
        g = by[t]
        mean = lambda k: sum(x[k] for x in g) / len(g)  # noqa: E731
        out.append(f"{t:6d} {len(g):6d} {mean('total'):17.3f} {mean('queued'):12.3f} {mean('waited'):12.3f}")
    h = held(steps, held_ms)
    out.append(f"{len(h)} steps held the host over {held_ms:g} ms in their enqueue")
    for i, s in h[:n_list]:
        lg = f"; longest {s['longest'][0]} {s['longest'][1]:.3f} ms" if s["longest"] else ""
        out.append(f"  step {i}: {s['tokens']} tokens, queued {s['queued']:.3f} ms, waited {s['waited']:.3f} ms{lg}")
    return "\n".join(out)


def main(argv):
    args = [a for a in argv[1:]]
    held_ms, n_list = 5.0, 12
    if "--held" in args:
        i = args.index("--held")
        held_ms = float(args[i + 1])
        del args[i:i + 2]
    if "--list" in args:
        i = args.index("--list")
        n_list = int(args[i + 1])
        del args[i:i + 2]
    if len(args) != 1:
        sys.stderr.write(__doc__)
        return 2
    with open(args[0], errors="replace") as f:
        print(summary(parse(f), held_ms, n_list))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

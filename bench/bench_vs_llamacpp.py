#!/usr/bin/env python3
"""vllm.c vs llama.cpp on the CPU, side by side on the same GGUF files.

    python3 bench/bench_vs_llamacpp.py [--models A.gguf B.gguf ...] [--threads 1,2] [--reps 3]

Both engines get the same fixed prompt (512 random token ids, no BOS),
greedy decoding of 128 tokens with EOS ignored, the same thread count, and
run interleaved (vllm.c, llama.cpp, llama.cpp, vllm.c, ...), each run in a
fresh process; medians over --reps runs are printed as one markdown table.

  ours       `build/vllm run --prompt-ids ... --threads T --print-ids`; speeds
             parsed from its "prompt: N tokens, X tok/s | decode: M tokens,
             Y tok/s" line (decode = (M-1) forward steps / time after prefill).
  llama.cpp  this script in --llama-worker mode under the Python that has
             llama-cpp-python (--llama-python, default /opt/bench-venv), using
             its low-level ctypes API: llama_model_load_from_file,
             llama_init_from_model (n_threads = n_threads_batch = T, default
             context params otherwise), one llama_decode of the whole prompt,
             then argmax + llama_decode per token, timed the same way.
  peak RSS   ru_maxrss of each child (wait4). For llama.cpp the Python
             interpreter's own RSS after its imports (before the model loads)
             is subtracted, so the column is the engine's share.
  agreement  the length of the common prefix of the two greedy sequences
             (random-weight models have near-flat logits, so they diverge
             early on tiny rounding differences; that is not an error).
  bandwidth  read bandwidth of this machine measured here with a small C
             loop (summing a 1 GiB array, 1 and T threads, best of 5); decode
             as a fraction of it = weight bytes (the GGUF data section) x
             decode tok/s / bandwidth at the same thread count.

The machine's load (uptime) before and after is printed with the table:
timings on a shared 2-core machine are only as good as its quietness.
"""
import argparse
import json
import os
import platform
import random
import statistics
import struct
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# --------------------------------------------------------------------------
# llama.cpp worker (runs under the llama-cpp-python venv)

def vm_kib(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def llama_worker(model, threads, ids_file, gen):
    import ctypes

    import llama_cpp as L
    import numpy as np

    base_rss = vm_kib("VmRSS")  # interpreter + llama_cpp + numpy, no model
    ids = [int(x) for x in open(ids_file).read().split(",")]
    L.llama_backend_init()
    mp = L.llama_model_default_params()
    mp.n_gpu_layers = 0
    model_p = L.llama_model_load_from_file(model.encode(), mp)
    if not model_p:
        raise SystemExit(f"llama.cpp could not load {model}")
    cp = L.llama_context_default_params()
    cp.n_ctx = len(ids) + gen + 16
    cp.n_batch = len(ids)
    cp.n_ubatch = len(ids)
    cp.n_threads = threads
    cp.n_threads_batch = threads
    ctx = L.llama_init_from_model(model_p, cp)
    if not ctx:
        raise SystemExit("llama.cpp could not create a context")
    n_vocab = L.llama_vocab_n_tokens(L.llama_model_get_vocab(model_p))

    def argmax_last():
        p = L.llama_get_logits_ith(ctx, -1)
        return int(np.ctypeslib.as_array(p, shape=(n_vocab,)).argmax())

    arr = (L.llama_token * len(ids))(*ids)
    t0 = time.perf_counter()
    if L.llama_decode(ctx, L.llama_batch_get_one(arr, len(ids))) != 0:
        raise SystemExit("llama_decode(prompt) failed")
    L.llama_synchronize(ctx)
    t1 = time.perf_counter()
    out = []
    one = (L.llama_token * 1)()
    for i in range(gen):
        nxt = argmax_last()
        out.append(nxt)
        if i + 1 < gen:
            one[0] = nxt
            if L.llama_decode(ctx, L.llama_batch_get_one(one, 1)) != 0:
                raise SystemExit("llama_decode(token) failed")
    L.llama_synchronize(ctx)
    t2 = time.perf_counter()
    res = dict(prefill_tps=len(ids) / (t1 - t0), decode_tps=(gen - 1) / (t2 - t1) if gen > 1 else 0.0,
               tokens=out, base_rss_kib=base_rss, hwm_kib=vm_kib("VmHWM"),
               version=getattr(L, "__version__", "?"))
    L.llama_free(ctx)
    L.llama_model_free(model_p)
    print(json.dumps(res))
    sys.stdout.flush()
    os._exit(0)  # skip interpreter teardown noise


# --------------------------------------------------------------------------
# driver

def run_child(argv, env=None):
    """Run argv; return (rc, stdout, stderr, peak RSS KiB from wait4)."""
    with tempfile.TemporaryFile() as fo, tempfile.TemporaryFile() as fe:
        p = subprocess.Popen(argv, stdout=fo, stderr=fe, env=env)
        _, status, ru = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        fo.seek(0)
        fe.seek(0)
        return p.returncode, fo.read().decode(errors="replace"), fe.read().decode(errors="replace"), ru.ru_maxrss


def run_ours(vllm, model, ids_csv, gen, threads):
    rc, out, err, rss = run_child([vllm, "run", "--model", model, "--prompt-ids", ids_csv, "--max-tokens", str(gen),
                                   "--ignore-eos", "--temperature", "0", "--threads", str(threads), "--print-ids"])
    if rc != 0:
        raise SystemExit(f"vllm run failed ({rc}): {err.strip()[-500:]}")
    line = next((l for l in err.splitlines() if l.startswith("prompt:")), None)
    if not line:
        raise SystemExit(f"no speed line from vllm run: {err[-500:]}")
    # prompt: N tokens, X tok/s | decode: M tokens, Y tok/s | finish: ...
    parts = line.split("|")
    pf = float(parts[0].split(",")[1].split()[0])
    dc = float(parts[1].split(",")[1].split()[0])
    toks = [int(x) for x in out.split()]
    return dict(prefill_tps=pf, decode_tps=dc, tokens=toks, rss_kib=rss)


def run_llama(py, model, ids_file, gen, threads):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    rc, out, err, rss = run_child([py, os.path.abspath(__file__), "--llama-worker", model, str(threads), ids_file,
                                   str(gen)], env=env)
    if rc != 0 or not out.strip():
        raise SystemExit(f"llama.cpp worker failed ({rc}): {err.strip()[-800:]}")
    r = json.loads(out.strip().splitlines()[-1])
    r["rss_kib"] = rss - r["base_rss_kib"]
    r["rss_raw_kib"] = rss
    return r


BW_C = r"""
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
typedef float v8 __attribute__((vector_size(32)));
typedef struct { const float *p; size_t n; double s; } job;
static void *sum(void *a) { /* 4 independent 8-wide accumulators: load-bound, not add-latency-bound */
    job *j = a; v8 s0 = {0}, s1 = {0}, s2 = {0}, s3 = {0}, x;
    for (size_t i = 0; i + 32 <= j->n; i += 32) {
        memcpy(&x, j->p + i, 32); s0 += x; memcpy(&x, j->p + i + 8, 32); s1 += x;
        memcpy(&x, j->p + i + 16, 32); s2 += x; memcpy(&x, j->p + i + 24, 32); s3 += x;
    }
    v8 t = s0 + s1 + s2 + s3; double s = 0;
    for (int k = 0; k < 8; k++) s += t[k];
    j->s = s; return NULL;
}
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
int main(int argc, char **argv) {
    int nt = atoi(argv[1]); size_t n = (size_t)1 << 28; /* 1 GiB of floats */
    float *a = malloc(n * sizeof *a); if (!a) return 1;
    for (size_t i = 0; i < n; i++) a[i] = (float)(i & 7);
    double best = 1e30, chk = 0;
    for (int r = 0; r < 5; r++) {
        pthread_t t[64]; job j[64]; double t0 = now();
        for (int k = 0; k < nt; k++) { j[k] = (job){a + n / nt * k, n / nt, 0}; pthread_create(&t[k], NULL, sum, &j[k]); }
        for (int k = 0; k < nt; k++) { pthread_join(t[k], NULL); chk += j[k].s; }
        double dt = now() - t0; if (dt < best) best = dt;
    }
    printf("%.3f %g\n", n * sizeof *a / best / 1e9, chk);
    return 0;
}
"""


def measure_bandwidth(threads_list):
    with tempfile.TemporaryDirectory() as d:
        src, exe = os.path.join(d, "bw.c"), os.path.join(d, "bw")
        open(src, "w").write(BW_C)
        subprocess.run(["cc", "-O3", "-march=native", "-ffast-math", "-pthread", src, "-o", exe], check=True)
        return {t: float(subprocess.run([exe, str(t)], capture_output=True, text=True, check=True).stdout.split()[0])
                for t in threads_list}


def gguf_data_bytes(path):
    """Bytes of the tensor data section of a GGUF file (header parsed here)."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        def rd(fmt):
            return struct.unpack("<" + fmt, f.read(struct.calcsize("<" + fmt)))[0]
        if f.read(4) != b"GGUF":
            raise SystemExit(f"{path}: not a GGUF file")
        rd("I")
        n_t, n_kv = rd("Q"), rd("Q")
        scal = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
        align = 32

        def skip(t):
            if t == 8:
                f.seek(rd("Q"), 1)
            elif t == 9:
                et, n = rd("I"), rd("Q")
                if et in scal:
                    f.seek(struct.calcsize(scal[et]) * n, 1)
                else:
                    for _ in range(n):
                        skip(et)
            else:
                f.seek(struct.calcsize(scal[t]), 1)
        for _ in range(n_kv):
            key = f.read(rd("Q")).decode()
            t = rd("I")
            if key == "general.alignment" and t == 4:
                align = rd("I")
            else:
                skip(t)
        for _ in range(n_t):
            f.seek(rd("Q"), 1)
            nd = rd("I")
            f.seek(8 * nd + 4 + 8, 1)
        start = (f.tell() + align - 1) // align * align
    return size - start


def uptime():
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def cpu_model():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def agree(a, b):
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--llama-worker":
        return llama_worker(sys.argv[2], int(sys.argv[3]), sys.argv[4], int(sys.argv[5]))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", nargs="+", default=[
        os.path.join(REPO, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"),
        os.path.join(REPO, "models", "rand-llama-1b-q4_0.gguf"),
        os.path.join(REPO, "models", "rand-llama-1b-q4_K_M.gguf")])
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--prompt-len", type=int, default=512)
    ap.add_argument("--gen", type=int, default=128)
    ap.add_argument("--vllm", default=os.path.join(REPO, "build", "vllm"))
    ap.add_argument("--llama-python", default="/opt/bench-venv/bin/python")
    ap.add_argument("--json", help="also write every run's numbers here")
    a = ap.parse_args()
    threads = [int(t) for t in a.threads.split(",")]
    for m in a.models:
        if not os.path.exists(m):
            raise SystemExit(f"missing model {m} (see docs/BENCHMARKS.md for how each is made)")
    rnd = random.Random(0)
    ids = [rnd.randrange(300, 900) for _ in range(a.prompt_len)]
    ids_csv = ",".join(map(str, ids))
    fd, ids_file = tempfile.mkstemp(suffix=".ids")
    os.write(fd, ids_csv.encode())
    os.close(fd)

    load_before = uptime()
    bw = measure_bandwidth(sorted(set(threads)))
    runs = {}
    try:
        for rep in range(a.reps):
            for m in a.models:
                for t in threads:
                    order = ["ours", "llama"] if (rep + t) % 2 == 0 else ["llama", "ours"]
                    for eng in order:
                        if eng == "ours":
                            r = run_ours(a.vllm, m, ids_csv, a.gen, t)
                        else:
                            r = run_llama(a.llama_python, m, ids_file, a.gen, t)
                        runs.setdefault((m, t, eng), []).append(r)
                        print(f"# rep {rep} {os.path.basename(m)} t={t} {eng}: prefill {r['prefill_tps']:.1f} "
                              f"decode {r['decode_tps']:.1f} tok/s rss {r['rss_kib'] / 1024:.0f} MiB",
                              file=sys.stderr, flush=True)
    finally:
        os.unlink(ids_file)
    load_after = uptime()

    version = next(iter(r["version"] for (m, t, e), rs in runs.items() if e == "llama" for r in rs), "?")
    med = lambda rs, k: statistics.median(r[k] for r in rs)
    print(f"CPU: {cpu_model()}, {os.cpu_count()} cores; llama-cpp-python {version}; "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print(f"prompt {a.prompt_len} random ids, {a.gen} greedy tokens, median of {a.reps} interleaved runs; "
          "read bandwidth " + ", ".join(f"{v:.1f} GB/s ({t} thr)" for t, v in bw.items()))
    print(f"load before: {load_before}")
    print(f"load after:  {load_after}")
    print()
    print("| model | thr | prefill ours | prefill llama.cpp | ratio | decode ours | decode llama.cpp | ratio "
          "| RSS ours MiB | RSS llama.cpp MiB | greedy agree | decode % of BW ours / llama.cpp |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for m in a.models:
        wbytes = gguf_data_bytes(m)
        for t in threads:
            o, l = runs[(m, t, "ours")], runs[(m, t, "llama")]
            pfo, pfl = med(o, "prefill_tps"), med(l, "prefill_tps")
            dco, dcl = med(o, "decode_tps"), med(l, "decode_tps")
            rso, rsl = max(r["rss_kib"] for r in o) / 1024, max(r["rss_kib"] for r in l) / 1024
            ag = agree(o[0]["tokens"], l[0]["tokens"])
            fo, fl = wbytes * dco / (bw[t] * 1e9), wbytes * dcl / (bw[t] * 1e9)
            print(f"| {os.path.basename(m)} | {t} | {pfo:.1f} | {pfl:.1f} | {pfo / pfl:.2f}x | {dco:.1f} | {dcl:.1f} "
                  f"| {dco / dcl:.2f}x | {rso:.0f} | {rsl:.0f} | {ag}/{a.gen} | {100 * fo:.0f}% / {100 * fl:.0f}% |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(dict(bandwidth_gbs=bw, load_before=load_before, load_after=load_after,
                           runs=[dict(model=m, threads=t, engine=e, **r) for (m, t, e), rs in runs.items()
                                 for r in rs]), f)


if __name__ == "__main__":
    main()

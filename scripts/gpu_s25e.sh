#!/usr/bin/env bash
# gpu_s25e.sh — session 25, call 5 (nvidia-h200, ~1.5 min): the ceilings
# the batch-1 decode gate is judged against, side by side in one run —
# the device-to-device copy rate (the gate's denominator), a pure read
# (torch sum over 1 and 4 GB), cuBLAS's bf16 GEMV (torch matmul of one
# row) on the 8B's and the 0.6B's decode shapes over rotating copies
# (>= 256 MB, so the L2 does not serve them), and our decode GEMV on the
# same shapes (test_cuda_speed without a checkpoint: every variant, a
# graph over distinct copies, GB/s and fraction of d2d).
#   bash scripts/gpu_snap.sh s25e test_cuda_speed
#   run carry [".gpu-snap-s25e"] "cd .gpu-snap-s25e && OUT=$OUT bash scripts/gpu_s25e.sh"
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_common.sh s25e
gpu_bin
$PY - <<'PY' 2>&1 | tee $L/torch.log
import torch
def timed(fn, reps):
    fn(); torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for i in range(reps): fn(i)
    b.record(); torch.cuda.synchronize()
    return a.elapsed_time(b) / reps * 1e-3
n = 1 << 28
x = torch.empty(n, dtype=torch.int32, device='cuda'); y = torch.empty_like(x)
d2d = 8 * n / timed(lambda i=0: y.copy_(x), 20) / 1e9
print(f"d2d copy (1 GB, read + write bytes): {d2d:.0f} GB/s")
for gb in (1, 4):
    f = torch.ones(gb * (1 << 28), dtype=torch.float32, device='cuda')
    r = gb * (1 << 30) / timed(lambda i=0: f.sum(), 20) / 1e9
    print(f"pure read (torch sum, {gb} GB): {r:.0f} GB/s = {r / d2d:.3f} of d2d")
    del f
shapes = [(6144, 4096, "8B qkv"), (4096, 4096, "8B wo"), (28672, 4096, "8B gate|up"), (4096, 14336, "8B down"),
          (4096, 1024, "0.6B qkv"), (1024, 2048, "0.6B wo"), (6144, 1024, "0.6B gate|up"), (1024, 3072, "0.6B down")]
for rows, k, name in shapes:
    nb = rows * k * 2
    cp = max(2, (256 << 20) // nb + 1)
    ws = [torch.randn(rows, k, device='cuda').to(torch.bfloat16) for _ in range(cp)]
    v = torch.randn(k, 1, device='cuda').to(torch.bfloat16)
    t = timed(lambda i=0: torch.matmul(ws[i % cp], v), 60)
    print(f"cuBLAS GEMV (torch matmul, one row) {name:12s} {rows}x{k}: {t * 1e6:7.1f} us, {nb / t / 1e9:5.0f} GB/s = {nb / t / 1e9 / d2d:.3f} of d2d")
    del ws
PY
gpu_test speed 240 ./test_cuda_speed
grep -E "speed: gemv|d2d" $L/speed.log | head -30
say done

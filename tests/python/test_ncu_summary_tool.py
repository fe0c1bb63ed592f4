"""tools/ncu_summary.py: an Nsight Compute CSV cut into steps after each
step's argmax / sampler kernels, so a decode step keeps its layers and its
head together (the logit-row gather is an EMBED too: the old cut at every
k_embed left only the head as "the last step")."""
import pathlib
import subprocess
import sys

TOOL = pathlib.Path(__file__).resolve().parents[2] / "tools" / "ncu_summary.py"
HEAD = '"ID","Kernel Name","Grid Size","Block Size","Metric Name","Metric Unit","Metric Value"\n'


def csv_text(kernels):
    out, kid = [HEAD], 0
    for name, us in kernels:
        for metric, v in (("gpu__time_duration.sum", us * 1000), ("dram__bytes_read.sum", 1000),
                          ("dram__bytes_write.sum", 0)):
            out.append(f'"{kid}","{name}","(1, 1, 1)","(256, 1, 1)","{metric}","",'
                       f'"{v:.0f}"\n')
        kid += 1
    return "".join(out)


def step(embed_us, layer_us, sample):
    ks = [("void k_embed_vec<2>(cuda_view, const char *)", embed_us),
          ("void k_norm_vec<0, 1, bf16, float>(char *)", 1.0),
          ("k_gemm_qkv_pp<2>", layer_us),
          ("void k_embed_vec<0>(cuda_view, const char *)", 2.0),  # the logit-row gather
          ("void k_gemv_half_rows<2, 4>(const char *)", 80.0)]
    ks += [("void k_sample(float *, int)", 5.0)] if sample else [
        ("void k_argmax_split(cuda_view)", 5.0), ("void k_argmax_finish(unsigned long long *)", 2.0)]
    return ks


def run(tmp_path, kernels):
    f = tmp_path / "ncu.csv"
    f.write_text(csv_text(kernels))
    r = subprocess.run([sys.executable, str(TOOL), str(f)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_steps_end_at_the_argmax(tmp_path):
    out = run(tmp_path, step(11.0, 4000.0, False) + step(3.0, 500.0, False) + step(3.0, 400.0, False))
    line = next(ln for ln in out.splitlines() if ln.startswith("steps (us):"))
    assert [float(v) for v in line.split(":")[1].split(",")] == [4101.0, 593.0, 493.0]
    last = out.split("decode step (forward 2, the last)")[1]
    assert "k_gemm_qkv_pp" in last and "k_gemv_half_rows" in last and "k_embed_vec<0>" in last


def test_sampler_steps_and_fallback(tmp_path):
    out = run(tmp_path, step(11.0, 4000.0, True) + step(3.0, 500.0, True))
    assert "steps (us): 4099.0, 591.0" in out
    # no argmax / sampler kernels (logits to the host): cut at each k_embed
    ks = [k for k in step(11.0, 4000.0, True) + step(3.0, 500.0, True) if "k_sample" not in k[0]]
    out = run(tmp_path, ks)
    assert "steps (us): 4012.0, 82.0, 504.0, 82.0" in out

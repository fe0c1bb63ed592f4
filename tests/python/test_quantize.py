"""tools/quantize: bytes against the `gguf` package's reference quantizers
(Q4_0/Q4_1/Q8_0), error bounds for the K-quants (dequantized by the `gguf`
package, an independent reader of the layouts), the q4_K_M type mix,
metadata copy, loading by `vllm run`, and (when llama-cpp-python is
installed, see bench/bench_vs_llamacpp.py) loading by llama.cpp.
"""
import os
import pathlib
import subprocess
import sys

import pytest

np = pytest.importorskip("numpy")
gguf = pytest.importorskip("gguf")

REPO = pathlib.Path(__file__).resolve().parents[2]
LLAMA_PY = os.environ.get("VLLM_LLAMA_PYTHON", "/opt/bench-venv/bin/python")
T = gguf.GGMLQuantizationType


@pytest.fixture(scope="module")
def quantize_bin(build_dir):
    exe = build_dir / "quantize"
    if not exe.exists():
        pytest.skip(f"no {exe}")
    return exe


@pytest.fixture(scope="module")
def tiny_f32(tmp_path_factory):
    out = tmp_path_factory.mktemp("q") / "tiny-f32.gguf"
    subprocess.run([sys.executable, str(REPO / "tools" / "make_random_gguf.py"), "--shape", "tiny", "--qtype", "f32",
                    "--seed", "3", "--out", str(out)], check=True, capture_output=True)
    return out


def quantize(exe, src, dst, qtype, *extra):
    r = subprocess.run([str(exe), str(src), str(dst), qtype, *extra], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return gguf.GGUFReader(str(dst))


def tensors(reader):
    return {t.name: t for t in reader.tensors}


def f32_of(t):
    """A tensor of the reader as f32 in our row-major shape."""
    shape = tuple(int(x) for x in reversed(t.shape))
    return gguf.quants.dequantize(np.asarray(t.data), t.tensor_type).reshape(shape).astype(np.float32)


@pytest.mark.parametrize("qtype,gt", [("q4_0", T.Q4_0), ("q4_1", T.Q4_1), ("q8_0", T.Q8_0)])
def test_bytes_match_reference(quantize_bin, tiny_f32, tmp_path, qtype, gt):
    src = tensors(gguf.GGUFReader(str(tiny_f32)))
    out = tensors(quantize(quantize_bin, tiny_f32, tmp_path / f"{qtype}.gguf", qtype))
    assert out.keys() == src.keys()
    n_quant = 0
    for name, t in out.items():
        s = src[name]
        if len(s.shape) == 1:
            assert t.tensor_type == T.F32, name  # norms stay f32
            assert np.array_equal(np.asarray(t.data), np.asarray(s.data)), name
            continue
        assert t.tensor_type == gt, name
        ref = gguf.quants.quantize(f32_of(s), gt)
        got = np.asarray(t.data).reshape(ref.shape)
        assert np.array_equal(got, ref), f"{name}: {np.count_nonzero(got != ref)} bytes differ"
        n_quant += 1
    assert n_quant == 2 * 7 + 2


# relative RMS error bounds for N(0, s) weights (observed ~2/3 of these)
BOUNDS = {"q4_K": 0.12, "q5_K": 0.06, "q6_K": 0.03, "q8_0": 0.01, "q4_K_M": 0.12}


@pytest.mark.parametrize("qtype", ["q4_K", "q5_K", "q6_K", "q4_K_M"])
def test_kquant_error_and_mix(quantize_bin, tiny_f32, tmp_path, qtype):
    src = tensors(gguf.GGUFReader(str(tiny_f32)))
    out = tensors(quantize(quantize_bin, tiny_f32, tmp_path / f"{qtype}.gguf", qtype))
    base = {"q4_K": T.Q4_K, "q5_K": T.Q5_K, "q6_K": T.Q6_K, "q4_K_M": T.Q4_K}[qtype]
    for name, t in out.items():
        s = src[name]
        if len(s.shape) == 1:
            assert t.tensor_type == T.F32, name
            continue
        want = base
        if qtype == "q4_K_M":
            # 2 layers: use_more_bits(i, 2) is true for i = 1 only; output -> Q6_K
            if name == "output.weight" or name in ("blk.1.attn_v.weight", "blk.1.ffn_down.weight"):
                want = T.Q6_K
        assert t.tensor_type == want, f"{name}: {t.tensor_type.name} != {want.name}"
        x, y = f32_of(s), f32_of(t)
        rel = float(np.sqrt(np.mean((x - y) ** 2)) / np.sqrt(np.mean(x ** 2)))
        bound = BOUNDS["q6_K"] if want == T.Q6_K else BOUNDS[qtype]
        assert rel < bound, f"{name}: relative RMS error {rel:.4f} >= {bound}"
        assert rel > 0, name


def test_metadata_copied(quantize_bin, tiny_f32, tmp_path):
    src = gguf.GGUFReader(str(tiny_f32))
    out = quantize(quantize_bin, tiny_f32, tmp_path / "m.gguf", "q4_K_M")
    for key in ("llama.block_count", "llama.embedding_length", "llama.rope.freq_base", "tokenizer.ggml.tokens",
                "tokenizer.ggml.token_type", "tokenizer.ggml.bos_token_id", "general.architecture"):
        a, b = src.fields[key], out.fields[key]
        assert a.types == b.types, key
        assert [bytes(np.asarray(a.parts[i])) for i in a.data] == [bytes(np.asarray(b.parts[i])) for i in b.data], key
    ft = out.fields["general.file_type"]
    assert int(ft.parts[ft.data[0]][0]) == 15  # LLAMA_FTYPE_MOSTLY_Q4_K_M


def test_requantize_quantized_source(quantize_bin, tiny_f32, tmp_path):
    """A Q8_0 source is dequantized and re-quantized; same type copies bytes."""
    q8 = tmp_path / "q8.gguf"
    quantize(quantize_bin, tiny_f32, q8, "q8_0")
    same = tensors(quantize(quantize_bin, q8, tmp_path / "q8b.gguf", "q8_0"))
    for name, t in tensors(gguf.GGUFReader(str(q8))).items():
        assert np.array_equal(np.asarray(same[name].data), np.asarray(t.data)), name
    k = tensors(quantize(quantize_bin, q8, tmp_path / "k.gguf", "q6_K"))
    assert k["blk.0.ffn_up.weight"].tensor_type == T.Q6_K


def test_vllm_runs_quantized(quantize_bin, vllm_bin, tiny_f32, tmp_path):
    for qtype in ("q4_K_M", "q5_K", "q4_1"):
        m = tmp_path / f"{qtype}.gguf"
        quantize(quantize_bin, tiny_f32, m, qtype)
        r = subprocess.run([str(vllm_bin), "run", "--model", str(m), "--prompt-ids", "1,300,301,302",
                            "--max-tokens", "4", "--temperature", "0", "--ignore-eos", "--print-ids",
                            "--threads", "1"], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        assert len(r.stdout.split()) == 4


def test_bad_input(quantize_bin, tiny_f32, tmp_path):
    r = subprocess.run([str(quantize_bin), str(tmp_path / "nope.gguf"), str(tmp_path / "o.gguf"), "q4_0"],
                       capture_output=True, text=True)
    assert r.returncode != 0 and "quantize:" in r.stderr
    r = subprocess.run([str(quantize_bin), str(tiny_f32), str(tmp_path / "o.gguf"), "q3_K"], capture_output=True,
                       text=True)
    assert r.returncode == 2 and "unknown type" in r.stderr
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF\x03\x00\x00\x00" + b"\xff" * 16)
    r = subprocess.run([str(quantize_bin), str(bad), str(tmp_path / "o.gguf"), "q4_0"], capture_output=True, text=True)
    assert r.returncode == 1 and "quantize:" in r.stderr
    assert not (tmp_path / "o.gguf").exists()


LLAMA_LOAD = r"""
import sys, llama_cpp as L
L.llama_backend_init()
mp = L.llama_model_default_params()
m = L.llama_model_load_from_file(sys.argv[1].encode(), mp)
assert m, "load failed"
cp = L.llama_context_default_params(); cp.n_ctx = 64; cp.n_threads = 1; cp.n_threads_batch = 1
c = L.llama_init_from_model(m, cp)
ids = (L.llama_token * 4)(1, 300, 301, 302)
assert L.llama_decode(c, L.llama_batch_get_one(ids, 4)) == 0
print("ok")
"""


@pytest.mark.parametrize("qtype", ["q4_K_M", "q5_K", "q4_0"])
def test_llama_cpp_loads(quantize_bin, tiny_f32, tmp_path, qtype):
    if not os.path.exists(LLAMA_PY) or subprocess.run([LLAMA_PY, "-c", "import llama_cpp"],
                                                      capture_output=True).returncode != 0:
        pytest.skip(f"llama-cpp-python not installed at {LLAMA_PY} (VLLM_LLAMA_PYTHON)")
    m = tmp_path / f"{qtype}.gguf"
    quantize(quantize_bin, tiny_f32, m, qtype)
    r = subprocess.run([LLAMA_PY, "-c", LLAMA_LOAD, str(m)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-2000:]

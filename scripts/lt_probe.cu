// lt_probe.cu — session 19 probe (not part of the build): cuBLAS GEMM algorithm choice
// for the prefill shapes. Per shape: cublasGemmEx with CUBLAS_GEMM_DEFAULT (as cuda_gemm.cu
// calls it) vs every cublasLt heuristic candidate (up to 32), each timed over 30 launches
// after 5 of warmup (CUDA events, one stream). Build and run: scripts/gpu_s19g.sh.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <algorithm>
#include <functional>

#define CK(x) do { auto e_ = (x); if ((int)e_ != 0) { printf("error %d at %s:%d\n", (int)e_, __FILE__, __LINE__); exit(1); } } while (0)

__global__ void init_bf16(__nv_bfloat16 *p, size_t n, unsigned seed) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        unsigned h = (unsigned)i * 2654435761u ^ seed;
        h ^= h >> 13; h *= 0x5bd1e995u; h ^= h >> 15;
        p[i] = __float2bfloat16(((float)(h & 0xffff) / 32768.0f - 1.0f) * 0.05f);
    }
}

struct shape { const char *name; int out, n, in; int f32_acc; };


int main() {
    cublasHandle_t h; CK(cublasCreate(&h));
    cublasLtHandle_t lt; CK(cublasLtCreate(&lt));
    cudaStream_t s; CK(cudaStreamCreate(&s));
    CK(cublasSetStream(h, s));
    size_t wsb = 64u << 20; void *ws; CK(cudaMalloc(&ws, wsb));
    CK(cublasSetWorkspace(h, ws, 32u << 20));
    const shape shapes[] = {
        {"0.6B qkv", 4096, 2048, 1024, 0}, {"0.6B gate|up", 6144, 2048, 1024, 0},
        {"0.6B wo+add", 1024, 2048, 2048, 1}, {"0.6B down+add", 1024, 2048, 3072, 1},
        {"0.6B wo bf16", 1024, 2048, 2048, 0},
        {"8B qkv", 6144, 2048, 4096, 0}, {"8B gate|up", 28672, 2048, 4096, 0},
        {"8B wo+add", 4096, 2048, 4096, 1}, {"8B down+add", 4096, 2048, 14336, 1},
    };
    cudaEvent_t e0, e1; CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
    for (const shape &sh : shapes) {
        size_t nw = (size_t)sh.out * sh.in, nx = (size_t)sh.n * sh.in, ny = (size_t)sh.n * sh.out;
        __nv_bfloat16 *w, *x; void *y;
        CK(cudaMalloc(&w, nw * 2)); CK(cudaMalloc(&x, nx * 2)); CK(cudaMalloc(&y, ny * 4));
        init_bf16<<<1024, 256, 0, s>>>(w, nw, 1); init_bf16<<<1024, 256, 0, s>>>(x, nx, 2);
        CK(cudaMemsetAsync(y, 0, ny * 4, s));
        const float one = 1.0f, zero = 0.0f; const float *beta = sh.f32_acc ? &one : &zero;
        cudaDataType yt = sh.f32_acc ? CUDA_R_32F : CUDA_R_16BF;
        auto run_def = [&]() {
            CK(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, sh.out, sh.n, sh.in, &one, w, CUDA_R_16BF, sh.in, x,
                            CUDA_R_16BF, sh.in, beta, y, yt, sh.out, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
        };
        const int REPS = 30;
        auto timed = [&](auto f) {
            for (int i = 0; i < 5; i++) f();
            CK(cudaEventRecord(e0, s));
            for (int i = 0; i < REPS; i++) f();
            CK(cudaEventRecord(e1, s)); CK(cudaEventSynchronize(e1));
            float ms; CK(cudaEventElapsedTime(&ms, e0, e1)); return ms * 1000.0f / REPS;
        };
        float t_def = timed(run_def);
        cublasLtMatmulDesc_t md; CK(cublasLtMatmulDescCreate(&md, CUBLAS_COMPUTE_32F, CUDA_R_32F));
        cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
        CK(cublasLtMatmulDescSetAttribute(md, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
        CK(cublasLtMatmulDescSetAttribute(md, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
        cublasLtMatrixLayout_t la, lb, lc;
        CK(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, sh.in, sh.out, sh.in));
        CK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, sh.in, sh.n, sh.in));
        CK(cublasLtMatrixLayoutCreate(&lc, yt, sh.out, sh.n, sh.out));
        cublasLtMatmulPreference_t pref; CK(cublasLtMatmulPreferenceCreate(&pref));
        CK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof wsb));
        cublasLtMatmulHeuristicResult_t hr[32]; int nr = 0;
        CK(cublasLtMatmulAlgoGetHeuristic(lt, md, la, lb, lc, lc, pref, 32, hr, &nr));
        float best = 1e30f, first = 0; int bi = -1;
        std::vector<float> ts;
        for (int i = 0; i < nr; i++) {
            if (hr[i].state != CUBLAS_STATUS_SUCCESS) { ts.push_back(-1); continue; }
            auto run = [&]() {
                CK(cublasLtMatmul(lt, md, &one, w, la, x, lb, beta, y, lc, y, lc, &hr[i].algo, ws, wsb, s));
            };
            float t = timed(run);
            ts.push_back(t);
            if (i == 0) first = t;
            if (t < best) best = t, bi = i;
        }
        double fl = 2.0 * sh.out * (double)sh.n * sh.in;
        printf("%-14s default %7.1f us (%4.0f TF/s) | Lt #0 %7.1f | best Lt #%d of %d %7.1f us (%4.0f TF/s, %.3fx of default) ws %zu\n",
               sh.name, t_def, fl / t_def * 1e-6, first, bi, nr, best, fl / best * 1e-6, best / t_def,
               bi >= 0 ? hr[bi].workspaceSize : 0);
        auto cfg = [&](int i) {
            if (i < 0) return;
            int id = 0, tile = 0, stages = 0, splitk = 0, red = 0, swz = 0, cust = 0, cl = 0;
            size_t w;
            cublasLtMatmulAlgoConfigGetAttribute(&hr[i].algo, CUBLASLT_ALGO_CONFIG_ID, &id, sizeof id, &w);
            cublasLtMatmulAlgoConfigGetAttribute(&hr[i].algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof tile, &w);
            cublasLtMatmulAlgoConfigGetAttribute(&hr[i].algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages, sizeof stages, &w);
            cublasLtMatmulAlgoConfigGetAttribute(&hr[i].algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitk, sizeof splitk, &w);
            cublasLtMatmulAlgoConfigGetAttribute(&hr[i].algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &red, sizeof red, &w);
            cublasLtMatmulAlgoConfigGetAttribute(&hr[i].algo, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, &swz, sizeof swz, &w);
            cublasLtMatmulAlgoConfigGetAttribute(&hr[i].algo, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, &cust, sizeof cust, &w);
            cublasLtMatmulAlgoConfigGetAttribute(&hr[i].algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &cl, sizeof cl, &w);
            printf("   #%d: algo %d tile %d stages %d splitK %d reduction %d swizzle %d custom %d cluster %d ws %zu waves %.2f\n",
                   i, id, tile, stages, splitk, red, swz, cust, cl, hr[i].workspaceSize, hr[i].wavesCount);
        };
        cfg(0);
        if (bi != 0) cfg(bi);
        printf("   all:");
        for (float t : ts) printf(" %.1f", t);
        printf("\n");
        cublasLtMatmulPreferenceDestroy(pref); cublasLtMatrixLayoutDestroy(la); cublasLtMatrixLayoutDestroy(lb);
        cublasLtMatrixLayoutDestroy(lc); cublasLtMatmulDescDestroy(md);
        cudaFree(w); cudaFree(x); cudaFree(y);
    }
    return 0;
}

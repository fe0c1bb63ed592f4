/* flash_wgmma_layout — kernel-lab check of the wgmma building blocks of the
 * Hopper flash prefill kernel (src/backends/cuda/cuda_flash_wgmma.cuh): one
 * warpgroup computes S = Q K^T (64 x 128 x 128, both operands in 128B-swizzled
 * shared memory by descriptor, K-major) and O = P V (P from registers, V
 * MN-major with the transpose bit, as one m64n128 and as two m64n64 over the
 * two 64-wide slabs) on small integers, compared exactly with a CPU matmul.
 * Wrong descriptors or fragment maps give wrong numbers, not errors.
 *
 *   nvcc -O2 -gencode arch=compute_90a,code=sm_90a -I. -o /tmp/wgunit \
 *        bench/kernels/flash_wgmma_layout.cu && /tmp/wgunit
 *
 * H200, 2026-11-29: "S max abs err 0, O(n128) 0, O(n64x2) 0".
 */
#include <cuda_bf16.h>
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include "src/backends/cuda/cuda_flash_wgmma.cuh"

__device__ uint32_t pk(float x, float y) { __nv_bfloat162 v = __floats2bfloat162_rn(x, y); return *(uint32_t *)&v; }

__global__ void kunit(const __nv_bfloat16 *q, const __nv_bfloat16 *k, const __nv_bfloat16 *v, const float *p, float *s_out,
                      float *o_out, float *o2_out) {
    extern __shared__ __align__(1024) uint8_t sm[];
    uint32_t base = (uint32_t)__cvta_generic_to_shared(sm);
    uint32_t b = (base + 1023) & ~1023u;
    uint8_t *gb = sm + (b - base);
    const uint32_t QO = 0, KO = 16384, VO = 16384 + 32768;
    int tid = threadIdx.x;
    for (int idx = tid; idx < 64 * 16; idx += 128) {
        int r = idx / 16, c = idx % 16;
        *(uint4 *)(gb + QO + flw_off(r, c, 64)) = *(const uint4 *)(q + r * 128 + c * 8);
    }
    for (int idx = tid; idx < 128 * 16; idx += 128) {
        int r = idx / 16, c = idx % 16;
        *(uint4 *)(gb + KO + flw_off(r, c, 128)) = *(const uint4 *)(k + r * 128 + c * 8);
        *(uint4 *)(gb + VO + flw_off(r, c, 128)) = *(const uint4 *)(v + r * 128 + c * 8);
    }
    flw_fence_proxy();
    __syncthreads();
    float s[64];
    for (int i = 0; i < 64; i++) s[i] = 0.f;
    flw_fence();
#pragma unroll
    for (int ks = 0; ks < 8; ks++)
        flw_ss_n128_bf16(s, flw_desc(b + QO + (ks >> 2) * 8192 + (ks & 3) * 32, 16, 1024),
                         flw_desc(b + KO + (ks >> 2) * 16384 + (ks & 3) * 32, 16, 1024), ks > 0);
    flw_commit();
    flw_wait<0>();
    flw_pin<64>(s);
    int w = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
    for (int j = 0; j < 16; j++)
        for (int h = 0; h < 2; h++)
            for (int e = 0; e < 2; e++) s_out[(16 * w + g + 8 * h) * 128 + 8 * j + 2 * t + e] = s[4 * j + 2 * h + e];
    uint32_t a[8][4];
    int r0 = 16 * w + g;
    for (int kk = 0; kk < 8; kk++) {
        const float *p0 = p + r0 * 128 + 16 * kk + 2 * t, *p1 = p0 + 8 * 128;
        a[kk][0] = pk(p0[0], p0[1]);
        a[kk][1] = pk(p1[0], p1[1]);
        a[kk][2] = pk(p0[8], p0[9]);
        a[kk][3] = pk(p1[8], p1[9]);
    }
    float o[64], o2[2][32];
    for (int i = 0; i < 64; i++) o[i] = 0.f;
    for (int i = 0; i < 32; i++) o2[0][i] = o2[1][i] = 0.f;
    flw_fence();
#pragma unroll
    for (int kk = 0; kk < 8; kk++) flw_rs_n128_bf16(o, a[kk], flw_desc(b + VO + kk * 2048, 16384, 1024));
#pragma unroll
    for (int kk = 0; kk < 8; kk++)
#pragma unroll
        for (int sl = 0; sl < 2; sl++) flw_rs_n64_bf16(o2[sl], a[kk], flw_desc(b + VO + sl * 16384 + kk * 2048, 16384, 1024));
    flw_commit();
    flw_wait<0>();
    flw_pin<64>(o);
    flw_pin<32>(o2[0]);
    flw_pin<32>(o2[1]);
    for (int j = 0; j < 16; j++)
        for (int h = 0; h < 2; h++)
            for (int e = 0; e < 2; e++) {
                int row = 16 * w + g + 8 * h, col = 8 * j + 2 * t + e;
                o_out[row * 128 + col] = o[4 * j + 2 * h + e];
                o2_out[row * 128 + col] = o2[j >> 3][4 * (j & 7) + 2 * h + e];
            }
}

int main() {
    const int NQ = 64 * 128, NK = 128 * 128;
    __nv_bfloat16 *hq = (__nv_bfloat16 *)malloc(NQ * 2), *hk = (__nv_bfloat16 *)malloc(NK * 2), *hv = (__nv_bfloat16 *)malloc(NK * 2);
    float *fq = (float *)malloc(NQ * 4), *fk = (float *)malloc(NK * 4), *fv = (float *)malloc(NK * 4), *fp = (float *)malloc(NQ * 2 * 4);
    srand(1);
    for (int i = 0; i < NQ; i++) { fq[i] = (float)(rand() % 7 - 3); hq[i] = __float2bfloat16(fq[i]); }
    for (int i = 0; i < NK; i++) { fk[i] = (float)(rand() % 7 - 3); hk[i] = __float2bfloat16(fk[i]); fv[i] = (float)(rand() % 5 - 2); hv[i] = __float2bfloat16(fv[i]); }
    for (int i = 0; i < 64 * 128; i++) fp[i] = (float)(rand() % 5 - 2);
    __nv_bfloat16 *dq, *dk, *dv; float *dp, *ds, *dO, *dO2;
    cudaMalloc(&dq, NQ * 2); cudaMalloc(&dk, NK * 2); cudaMalloc(&dv, NK * 2); cudaMalloc(&dp, 64 * 128 * 4);
    cudaMalloc(&ds, 64 * 128 * 4); cudaMalloc(&dO, 64 * 128 * 4); cudaMalloc(&dO2, 64 * 128 * 4);
    cudaMemcpy(dq, hq, NQ * 2, cudaMemcpyHostToDevice); cudaMemcpy(dk, hk, NK * 2, cudaMemcpyHostToDevice);
    cudaMemcpy(dv, hv, NK * 2, cudaMemcpyHostToDevice); cudaMemcpy(dp, fp, 64 * 128 * 4, cudaMemcpyHostToDevice);
    int smem = 16384 + 65536 + 1024;
    cudaFuncSetAttribute(kunit, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    kunit<<<1, 128, smem>>>(dq, dk, dv, dp, ds, dO, dO2);
    cudaError_t e = cudaDeviceSynchronize();
    printf("wgunit: launch %s\n", cudaGetErrorString(e));
    float *s = (float *)malloc(64 * 128 * 4), *o = (float *)malloc(64 * 128 * 4), *o2 = (float *)malloc(64 * 128 * 4);
    cudaMemcpy(s, ds, 64 * 128 * 4, cudaMemcpyDeviceToHost); cudaMemcpy(o, dO, 64 * 128 * 4, cudaMemcpyDeviceToHost);
    cudaMemcpy(o2, dO2, 64 * 128 * 4, cudaMemcpyDeviceToHost);
    double es = 0, eo = 0, eo2 = 0;
    int shown = 0;
    for (int r = 0; r < 64; r++)
        for (int c = 0; c < 128; c++) {
            double rs = 0, ro = 0;
            for (int kx = 0; kx < 128; kx++) { rs += fq[r * 128 + kx] * fk[c * 128 + kx]; ro += fp[r * 128 + kx] * fv[kx * 128 + c]; }
            es = fmax(es, fabs(rs - s[r * 128 + c])); eo = fmax(eo, fabs(ro - o[r * 128 + c])); eo2 = fmax(eo2, fabs(ro - o2[r * 128 + c]));
            if (fabs(rs - s[r * 128 + c]) > 0 && shown < 4) { printf("  S[%d][%d] ref %g got %g\n", r, c, rs, s[r * 128 + c]); shown++; }
        }
    printf("wgunit: S max abs err %g, O(n128) %g, O(n64x2) %g\n", es, eo, eo2);
    return 0;
}

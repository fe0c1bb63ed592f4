/* cpu_features — which SIMD level to run, and the kernel table per level.
 *
 * VLLM_CPU_ISA=scalar|avx2|avx512 caps the level (for tests and
 * benchmarks); a level the CPU lacks is never selected. */
#include "backends/cpu/cpu_internal.h"

#include "base/log.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static const char *g_isa_names[CPU_ISA_COUNT] = {"scalar", "avx2", "avx512"};

const char *cpu_isa_name(cpu_isa isa) {
    return (unsigned)isa < CPU_ISA_COUNT ? g_isa_names[isa] : "?";
}

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
static int has_f16c(void) { unsigned a, b, c, d; return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C); }
#endif
cpu_isa cpu_isa_detect(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
        __builtin_cpu_supports("fma") && has_f16c())
        return CPU_ISA_AVX512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
        has_f16c())
        return CPU_ISA_AVX2;
#endif
    return CPU_ISA_SCALAR;
}

cpu_isa cpu_isa_select(void) {
    cpu_isa best = cpu_isa_detect();
    const char *env = getenv("VLLM_CPU_ISA");
    if (!env || !*env) return best;
    for (int i = 0; i < CPU_ISA_COUNT; i++) {
        if (strcmp(env, g_isa_names[i]) == 0) {
            if ((cpu_isa)i > best) {
                VC_WARN("VLLM_CPU_ISA=%s not supported by this CPU; using %s", env,
                        g_isa_names[best]);
                return best;
            }
            return (cpu_isa)i;
        }
    }
    VC_WARN("VLLM_CPU_ISA=%s unknown (scalar|avx2|avx512); using %s", env, g_isa_names[best]);
    return best;
}

static cpu_kernels g_tables[CPU_ISA_COUNT];
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void fill_scalar(cpu_kernels *k) {
    memset(k, 0, sizeof *k);
    k->name = "scalar";
    k->mm[RT_F32] = cpu_mm_f32_ref;
    k->mm[RT_F16] = cpu_mm_f16_ref;
    k->mm[RT_BF16] = cpu_mm_bf16_ref;
    k->mm[RT_Q4_0] = cpu_mm_q4_0_ref;
    k->mm[RT_Q4_1] = cpu_mm_q4_1_ref;
    k->mm[RT_Q8_0] = cpu_mm_q8_0_ref;
    k->mm[RT_Q4_K] = cpu_mm_q4_K_ref;
    k->mm[RT_Q5_K] = cpu_mm_q5_K_ref;
    k->mm[RT_Q6_K] = cpu_mm_q6_K_ref;
    k->chain[RT_Q4_0] = k->chain[RT_Q4_1] = k->chain[RT_Q8_0] = 1;
    k->chain[RT_Q4_K] = k->chain[RT_Q6_K] = 1;
    k->quant_q8a = cpu_quant_q8a_ref;
    k->quant_q8k = cpu_quant_q8k_ref;
    k->rmsnorm = cpu_rmsnorm_ref;
    k->softmax = cpu_softmax_ref;
    k->glu = cpu_glu_ref;
    k->add = cpu_add_ref;
    k->scale = cpu_scale_ref;
    k->attn = cpu_attn_ref;
    k->f16_to_f32 = cpu_f16_to_f32_ref;
    k->bf16_to_f32 = cpu_bf16_to_f32_ref;
    k->f32_to_f16 = cpu_f32_to_f16_ref;
}

static void init_tables(void) {
    fill_scalar(&g_tables[CPU_ISA_SCALAR]);
#if defined(__x86_64__)
    g_tables[CPU_ISA_AVX2] = g_tables[CPU_ISA_SCALAR];
    g_tables[CPU_ISA_AVX2].name = "avx2";
    cpu_fill_matmul_avx2(&g_tables[CPU_ISA_AVX2]);
    cpu_fill_gemm_avx2(&g_tables[CPU_ISA_AVX2]);
    cpu_fill_elementwise_avx2(&g_tables[CPU_ISA_AVX2]);
    cpu_fill_attention_avx2(&g_tables[CPU_ISA_AVX2]);
    g_tables[CPU_ISA_AVX512] = g_tables[CPU_ISA_AVX2];
    g_tables[CPU_ISA_AVX512].name = "avx512";
    cpu_fill_matmul_avx512(&g_tables[CPU_ISA_AVX512]);
    /* VNNI is not part of the avx512 level: its tiles go in where the CPU
     * has them (bit-identical results either way) */
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512vnni")) cpu_fill_gemm_avx512vnni(&g_tables[CPU_ISA_AVX512]);
#else
    g_tables[CPU_ISA_AVX2] = g_tables[CPU_ISA_AVX512] = g_tables[CPU_ISA_SCALAR];
#endif
}

const cpu_kernels *cpu_kernels_for(cpu_isa isa) {
    pthread_once(&g_once, init_tables);
    return &g_tables[(unsigned)isa < CPU_ISA_COUNT ? isa : CPU_ISA_SCALAR];
}

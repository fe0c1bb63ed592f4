/* Timing of smp_batch_sample (not a ctest: the name has no test_ prefix).
 *
 *   cmake --build build --target vllmcore
 *   gcc -O2 -std=c11 -Isrc tests/sample/bench_batch_sampler.c build/libvllmcore.a -lm -o build/bench_batch_sampler
 *   ./build/bench_batch_sampler [V ...]
 *
 * Prints CPU ms per call (logits copy excluded) for B = 1, 64, 256 and a few
 * parameter mixes, on N(0, 3^2) logits with a handful of peaks.
 */
#define _POSIX_C_SOURCE 199309L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/err.h"
#include "sample/batch.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t); /* CPU time: the build machine is shared */
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static uint64_t rs = 0x12345678abcdefull;
static double unif(void) {
    rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
    return (double)(rs >> 11) / 9007199254740992.0;
}

int main(int argc, char **argv) {
    int64_t vocabs[4] = {49152, 151936};
    int nv = 2;
    if (argc > 1) {
        nv = 0;
        for (int i = 1; i < argc && nv < 4; i++) vocabs[nv++] = atoll(argv[i]);
    }
    const int Bs[3] = {1, 64, 256};
    struct {
        const char *name;
        float T, top_p, min_p, rep, pres;
        int32_t top_k, logprobs;
    } mixes[] = {
        {"greedy", 0, 1, 0, 1, 0, 0, -1},
        {"T=0.8", 0.8f, 1, 0, 1, 0, 0, -1},
        {"top_k=50", 0.8f, 1, 0, 1, 0, 50, -1},
        {"top_p=0.9", 0.8f, 0.9f, 0, 1, 0, 0, -1},
        {"k50+p0.9+minp", 0.8f, 0.9f, 0.05f, 1, 0, 50, -1},
        {"top_p+penalties(2k hist)", 0.8f, 0.9f, 0, 1.1f, 0.5f, 0, -1},
        {"greedy+logprobs=5", 0, 1, 0, 1, 0, 0, 5},
        {"top_p+logprobs=20", 0.8f, 0.9f, 0, 1, 0, 0, 20},
    };
    const int nm = (int)(sizeof mixes / sizeof mixes[0]);
    static int32_t hist[2000];
    for (int i = 0; i < 2000; i++) hist[i] = (int32_t)(unif() * 30000);
    for (int vi = 0; vi < nv; vi++) {
        int64_t V = vocabs[vi];
        size_t n = (size_t)256 * (size_t)V;
        float *src = malloc(n * sizeof *src), *x = malloc(n * sizeof *x);
        if (!src || !x) return 1;
        for (size_t i = 0; i < n; i++) {
            double u = unif() + 1e-300, w = unif();
            src[i] = (float)(3.0 * sqrt(-2 * log(u)) * cos(6.283185307 * w));
        }
        for (int r = 0; r < 256; r++)
            for (int j = 0; j < 5; j++) src[(size_t)r * V + (size_t)(unif() * V)] += 12.0f - 2.0f * j;
        smp_batch_params bp = smp_batch_params_default();
        bp.vocab = V;
        bp.seed = 1;
        bp.has_seed = true;
        smp_batch *b = smp_batch_create(&bp);
        printf("V=%lld (ms per call; per row in brackets)\n", (long long)V);
        printf("  %-26s %14s %14s %14s\n", "mix", "B=1", "B=64", "B=256");
        for (int m = 0; m < nm; m++) {
            smp_req_params p = smp_req_params_default();
            p.temperature = mixes[m].T;
            p.top_p = mixes[m].top_p;
            p.min_p = mixes[m].min_p;
            p.top_k = mixes[m].top_k;
            p.repetition_penalty = mixes[m].rep;
            p.presence_penalty = mixes[m].pres;
            p.logprobs = mixes[m].logprobs;
            smp_req *r;
            if (smp_req_create(b, &p, &r) < 0) {
                fprintf(stderr, "%s\n", vc_err_msg());
                return 1;
            }
            smp_row rows[256];
            for (int i = 0; i < 256; i++) rows[i] = (smp_row){r, hist, 1000, hist + 1000, 1000};
            printf("  %-26s", mixes[m].name);
            for (int bi = 0; bi < 3; bi++) {
                int B = Bs[bi], iters = B == 1 ? 20 : 2;
                double t = 0;
                for (int it = 0; it < iters; it++) {
                    memcpy(x, src, (size_t)B * (size_t)V * sizeof *x);
                    double t0 = now();
                    if (smp_batch_sample(b, x, rows, B) < 0) return 1;
                    t += now() - t0;
                }
                double ms = 1e3 * t / iters;
                printf(" %7.2f [%.3f]", ms, ms / B);
            }
            printf("\n");
            fflush(stdout);
            smp_req_free(r);
        }
        smp_batch_free(b);
        free(src);
        free(x);
    }
    return 0;
}

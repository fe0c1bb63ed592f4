/* sampler — turns one row of logits into a token, in vLLM's order:
 * greedy when temperature < 1e-5; else temperature -> min_p -> top_k ->
 * top_p -> draw from the renormalised distribution with a per-sampler
 * seeded RNG (same seed => same tokens, whatever else runs).
 *
 *   smp_params p = smp_params_default(); p.temperature = 0.8f; p.seed = 42;
 *   smp_sampler *s = smp_create(&p, vocab);
 *   int32_t tok = smp_sample(s, logits);   // logits[vocab] f32, modified
 *   smp_free(s);
 */
#ifndef SMP_SAMPLER_H
#define SMP_SAMPLER_H

#include <stdbool.h>
#include <stdint.h>

typedef struct {
    float temperature; /* default 1.0; < 1e-5 => greedy */
    int32_t top_k;     /* <= 0 or >= vocab: off */
    float top_p;       /* 1.0: off */
    float min_p;       /* 0: off */
    uint64_t seed;
    bool has_seed;     /* false: seeded from the clock */
} smp_params;

typedef struct smp_sampler smp_sampler;

smp_params smp_params_default(void);
/* Validate ranges (temperature >= 0, 0 < top_p <= 1, 0 <= min_p <= 1). */
int smp_params_check(const smp_params *p);
smp_sampler *smp_create(const smp_params *p, int64_t vocab);
void smp_free(smp_sampler *s);
int32_t smp_sample(smp_sampler *s, float *logits);
/* Greedy pick: lowest index among equal maxima; NaN never wins. */
int32_t smp_argmax(const float *logits, int64_t n);

/* The RNG (xoshiro256**, seeded by splitmix64), exposed for tests. */
typedef struct {
    uint64_t s[4];
} smp_rng;
void smp_rng_seed(smp_rng *r, uint64_t seed);
uint64_t smp_rng_next(smp_rng *r);
double smp_rng_uniform(smp_rng *r); /* [0, 1) */

#endif

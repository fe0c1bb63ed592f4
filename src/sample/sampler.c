#include "sample/sampler.h"

#include "base/err.h"

#include <math.h>
#include <stdlib.h>
#include <time.h>

struct smp_sampler {
    smp_params p;
    int64_t vocab;
    smp_rng rng;
    int32_t *idx;  /* [vocab] candidate ids, sorted by logit when needed */
    float *prob;   /* [vocab] */
};

smp_params smp_params_default(void) {
    smp_params p = {.temperature = 1.0f, .top_k = 0, .top_p = 1.0f, .min_p = 0.0f, .seed = 0, .has_seed = false};
    return p;
}

int smp_params_check(const smp_params *p) {
    if (!(p->temperature >= 0.0f) || !isfinite(p->temperature))
        return vc_err_set(VC_ERR_INVALID, "temperature must be >= 0 (got %g)", (double)p->temperature);
    if (!(p->top_p > 0.0f && p->top_p <= 1.0f))
        return vc_err_set(VC_ERR_INVALID, "top_p must be in (0, 1] (got %g)", (double)p->top_p);
    if (!(p->min_p >= 0.0f && p->min_p <= 1.0f))
        return vc_err_set(VC_ERR_INVALID, "min_p must be in [0, 1] (got %g)", (double)p->min_p);
    if (p->top_k < -1) return vc_err_set(VC_ERR_INVALID, "top_k must be -1, 0 or positive (got %d)", p->top_k);
    return VC_OK;
}

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void smp_rng_seed(smp_rng *r, uint64_t seed) {
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&seed);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t smp_rng_next(smp_rng *r) {
    uint64_t *s = r->s, out = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return out;
}

double smp_rng_uniform(smp_rng *r) { return (double)(smp_rng_next(r) >> 11) * (1.0 / 9007199254740992.0); }

smp_sampler *smp_create(const smp_params *p, int64_t vocab) {
    if (smp_params_check(p) < 0) return NULL;
    smp_sampler *s = calloc(1, sizeof *s);
    if (!s) goto oom;
    s->p = *p;
    s->vocab = vocab;
    s->idx = malloc((size_t)vocab * sizeof *s->idx);
    s->prob = malloc((size_t)vocab * sizeof *s->prob);
    if (!s->idx || !s->prob) goto oom;
    uint64_t seed = p->has_seed ? p->seed : (uint64_t)time(NULL) ^ (uint64_t)(uintptr_t)s;
    smp_rng_seed(&s->rng, seed);
    return s;
oom:
    smp_free(s);
    vc_err_set(VC_ERR_OOM, "out of memory");
    return NULL;
}

void smp_free(smp_sampler *s) {
    if (!s) return;
    free(s->idx);
    free(s->prob);
    free(s);
}

int32_t smp_argmax(const float *x, int64_t n) {
    int64_t best = 0;
    float bv = -INFINITY;
    bool found = false;
    for (int64_t i = 0; i < n; i++) {
        if (isnan(x[i])) continue;
        if (!found || x[i] > bv) {
            bv = x[i];
            best = i;
            found = true;
        }
    }
    return (int32_t)best;
}

static _Thread_local const float *g_sort_keys; /* qsort has no context arg in C11 */
static int cmp_desc(const void *a, const void *b) {
    float x = g_sort_keys[*(const int32_t *)a], y = g_sort_keys[*(const int32_t *)b];
    if (x > y) return -1;
    if (x < y) return 1;
    return (*(const int32_t *)a > *(const int32_t *)b) - (*(const int32_t *)a < *(const int32_t *)b);
}

/* Move the k largest probabilities to the front of idx[0..n) (unordered). */
static void select_top(const float *p, int32_t *idx, int64_t n, int64_t k) {
    int64_t lo = 0, hi = n - 1;
    while (lo < hi) {
        float pivot = p[idx[(lo + hi) / 2]];
        int64_t i = lo, j = hi;
        while (i <= j) {
            while (p[idx[i]] > pivot) i++;
            while (p[idx[j]] < pivot) j--;
            if (i <= j) {
                int32_t t = idx[i];
                idx[i] = idx[j];
                idx[j] = t;
                i++;
                j--;
            }
        }
        if (k - 1 <= j) hi = j;
        else if (k - 1 >= i) lo = i;
        else break;
    }
}

int32_t smp_sample(smp_sampler *s, float *logits) {
    const smp_params *p = &s->p;
    int64_t V = s->vocab;
    if (p->temperature < 1e-5f) return smp_argmax(logits, V);
    /* softmax(logits / T) */
    float mx = logits[smp_argmax(logits, V)];
    double sum = 0;
    for (int64_t i = 0; i < V; i++) {
        float e = isnan(logits[i]) ? 0.0f : expf((logits[i] - mx) / p->temperature);
        s->prob[i] = e;
        sum += e;
    }
    int64_t n = 0;
    float floor_p = p->min_p > 0 ? p->min_p * (float)(1.0 / sum) : 0.0f; /* max prob is 1/sum */
    for (int64_t i = 0; i < V; i++) {
        s->prob[i] = (float)(s->prob[i] / sum);
        if (s->prob[i] > 0 && s->prob[i] >= floor_p) s->idx[n++] = (int32_t)i;
    }
    if (n == 0) return smp_argmax(logits, V);
    if (p->top_k > 0 && p->top_k < n) {
        select_top(s->prob, s->idx, n, p->top_k);
        n = p->top_k;
    }
    if (p->top_p < 1.0f) {
        g_sort_keys = s->prob;
        qsort(s->idx, (size_t)n, sizeof *s->idx, cmp_desc);
        double mass = 0, total = 0;
        for (int64_t i = 0; i < n; i++) total += s->prob[s->idx[i]];
        int64_t keep = n;
        for (int64_t i = 0; i < n; i++) {
            mass += s->prob[s->idx[i]] / total;
            if (mass >= p->top_p) {
                keep = i + 1;
                break;
            }
        }
        n = keep;
    }
    double total = 0;
    for (int64_t i = 0; i < n; i++) total += s->prob[s->idx[i]];
    double r = smp_rng_uniform(&s->rng) * total, acc = 0;
    for (int64_t i = 0; i < n; i++) {
        acc += s->prob[s->idx[i]];
        if (r < acc) return s->idx[i];
    }
    return s->idx[n - 1];
}

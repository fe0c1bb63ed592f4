/* Logprobs of one row (vLLM's compute_logprobs + gather_logprobs): the
 * chosen token's logprob and rank, and the top k, without materialising
 * the [V] log_softmax. Two vectorised passes: max / top-k insertion /
 * rank count, then the sum of exponentials. */
#include "sample/sample_int.h"
#include "sample/vecf.h"

#include "base/err.h"

static inline float val(const float *x, int64_t i) { return x[i] != x[i] ? -INFINITY : x[i]; }

/* Insert (v, i) into the top list ids/vals[1..*nk] (at most k, descending,
 * equal values keep the earlier id first). */
static inline void top_insert(int32_t *ids, float *vals, int32_t *nk, int32_t k, float v, int64_t i) {
    int32_t j = *nk < k ? ++*nk : *nk;
    while (j > 1 && vals[j - 1] < v) {
        vals[j] = vals[j - 1];
        ids[j] = ids[j - 1];
        j--;
    }
    vals[j] = v;
    ids[j] = (int32_t)i;
}

void smp_row_logprobs(const float *x, int64_t V, int32_t tok, int32_t k, bool as_logits, int32_t *ids, float *vals,
                      int32_t *rank) {
    const float xt = val(x, tok);
    /* Pass 1: max, #{x >= x[tok]}, #{+inf}, and the top k (blocks
     * are skipped when none beats the list's last entry). */
    const vecf vxt = vecf_set(xt), pinf = vecf_set(INFINITY);
    vecf m = vecf_set(-INFINITY);
    veci ge = veci_set(0), ninf = veci_set(0);
    int32_t nk = 0;
    int64_t i = 0;
    for (; i + VECF_N <= V; i += VECF_N) {
        vecf v = vecf_nonan(vecf_load(x + i));
        m = vecf_max(m, v);
        ge -= v >= vxt;
        ninf -= v == pinf;
        if (k > 0 && (nk < k || veci_any(v > vecf_set(vals[nk]))))
            for (int l = 0; l < VECF_N; l++)
                if (nk < k || v[l] > vals[nk]) top_insert(ids, vals, &nk, k, v[l], i + l);
    }
    float mx = vecf_hmax(m);
    int64_t n_ge = 0, n_inf = 0;
    for (int l = 0; l < VECF_N; l++) n_ge += ge[l], n_inf += ninf[l];
    for (; i < V; i++) {
        float v = val(x, i);
        mx = v > mx ? v : mx;
        n_ge += v >= xt;
        n_inf += v == INFINITY;
        if (k > 0 && (nk < k || v > vals[nk])) top_insert(ids, vals, &nk, k, v, i);
    }
    /* Pass 2: log-sum-exp; +inf logits share all the mass. */
    if (as_logits) {
        vals[0] = xt;
    } else {
        float lse = mx;
        if (isfinite(mx)) lse = mx + (float)log(smp_ops_sumexp(x, V, mx));
        for (int32_t j = 0; j <= nk; j++) {
            float v = j == 0 ? xt : vals[j];
            float lp;
            if (mx == INFINITY) lp = v == INFINITY ? -logf((float)n_inf) : -INFINITY;
            else if (mx == -INFINITY) lp = -INFINITY;
            else lp = v - lse;
            vals[j] = lp;
        }
    }
    for (int32_t j = nk + 1; j <= k; j++) { /* k > V: nothing more to list */
        ids[j] = -1;
        vals[j] = -INFINITY;
    }
    ids[0] = tok;
    *rank = (int32_t)n_ge;
}

int smp_prompt_logprobs(const float *logits, int32_t P, int64_t V, const int32_t *next_ids, int32_t k,
                        int32_t *ids, float *vals, int32_t *ranks) {
    if (P < 0 || V <= 0 || (P > 0 && (!logits || !next_ids || !ids || !vals || !ranks)))
        return vc_err_set(VC_ERR_INVALID, "prompt_logprobs: bad arguments");
    if (k < 0) k = 0;
    for (int32_t p = 0; p < P; p++)
        if (next_ids[p] < 0 || next_ids[p] >= V)
            return vc_err_set(VC_ERR_INVALID, "prompt token id %d out of vocab (size %lld)", next_ids[p],
                              (long long)V);
    for (int32_t p = 0; p < P; p++)
        smp_row_logprobs(logits + (int64_t)p * V, V, next_ids[p], k, false, ids + (int64_t)p * (k + 1),
                         vals + (int64_t)p * (k + 1), ranks + p);
    return VC_OK;
}

/* Vectorised passes over one row [V] (see vecf.h): the sampler spends its
 * time here, a few streaming passes per row. */
#include "sample/sample_int.h"
#include "sample/vecf.h"

float smp_ops_sanitize_max(float *x, int64_t V) {
    /* Read-only unless a NaN shows up: rows are large, NaN is rare. */
    vecf m = vecf_set(-INFINITY);
    veci nan = veci_set(0);
    int64_t i = 0;
    for (; i + VECF_N <= V; i += VECF_N) {
        vecf v = vecf_load(x + i);
        nan |= v != v;
        m = vecf_max(v, m); /* a NaN lane loses: (NaN > m) is false */
    }
    float mx = vecf_hmax(m);
    int any = veci_any(nan);
    for (; i < V; i++) {
        any |= x[i] != x[i];
        mx = x[i] > mx ? x[i] : mx;
    }
    if (any)
        for (i = 0; i < V; i++)
            if (x[i] != x[i]) x[i] = -INFINITY;
    return mx;
}

float smp_ops_max(const float *x, int64_t V) {
    vecf m = vecf_set(-INFINITY);
    int64_t i = 0;
    for (; i + VECF_N <= V; i += VECF_N) m = vecf_max(m, vecf_load(x + i));
    if (i < V) m = vecf_max(m, vecf_load_tail(x + i, V - i, -INFINITY));
    return vecf_hmax(m);
}

float smp_ops_div_max(float *x, int64_t V, float T) {
    const vecf t = vecf_set(T);
    vecf m = vecf_set(-INFINITY);
    int64_t i = 0;
    for (; i + VECF_N <= V; i += VECF_N) {
        vecf v = vecf_load(x + i) / t;
        vecf_store(x + i, v);
        m = vecf_max(m, v);
    }
    for (; i < V; i++) {
        x[i] /= T;
        m[0] = x[i] > m[0] ? x[i] : m[0];
    }
    return vecf_hmax(m);
}

int64_t smp_ops_find(const float *x, int64_t V, float v) {
    for (int64_t i = 0; i < V; i++)
        if (x[i] == v) return i;
    return 0;
}

/* ev[i] = exp(x[i] - mx) where x[i] >= cut, else 0 with x[i] = -inf.
 * Returns the sum of ev; float lanes per block of 512, double across. */
double smp_ops_exp_mask(float *x, float *ev, int64_t V, float mx, float cut) {
    const vecf vmx = vecf_set(mx), vcut = vecf_set(cut), ninf = vecf_set(-INFINITY), zero = vecf_set(0.0f);
    double S = 0;
    int64_t i = 0;
    while (i + VECF_N <= V) {
        vecf acc = zero;
        int64_t end = i + 512 < V ? i + 512 : V;
        for (; i + VECF_N <= end; i += VECF_N) {
            vecf v = vecf_load(x + i);
            veci keep = v >= vcut;
            vecf e = vecf_sel(keep, vecf_exp_neg(v - vmx), zero);
            vecf_store(x + i, vecf_sel(keep, v, ninf));
            vecf_store(ev + i, e);
            acc += e;
        }
        S += vecf_hsum(acc);
    }
    if (i < V) {
        vecf v = vecf_load_tail(x + i, V - i, -INFINITY);
        veci keep = v >= vcut;
        vecf e = vecf_sel(keep, vecf_exp_neg(v - vmx), zero);
        vecf_store_tail(x + i, V - i, vecf_sel(keep, v, ninf));
        vecf_store_tail(ev + i, V - i, e);
        S += vecf_hsum(e);
    }
    return S;
}

/* sum exp(x - mx) over a row that may hold NaN (read as -inf). */
double smp_ops_sumexp(const float *x, int64_t V, float mx) {
    const vecf vmx = vecf_set(mx), zero = vecf_set(0.0f);
    double S = 0;
    int64_t i = 0;
    while (i + VECF_N <= V) {
        vecf acc = zero;
        int64_t end = i + 512 < V ? i + 512 : V;
        for (; i + VECF_N <= end; i += VECF_N) acc += vecf_exp_neg(vecf_nonan(vecf_load(x + i)) - vmx);
        S += vecf_hsum(acc);
    }
    if (i < V) S += vecf_hsum(vecf_exp_neg(vecf_nonan(vecf_load_tail(x + i, V - i, -INFINITY)) - vmx));
    return S;
}

/* Min-heap of k floats: h[0] is the smallest. */
static void heap_down(float *h, int64_t k, int64_t j) {
    float v = h[j];
    for (;;) {
        int64_t c = 2 * j + 1;
        if (c >= k) break;
        if (c + 1 < k && h[c + 1] < h[c]) c++;
        if (!(h[c] < v)) break;
        h[j] = h[c];
        j = c;
    }
    h[j] = v;
}

/* k-th largest value among x[i] >= lo (x without NaN), -inf when fewer
 * than k qualify. A k-heap with a vector pre-test against its root, so a
 * block of VECF_N costs one compare once the heap is warm: O(V + k log k
 * log(V/k)) on typical rows. heap: [k] scratch. */
float smp_ops_kth_largest(const float *x, int64_t V, int64_t k, float lo, float *heap) {
    int64_t n = 0, i = 0;
    lo = lo > -INFINITY ? lo : -INFINITY;
    /* fill: the first k qualifying values */
    for (; i < V && n < k; i++)
        if (x[i] >= lo && x[i] > -INFINITY) heap[n++] = x[i];
    if (n < k) return -INFINITY;
    for (int64_t j = k / 2 - 1; j >= 0; j--) heap_down(heap, k, j);
    for (; i < V && (i & (VECF_N - 1)); i++)
        if (x[i] > heap[0]) heap[0] = x[i], heap_down(heap, k, 0);
    for (; i + VECF_N <= V; i += VECF_N) {
        vecf v = vecf_load(x + i);
        if (!veci_any(v > vecf_set(heap[0]))) continue;
        for (int l = 0; l < VECF_N; l++)
            if (v[l] > heap[0]) heap[0] = v[l], heap_down(heap, k, 0);
    }
    for (; i < V; i++)
        if (x[i] > heap[0]) heap[0] = x[i], heap_down(heap, k, 0);
    return heap[0];
}

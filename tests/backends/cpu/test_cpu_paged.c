/* KV_STORE and PAGED_ATTENTION on the CPU backend: a varlen batch (prefill
 * from scratch, a long decode that splits its context, a chunked prefill
 * with history) over shuffled block tables, f32 and f16 caches, against a
 * naive double reference over the logical K/V; every ISA level, 1 and 3
 * threads (bit-identical), batch invariance, and bad inputs. */
#include "cpu_test_util.h"

#include "base/log.h"

enum { S = 3, B = 16, NUM_BLOCKS = 140, MAXB = 100 };
/* cache dtype of the tests' `f16` kind: 0 f32, 1 f16, 2 bf16 */
#define KV_DT(kind) ((kind) == 2 ? RT_BF16 : (kind) ? RT_F16 : RT_F32)

static const int32_t g_seq_len[S] = {37, 1500, 5}, g_q_len[S] = {37, 1, 3};

typedef struct {
    int64_t h, kvh, hd;
    float softcap;
    int32_t window;
} pcase;

typedef struct {
    int64_t T;
    int32_t qsl[S + 1], bt[S * MAXB];
    float *k[S], *v[S]; /* logical [seq_len, kvh, hd] per sequence */
    float *q;           /* [T, h, hd] */
    void *kc, *vc;      /* [NUM_BLOCKS, B, kvh, hd] */
} pbatch;

static void batch_init(pbatch *pb, const pcase *c, int f16) {
    memset(pb, 0, sizeof *pb);
    int64_t row = c->kvh * c->hd;
    for (int s = 0; s < S; s++) pb->qsl[s + 1] = pb->qsl[s] + g_q_len[s];
    pb->T = pb->qsl[S];
    /* a shuffled assignment of distinct blocks */
    int32_t perm[NUM_BLOCKS];
    for (int i = 0; i < NUM_BLOCKS; i++) perm[i] = i;
    for (int i = NUM_BLOCKS - 1; i > 0; i--) {
        int j = (int)((rnd_uniform() + 1.0f) * 0.5f * (float)(i + 1)) % (i + 1);
        int32_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    int used = 0;
    for (int s = 0; s < S; s++)
        for (int b = 0; b < MAXB; b++) pb->bt[s * MAXB + b] = b < (g_seq_len[s] + B - 1) / B ? perm[used++] : -1;
    size_t es = f16 ? 2 : 4;
    pb->kc = xmalloc((size_t)NUM_BLOCKS * B * (size_t)row * es);
    pb->vc = xmalloc((size_t)NUM_BLOCKS * B * (size_t)row * es);
    memset(pb->kc, 0xff, (size_t)NUM_BLOCKS * B * (size_t)row * es); /* NaN poison: unused slots */
    memset(pb->vc, 0xff, (size_t)NUM_BLOCKS * B * (size_t)row * es);
    for (int s = 0; s < S; s++) {
        pb->k[s] = xmalloc((size_t)(g_seq_len[s] * row) * 4);
        pb->v[s] = xmalloc((size_t)(g_seq_len[s] * row) * 4);
        fill_rand(pb->k[s], g_seq_len[s] * row, 1.0f);
        fill_rand(pb->v[s], g_seq_len[s] * row, 1.0f);
        if (f16 == 1) /* the reference sees the rounded cache */
            for (int64_t i = 0; i < g_seq_len[s] * row; i++) {
                pb->k[s][i] = rt_f16_to_f32(rt_f32_to_f16(pb->k[s][i]));
                pb->v[s][i] = rt_f16_to_f32(rt_f32_to_f16(pb->v[s][i]));
            }
        else if (f16 == 2)
            for (int64_t i = 0; i < g_seq_len[s] * row; i++) {
                pb->k[s][i] = rt_bf16_to_f32(rt_f32_to_bf16(pb->k[s][i]));
                pb->v[s][i] = rt_bf16_to_f32(rt_f32_to_bf16(pb->v[s][i]));
            }
    }
    pb->q = xmalloc((size_t)(pb->T * c->h * c->hd) * 4);
    fill_rand(pb->q, pb->T * c->h * c->hd, 1.0f);
}

static void batch_free(pbatch *pb) {
    for (int s = 0; s < S; s++) {
        free(pb->k[s]);
        free(pb->v[s]);
    }
    free(pb->q);
    free(pb->kc);
    free(pb->vc);
}

/* Store every token of every sequence with rt_kv_store (one call, with a
 * padding row of slot -1 in the middle). */
static void store_all(rt_backend *be, pbatch *pb, const pcase *c, int f16) {
    int64_t row = c->kvh * c->hd, n = 0;
    for (int s = 0; s < S; s++) n += g_seq_len[s];
    float *ks = xmalloc((size_t)((n + 1) * row) * 4), *vs = xmalloc((size_t)((n + 1) * row) * 4);
    int32_t *slots = xmalloc((size_t)(n + 1) * 4);
    int64_t i = 0;
    for (int s = 0; s < S; s++)
        for (int64_t p = 0; p < g_seq_len[s]; p++, i++) {
            if (i == 10) { /* padding row */
                slots[i] = -1;
                fill_rand(ks + i * row, row, 9.0f);
                fill_rand(vs + i * row, row, 9.0f);
                i++;
            }
            memcpy(ks + i * row, pb->k[s] + p * row, (size_t)row * 4);
            memcpy(vs + i * row, pb->v[s] + p * row, (size_t)row * 4);
            slots[i] = pb->bt[s * MAXB + p / B] * B + (int32_t)(p % B);
        }
    rt_tensor tk = rt_tensor_3d(ks, RT_F32, RT_DEV_CPU, n + 1, c->kvh, c->hd);
    rt_tensor tv = rt_tensor_3d(vs, RT_F32, RT_DEV_CPU, n + 1, c->kvh, c->hd);
    rt_tensor ts = rt_tensor_1d(slots, RT_I32, RT_DEV_CPU, n + 1);
    int64_t shp[4] = {NUM_BLOCKS, B, c->kvh, c->hd};
    rt_tensor kc = rt_tensor_make(pb->kc, KV_DT(f16), RT_DEV_CPU, 4, shp);
    rt_tensor vc = rt_tensor_make(pb->vc, KV_DT(f16), RT_DEV_CPU, 4, shp);
    assert_int_equal(rt_kv_store(be, &kc, &tk, &ts), VC_OK);
    assert_int_equal(rt_kv_store(be, &vc, &tv, &ts), VC_OK);
    /* out-of-range slot */
    slots[0] = NUM_BLOCKS * B;
    assert_int_equal(rt_kv_store(be, &kc, &tk, &ts), VC_ERR_INVALID);
    free(ks);
    free(vs);
    free(slots);
}

static int run_paged(rt_backend *be, const pbatch *pb, const pcase *c, int f16, float *y, int s0,
                     int ns) {
    /* sequences s0..s0+ns-1 as their own batch */
    int32_t qsl[S + 1], sl[S];
    for (int s = 0; s <= ns; s++) qsl[s] = pb->qsl[s0 + s] - pb->qsl[s0];
    for (int s = 0; s < ns; s++) sl[s] = g_seq_len[s0 + s];
    int64_t T = qsl[ns];
    rt_tensor tq = rt_tensor_3d(pb->q + pb->qsl[s0] * c->h * c->hd, RT_F32, RT_DEV_CPU, T, c->h, c->hd);
    rt_tensor ty = rt_tensor_3d(y, RT_F32, RT_DEV_CPU, T, c->h, c->hd);
    int64_t shp[4] = {NUM_BLOCKS, B, c->kvh, c->hd};
    rt_tensor kc = rt_tensor_make(pb->kc, KV_DT(f16), RT_DEV_CPU, 4, shp);
    rt_tensor vc = rt_tensor_make(pb->vc, KV_DT(f16), RT_DEV_CPU, 4, shp);
    rt_tensor tbt = rt_tensor_2d((void *)(pb->bt + s0 * MAXB), RT_I32, RT_DEV_CPU, ns, MAXB);
    rt_tensor tqsl = rt_tensor_1d(qsl, RT_I32, RT_DEV_CPU, ns + 1);
    rt_tensor tsl = rt_tensor_1d(sl, RT_I32, RT_DEV_CPU, ns);
    float scale = 1.5f / sqrtf((float)c->hd);
    return rt_paged_attention(be, &ty, &tq, &kc, &vc, &tbt, &tqsl, &tsl, scale, c->softcap, c->window);
}

static void test_paged(void **state) {
    (void)state;
    const pcase cases[] = {{12, 1, 64, 0, 0}, {8, 2, 40, 30.0f, 700}, {4, 4, 128, 0, 0}};
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++)
        for (int f16 = 0; f16 < 3; f16++) { /* cache f32, f16, bf16 */
            const pcase *c = &cases[ci];
            pbatch pb;
            batch_init(&pb, c, f16);
            int64_t n = pb.T * c->h * c->hd;
            double *ref = xmalloc((size_t)n * 8);
            for (int s = 0; s < S; s++)
                for (int64_t i = 0; i < g_q_len[s]; i++) {
                    int64_t t = pb.qsl[s] + i, pos = g_seq_len[s] - g_q_len[s] + i;
                    attn_ref_row(ref + t * c->h * c->hd, pb.q + t * c->h * c->hd, pb.k[s], pb.v[s], c->h,
                                 c->kvh, c->hd, pos, 1.5f / sqrtf((float)c->hd), c->softcap, c->window);
                }
            float *y = xmalloc((size_t)n * 4), *y1 = xmalloc((size_t)n * 4), *ys = xmalloc((size_t)n * 4);
            for (int isa = 0; isa < N_ISAS; isa++) {
                rt_backend *be1 = make_backend(g_isas[isa], 1), *be3 = make_backend(g_isas[isa], 3);
                if (isa == 0) store_all(be1, &pb, c, f16);
                assert_int_equal(run_paged(be3, &pb, c, f16, y, 0, S), VC_OK);
                double e = rel_max_err(y, ref, n);
                if (!(e < 2e-5)) fail_msg("paged case %zu f16=%d isa %s: err %g", ci, f16, g_isas[isa], e);
                assert_int_equal(run_paged(be1, &pb, c, f16, y1, 0, S), VC_OK);
                assert_memory_equal(y, y1, (size_t)n * 4);
                /* each sequence alone gives the same bits as inside the batch */
                for (int s = 0; s < S; s++) {
                    assert_int_equal(run_paged(be3, &pb, c, f16, ys, s, 1), VC_OK);
                    assert_memory_equal(ys, y + pb.qsl[s] * c->h * c->hd,
                                        (size_t)(g_q_len[s] * c->h * c->hd) * 4);
                }
                rt_backend_free(be1);
                rt_backend_free(be3);
            }
            free(y);
            free(y1);
            free(ys);
            free(ref);
            batch_free(&pb);
        }
}

static void test_paged_errors(void **state) {
    (void)state;
    const pcase c = {4, 2, 16, 0, 0};
    pbatch pb;
    batch_init(&pb, &c, 0);
    rt_backend *be = make_backend("avx2", 2);
    float *y = xmalloc((size_t)(pb.T * c.h * c.hd) * 4);
    store_all(be, &pb, &c, 0);
    assert_int_equal(run_paged(be, &pb, &c, 0, y, 0, S), VC_OK);
    pb.bt[MAXB + 5] = NUM_BLOCKS; /* sequence 1, a block it uses */
    assert_int_equal(run_paged(be, &pb, &c, 0, y, 0, S), VC_ERR_INVALID);
    pb.bt[MAXB + 5] = -3;
    assert_int_equal(run_paged(be, &pb, &c, 0, y, 0, S), VC_ERR_INVALID);
    pb.bt[MAXB + 5] = 0;
    pb.bt[MAXB + 99] = NUM_BLOCKS + 7; /* a block past the sequence: never read */
    assert_int_equal(run_paged(be, &pb, &c, 0, y, 0, S), VC_OK);
    free(y);
    batch_free(&pb);
    rt_backend_free(be);
}

int main(void) {
    vc_log_set_level(VC_LOG_ERROR);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_paged),
        cmocka_unit_test(test_paged_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

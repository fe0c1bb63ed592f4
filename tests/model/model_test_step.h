/* model_test_step.h — one step of a hand-made batch for the model tests
 * that compare two loads of the tiny Llama step by step
 * (test_model_attn_split, test_model_last_rows). */
#ifndef VLLM_TESTS_MODEL_TEST_STEP_H
#define VLLM_TESTS_MODEL_TEST_STEP_H

#include "model/model_impl.h"

enum { MTS_MAX_SEQS = 16, MTS_MAX_BLOCKS = 16, MTS_MAX_TOKENS = 128 };

/* One step: n[i] new tokens of sequence seqs[i], i < k (k <=
 * MTS_MAX_SEQS); sequence s owns blocks s * mb .. s * mb + mb - 1 of size
 * bs; len[s] its length so far (advanced). The logits of each sequence's
 * last row into lg [k, V]. */
static void mts_step(mdl_model *m, mdl_kv *kv, int32_t *len, const int *seqs, const int *n, int k, int mb, int bs,
                     float *lg) {
    const int64_t V = mdl_get_config(m)->vocab;
    int32_t bt[MTS_MAX_SEQS * MTS_MAX_BLOCKS], ids[MTS_MAX_TOKENS], pos[MTS_MAX_TOKENS], slots[MTS_MAX_TOKENS];
    int32_t qsl[MTS_MAX_SEQS + 1] = {0}, sl[MTS_MAX_SEQS], rows[MTS_MAX_SEQS], T = 0;
    assert_true(k <= MTS_MAX_SEQS && mb <= MTS_MAX_BLOCKS);
    for (int i = 0; i < k; i++) {
        const int s = seqs[i];
        for (int b = 0; b < mb; b++) bt[i * mb + b] = s * mb + b;
        assert_true(T + n[i] <= MTS_MAX_TOKENS);
        for (int j = 0; j < n[i]; j++, T++) {
            pos[T] = len[s] + j;
            ids[T] = (int32_t)((7 * s + 3 * pos[T] + 1) % V);
            slots[T] = (s * mb + pos[T] / bs) * bs + pos[T] % bs;
        }
        qsl[i + 1] = T;
        sl[i] = len[s] + n[i];
        rows[i] = T - 1;
    }
    mdl_batch b = {.n_tokens = T, .ids = ids, .positions = pos, .slots = slots, .n_seqs = k, .qsl = qsl,
                   .seq_lens = sl, .block_tables = bt, .max_blocks = mb, .n_logits = k, .logit_rows = rows};
    assert_int_equal(mdl_forward_batch(m, kv, &b, lg), 0);
    for (int i = 0; i < k; i++) len[seqs[i]] += n[i];
}

#endif

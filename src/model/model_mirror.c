/* model_mirror — async scheduling's device mirror of sampled ids (model.h).
 *
 * Enqueue (the thread that runs steps): the forward pass with the step's
 * placeholder ids spliced in on the device (COMBINE from the previous
 * ticket's ids), the logits rows reduced to ids (ARGMAX or SAMPLE) into
 * the new ticket's device buffer, then the host copy of those ids queued
 * behind them with an event. Nothing waits: the next step can be enqueued
 * while this one runs. Collect (any thread): wait for the event, hand the
 * ids over.
 *
 * Two tickets are resident: ticket t uses mirror[t % 2], claimed only when
 * t - 2 was collected, so neither its device ids (read by the step after
 * it, earlier on the same stream) nor its pinned host copy are reused
 * before their last use was seen to complete (the rule vllm.cpp learned).
 * Under TP the ids are computed on the host (no mirror, no splice).
 *
 * VLLM_STEP_TRACE=1: a line per collected step on stderr with the host's
 * times: forward queued (uploads + every kernel launch), ids queued
 * (sampling / argmax + the copy), then the wait for the ids. A step whose
 * wait is long had the GPU behind the host (GPU-bound); the enqueue time
 * is then the host's launch cost, hidden behind the GPU.
 */
#include "model/model_impl.h"

#include "base/clock.h"
#include "base/err.h"
#include "base/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>


int mdl_mirror_init(mdl_model *m) {
    int64_t B = m->max_batch, s4[2] = {4, B};
    for (int i = 0; i < MDL_MIRROR; i++) {
        mdl_mirror *mr = &m->mirror[i];
        mr->ids = rt_tensor_alloc(m->be, RT_I32, 1, &B);
        mr->host = rt_backend_host_alloc(m->be, (size_t)B * sizeof(int32_t));
        mr->ev = mr->host ? rt_backend_event_create(m->be) : NULL;
        if (!mr->ids.data || !mr->host || !mr->ev) return vc_err_prefix("model: device mirror");
        atomic_store(&mr->collected, true);
    }
    m->splice_dev = rt_tensor_alloc(m->be, RT_I32, 2, s4);
    m->splice_host = malloc((size_t)(2 * B) * sizeof *m->splice_host);
    if (!m->splice_dev.data || !m->splice_host) return vc_err_set(VC_ERR_OOM, "model: out of memory for splices");
    return VC_OK;
}

void mdl_mirror_free(mdl_model *m) {
    for (int i = 0; i < MDL_MIRROR; i++) {
        mdl_mirror *mr = &m->mirror[i];
        /* A copy may still target the host buffer: see it complete first. */
        if (mr->queued && !atomic_load(&mr->collected)) (void)rt_backend_event_wait(m->be, mr->ev);
        rt_backend_event_free(m->be, mr->ev);
        rt_backend_host_free(m->be, mr->host);
        if (mr->ids.data) rt_backend_free_mem(m->be, mr->ids.data);
        memset(mr, 0, sizeof *mr);
    }
    if (m->splice_dev.data) rt_backend_free_mem(m->be, m->splice_dev.data);
    m->splice_dev.data = NULL;
    free(m->splice_host);
    m->splice_host = NULL;
}

bool mdl_can_mirror(const mdl_model *m) {
    rt_op_args a = {0};
    return m->tp_size == 1 && m->mirror[0].host && rt_op_supported(m->be, RT_OP_COMBINE, &a);
}

/* The splice names the last ticket, resident on the device, and rows in range. */
static int check_splice(const mdl_model *m, const mdl_batch *b, const mdl_sample_args *sa, const mdl_splice *sp) {
    if (!sp || sp->n == 0) return VC_OK;
    if (!mdl_can_mirror(m)) return vc_err_set(VC_ERR_UNSUPPORTED, "forward: no device splice on this model");
    const mdl_mirror *mr = &m->mirror[(sp->prev > 0 ? sp->prev : 0) % MDL_MIRROR];
    if (sp->prev <= 0 || sp->prev != m->mirror_next || mr->ticket != sp->prev || !mr->on_device)
        return vc_err_set(VC_ERR_INVALID, "forward: splice from step %lld, which is not the last one on the device",
                          (long long)sp->prev);
    if (sp->n < 0 || sp->n > b->n_tokens || !sp->rows || !sp->src)
        return vc_err_set(VC_ERR_INVALID, "forward: malformed splice");
    for (int32_t j = 0; j < sp->n; j++) {
        if (sp->rows[j] < 0 || sp->rows[j] >= b->n_tokens || sp->src[j] < 0 || sp->src[j] >= mr->n)
            return vc_err_set(VC_ERR_INVALID, "forward: splice entry %d (row %d <- id %d) out of range", j,
                              sp->rows[j], sp->src[j]);
        int64_t h = sp->hist ? sp->hist[j] : -1;
        if (h < -1 || (h >= 0 && (!sa || h >= sa->n_hist)))
            return vc_err_set(VC_ERR_INVALID, "forward: splice entry %d: history index %lld out of range", j,
                              (long long)h);
    }
    return VC_OK;
}

int mdl_splice_ids(mdl_model *m, int64_t T) {
    const mdl_splice *sp = m->splice;
    if (!sp || sp->n == 0) return VC_OK;
    const mdl_mirror *prev = &m->mirror[sp->prev % MDL_MIRROR];
    int64_t B = m->max_batch, n = sp->n;
    rt_tensor pos = rt_tensor_1d(m->splice_dev.data, RT_I32, m->be->device, n);
    rt_tensor sel = rt_tensor_1d((int32_t *)m->splice_dev.data + B, RT_I32, m->be->device, n);
    rt_tensor ids = rt_tensor_slice0(&m->ids, 0, T), vals = rt_tensor_slice0(&prev->ids, 0, prev->n);
    int rc = mdl_upload_i32(m, &pos, sp->rows, n);
    if (rc == 0) rc = mdl_upload_i32(m, &sel, sp->src, n);
    return rc < 0 ? rc : rt_combine(m->be, &ids, &vals, &pos, &sel);
}

int mdl_splice_hist(mdl_model *m, rt_tensor *hist) {
    const mdl_splice *sp = m->splice;
    if (!sp || !sp->hist) return VC_OK;
    int64_t B = m->max_batch, n = 0;
    int32_t *hpos = m->splice_host, *hsel = m->splice_host + B;
    for (int32_t j = 0; j < sp->n; j++)
        if (sp->hist[j] >= 0) {
            hpos[n] = sp->hist[j];
            hsel[n++] = sp->src[j];
        }
    if (n == 0) return VC_OK;
    const mdl_mirror *prev = &m->mirror[sp->prev % MDL_MIRROR];
    rt_tensor pos = rt_tensor_1d((int32_t *)m->splice_dev.data + 2 * B, RT_I32, m->be->device, n);
    rt_tensor sel = rt_tensor_1d((int32_t *)m->splice_dev.data + 3 * B, RT_I32, m->be->device, n);
    rt_tensor vals = rt_tensor_slice0(&prev->ids, 0, prev->n);
    int rc = mdl_upload_i32(m, &pos, hpos, n);
    if (rc == 0) rc = mdl_upload_i32(m, &sel, hsel, n);
    return rc < 0 ? rc : rt_combine(m->be, hist, &vals, &pos, &sel);
}

/* The slot of the next ticket, free once its previous ticket was collected. */
static mdl_mirror *claim(mdl_model *m, mdl_ticket *t) {
    *t = m->mirror_next + 1;
    mdl_mirror *mr = &m->mirror[*t % MDL_MIRROR];
    if (!mr->host) {
        vc_err_set(VC_ERR_INVALID, "forward: no device mirror on this model");
        return NULL;
    }
    if (mr->ticket && !atomic_load(&mr->collected)) {
        vc_err_set(VC_ERR_INVALID, "forward: collect step %lld before enqueuing step %lld", (long long)mr->ticket,
                   (long long)*t);
        return NULL;
    }
    mr->ticket = 0; /* while being refilled */
    return mr;
}

/* Hand ticket t out for slot mr (its n, on_device, queued set). */
static void publish(mdl_model *m, mdl_mirror *mr, mdl_ticket t, bool collected) {
    mr->ticket = t;
    atomic_store(&mr->collected, collected);
    m->mirror_next = t;
}

static int enqueue(mdl_model *m, mdl_kv *kv, const mdl_batch *b, const mdl_sample_args *sa, const mdl_splice *sp,
                   mdl_ticket *t) {
    mdl_ticket nt;
    *t = 0;
    if (sa && !mdl_can_sample(m)) return vc_err_set(VC_ERR_UNSUPPORTED, "forward: no device sampling on this model");
    if (sa && (!sa->fparams || !sa->iparams || sa->n_hist < 0 || (sa->n_hist > 0 && !sa->hist)))
        return vc_err_set(VC_ERR_INVALID, "forward: bad sampling arguments");
    int rc = check_splice(m, b, sa, sp);
    if (rc < 0) return rc;
    mdl_mirror *mr = claim(m, &nt);
    if (!mr) return VC_ERR_INVALID;
    int64_t L = b->n_logits;
    m->splice = sp && sp->n > 0 ? sp : NULL;
    mr->trace_T = b->n_tokens;
    mr->trace_t[0] = vc_step_trace() ? vc_now_s() : 0.0;
    rc = mdl_forward_step(m, kv, b);
    mr->trace_t[1] = vc_step_trace() ? vc_now_s() : 0.0;
    if (rc == 0 && m->tp_size > 1) { /* the rows are split over ranks: reduce on the host */
        rc = mdl_fetch_logits(m, L, NULL, mr->host);
        mr->on_device = mr->queued = false;
    } else if (rc == 0) {
        rt_tensor dst = rt_tensor_slice0(&mr->ids, 0, L), dl = rt_tensor_slice0(&m->logits, 0, L);
        if (L > 0) rc = sa ? mdl_sample_rows(m, L, &dst, sa) : rt_argmax(m->be, &dst, &dl);
        if (rc == 0)
            rc = rt_backend_copy_to_host_async(m->be, mr->host, mr->ids.data, (size_t)L * sizeof(int32_t), mr->ev);
        mr->on_device = true;
        mr->queued = rc == 0;
    }
    m->splice = NULL;
    if (rc < 0) return rc;
    mr->trace_t[2] = vc_step_trace() ? vc_now_s() : 0.0;
    if (vc_step_trace()) rt_op_trace_take(mr->trace_ops, sizeof mr->trace_ops); /* this thread queued the ops */
    mr->n = (int32_t)L;
    publish(m, mr, nt, !mr->queued);
    *t = nt;
    return VC_OK;
}

int mdl_forward_batch_argmax_async(mdl_model *m, mdl_kv *kv, const mdl_batch *b, const mdl_splice *sp,
                                   mdl_ticket *t) {
    return enqueue(m, kv, b, NULL, sp, t);
}

int mdl_forward_batch_sample_async(mdl_model *m, mdl_kv *kv, const mdl_batch *b, const mdl_sample_args *sa,
                                   const mdl_splice *sp, mdl_ticket *t) {
    if (!sa) return vc_err_set(VC_ERR_INVALID, "forward: bad sampling arguments");
    return enqueue(m, kv, b, sa, sp, t);
}

int mdl_forward_batch_splice(mdl_model *m, mdl_kv *kv, const mdl_batch *b, const mdl_splice *sp, float *logits) {
    if (b->n_logits > 0 && !logits) return vc_err_set(VC_ERR_INVALID, "forward: no logits buffer");
    int rc = check_splice(m, b, NULL, sp);
    if (rc < 0) return rc;
    m->splice = sp && sp->n > 0 ? sp : NULL;
    rc = mdl_forward_step(m, kv, b);
    m->splice = NULL;
    return rc < 0 ? rc : mdl_fetch_logits(m, b->n_logits, logits, NULL);
}

int mdl_mirror_put(mdl_model *m, const int32_t *ids, int32_t n, mdl_ticket *t) {
    mdl_ticket nt;
    *t = 0;
    if (n < 0 || n > m->max_batch)
        return vc_err_set(VC_ERR_INVALID, "mirror: %d ids (max %lld)", n, (long long)m->max_batch);
    for (int32_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= m->cfg.vocab)
            return vc_err_set(VC_ERR_INVALID, "mirror: token id %d out of range", ids[i]);
    mdl_mirror *mr = claim(m, &nt);
    if (!mr) return VC_ERR_INVALID;
    memcpy(mr->host, ids, (size_t)n * sizeof *ids);
    int rc = m->tp_size == 1 ? mdl_upload_i32(m, &mr->ids, ids, n) : VC_OK;
    if (rc < 0) return rc;
    mr->n = n;
    mr->on_device = m->tp_size == 1;
    mr->queued = false;
    publish(m, mr, nt, true);
    *t = nt;
    return VC_OK;
}

int mdl_collect(mdl_model *m, mdl_ticket t, int32_t *ids) {
    mdl_mirror *mr = &m->mirror[(t > 0 ? t : 0) % MDL_MIRROR];
    if (t <= 0 || mr->ticket != t)
        return vc_err_set(VC_ERR_INVALID, "collect: step %lld is not resident", (long long)t);
    if (mr->queued) {
        int rc = rt_backend_event_wait(m->be, mr->ev);
        if (rc < 0) return rc;
    }
    if (ids && mr->n > 0) memcpy(ids, mr->host, (size_t)mr->n * sizeof *ids);
    if (vc_step_trace()) {
        double t3 = vc_now_s(), *tt = mr->trace_t;
        const char *ops = mr->trace_ops[0] ? mr->trace_ops : "-";
        fprintf(stderr, "step trace: %lld tokens: forward queued in %.3f ms, ids queued %.3f ms later, waited %.3f ms; "
                        "enqueue start -> ids %.3f ms; host: %s\n", (long long)mr->trace_T, (tt[1] - tt[0]) * 1e3,
                (tt[2] - tt[1]) * 1e3, (t3 - tt[2]) * 1e3, (t3 - tt[0]) * 1e3, ops);
    }
    atomic_store(&mr->collected, true);
    return VC_OK;
}

/* srv_metrics — Prometheus text for GET /metrics with vLLM's metric names
 * (label model_name). Counters and histograms are updated from the engine
 * callbacks under one mutex; gauges come from an engine stats snapshot at
 * scrape time. Bucket bounds are vLLM's. */
#include "server/srv_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_BUCKETS 24

typedef struct {
    double le[MAX_BUCKETS];
    int n;
    uint64_t counts[MAX_BUCKETS]; /* non-cumulative, per bound */
    uint64_t count;
    double sum;
} histo;

static const double TTFT_LE[] = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
                                 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
static const double ITL_LE[] = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5,
                                0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0};
static const double E2E_LE[] = {0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0,
                                30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};

static const double N_LE[] = {1, 2, 5, 10, 20};

static const char *const REASONS[] = {"stop", "length", "abort", "error"};
#define N_REASONS 4

struct srv_metrics {
    pthread_mutex_t mu;
    int refs;
    histo ttft, itl, e2e, tpot;
    histo queue, prefill, decode, inference; /* engine timeline, E2E_LE buckets (vLLM) */
    histo req_prompt, req_gen, req_max_gen, params_n, params_max_tokens; /* per finished request */
    uint64_t prompt_tokens, gen_tokens;
    uint64_t success[N_REASONS];
};

static void histo_init(histo *h, const double *le, int n) {
    memset(h, 0, sizeof *h);
    h->n = n < MAX_BUCKETS ? n : MAX_BUCKETS;
    memcpy(h->le, le, (size_t)h->n * sizeof *le);
}

/* vLLM's build_1_2_5_buckets(max): 1, 2, 5, 10, 20, 50, ... up to max. */
static void histo_init_125(histo *h, double max) {
    double le[MAX_BUCKETS];
    int n = 0;
    for (double e = 1; n < MAX_BUCKETS; e *= 10) {
        const double m[3] = {1, 2, 5};
        for (int k = 0; k < 3 && n < MAX_BUCKETS; k++) {
            if (m[k] * e > max) goto done;
            le[n++] = m[k] * e;
        }
    }
done:
    histo_init(h, le, n);
}

static void histo_add(histo *h, double v) {
    int i = 0;
    while (i < h->n && v > h->le[i]) i++;
    if (i < h->n) h->counts[i]++;
    h->count++;
    h->sum += v;
}

srv_metrics *srv_metrics_create(int32_t max_model_len) {
    srv_metrics *m = calloc(1, sizeof *m);
    if (!m) return NULL;
    pthread_mutex_init(&m->mu, NULL);
    m->refs = 1;
    histo_init(&m->ttft, TTFT_LE, (int)(sizeof TTFT_LE / sizeof TTFT_LE[0]));
    histo_init(&m->itl, ITL_LE, (int)(sizeof ITL_LE / sizeof ITL_LE[0]));
    histo_init(&m->e2e, E2E_LE, (int)(sizeof E2E_LE / sizeof E2E_LE[0]));
    histo_init(&m->tpot, ITL_LE, (int)(sizeof ITL_LE / sizeof ITL_LE[0]));
    histo_init(&m->queue, E2E_LE, (int)(sizeof E2E_LE / sizeof E2E_LE[0]));
    histo_init(&m->prefill, E2E_LE, (int)(sizeof E2E_LE / sizeof E2E_LE[0]));
    histo_init(&m->decode, E2E_LE, (int)(sizeof E2E_LE / sizeof E2E_LE[0]));
    histo_init(&m->inference, E2E_LE, (int)(sizeof E2E_LE / sizeof E2E_LE[0]));
    histo_init(&m->params_n, N_LE, (int)(sizeof N_LE / sizeof N_LE[0]));
    double mx = max_model_len > 0 ? max_model_len : 1;
    histo_init_125(&m->req_prompt, mx);
    histo_init_125(&m->req_gen, mx);
    histo_init_125(&m->req_max_gen, mx);
    histo_init_125(&m->params_max_tokens, mx);
    return m;
}

srv_metrics *srv_metrics_ref(srv_metrics *m) {
    pthread_mutex_lock(&m->mu);
    m->refs++;
    pthread_mutex_unlock(&m->mu);
    return m;
}

void srv_metrics_free(srv_metrics *m) {
    if (!m) return;
    pthread_mutex_lock(&m->mu);
    bool last = --m->refs == 0;
    pthread_mutex_unlock(&m->mu);
    if (!last) return;
    pthread_mutex_destroy(&m->mu);
    free(m);
}

void srv_metrics_ttft(srv_metrics *m, double s) {
    pthread_mutex_lock(&m->mu);
    histo_add(&m->ttft, s);
    pthread_mutex_unlock(&m->mu);
}

void srv_metrics_itl(srv_metrics *m, double s) {
    pthread_mutex_lock(&m->mu);
    histo_add(&m->itl, s);
    pthread_mutex_unlock(&m->mu);
}

void srv_metrics_finished(srv_metrics *m, const srv_finished *f) {
    pthread_mutex_lock(&m->mu);
    histo_add(&m->e2e, f->e2e);
    int32_t pt = f->prompt_tokens > 0 ? f->prompt_tokens : 0, gt = f->gen_tokens > 0 ? f->gen_tokens : 0;
    m->prompt_tokens += (uint64_t)pt;
    m->gen_tokens += (uint64_t)gt;
    for (int i = 0; i < N_REASONS; i++)
        if (!strcmp(f->reason, REASONS[i])) m->success[i]++;
    histo_add(&m->req_prompt, pt);
    histo_add(&m->req_gen, gt);
    histo_add(&m->req_max_gen, f->max_tokens);
    histo_add(&m->params_max_tokens, f->max_tokens);
    histo_add(&m->params_n, f->n);
    if (f->tpot >= 0) histo_add(&m->tpot, f->tpot);
    if (f->queue >= 0) histo_add(&m->queue, f->queue);
    if (f->prefill >= 0) histo_add(&m->prefill, f->prefill);
    if (f->decode >= 0) histo_add(&m->decode, f->decode);
    if (f->inference >= 0) histo_add(&m->inference, f->inference);
    pthread_mutex_unlock(&m->mu);
}

static void put_histo(vc_strbuf *sb, const char *name, const char *help, const histo *h, const char *lbl) {
    vc_sb_printf(sb, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    uint64_t cum = 0;
    for (int i = 0; i < h->n; i++) {
        cum += h->counts[i];
        vc_sb_printf(sb, "%s_bucket{le=\"%g\",%s} %llu\n", name, h->le[i], lbl, (unsigned long long)cum);
    }
    vc_sb_printf(sb, "%s_bucket{le=\"+Inf\",%s} %llu\n", name, lbl, (unsigned long long)h->count);
    vc_sb_printf(sb, "%s_count{%s} %llu\n%s_sum{%s} %.9g\n", name, lbl, (unsigned long long)h->count, name, lbl,
                 h->sum);
}

static void put_one(vc_strbuf *sb, const char *name, const char *type, const char *help, const char *lbl, double v) {
    /* Counters are declared without their _total suffix, as prometheus_client does. */
    size_t n = strlen(name);
    int base = !strcmp(type, "counter") && n > 6 && !strcmp(name + n - 6, "_total") ? (int)(n - 6) : (int)n;
    vc_sb_printf(sb, "# HELP %.*s %s\n# TYPE %.*s %s\n%s{%s} %.17g\n", base, name, help, base, name, type, name, lbl,
                 v);
}

char *srv_metrics_render(srv_metrics *m, aeng *a, const char *model_name) {
    esched_stats st;
    aeng_stats(a, &st);
    vc_strbuf sb = {0};
    char lbl[512];
    /* Label values escape \ and " (Prometheus text format). */
    vc_strbuf esc = {0};
    for (const char *p = model_name; *p; p++) {
        if (*p == '\\' || *p == '"') vc_sb_putc(&esc, '\\');
        if (*p == '\n') { vc_sb_puts(&esc, "\\n"); continue; }
        vc_sb_putc(&esc, *p);
    }
    snprintf(lbl, sizeof lbl, "model_name=\"%s\"", esc.s ? esc.s : "");
    vc_sb_free(&esc);
    put_one(&sb, "vllm:num_requests_running", "gauge", "Number of requests in model execution batches.", lbl,
            st.num_running);
    put_one(&sb, "vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.", lbl,
            st.num_waiting);
    put_one(&sb, "vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.", lbl, st.kv_usage);
    put_one(&sb, "vllm:num_preemptions_total", "counter", "Cumulative number of preemptions from the engine.", lbl,
            (double)st.num_preemptions_total);
    put_one(&sb, "vllm:prefix_cache_queries_total", "counter", "Prefix cache queries, in terms of number of queried "
            "tokens.", lbl, (double)(st.prefix_queries_total + st.preempted_prefix_queries_total));
    put_one(&sb, "vllm:prefix_cache_hits_total", "counter", "Prefix cache hits, in terms of number of cached tokens.",
            lbl, (double)(st.prefix_hits_total + st.preempted_prefix_hits_total));
    /* Tokens per engine step, from the scheduler's own counts (vLLM's
     * bounds; a histogram despite the _total in its name). */
    histo it;
    double le[ESCHED_ITER_BUCKETS];
    for (int i = 0; i < ESCHED_ITER_BUCKETS; i++) le[i] = ESCHED_ITER_LE[i];
    histo_init(&it, le, ESCHED_ITER_BUCKETS);
    for (int i = 0; i < ESCHED_ITER_BUCKETS; i++) it.counts[i] = (uint64_t)st.iter_counts[i];
    it.count = (uint64_t)st.iter_steps;
    it.sum = (double)st.iter_tokens;
    put_histo(&sb, "vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.", &it, lbl);
    pthread_mutex_lock(&m->mu);
    put_one(&sb, "vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed.", lbl,
            (double)m->prompt_tokens);
    put_one(&sb, "vllm:generation_tokens_total", "counter", "Number of generation tokens processed.", lbl,
            (double)m->gen_tokens);
    vc_sb_puts(&sb, "# HELP vllm:request_success Count of successfully processed requests.\n"
                    "# TYPE vllm:request_success counter\n");
    for (int i = 0; i < N_REASONS; i++)
        vc_sb_printf(&sb, "vllm:request_success_total{finished_reason=\"%s\",%s} %llu\n", REASONS[i], lbl,
                     (unsigned long long)m->success[i]);
    put_histo(&sb, "vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", &m->ttft, lbl);
    put_histo(&sb, "vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", &m->itl, lbl);
    put_histo(&sb, "vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", &m->e2e, lbl);
    put_histo(&sb, "vllm:request_time_per_output_token_seconds", "Histogram of time_per_output_token_seconds per "
              "request.", &m->tpot, lbl);
    put_histo(&sb, "vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.",
              &m->queue, lbl);
    put_histo(&sb, "vllm:request_inference_time_seconds", "Histogram of time spent in RUNNING phase for request.",
              &m->inference, lbl);
    put_histo(&sb, "vllm:request_prefill_time_seconds", "Histogram of time spent in PREFILL phase for request.",
              &m->prefill, lbl);
    put_histo(&sb, "vllm:request_decode_time_seconds", "Histogram of time spent in DECODE phase for request.",
              &m->decode, lbl);
    put_histo(&sb, "vllm:request_prompt_tokens", "Number of prefill tokens processed.", &m->req_prompt, lbl);
    put_histo(&sb, "vllm:request_generation_tokens", "Number of generation tokens processed.", &m->req_gen, lbl);
    put_histo(&sb, "vllm:request_max_num_generation_tokens", "Histogram of maximum number of requested generation "
              "tokens.", &m->req_max_gen, lbl);
    put_histo(&sb, "vllm:request_params_n", "Histogram of the n request parameter.", &m->params_n, lbl);
    put_histo(&sb, "vllm:request_params_max_tokens", "Histogram of the max_tokens request parameter.",
              &m->params_max_tokens, lbl);
    pthread_mutex_unlock(&m->mu);
    return vc_sb_steal(&sb);
}

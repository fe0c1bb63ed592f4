/* vllm run — load a model, generate from one prompt, print the text to
 * stdout as it is produced and prompt/decode speed to stderr. */
#include "base/err.h"
#include "base/clock.h"
#include "base/log.h"
#include "cli/cli.h"
#include "cli/cli_common.h"
#include "model/model.h"
#include "runtime/comm.h"
#include "runtime/ops.h"
#include "sample/batch.h"
#include "tokenizer/tokenizer.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void run_usage(FILE *f) {
    fprintf(f,
            "usage: vllm run [--model PATH] --prompt TEXT [options]\n"
            "  --model PATH        .gguf file or Hugging Face model folder (default: the default model)\n"
            "  --prompt TEXT       prompt text (special tokens added as transformers does)\n"
            "  --prompt-ids IDS    comma-separated token ids instead of --prompt\n"
            "  --max-tokens N      tokens to generate (default 256)\n"
            "  --temperature T     default 1.0; 0 = greedy\n"
            "  --top-p P           default 1.0\n"
            "  --top-k K           default 0 (off)\n"
            "  --min-p P           default 0 (off)\n"
            "  --seed S            sampling seed (default: random)\n"
            "  --threads N         CPU threads (default: all cores)\n"
            "  --device auto|cpu|cuda  backend (default auto: cuda where the build has it and a GPU is found, else cpu)\n"
            "  --kv-cache-dtype T  auto (default: the model's dtype on GPUs, f32 on the CPU), float32, float16, bfloat16\n"
            "  --tensor-parallel-size N, -tp N\n"
            "                      split the model over N ranks (GPUs 0..N-1, or N groups of CPU threads)\n"
            "  --ignore-eos        keep generating after end-of-sequence\n"
            "  --print-ids         print generated token ids (one line, space separated) instead of text\n");
}

static int parse_ids(const char *s, int32_t **out, size_t *n) {
    size_t cap = 16, len = 0;
    int32_t *ids = malloc(cap * sizeof *ids);
    if (!ids) return vc_err_set(VC_ERR_OOM, "out of memory");
    const char *p = s;
    while (*p) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v > INT32_MAX) {
            free(ids);
            return vc_err_set(VC_ERR_INVALID, "--prompt-ids: bad token id list '%s'", s);
        }
        if (len == cap) {
            int32_t *ni = realloc(ids, (cap *= 2) * sizeof *ids);
            if (!ni) { free(ids); return vc_err_set(VC_ERR_OOM, "out of memory"); }
            ids = ni;
        }
        ids[len++] = (int32_t)v;
        p = end;
        while (*p == ',' || *p == ' ') p++;
    }
    *out = ids;
    *n = len;
    return VC_OK;
}

int cli_run(int argc, char **argv) {
    const char *model_path = NULL, *prompt = NULL, *prompt_ids = NULL;
    int64_t max_tokens = 256, threads = 0, tp = 1;
    int kv_dtype = MDL_KV_AUTO;
    bool ignore_eos = false, print_ids = false;
    int device = CLI_DEVICE_AUTO;
    smp_req_params rp = smp_req_params_default(); /* the sampling flags, checked by smp_req_create */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { run_usage(stdout); return 0; }
        if (!strcmp(a, "--ignore-eos")) { ignore_eos = true; continue; }
        if (!strcmp(a, "--print-ids")) { print_ids = true; continue; }
        if (!v) { fprintf(stderr, "vllm run: %s needs a value\n", a); run_usage(stderr); return 2; }
        int rc = 0;
        if (!strcmp(a, "--model")) model_path = v;
        else if (!strcmp(a, "--prompt")) prompt = v;
        else if (!strcmp(a, "--prompt-ids")) prompt_ids = v;
        else if (!strcmp(a, "--device")) rc = cli_parse_device(v, &device);
        else if (!strcmp(a, "--max-tokens")) rc = cli_parse_i64(a, v, 1, 1 << 24, &max_tokens);
        else if (!strcmp(a, "--threads")) rc = cli_parse_i64(a, v, 1, 1024, &threads);
        else if (!strcmp(a, "--kv-cache-dtype")) rc = mdl_parse_kv_dtype(v, &kv_dtype);
        else if (!strcmp(a, "--tensor-parallel-size") || !strcmp(a, "-tp")) rc = cli_parse_i64(a, v, 1, 64, &tp);
        else if (!strcmp(a, "--temperature")) rc = cli_parse_f32(a, v, 0.0f, 1e6f, &rp.temperature);
        else if (!strcmp(a, "--top-p")) rc = cli_parse_f32(a, v, 1e-9f, 1.0f, &rp.top_p);
        else if (!strcmp(a, "--min-p")) rc = cli_parse_f32(a, v, 0.0f, 1.0f, &rp.min_p);
        else if (!strcmp(a, "--top-k")) {
            int64_t k;
            rc = cli_parse_i64(a, v, -1, INT32_MAX, &k);
            rp.top_k = (int32_t)k;
        } else if (!strcmp(a, "--seed")) {
            int64_t s;
            rc = cli_parse_i64(a, v, 0, INT64_MAX, &s);
            rp.seed = (uint64_t)s;
            rp.has_seed = true;
        } else {
            fprintf(stderr, "vllm run: unknown option '%s'\n", a);
            run_usage(stderr);
            return 2;
        }
        if (rc < 0) { fprintf(stderr, "vllm run: %s\n", vc_err_msg()); return 2; }
        i++;
    }
    if (!!prompt == !!prompt_ids) {
        fprintf(stderr, "vllm run: give exactly one of --prompt or --prompt-ids\n");
        run_usage(stderr);
        return 2;
    }
    char defpath[4096];
    if (!model_path) {
        if (cli_default_model(defpath, sizeof defpath) < 0) {
            fprintf(stderr, "vllm run: %s\n", vc_err_msg());
            return 1;
        }
        model_path = defpath;
    }

    int status = 1;
    rt_backend *bes[64] = {0}, *be = NULL;
    mdl_model *m = NULL;
    mdl_seq *seq = NULL;
    tok_tokenizer *tok = NULL;
    tok_stream *ts = NULL;
    smp_batch *sb = NULL;
    smp_req *sreq = NULL;
    int32_t *ids = NULL, *outs = NULL;
    size_t n_ids = 0;
    float *logits = NULL;

    device = cli_device_resolve(device);
    rt_backend_params bp = rt_backend_params_default();
    bp.n_threads = (int)threads;
    if (rt_backends_create_group((rt_device)device, (int)tp, &bp, bes) < 0) goto fail;
    be = bes[0];
    if (access(model_path, R_OK) != 0) {
        vc_err_set(VC_ERR_IO, "cannot open model '%s': %s", model_path, strerror(errno));
        goto fail;
    }
    if (prompt) {
        tok = tok_load(model_path);
        if (!tok) goto fail;
        if (tok_encode(tok, prompt, strlen(prompt), true, &ids, &n_ids) < 0) goto fail;
        ts = tok_stream_create(tok, true);
        if (!ts) goto fail;
    } else if (parse_ids(prompt_ids, &ids, &n_ids) < 0) {
        goto fail;
    }
    if (n_ids == 0) {
        vc_err_set(VC_ERR_INVALID, "the prompt is empty");
        goto fail;
    }
    mdl_params mp = mdl_params_default();
    mp.tp_size = (int)tp;
    mp.tp_backends = bes;
    mp.kv_dtype = kv_dtype;
    /* An accelerator prefills the whole prompt in one forward (up to 8192
     * tokens, as the engine's default budget allows); the CPU keeps
     * 512-token chunks (same speed, smaller scratch). */
    if (device != RT_DEV_CPU && (int64_t)n_ids > mp.max_batch) mp.max_batch = n_ids < 8192 ? (int64_t)n_ids : 8192;
    m = mdl_load(model_path, be, &mp);
    if (!m) goto fail;
    const mdl_config *cfg = mdl_get_config(m);
    if ((int64_t)n_ids >= cfg->max_pos) {
        vc_err_set(VC_ERR_INVALID, "prompt of %zu tokens does not fit the model's context (%lld)", n_ids,
                   (long long)cfg->max_pos);
        goto fail;
    }
    int64_t ctx = (int64_t)n_ids + max_tokens;
    if (ctx > cfg->max_pos) {
        max_tokens = cfg->max_pos - (int64_t)n_ids;
        ctx = cfg->max_pos;
    }
    seq = mdl_seq_create(m, ctx);
    logits = malloc((size_t)cfg->vocab * sizeof *logits);
    outs = malloc((size_t)max_tokens * sizeof *outs);
    if (!seq || !logits || !outs) goto fail;
    /* The engine's sampler (vLLM's order and ranges; a seeded run draws its
     * step-k uniform from (seed, k), so `vllm run --seed S` and a request
     * with seed S sample alike). */
    smp_batch_params sbp = smp_batch_params_default();
    sbp.vocab = cfg->vocab;
    sbp.max_batch = 1;
    sb = smp_batch_create(&sbp);
    if (!sb) goto fail;
    if (smp_req_create(sb, &rp, &sreq) < 0) goto fail;
    smp_row srow = {.req = sreq, .prompt = ids, .n_prompt = (int32_t)n_ids, .output = outs, .n_output = 0};

    /* Greedy: the argmax is taken on the device (4 bytes back per step
     * instead of the vocabulary's logits). */
    bool greedy = rp.temperature < 1e-5f; /* as the sampler's rule */
    int32_t next = 0;
    double t0 = vc_now_s();
    if ((greedy ? mdl_forward_argmax(m, seq, ids, (int64_t)n_ids, &next)
                : mdl_forward(m, seq, ids, (int64_t)n_ids, logits, false)) < 0)
        goto fail;
    double t1 = vc_now_s();
    int64_t produced = 0;
    const char *finish = "length";
    /* On an accelerator the device runs a step ahead: step k + 1 is queued
     * with its input taken on the device from step k's token before the
     * host collects (and prints) step k, so the device does not idle while
     * the host copies, prints and launches; its token is the argmax or,
     * sampling, drawn on the device (rt_sample, the host sampler's
     * arithmetic with the uniform the host would draw) instead of the
     * vocabulary's logits coming back to a host sampler. The first token
     * (from the prompt's logits) is sampled on the host. VLLM_RUN_PIPELINE=0
     * turns it off, =1 on for the CPU too (where it gains nothing: the
     * CPU's steps run inside the enqueue). At a stop token the step queued
     * after it is left unread. */
    const char *pe = getenv("VLLM_RUN_PIPELINE");
    bool pipe = mdl_can_mirror(m) && (greedy || mdl_can_sample(m)) &&
                (pe && *pe ? strcmp(pe, "0") != 0 : device != RT_DEV_CPU);
    mdl_ticket held = 0; /* pipe: the ticket holding token `produced` (0: it is `next`) */
    for (; produced < max_tokens; produced++) {
        if (!greedy && !held) { /* sampled on the host: token 0 (pipe) or every token */
            srow.n_output = (int32_t)produced;
            if (smp_batch_sample(sb, logits, &srow, 1) < 0) goto fail;
            next = smp_batch_output(sb)->tokens[0];
        }
        if (pipe) {
            mdl_ticket nt = 0;
            if (produced + 1 < max_tokens) {
                const int32_t *in = held ? NULL : &next;
                if (greedy) {
                    if (mdl_seq_argmax_async(m, seq, in, held, &nt) < 0) goto fail;
                } else { /* the step that draws token produced + 1 */
                    float f[RT_SAMPLE_NF];
                    int32_t q[RT_SAMPLE_NI];
                    double u;
                    srow.n_output = (int32_t)(produced + 1);
                    smp_batch_uniforms(sb, &srow, 1, &u);
                    smp_plain pl = smp_row_plain(&srow);
                    rt_sample_row(f, q, pl.temperature, pl.top_p, pl.min_p, pl.top_k, pl.repetition, pl.frequency,
                                  pl.presence, 0, 0, 0, u);
                    mdl_sample_args sa = {.fparams = f, .iparams = q};
                    if (mdl_seq_sample_async(m, seq, in, held, &sa, &nt) < 0) goto fail;
                }
            }
            if (held && mdl_collect(m, held, &next) < 0) goto fail;
            held = nt;
        }
        outs[produced] = next;
        if (!ignore_eos && mdl_config_is_eos(cfg, next)) {
            finish = "stop";
            break;
        }
        if (print_ids) {
            printf(produced ? " %d" : "%d", next);
        } else if (ts) {
            char *delta = NULL;
            if (tok_stream_push(ts, next, &delta) < 0) goto fail;
            if (delta) fputs(delta, stdout);
            free(delta);
        }
        fflush(stdout);
        if (!pipe && produced + 1 < max_tokens &&
            (greedy ? mdl_forward_argmax(m, seq, &next, 1, &next) : mdl_forward(m, seq, &next, 1, logits, false)) < 0)
            goto fail;
    }
    if (ts && !print_ids) {
        char *rest = NULL;
        if (tok_stream_flush(ts, &rest) == 0 && rest) fputs(rest, stdout);
        free(rest);
    }
    fputc('\n', stdout);
    fflush(stdout); /* text before the stats line on a shared terminal/pipe */
    double t2 = vc_now_s();
    fprintf(stderr, "prompt: %zu tokens, %.1f tok/s | decode: %lld tokens, %.1f tok/s | finish: %s\n", n_ids,
            (double)n_ids / (t1 - t0), (long long)produced,
            produced > 1 ? (double)(produced - 1) / (t2 - t1) : 0.0, finish);
    status = 0;
    goto done;
fail:
    fprintf(stderr, "vllm run: %s\n", vc_err_msg());
done:
    free(logits);
    free(ids);
    free(outs);
    smp_req_free(sreq);
    smp_batch_free(sb);
    tok_stream_free(ts);
    tok_free(tok);
    mdl_seq_free(seq);
    mdl_free(m);
    rt_backends_free_group(bes, (int)tp);
    return status;
}

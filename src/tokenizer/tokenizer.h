/* tokenizer — byte-exact text <-> token ids, as HF `tokenizers` does it.
 *
 * Sources:
 *  - a folder with tokenizer.json (+ tokenizer_config.json, generation_config.json);
 *  - a tokenizer.json file;
 *  - a GGUF file (tokenizer.ggml.* metadata: "gpt2" byte-level BPE or
 *    "llama" SentencePiece BPE with byte fallback).
 * Supported pipeline pieces: BPE (byte-level or SentencePiece-style with
 * byte fallback), normalizers NFC/NFD/NFKC/NFKD/Lowercase/Strip/Replace/
 * Prepend/Append/Sequence, pre-tokenizers Split/ByteLevel/Metaspace/Digits/
 * Punctuation/Whitespace/WhitespaceSplit/Sequence, post-processors
 * TemplateProcessing/ByteLevel/Roberta/Bert/Sequence, decoders ByteLevel/
 * Replace/ByteFallback/Fuse/Strip/Metaspace/Sequence, added tokens with
 * lstrip/rstrip/normalized/single_word.
 *
 *   tok_tokenizer *t = tok_load("models/qwen3");      // NULL -> vc_err_msg()
 *   int32_t *ids; size_t n;
 *   tok_encode(t, text, strlen(text), true, &ids, &n); ... free(ids);
 *   char *s; tok_decode(t, ids, n, false, &s, NULL); ... free(s);
 *   tok_stream *st = tok_stream_create(t, true);
 *   for each generated id: tok_stream_push(st, id, &delta) -> print, free(delta)
 *   tok_stream_flush(st, &delta); tok_stream_free(st);
 *   tok_free(t);
 *
 * A loaded tokenizer is immutable: encode/decode are thread-safe.
 * Input text must be valid UTF-8 (else VC_ERR_INVALID).
 */
#ifndef TOKENIZER_H
#define TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct tok_tokenizer tok_tokenizer;
typedef struct gguf_ctx gguf_ctx;

/* `path`: a folder (tokenizer.json, or else a single *.gguf inside), a
 * tokenizer.json file, or a .gguf file. */
tok_tokenizer *tok_load(const char *path);
/* tokenizer.json text plus optional tokenizer_config.json text (NULL = none).
 * `name` is used in error messages. Buffers are not kept. */
tok_tokenizer *tok_load_json_buf(const char *json, size_t len, const char *config_json,
                                 size_t config_len, const char *name);
tok_tokenizer *tok_load_gguf(const gguf_ctx *g);
void tok_free(tok_tokenizer *t);

/* Encode UTF-8 text. add_special: wrap with the post-processor's special
 * tokens (e.g. BOS), as transformers does by default. *ids is malloc'd
 * (non-NULL even when *n == 0). Returns 0 or a negative vc_status. */
int tok_encode(const tok_tokenizer *t, const char *text, size_t len, bool add_special,
               int32_t **ids, size_t *n);
/* Decode ids (unknown ids are skipped, as HF does). *out is malloc'd and
 * NUL-terminated; out_len may be NULL. */
int tok_decode(const tok_tokenizer *t, const int32_t *ids, size_t n, bool skip_special,
               char **out, size_t *out_len);

/* Vocabulary. tok_vocab_size is max id + 1 (model vocab plus added tokens). */
size_t tok_vocab_size(const tok_tokenizer *t);
/* Raw token string (e.g. "Ġhello", "▁the", "<0x0A>"); NULL for an unknown
 * id. Not NUL-terminated in general: use *len. */
const char *tok_token_str(const tok_tokenizer *t, int32_t id, size_t *len);
/* Id of an exact token string (added tokens first), -1 if none. */
int32_t tok_token_id(const tok_tokenizer *t, const char *s, size_t len);
bool tok_is_special(const tok_tokenizer *t, int32_t id);

/* Special ids (-1 when the tokenizer has none). */
int32_t tok_bos_id(const tok_tokenizer *t);
int32_t tok_eos_id(const tok_tokenizer *t); /* the first of tok_eos_ids */
int32_t tok_pad_id(const tok_tokenizer *t);
int32_t tok_unk_id(const tok_tokenizer *t);
/* All end-of-sequence ids: the tokenizer's eos plus generation_config.json
 * eos_token_id (int or list) when present. */
size_t tok_eos_ids(const tok_tokenizer *t, const int32_t **ids);
bool tok_is_eos(const tok_tokenizer *t, int32_t id);
/* Token strings for chat templates (NULL when unset). */
const char *tok_bos_token_str(const tok_tokenizer *t);
const char *tok_eos_token_str(const tok_tokenizer *t);
/* chat_template.jinja beside tokenizer_config.json, else its "chat_template"
 * (string, or the "default" entry of a list), or GGUF
 * tokenizer.chat_template; NULL if none. */
const char *tok_chat_template(const tok_tokenizer *t);

/* Streaming detokenizer (vLLM's prefix/read offsets): pushes generated ids
 * one by one and returns the new text. Never emits a broken UTF-8 sequence
 * (incomplete bytes, and with ByteFallback whole <0xNN> runs, are held
 * back) and the deltas of all pushes plus the final flush concatenate to
 * exactly tok_decode(all ids, skip_special). Each delta is decoded with the
 * previous token as context, so a stream primed with the prompt's last ids
 * (push them, flush, drop the text) keeps e.g. the leading space of the
 * first generated "▁word". *delta is a malloc'd NUL-terminated string the
 * caller frees, or NULL when nothing is new. */
typedef struct tok_stream tok_stream;
tok_stream *tok_stream_create(const tok_tokenizer *t, bool skip_special);
int tok_stream_push(tok_stream *s, int32_t id, char **delta);
/* Emits what was held back (an incomplete character decodes to U+FFFD).
 * May be called mid-stream; if later ids complete a flushed character, the
 * stream resynchronizes (that character is emitted again) instead of
 * stalling. */
int tok_stream_flush(tok_stream *s, char **delta);
/* Same, also giving the length (text may contain U+0000). */
int tok_stream_push_n(tok_stream *s, int32_t id, char **delta, size_t *len);
int tok_stream_flush_n(tok_stream *s, char **delta, size_t *len);
void tok_stream_free(tok_stream *s);

#endif

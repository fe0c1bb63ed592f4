/* jj_json — json_t -> values (the render context) and values -> JSON text
 * the way Python's json.dumps(...) writes it. */
#include <math.h>
#include <string.h>

#include "chat/jj_eval.h"

static int from_json(jj_ctx *c, const json_t *j, jj_val *out, int depth) {
    if (depth > 200) return jj_error(c, "JSON input nested too deeply");
    switch (json_typeof(j)) {
    case JSON_NULL: *out = jj_none_v; return 0;
    case JSON_TRUE: *out = jj_bool(true); return 0;
    case JSON_FALSE: *out = jj_bool(false); return 0;
    case JSON_INTEGER: *out = jj_int((int64_t)json_integer_value(j)); return 0;
    case JSON_REAL: *out = jj_float(json_real_value(j)); return 0;
    case JSON_STRING: return jj_str_dup(c, json_string_value(j), json_string_length(j), out);
    case JSON_ARRAY: {
        size_t n = json_array_size(j);
        if (jj_list_new(c, n, false, out) < 0) return -1;
        for (size_t i = 0; i < n; i++) {
            if (from_json(c, json_array_get(j, i), &out->u.l->v[i], depth + 1) < 0) return -1;
            out->u.l->n++;
        }
        return 0;
    }
    case JSON_OBJECT: {
        if (jj_dict_new(c, json_object_size(j), out) < 0) return -1;
        const char *k;
        json_t *v;
        /* iteration order is insertion order when the caller loaded with
         * JSON_PRESERVE_ORDER (jansson >= 2.8 keeps it always) */
        json_object_foreach((json_t *)j, k, v) {
            jj_val kv, vv;
            if (jj_str_dup(c, k, strlen(k), &kv) < 0) return -1;
            if (from_json(c, v, &vv, depth + 1) < 0) return -1;
            if (jj_dict_set(c, out->u.d, kv, vv) < 0) return -1;
        }
        return 0;
    }
    }
    return jj_error(c, "unknown JSON value");
}

int jj_from_json(jj_ctx *c, const json_t *j, jj_val *out) { return from_json(c, j, out, 0); }

static void json_str(vc_strbuf *sb, const char *s, size_t n, bool ascii) {
    vc_sb_putc(sb, '"');
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ascii && ch >= 0x7F) {
            uint32_t cp;
            i += jj_utf8_dec(s + i, n - i, &cp) - 1;
            if (cp >= 0x10000) { /* UTF-16 surrogate pair, as Python writes it */
                cp -= 0x10000;
                vc_sb_printf(sb, "\\u%04x\\u%04x", 0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF));
            } else vc_sb_printf(sb, "\\u%04x", cp);
            continue;
        }
        switch (ch) {
        case '"': vc_sb_puts(sb, "\\\""); break;
        case '\\': vc_sb_puts(sb, "\\\\"); break;
        case '\n': vc_sb_puts(sb, "\\n"); break;
        case '\r': vc_sb_puts(sb, "\\r"); break;
        case '\t': vc_sb_puts(sb, "\\t"); break;
        case '\b': vc_sb_puts(sb, "\\b"); break;
        case '\f': vc_sb_puts(sb, "\\f"); break;
        default:
            if (ch < 0x20) vc_sb_printf(sb, "\\u%04x", ch);
            else vc_sb_putc(sb, (char)ch);
        }
    }
    vc_sb_putc(sb, '"');
}

static void newline_indent(vc_strbuf *sb, const jj_json_opts *o, int level) {
    vc_sb_putc(sb, '\n');
    for (int i = 0; i < level; i++) vc_sb_puts(sb, o->indent);
}

/* Key text as json.dumps converts non-string keys. Returns -1 if unsupported. */
static int key_text(jj_ctx *c, jj_val k, vc_strbuf *sb) {
    switch (k.t) {
    case JJ_STR: vc_sb_append(sb, k.u.s.p, k.u.s.n); return 0;
    case JJ_INT: vc_sb_printf(sb, "%lld", (long long)k.u.i); return 0;
    case JJ_BOOL: vc_sb_puts(sb, k.u.b ? "true" : "false"); return 0;
    case JJ_NONE: vc_sb_puts(sb, "null"); return 0;
    case JJ_FLOAT: jj_repr_float(sb, k.u.f); return 0;
    default:
        return jj_error(c, "keys must be str, int, float, bool or None, not %s", jj_type_name(k));
    }
}

static int dump(jj_ctx *c, vc_strbuf *sb, jj_val v, const jj_json_opts *o, int level) {
    if (level > 100) return jj_error(c, "value nested too deeply for tojson");
    if (jj_step(c) < 0) return -1;
    switch (v.t) {
    case JJ_NONE: vc_sb_puts(sb, "null"); return 0;
    case JJ_BOOL: vc_sb_puts(sb, v.u.b ? "true" : "false"); return 0;
    case JJ_INT: vc_sb_printf(sb, "%lld", (long long)v.u.i); return 0;
    case JJ_FLOAT:
        if (isnan(v.u.f)) vc_sb_puts(sb, "NaN");
        else if (isinf(v.u.f)) vc_sb_puts(sb, v.u.f < 0 ? "-Infinity" : "Infinity");
        else jj_repr_float(sb, v.u.f);
        return 0;
    case JJ_STR: json_str(sb, v.u.s.p, v.u.s.n, o->ensure_ascii); return 0;
    case JJ_LIST: {
        const jj_list *l = v.u.l;
        if (l->n == 0) {
            vc_sb_puts(sb, "[]");
            return 0;
        }
        vc_sb_putc(sb, '[');
        for (size_t i = 0; i < l->n; i++) {
            if (i) vc_sb_puts(sb, o->item_sep);
            if (o->indent) newline_indent(sb, o, level + 1);
            if (dump(c, sb, l->v[i], o, level + 1) < 0) return -1;
        }
        if (o->indent) newline_indent(sb, o, level);
        vc_sb_putc(sb, ']');
        return 0;
    }
    case JJ_DICT: {
        const jj_dict *d = v.u.d;
        if (d->n == 0) {
            vc_sb_puts(sb, "{}");
            return 0;
        }
        size_t *order = jj_alloc(jj_ctx_arena(c), d->n * sizeof(size_t));
        if (!order) return jj_error(c, "template used too much memory");
        for (size_t i = 0; i < d->n; i++) order[i] = i;
        if (o->sort_keys) { /* insertion sort: stable, dicts are small */
            for (size_t i = 1; i < d->n; i++) {
                size_t x = order[i], j = i;
                while (j > 0) {
                    int cmp;
                    if (jj_compare(c, d->k[order[j - 1]], d->k[x], "<", &cmp) < 0) return -1;
                    if (cmp <= 0) break;
                    order[j] = order[j - 1];
                    j--;
                }
                order[j] = x;
            }
        }
        vc_sb_putc(sb, '{');
        for (size_t i = 0; i < d->n; i++) {
            size_t x = order[i];
            if (i) vc_sb_puts(sb, o->item_sep);
            if (o->indent) newline_indent(sb, o, level + 1);
            vc_strbuf kb = {0};
            if (key_text(c, d->k[x], &kb) < 0) {
                vc_sb_free(&kb);
                return -1;
            }
            json_str(sb, kb.s ? kb.s : "", kb.len, o->ensure_ascii);
            vc_sb_free(&kb);
            vc_sb_puts(sb, o->key_sep);
            if (dump(c, sb, d->v[x], o, level + 1) < 0) return -1;
        }
        if (o->indent) newline_indent(sb, o, level);
        vc_sb_putc(sb, '}');
        return 0;
    }
    default:
        return jj_error(c, "Object of type %s is not JSON serializable", jj_type_name(v));
    }
}

int jj_to_json(jj_ctx *c, vc_strbuf *sb, jj_val v, const jj_json_opts *o) { return dump(c, sb, v, o, 0); }

/* jj_methods — attribute and item access, Python methods of str / dict /
 * list values, the loop object, and the globals transformers provides
 * (range, namespace, dict, raise_exception, strftime_now). Lists and dicts
 * are read-only as in ImmutableSandboxedEnvironment. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <utf8proc.h>

#include "chat/jj_eval.h"

static const char *const STR_METHODS[] = {
    "capitalize", "casefold", "center", "count", "encode", "endswith", "expandtabs", "find", "format",
    "format_map", "index", "isalnum", "isalpha", "isascii", "isdecimal", "isdigit", "isidentifier",
    "islower", "isnumeric", "isprintable", "isspace", "istitle", "isupper", "join", "ljust", "lower",
    "lstrip", "maketrans", "partition", "removeprefix", "removesuffix", "replace", "rfind", "rindex",
    "rjust", "rpartition", "rsplit", "rstrip", "split", "splitlines", "startswith", "strip", "swapcase",
    "title", "translate", "upper", "zfill", NULL};
static const char *const DICT_METHODS[] = {"clear", "copy", "fromkeys", "get", "items", "keys", "pop",
                                           "popitem", "setdefault", "update", "values", NULL};
static const char *const LIST_METHODS[] = {"append", "clear", "copy", "count", "extend", "index",
                                           "insert", "pop", "remove", "reverse", "sort", NULL};

static bool in_set(const char *const *set, const char *name) {
    for (int i = 0; set[i]; i++)
        if (strcmp(set[i], name) == 0) return true;
    return false;
}

static int method(jj_ctx *c, jj_val self, const char *name, jj_val *out) {
    jj_method *m = jj_alloc(jj_ctx_arena(c), sizeof *m);
    if (!m) return jj_error(c, "template used too much memory");
    m->self = self;
    m->name = name;
    out->t = JJ_METHOD;
    out->u.m = m;
    return 0;
}

/* Jinja's Undefined hint: "'dict object' has no attribute 'x'" for names,
 * "list object has no element 3" for other keys. */
static int missing(jj_ctx *c, jj_val obj, jj_val key, jj_val *out) {
    vc_strbuf sb = {0};
    char tn[48];
    if (obj.t == JJ_NONE) snprintf(tn, sizeof tn, "None");
    else if (obj.t == JJ_NS) snprintf(tn, sizeof tn, "jinja2.utils.Namespace object");
    else if (obj.t == JJ_LOOP) snprintf(tn, sizeof tn, "jinja2.runtime.LoopContext object");
    else snprintf(tn, sizeof tn, "%s object", jj_type_name(obj));
    if (key.t == JJ_STR) vc_sb_printf(&sb, "'%s' has no attribute ", tn);
    else vc_sb_printf(&sb, "%s has no element ", tn);
    int rc = jj_to_repr(c, &sb, key);
    jj_val h;
    if (rc == 0) rc = jj_str_dup(c, sb.s, sb.len, &h);
    vc_sb_free(&sb);
    if (rc < 0) return -1;
    *out = jj_undef(h.u.s.p);
    return 0;
}

static int no_attr(jj_ctx *c, jj_val obj, const char *name, jj_val *out) {
    return missing(c, obj, jj_str(name, strlen(name)), out);
}

int jj_getattr(jj_ctx *c, jj_val obj, const char *name, jj_val *out) {
    switch (obj.t) {
    case JJ_UNDEF: return jj_error(c, "%s", obj.u.s.p ? obj.u.s.p : "undefined value has no attributes");
    case JJ_DICT: {
        if (in_set(DICT_METHODS, name)) return method(c, obj, name, out);
        const jj_val *v = jj_dict_gets(obj.u.d, name);
        if (v) {
            *out = *v;
            return 0;
        }
        return no_attr(c, obj, name, out);
    }
    case JJ_NS: {
        const jj_val *v = jj_dict_gets(obj.u.d, name);
        if (v) {
            *out = *v;
            return 0;
        }
        return no_attr(c, obj, name, out);
    }
    case JJ_STR:
        if (in_set(STR_METHODS, name)) return method(c, obj, name, out);
        return no_attr(c, obj, name, out);
    case JJ_LIST:
        if (obj.u.l->group && (!strcmp(name, "grouper") || !strcmp(name, "list"))) {
            *out = obj.u.l->v[name[0] == 'l'];
            return 0;
        }
        if (!obj.u.l->tuple && in_set(LIST_METHODS, name)) return method(c, obj, name, out);
        if (obj.u.l->tuple && (!strcmp(name, "count") || !strcmp(name, "index"))) return method(c, obj, name, out);
        return no_attr(c, obj, name, out);
    case JJ_LOOP:
        if (!strcmp(name, "cycle") || !strcmp(name, "changed")) return method(c, obj, name, out);
        return jj_loop_attr(c, obj.u.loop, name, out);
    default: return no_attr(c, obj, name, out);
    }
}

int jj_getitem(jj_ctx *c, jj_val obj, jj_val key, jj_val *out) {
    switch (obj.t) {
    case JJ_UNDEF: return jj_error(c, "%s", obj.u.s.p ? obj.u.s.p : "undefined value is not subscriptable");
    case JJ_DICT: case JJ_NS: {
        const jj_val *v = jj_dict_get(obj.u.d, key);
        if (v) {
            *out = *v;
            return 0;
        }
        if (key.t == JJ_STR && obj.t == JJ_DICT) {
            char name[64];
            if (key.u.s.n < sizeof name && !memchr(key.u.s.p, 0, key.u.s.n)) {
                memcpy(name, key.u.s.p, key.u.s.n);
                name[key.u.s.n] = 0;
                if (in_set(DICT_METHODS, name)) {
                    jj_val nm;
                    if (jj_str_dup(c, name, key.u.s.n, &nm) < 0) return -1;
                    return method(c, obj, nm.u.s.p, out);
                }
            }
        }
        return missing(c, obj, key, out);
    }
    case JJ_LIST: case JJ_STR: case JJ_RANGE: {
        if (key.t != JJ_INT && key.t != JJ_BOOL) {
            if (key.t == JJ_STR) { /* obj['upper'] falls back to the attribute */
                char name[64];
                if (key.u.s.n < sizeof name && !memchr(key.u.s.p, 0, key.u.s.n)) {
                    memcpy(name, key.u.s.p, key.u.s.n);
                    name[key.u.s.n] = 0;
                    jj_val nm;
                    if (jj_str_dup(c, name, key.u.s.n, &nm) < 0) return -1;
                    return jj_getattr(c, obj, nm.u.s.p, out);
                }
            }
            return missing(c, obj, key, out);
        }
        jj_list *l;
        if (obj.t == JJ_LIST) l = obj.u.l;
        else if (jj_iterate(c, obj, &l) < 0) return -1;
        int64_t i = key.t == JJ_INT ? key.u.i : key.u.b;
        if (i < 0) i += (int64_t)l->n;
        if (i < 0 || i >= (int64_t)l->n) return missing(c, obj, key, out);
        *out = l->v[i];
        return 0;
    }
    case JJ_LOOP:
        if (key.t == JJ_STR) {
            char name[32];
            if (key.u.s.n < sizeof name) {
                memcpy(name, key.u.s.p, key.u.s.n);
                name[key.u.s.n] = 0;
                return jj_loop_attr(c, obj.u.loop, name, out);
            }
        }
        return missing(c, obj, key, out);
    default: return missing(c, obj, key, out);
    }
}

int jj_loop_attr(jj_ctx *c, const jj_loop *l, const char *name, jj_val *out) {
    int64_t i = (int64_t)l->idx, n = (int64_t)l->items->n;
    if (!strcmp(name, "index")) *out = jj_int(i + 1);
    else if (!strcmp(name, "index0")) *out = jj_int(i);
    else if (!strcmp(name, "revindex")) *out = jj_int(n - i);
    else if (!strcmp(name, "revindex0")) *out = jj_int(n - i - 1);
    else if (!strcmp(name, "first")) *out = jj_bool(i == 0);
    else if (!strcmp(name, "last")) *out = jj_bool(i == n - 1);
    else if (!strcmp(name, "length")) *out = jj_int(n);
    else if (!strcmp(name, "depth")) *out = jj_int(l->depth);
    else if (!strcmp(name, "depth0")) *out = jj_int(l->depth - 1);
    else if (!strcmp(name, "previtem"))
        *out = i > 0 ? l->items->v[i - 1] : jj_undef("there is no previous item");
    else if (!strcmp(name, "nextitem"))
        *out = i + 1 < n ? l->items->v[i + 1] : jj_undef("there is no next item");
    else {
        (void)c;
        *out = jj_undef("'LoopContext' object has no such attribute");
    }
    return 0;
}

/* ---- string helpers ---- */

static int sb_to_val(jj_ctx *c, vc_strbuf *sb, jj_val *out) {
    int rc = jj_str_dup(c, sb->s ? sb->s : "", sb->len, out);
    vc_sb_free(sb);
    return rc;
}

/* strip with Python semantics: chars == NULL -> whitespace */
/* is cp stripped: whitespace when chars is NULL, else one of chars' code points */
static bool strip_hit(uint32_t cp, const jj_val *chars) {
    if (!chars) return jj_py_isspace(cp);
    for (size_t i = 0; i < chars->u.s.n;) {
        uint32_t x;
        i += jj_utf8_dec(chars->u.s.p + i, chars->u.s.n - i, &x);
        if (x == cp) return true;
    }
    return false;
}

int jj_strip(jj_ctx *c, jj_val s, const jj_val *chars, bool left, bool right, jj_val *out) {
    if (chars && chars->t != JJ_NONE && chars->t != JJ_STR)
        return jj_error(c, "strip arg must be None or str");
    if (chars && chars->t == JJ_NONE) chars = NULL;
    const char *p = s.u.s.p;
    size_t b = 0, e = s.u.s.n;
    uint32_t cp;
    while (left && b < e) {
        size_t k = jj_utf8_dec(p + b, e - b, &cp);
        if (!strip_hit(cp, chars)) break;
        b += k;
    }
    while (right && e > b) {
        size_t st = e - 1;
        while (st > b && ((unsigned char)p[st] & 0xC0) == 0x80) st--;
        jj_utf8_dec(p + st, e - st, &cp);
        if (!strip_hit(cp, chars)) break;
        e = st;
    }
    *out = jj_str(p + b, e - b);
    return 0;
}

/* per-code-point case mapping; mode 'u' upper, 'l' lower, 't' title */
static uint32_t map_case(uint32_t cp, char mode) {
    utf8proc_int32_t r = mode == 'u' ? utf8proc_toupper((utf8proc_int32_t)cp)
                         : mode == 'l' ? utf8proc_tolower((utf8proc_int32_t)cp)
                                       : utf8proc_totitle((utf8proc_int32_t)cp);
    return (uint32_t)r;
}

static bool is_cased(uint32_t cp) {
    return map_case(cp, 'u') != cp || map_case(cp, 'l') != cp ||
           utf8proc_category((utf8proc_int32_t)cp) == UTF8PROC_CATEGORY_LT;
}

/* mode: 'u' upper, 'l' lower, 'c' capitalize, 't' Python str.title(), 's' swapcase */
int jj_case(jj_ctx *c, jj_val s, char mode, jj_val *out) {
    vc_strbuf sb = {0};
    bool prev_cased = false, first = true;
    for (size_t i = 0; i < s.u.s.n;) {
        uint32_t cp;
        i += jj_utf8_dec(s.u.s.p + i, s.u.s.n - i, &cp);
        uint32_t r = cp;
        switch (mode) {
        case 'u': r = map_case(cp, 'u'); break;
        case 'l': r = map_case(cp, 'l'); break;
        case 'c': r = first ? map_case(cp, 't') : map_case(cp, 'l'); break;
        case 's': r = map_case(cp, 'u') != cp ? map_case(cp, 'u') : map_case(cp, 'l'); break;
        default: {
            bool cased = is_cased(cp);
            r = cased ? (prev_cased ? map_case(cp, 'l') : map_case(cp, 't')) : cp;
            prev_cased = cased;
        }
        }
        first = false;
        jj_utf8_enc(&sb, r);
    }
    return sb_to_val(c, &sb, out);
}

int jj_replace(jj_ctx *c, jj_val s, jj_val old, jj_val new_, int64_t count, jj_val *out) {
    vc_strbuf sb = {0};
    const char *p = s.u.s.p;
    size_t n = s.u.s.n, i = 0;
    int64_t done = 0;
    if (old.u.s.n == 0) { /* Python inserts `new` between every character */
        while (count < 0 || done < count) {
            vc_sb_append(&sb, new_.u.s.p, new_.u.s.n);
            done++;
            if (i >= n) break;
            uint32_t cp;
            size_t k = jj_utf8_dec(p + i, n - i, &cp);
            vc_sb_append(&sb, p + i, k);
            i += k;
            if (sb.len > jj_max_output(c)) break;
        }
        vc_sb_append(&sb, p + i, n - i);
        return sb_to_val(c, &sb, out);
    }
    while (i < n && (count < 0 || done < count)) {
        const char *f = memmem(p + i, n - i, old.u.s.p, old.u.s.n);
        if (!f) break;
        vc_sb_append(&sb, p + i, (size_t)(f - (p + i)));
        vc_sb_append(&sb, new_.u.s.p, new_.u.s.n);
        i = (size_t)(f - p) + old.u.s.n;
        done++;
        if (sb.len > jj_max_output(c)) {
            vc_sb_free(&sb);
            return jj_error(c, "string too large");
        }
    }
    vc_sb_append(&sb, p + i, n - i);
    return sb_to_val(c, &sb, out);
}

/* str.split(sep=None, maxsplit=-1) */
static int str_split(jj_ctx *c, jj_val s, const jj_val *sep, int64_t maxsplit, jj_val *out) {
    if (jj_list_new(c, 0, false, out) < 0) return -1;
    const char *p = s.u.s.p;
    size_t n = s.u.s.n, i = 0;
    if (!sep || sep->t == JJ_NONE) {
        for (;;) {
            uint32_t cp;
            while (i < n) { /* skip whitespace */
                size_t k = jj_utf8_dec(p + i, n - i, &cp);
                if (!jj_py_isspace(cp)) break;
                i += k;
            }
            if (i >= n) break;
            if (maxsplit >= 0 && (int64_t)out->u.l->n >= maxsplit) {
                size_t e = n;
                while (e > i) {
                    size_t st = e - 1;
                    while (st > i && ((unsigned char)p[st] & 0xC0) == 0x80) st--;
                    jj_utf8_dec(p + st, e - st, &cp);
                    if (!jj_py_isspace(cp)) break;
                    e = st;
                }
                if (jj_list_push(c, out, jj_str(p + i, e - i)) < 0) return -1;
                break;
            }
            size_t st = i;
            while (i < n) {
                size_t k = jj_utf8_dec(p + i, n - i, &cp);
                if (jj_py_isspace(cp)) break;
                i += k;
            }
            if (jj_list_push(c, out, jj_str(p + st, i - st)) < 0) return -1;
        }
        return 0;
    }
    if (sep->t != JJ_STR) return jj_error(c, "must be str or None, not %s", jj_type_name(*sep));
    if (sep->u.s.n == 0) return jj_error(c, "empty separator");
    int64_t splits = 0;
    for (;;) {
        const char *f = (maxsplit < 0 || splits < maxsplit) ? memmem(p + i, n - i, sep->u.s.p, sep->u.s.n) : NULL;
        if (!f) {
            if (jj_list_push(c, out, jj_str(p + i, n - i)) < 0) return -1;
            return 0;
        }
        if (jj_list_push(c, out, jj_str(p + i, (size_t)(f - (p + i)))) < 0) return -1;
        i = (size_t)(f - p) + sep->u.s.n;
        splits++;
        if (jj_step(c) < 0) return -1;
    }
}

/* Python str.islower() / str.isupper(): at least one cased character and
 * every cased character in that case. */
bool jj_str_is_case(jj_val s, bool lower) {
    bool any = false;
    for (size_t i = 0; i < s.u.s.n;) {
        uint32_t cp;
        i += jj_utf8_dec(s.u.s.p + i, s.u.s.n - i, &cp);
        utf8proc_category_t cat = utf8proc_category((utf8proc_int32_t)cp);
        if (cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LT) {
            if (lower || cat == UTF8PROC_CATEGORY_LT) return false;
            any = true;
        } else if (cat == UTF8PROC_CATEGORY_LL) {
            if (!lower) return false;
            any = true;
        }
    }
    return any;
}

static int64_t cp_index(const char *p, size_t byte_off) { return (int64_t)jj_utf8_len(p, byte_off); }

static bool starts_or_ends(jj_val s, jj_val x, bool ends) {
    if (x.u.s.n > s.u.s.n) return false;
    const char *p = ends ? s.u.s.p + s.u.s.n - x.u.s.n : s.u.s.p;
    return memcmp(p, x.u.s.p, x.u.s.n) == 0;
}

static int str_method(jj_ctx *c, jj_val s, const char *name, const jj_args *a, jj_val *out) {
    const jj_val *a0 = jj_arg(a, 0, NULL), *a1 = jj_arg(a, 1, NULL);
    if (!strcmp(name, "strip") || !strcmp(name, "lstrip") || !strcmp(name, "rstrip"))
        return jj_strip(c, s, jj_arg(a, 0, "chars"), name[0] != 'r', name[0] != 'l', out);
    if (!strcmp(name, "upper")) return jj_case(c, s, 'u', out);
    if (!strcmp(name, "lower") || !strcmp(name, "casefold")) return jj_case(c, s, 'l', out);
    if (!strcmp(name, "title")) return jj_case(c, s, 't', out);
    if (!strcmp(name, "capitalize")) return jj_case(c, s, 'c', out);
    if (!strcmp(name, "swapcase")) return jj_case(c, s, 's', out);
    if (!strcmp(name, "split") || !strcmp(name, "rsplit")) {
        const jj_val *sep = jj_arg(a, 0, "sep"), *mx = jj_arg(a, 1, "maxsplit");
        int64_t m = mx && mx->t == JJ_INT ? mx->u.i : -1;
        if (name[0] == 'r' && m >= 0) return jj_error(c, "rsplit with maxsplit is not supported");
        return str_split(c, s, sep, m, out);
    }
    if (!strcmp(name, "startswith") || !strcmp(name, "endswith")) {
        bool ends = name[0] == 'e';
        if (!a0) return jj_error(c, "%s() takes at least 1 argument (0 given)", name);
        if (a0->t == JJ_STR) {
            *out = jj_bool(starts_or_ends(s, *a0, ends));
            return 0;
        }
        if (a0->t == JJ_LIST && a0->u.l->tuple) {
            bool r = false;
            for (size_t i = 0; i < a0->u.l->n; i++) {
                if (a0->u.l->v[i].t != JJ_STR) return jj_error(c, "tuple for %s must only contain str", name);
                r = r || starts_or_ends(s, a0->u.l->v[i], ends);
            }
            *out = jj_bool(r);
            return 0;
        }
        return jj_error(c, "%s first arg must be str or a tuple of str, not %s", name, jj_type_name(*a0));
    }
    if (!strcmp(name, "replace")) {
        if (!a0 || !a1 || a0->t != JJ_STR || a1->t != JJ_STR) return jj_error(c, "replace() arguments must be str");
        const jj_val *cnt = jj_arg(a, 2, "count");
        return jj_replace(c, s, *a0, *a1, cnt && cnt->t == JJ_INT ? cnt->u.i : -1, out);
    }
    if (!strcmp(name, "find") || !strcmp(name, "rfind") || !strcmp(name, "index") || !strcmp(name, "rindex") ||
        !strcmp(name, "count")) {
        if (!a0 || a0->t != JJ_STR) return jj_error(c, "%s() argument must be str", name);
        if (!strcmp(name, "count")) {
            int64_t cnt = 0;
            if (a0->u.s.n == 0) cnt = (int64_t)jj_utf8_len(s.u.s.p, s.u.s.n) + 1;
            else
                for (size_t i = 0; i + a0->u.s.n <= s.u.s.n;) {
                    const char *f = memmem(s.u.s.p + i, s.u.s.n - i, a0->u.s.p, a0->u.s.n);
                    if (!f) break;
                    cnt++;
                    i = (size_t)(f - s.u.s.p) + a0->u.s.n;
                }
            *out = jj_int(cnt);
            return 0;
        }
        const char *f = NULL;
        if (name[0] == 'r') {
            for (size_t i = s.u.s.n + 1; i-- > 0;)
                if (i + a0->u.s.n <= s.u.s.n && memcmp(s.u.s.p + i, a0->u.s.p, a0->u.s.n) == 0) {
                    f = s.u.s.p + i;
                    break;
                }
        } else f = a0->u.s.n ? memmem(s.u.s.p, s.u.s.n, a0->u.s.p, a0->u.s.n) : s.u.s.p;
        if (!f && strstr(name, "index")) return jj_error(c, "substring not found");
        *out = jj_int(f ? cp_index(s.u.s.p, (size_t)(f - s.u.s.p)) : -1);
        return 0;
    }
    if (!strcmp(name, "join")) {
        if (!a0) return jj_error(c, "join() takes exactly one argument");
        jj_list *l;
        if (jj_iterate(c, *a0, &l) < 0) return -1;
        vc_strbuf sb = {0};
        for (size_t i = 0; i < l->n; i++) {
            if (l->v[i].t != JJ_STR) {
                vc_sb_free(&sb);
                return jj_error(c, "sequence item %zu: expected str instance, %s found", i, jj_type_name(l->v[i]));
            }
            if (i) vc_sb_append(&sb, s.u.s.p, s.u.s.n);
            vc_sb_append(&sb, l->v[i].u.s.p, l->v[i].u.s.n);
        }
        return sb_to_val(c, &sb, out);
    }
    if (!strcmp(name, "removeprefix") || !strcmp(name, "removesuffix")) {
        if (!a0 || a0->t != JJ_STR) return jj_error(c, "%s() argument must be str", name);
        bool suf = name[6] == 's';
        *out = s;
        if (starts_or_ends(s, *a0, suf)) *out = jj_str(s.u.s.p + (suf ? 0 : a0->u.s.n), s.u.s.n - a0->u.s.n);
        return 0;
    }
    if (!strcmp(name, "format")) return jj_str_format(c, s, a, out);
    if (!strcmp(name, "splitlines")) {
        if (jj_list_new(c, 0, false, out) < 0) return -1;
        size_t st = 0, i = 0;
        while (i < s.u.s.n) {
            uint32_t cp;
            size_t k = jj_utf8_dec(s.u.s.p + i, s.u.s.n - i, &cp);
            bool br = cp == '\n' || cp == '\r' || cp == 0x0B || cp == 0x0C || (cp >= 0x1C && cp <= 0x1E) ||
                      cp == 0x85 || cp == 0x2028 || cp == 0x2029;
            if (br) {
                if (jj_list_push(c, out, jj_str(s.u.s.p + st, i - st)) < 0) return -1;
                if (cp == '\r' && i + 1 < s.u.s.n && s.u.s.p[i + 1] == '\n') k++;
                st = i + k;
            }
            i += k;
        }
        if (st < s.u.s.n && jj_list_push(c, out, jj_str(s.u.s.p + st, s.u.s.n - st)) < 0) return -1;
        return 0;
    }
    if (!strcmp(name, "islower") || !strcmp(name, "isupper")) {
        *out = jj_bool(jj_str_is_case(s, name[2] == 'l'));
        return 0;
    }
    if (!strncmp(name, "is", 2)) {
        bool r = s.u.s.n > 0;
        for (size_t i = 0; i < s.u.s.n && r;) {
            uint32_t cp;
            i += jj_utf8_dec(s.u.s.p + i, s.u.s.n - i, &cp);
            utf8proc_category_t cat = utf8proc_category((utf8proc_int32_t)cp);
            if (!strcmp(name, "isdigit") || !strcmp(name, "isdecimal") || !strcmp(name, "isnumeric"))
                r = cat == UTF8PROC_CATEGORY_ND;
            else if (!strcmp(name, "isalpha")) r = cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO;
            else if (!strcmp(name, "isalnum"))
                r = (cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO) || cat == UTF8PROC_CATEGORY_ND;
            else if (!strcmp(name, "isspace")) r = jj_py_isspace(cp);
            else if (!strcmp(name, "isascii")) r = cp < 0x80;
            else return jj_error(c, "str.%s() is not supported", name);
        }
        if (!strcmp(name, "isascii") && s.u.s.n == 0) r = true;
        *out = jj_bool(r);
        return 0;
    }
    return jj_error(c, "str.%s() is not supported in chat templates", name);
}

static int dict_method(jj_ctx *c, jj_val d, const char *name, const jj_args *a, jj_val *out) {
    const jj_dict *dd = d.u.d;
    if (!strcmp(name, "get")) {
        const jj_val *k = jj_arg(a, 0, "key"), *def = jj_arg(a, 1, "default");
        if (!k) return jj_error(c, "get expected at least 1 argument, got 0");
        const jj_val *v = jj_dict_get(dd, *k);
        *out = v ? *v : def ? *def : jj_none_v;
        return 0;
    }
    if (!strcmp(name, "items") || !strcmp(name, "keys") || !strcmp(name, "values")) {
        if (jj_list_new(c, dd->n, false, out) < 0) return -1;
        for (size_t i = 0; i < dd->n; i++) {
            jj_val x;
            if (name[0] == 'i') {
                if (jj_list_new(c, 2, true, &x) < 0) return -1;
                x.u.l->v[0] = dd->k[i];
                x.u.l->v[1] = dd->v[i];
                x.u.l->n = 2;
            } else x = name[0] == 'k' ? dd->k[i] : dd->v[i];
            out->u.l->v[out->u.l->n++] = x;
        }
        return 0;
    }
    if (!strcmp(name, "copy")) {
        if (jj_dict_new(c, dd->n, out) < 0) return -1;
        for (size_t i = 0; i < dd->n; i++)
            if (jj_dict_set(c, out->u.d, dd->k[i], dd->v[i]) < 0) return -1;
        return 0;
    }
    return jj_error(c, "access to attribute '%s' of 'dict' object is unsafe.", name);
}

static int list_method(jj_ctx *c, jj_val l, const char *name, const jj_args *a, jj_val *out) {
    const jj_val *a0 = jj_arg(a, 0, NULL);
    if (!strcmp(name, "count") || !strcmp(name, "index")) {
        if (!a0) return jj_error(c, "%s() takes exactly one argument (0 given)", name);
        int64_t cnt = 0;
        for (size_t i = 0; i < l.u.l->n; i++)
            if (jj_eq(l.u.l->v[i], *a0)) {
                if (name[0] == 'i') {
                    *out = jj_int((int64_t)i);
                    return 0;
                }
                cnt++;
            }
        if (name[0] == 'i') return jj_error(c, "value is not in list");
        *out = jj_int(cnt);
        return 0;
    }
    if (!strcmp(name, "copy")) {
        if (jj_list_new(c, l.u.l->n, false, out) < 0) return -1;
        if (l.u.l->n) memcpy(out->u.l->v, l.u.l->v, l.u.l->n * sizeof(jj_val));
        out->u.l->n = l.u.l->n;
        return 0;
    }
    return jj_error(c, "access to attribute '%s' of 'list' object is unsafe.", name);
}

int jj_call_method(jj_ctx *c, const jj_method *m, const jj_args *a, jj_val *out) {
    switch (m->self.t) {
    case JJ_STR: return str_method(c, m->self, m->name, a, out);
    case JJ_DICT: return dict_method(c, m->self, m->name, a, out);
    case JJ_LIST: return list_method(c, m->self, m->name, a, out);
    case JJ_LOOP:
        if (!strcmp(m->name, "changed")) { /* True when the arguments differ from the last call's */
            jj_val now;
            if (jj_list_new(c, a->npos, true, &now) < 0) return -1;
            for (size_t i = 0; i < a->npos; i++) now.u.l->v[now.u.l->n++] = a->pos[i];
            jj_loop *l = m->self.u.loop;
            bool changed = l->last_changed.t == JJ_UNDEF || !jj_eq(l->last_changed, now);
            if (changed) l->last_changed = now;
            *out = jj_bool(changed);
            return 0;
        }
        if (a->npos == 0) return jj_error(c, "no items for cycling given");
        *out = a->pos[m->self.u.loop->idx % a->npos];
        return 0;
    default: return jj_error(c, "'%s' object is not callable", jj_type_name(m->self));
    }
}

/* ---- globals ---- */

int jj_lookup_global(const char *name, jj_val *out) {
    static const struct {
        const char *name;
        int fn;
    } G[] = {{"range", JJ_FN_RANGE}, {"namespace", JJ_FN_NAMESPACE}, {"dict", JJ_FN_DICT},
             {"raise_exception", JJ_FN_RAISE}, {"strftime_now", JJ_FN_STRFTIME}};
    for (size_t i = 0; i < sizeof G / sizeof G[0]; i++)
        if (!strcmp(G[i].name, name)) {
            out->t = JJ_FUNC;
            out->u.fn = G[i].fn;
            return 1;
        }
    return 0;
}

static int to_int_arg(jj_ctx *c, const jj_val *v, int64_t *out) {
    if (v->t == JJ_INT) *out = v->u.i;
    else if (v->t == JJ_BOOL) *out = v->u.b;
    else return jj_error(c, "'%s' object cannot be interpreted as an integer", jj_type_name(*v));
    return 0;
}

int jj_call_global(jj_ctx *c, int fn, const jj_args *a, jj_val *out) {
    switch (fn) {
    case JJ_FN_RANGE: {
        int64_t v[3] = {0, 0, 1};
        if (a->npos < 1 || a->npos > 3) return jj_error(c, "range expected 1 to 3 arguments, got %zu", a->npos);
        for (size_t i = 0; i < a->npos; i++)
            if (to_int_arg(c, &a->pos[i], &v[i]) < 0) return -1;
        jj_range *r = jj_alloc(jj_ctx_arena(c), sizeof *r);
        if (!r) return jj_error(c, "template used too much memory");
        if (a->npos == 1) {
            r->start = 0;
            r->stop = v[0];
            r->step = 1;
        } else {
            r->start = v[0];
            r->stop = v[1];
            r->step = a->npos == 3 ? v[2] : 1;
        }
        if (r->step == 0) return jj_error(c, "range() arg 3 must not be zero");
        out->t = JJ_RANGE;
        out->u.r = r;
        return 0;
    }
    case JJ_FN_NAMESPACE: case JJ_FN_DICT: {
        if (jj_dict_new(c, a->nkw, out) < 0) return -1;
        if (a->npos > 1) return jj_error(c, "%s expected at most 1 argument, got %zu", fn == JJ_FN_DICT ? "dict" : "namespace", a->npos);
        if (a->npos == 1) {
            const jj_val *src = &a->pos[0];
            if (src->t == JJ_DICT || src->t == JJ_NS) {
                for (size_t i = 0; i < src->u.d->n; i++)
                    if (jj_dict_set(c, out->u.d, src->u.d->k[i], src->u.d->v[i]) < 0) return -1;
            } else {
                jj_list *l;
                if (jj_iterate(c, *src, &l) < 0) return -1;
                for (size_t i = 0; i < l->n; i++) {
                    jj_list *pair;
                    if (jj_iterate(c, l->v[i], &pair) < 0) return -1;
                    if (pair->n != 2) return jj_error(c, "dictionary update sequence element has wrong length");
                    if (jj_dict_set(c, out->u.d, pair->v[0], pair->v[1]) < 0) return -1;
                }
            }
        }
        for (size_t i = 0; i < a->nkw; i++) {
            jj_val k;
            if (fn == JJ_FN_NAMESPACE && a->kwn[i][0] == '_')
                return jj_error(c, "Chat templates cannot store underscore-prefixed attributes on a namespace, but got '%s'. "
                                   "Please rename the attribute.", a->kwn[i]);
            if (jj_str_dup(c, a->kwn[i], strlen(a->kwn[i]), &k) < 0) return -1;
            if (jj_dict_set(c, out->u.d, k, a->kwv[i]) < 0) return -1;
        }
        if (fn == JJ_FN_NAMESPACE) out->t = JJ_NS;
        return 0;
    }
    case JJ_FN_RAISE: {
        const jj_val *m = jj_arg(a, 0, "message");
        vc_strbuf sb = {0};
        if (m && jj_to_str(c, &sb, *m) < 0) {
            vc_sb_free(&sb);
            return -1;
        }
        jj_error(c, "%s", sb.s ? sb.s : "");
        vc_sb_free(&sb);
        return -1;
    }
    case JJ_FN_STRFTIME: {
        const jj_val *f = jj_arg(a, 0, "format");
        if (!f || f->t != JJ_STR) return jj_error(c, "strftime_now() needs a format string");
        char fmt[256], buf[512];
        if (f->u.s.n >= sizeof fmt) return jj_error(c, "strftime_now() format too long");
        memcpy(fmt, f->u.s.p, f->u.s.n);
        fmt[f->u.s.n] = 0;
        time_t now = time(NULL);
        struct tm tmv;
        localtime_r(&now, &tmv);
        size_t n = strftime(buf, sizeof buf, fmt, &tmv);
        return jj_str_dup(c, buf, n, out);
    }
    default: return jj_error(c, "unknown function");
    }
}

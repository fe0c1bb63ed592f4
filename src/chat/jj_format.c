/* jj_format — Python string formatting: `fmt % args` (printf style) and
 * str.format() with the format-spec mini-language subset templates use. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/jj_eval.h"

static bool num(jj_val v) { return v.t == JJ_INT || v.t == JJ_FLOAT || v.t == JJ_BOOL; }
static double fval(jj_val v) { return v.t == JJ_FLOAT ? v.u.f : v.t == JJ_INT ? (double)v.u.i : (double)v.u.b; }
static int64_t ival(jj_val v) { return v.t == JJ_INT ? v.u.i : (int64_t)v.u.b; }

/* pad a converted field to `width` code points (left-justified with '-') */
static void put_padded(vc_strbuf *sb, const char *p, size_t n, int64_t width, bool left) {
    int64_t len = (int64_t)jj_utf8_len(p, n);
    if (!left)
        for (int64_t i = len; i < width; i++) vc_sb_putc(sb, ' ');
    vc_sb_append(sb, p, n);
    if (left)
        for (int64_t i = len; i < width; i++) vc_sb_putc(sb, ' ');
}

/* Python's printf-style `str % args`: %[flags][width][.prec]conv with
 * flags "-+ 0#" and conversions s r a d i u o x X e E f F g G c %. */
int jj_percent_format(jj_ctx *c, jj_val fmt, jj_val args, jj_val *out) {
    const jj_val *av = &args;
    size_t an = 1, ai = 0;
    if (args.t == JJ_LIST && args.u.l->tuple) {
        av = args.u.l->v;
        an = args.u.l->n;
    }
    vc_strbuf sb = {0};
    const char *p = fmt.u.s.p;
    size_t n = fmt.u.s.n;
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        if (p[i] != '%') {
            vc_sb_putc(&sb, p[i]);
            continue;
        }
        char flags[8];
        int nf = 0;
        int64_t width = -1, prec = -1;
        i++;
        if (i < n && p[i] == '(') {
            rc = jj_error(c, "format requires a mapping");
            break;
        }
        while (i < n && strchr("-+ 0#", p[i]) && nf < 6) flags[nf++] = p[i++];
        flags[nf] = 0;
        if (i < n && p[i] == '*') {
            if (ai >= an || av[ai].t != JJ_INT) {
                rc = jj_error(c, "* wants int");
                break;
            }
            width = av[ai++].u.i;
            i++;
        } else
            while (i < n && p[i] >= '0' && p[i] <= '9' && width < 100000) width = (width < 0 ? 0 : width * 10) + (p[i++] - '0');
        if (i < n && p[i] == '.') {
            i++;
            prec = 0;
            while (i < n && p[i] >= '0' && p[i] <= '9' && prec < 100000) prec = prec * 10 + (p[i++] - '0');
        }
        while (i < n && (p[i] == 'l' || p[i] == 'h' || p[i] == 'L')) i++;
        if (i >= n) {
            rc = jj_error(c, "incomplete format");
            break;
        }
        char conv = p[i];
        if (conv == '%') {
            vc_sb_putc(&sb, '%');
            continue;
        }
        if (width > 1000 || prec > 1000) {
            rc = jj_error(c, "format width or precision too large");
            break;
        }
        if (ai >= an) {
            rc = jj_error(c, "not enough arguments for format string");
            break;
        }
        jj_val a = av[ai++];
        bool left = strchr(flags, '-') != NULL;
        char spec[32], buf[4096];
        switch (conv) {
        case 's': case 'r': case 'a': {
            vc_strbuf tmp = {0};
            rc = conv == 's' ? jj_to_str(c, &tmp, a) : jj_to_repr(c, &tmp, a);
            if (rc == 0) {
                size_t len = tmp.len;
                if (prec >= 0) { /* truncate to prec code points */
                    size_t k = 0, cps = 0;
                    uint32_t cp;
                    while (k < tmp.len && (int64_t)cps < prec) {
                        k += jj_utf8_dec(tmp.s + k, tmp.len - k, &cp);
                        cps++;
                    }
                    len = k;
                }
                put_padded(&sb, tmp.s ? tmp.s : "", len, width, left);
            }
            vc_sb_free(&tmp);
            break;
        }
        case 'c': {
            vc_strbuf tmp = {0};
            if (a.t == JJ_INT && a.u.i >= 0 && a.u.i <= 0x10FFFF) jj_utf8_enc(&tmp, (uint32_t)a.u.i);
            else if (a.t == JJ_STR && jj_utf8_len(a.u.s.p, a.u.s.n) == 1) vc_sb_append(&tmp, a.u.s.p, a.u.s.n);
            else rc = jj_error(c, "%%c requires int or char");
            if (rc == 0) put_padded(&sb, tmp.s ? tmp.s : "", tmp.len, width, left);
            vc_sb_free(&tmp);
            break;
        }
        case 'd': case 'i': case 'u': case 'o': case 'x': case 'X': {
            if (!num(a) || (a.t == JJ_FLOAT && conv != 'd' && conv != 'i' && conv != 'u')) {
                rc = jj_error(c, "%%%c format: a%s number is required, not %s", conv,
                              conv == 'd' || conv == 'i' || conv == 'u' ? " real" : "n integer", jj_type_name(a));
                break;
            }
            long long v;
            if (a.t == JJ_FLOAT) {
                if (isnan(a.u.f) || isinf(a.u.f) || fabs(a.u.f) >= 9.2e18) {
                    rc = jj_error(c, "cannot convert float to integer");
                    break;
                }
                v = (long long)a.u.f;
            } else v = (long long)ival(a);
            char cv = conv == 'i' || conv == 'u' ? 'd' : conv;
            bool neg = v < 0 && cv != 'd';
            unsigned long long mag = neg ? 0ull - (unsigned long long)v : (unsigned long long)v;
            if (cv == 'd') snprintf(spec, sizeof spec, "%%%s%s%slld", flags, width >= 0 ? "*" : "", prec >= 0 ? ".*" : "");
            else snprintf(spec, sizeof spec, "%%%s%s%sll%c", flags, width >= 0 ? "*" : "", prec >= 0 ? ".*" : "", cv);
            char body[200];
            if (cv == 'd') {
                if (width >= 0 && prec >= 0) snprintf(buf, sizeof buf, spec, (int)width, (int)prec, v);
                else if (width >= 0) snprintf(buf, sizeof buf, spec, (int)width, v);
                else if (prec >= 0) snprintf(buf, sizeof buf, spec, (int)prec, v);
                else snprintf(buf, sizeof buf, spec, v);
            } else { /* Python prints a sign for negative hex/octal; "#o" is 0o */
                snprintf(body, sizeof body, cv == 'o' ? "%llo" : cv == 'x' ? "%llx" : "%llX", mag);
                vc_strbuf tmp = {0};
                if (neg) vc_sb_putc(&tmp, '-');
                else if (strchr(flags, '+')) vc_sb_putc(&tmp, '+');
                else if (strchr(flags, ' ')) vc_sb_putc(&tmp, ' ');
                if (strchr(flags, '#')) vc_sb_puts(&tmp, cv == 'o' ? "0o" : cv == 'x' ? "0x" : "0X");
                size_t pre = tmp.len;
                for (int64_t k = (int64_t)strlen(body); k < prec; k++) vc_sb_putc(&tmp, '0');
                vc_sb_puts(&tmp, body);
                if (!left && strchr(flags, '0'))
                    while ((int64_t)tmp.len < width) {
                        vc_sb_putc(&tmp, 0);
                        memmove(tmp.s + pre + 1, tmp.s + pre, tmp.len - pre - 1);
                        tmp.s[pre] = '0';
                    }
                snprintf(buf, sizeof buf, "%s", tmp.s);
                vc_sb_free(&tmp);
                put_padded(&sb, buf, strlen(buf), width, left);
                break;
            }
            vc_sb_puts(&sb, buf);
            break;
        }
        case 'e': case 'E': case 'f': case 'F': case 'g': case 'G': {
            if (!num(a)) {
                rc = jj_error(c, "must be real number, not %s", jj_type_name(a));
                break;
            }
            snprintf(spec, sizeof spec, "%%%s%s%s%c", flags, width >= 0 ? "*" : "", prec >= 0 ? ".*" : "", conv);
            double v = fval(a);
            if (width >= 0 && prec >= 0) snprintf(buf, sizeof buf, spec, (int)width, (int)prec, v);
            else if (width >= 0) snprintf(buf, sizeof buf, spec, (int)width, v);
            else if (prec >= 0) snprintf(buf, sizeof buf, spec, (int)prec, v);
            else snprintf(buf, sizeof buf, spec, v);
            vc_sb_puts(&sb, buf);
            break;
        }
        default: rc = jj_error(c, "unsupported format character '%c' (0x%x)", conv, (unsigned char)conv);
        }
    }
    if (rc == 0 && ai < an) rc = jj_error(c, "not all arguments converted during string formatting");
    if (rc == 0) rc = jj_str_dup(c, sb.s ? sb.s : "", sb.len, out);
    vc_sb_free(&sb);
    return rc;
}


/* Apply a format spec [[fill]align][sign][#][0][width][,_][.prec][type] to v. */
static int apply_spec(jj_ctx *c, vc_strbuf *sb, jj_val v, const char *spec, size_t n) {
    uint32_t fill = ' ';
    char align = 0, sign = '-', type = 0;
    bool alt = false, zero = false;
    int64_t width = -1, prec = -1;
    size_t i = 0;
    uint32_t cp0 = 0;
    size_t k0 = n ? jj_utf8_dec(spec, n, &cp0) : 0;
    if (k0 < n && strchr("<>^=", spec[k0])) {
        fill = cp0;
        align = spec[k0];
        i = k0 + 1;
    } else if (n && strchr("<>^=", spec[0])) {
        align = spec[0];
        i = 1;
    }
    if (i < n && strchr("+- ", spec[i])) sign = spec[i++];
    if (i < n && spec[i] == '#') alt = true, i++;
    if (i < n && spec[i] == '0') zero = true, i++;
    while (i < n && spec[i] >= '0' && spec[i] <= '9' && width < 10000) width = (width < 0 ? 0 : width * 10) + (spec[i++] - '0');
    if (i < n && (spec[i] == ',' || spec[i] == '_')) return jj_error(c, "format spec grouping is not supported");
    if (i < n && spec[i] == '.') {
        i++;
        prec = 0;
        while (i < n && spec[i] >= '0' && spec[i] <= '9' && prec < 1000) prec = prec * 10 + (spec[i++] - '0');
    }
    if (i < n) type = spec[i++];
    if (i < n || width > 1000) return jj_error(c, "Invalid format specifier");
    (void)alt;
    vc_strbuf body = {0};
    char buf[1200];
    bool numeric = num(v) && type != 's';
    if (!numeric) {
        if (type && type != 's') {
            vc_sb_free(&body);
            return jj_error(c, "Unknown format code '%c' for object of type '%s'", type, jj_type_name(v));
        }
        if (jj_to_str(c, &body, v) < 0) {
            vc_sb_free(&body);
            return -1;
        }
        if (prec >= 0) { /* truncate to prec code points */
            size_t k = 0;
            for (int64_t q = 0; q < prec && k < body.len; q++) {
                uint32_t cp;
                k += jj_utf8_dec(body.s + k, body.len - k, &cp);
            }
            body.len = k;
        }
        if (!align) align = '<';
    } else {
        double f = fval(v);
        bool is_int = v.t != JJ_FLOAT;
        if (!type) type = is_int ? 'd' : (prec >= 0 ? 'g' : 'r');
        if (is_int && strchr("dxXobc", type)) {
            long long x = (long long)ival(v);
            unsigned long long m = x < 0 ? 0ull - (unsigned long long)x : (unsigned long long)x;
            if (x < 0) vc_sb_putc(&body, '-');
            else if (sign != '-') vc_sb_putc(&body, sign);
            if (type == 'd') snprintf(buf, sizeof buf, "%llu", m);
            else if (type == 'x') snprintf(buf, sizeof buf, "%s%llx", alt ? "0x" : "", m);
            else if (type == 'X') snprintf(buf, sizeof buf, "%s%llX", alt ? "0X" : "", m);
            else if (type == 'o') snprintf(buf, sizeof buf, "%s%llo", alt ? "0o" : "", m);
            else if (type == 'c') {
                buf[0] = 0;
                body.len = 0;
                jj_utf8_enc(&body, (uint32_t)m);
            } else {
                size_t b = 0;
                if (alt) buf[b++] = '0', buf[b++] = 'b';
                int top = 63;
                while (top > 0 && !((m >> top) & 1)) top--;
                for (int q = top; q >= 0; q--) buf[b++] = (char)('0' + ((m >> q) & 1));
                buf[b] = 0;
            }
            vc_sb_puts(&body, buf);
        } else if (strchr("eEfFgG%r", type)) {
            if (type == 'r') jj_repr_float(&body, f);
            else {
                double x = type == '%' ? f * 100 : f;
                char t = type == '%' ? 'f' : type;
                char fmt[16];
                snprintf(fmt, sizeof fmt, "%%%s.*%c", sign == '-' ? "" : sign == '+' ? "+" : " ", t);
                snprintf(buf, sizeof buf, fmt, (int)(prec >= 0 ? prec : 6), x);
                vc_sb_puts(&body, buf);
                if (type == '%') vc_sb_putc(&body, '%');
            }
            if (type == 'r' && sign != '-' && f >= 0) { /* sign for the repr form */
                vc_strbuf t2 = {0};
                vc_sb_putc(&t2, sign);
                vc_sb_append(&t2, body.s, body.len);
                vc_sb_free(&body);
                body = t2;
            }
        } else {
            vc_sb_free(&body);
            return jj_error(c, "Unknown format code '%c' for object of type '%s'", type, jj_type_name(v));
        }
        if (!align) align = zero ? '=' : '>';
        if (zero && fill == ' ') fill = '0';
    }
    int64_t len = (int64_t)jj_utf8_len(body.s ? body.s : "", body.len), pad = width > len ? width - len : 0;
    int64_t left = align == '<' ? 0 : align == '^' ? pad / 2 : pad;
    if (align == '=' && body.len && strchr("+- ", body.s[0])) { /* padding after the sign */
        vc_sb_putc(sb, body.s[0]);
        for (int64_t q = 0; q < pad; q++) jj_utf8_enc(sb, fill);
        vc_sb_append(sb, body.s + 1, body.len - 1);
    } else {
        for (int64_t q = 0; q < left; q++) jj_utf8_enc(sb, fill);
        vc_sb_append(sb, body.s ? body.s : "", body.len);
        for (int64_t q = left; q < pad; q++) jj_utf8_enc(sb, fill);
    }
    vc_sb_free(&body);
    return 0;
}

/* str.format(*args, **kwargs): {} {0} {name} {0.attr} {0[key]} {!r} {:spec} */
int jj_str_format(jj_ctx *c, jj_val fmt, const jj_args *a, jj_val *out) {
    vc_strbuf sb = {0};
    const char *p = fmt.u.s.p;
    size_t n = fmt.u.s.n, auto_idx = 0;
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        if (p[i] == '}') {
            if (i + 1 < n && p[i + 1] == '}') i++;
            else {
                rc = jj_error(c, "Single '}' encountered in format string");
                break;
            }
            vc_sb_putc(&sb, '}');
            continue;
        }
        if (p[i] != '{') {
            vc_sb_putc(&sb, p[i]);
            continue;
        }
        if (i + 1 < n && p[i + 1] == '{') {
            vc_sb_putc(&sb, '{');
            i++;
            continue;
        }
        size_t st = ++i;
        while (i < n && p[i] != '}') i++;
        if (i >= n) {
            rc = jj_error(c, "expected '}' before end of string");
            break;
        }
        /* field [!conv] [:spec] */
        const char *f = p + st, *fe = p + i, *spec = fe, *conv = NULL;
        for (const char *q = f; q < fe; q++)
            if (*q == '!' && !conv) conv = q;
            else if (*q == ':') {
                spec = q;
                break;
            }
        const char *name_end = conv && conv < spec ? conv : spec;
        size_t k = 0;
        while (f + k < name_end && f[k] != '.' && f[k] != '[') k++;
        jj_val v;
        if (k == 0) {
            if (auto_idx >= a->npos) {
                rc = jj_error(c, "tuple index out of range (replacement index %zu)", auto_idx);
                break;
            }
            v = a->pos[auto_idx++];
        } else if (f[0] >= '0' && f[0] <= '9') {
            size_t idx = (size_t)strtoul(f, NULL, 10);
            if (idx >= a->npos) {
                rc = jj_error(c, "tuple index out of range (replacement index %zu)", idx);
                break;
            }
            v = a->pos[idx];
        } else {
            bool found = false;
            for (size_t q = 0; q < a->nkw; q++)
                if (strlen(a->kwn[q]) == k && !memcmp(a->kwn[q], f, k)) v = a->kwv[q], found = true;
            if (!found) {
                rc = jj_error(c, "KeyError: '%.*s'", (int)k, f);
                break;
            }
        }
        const char *q = f + k;
        while (rc == 0 && q < name_end) { /* .attr and [key] chains */
            char key[128];
            bool dot = *q == '.';
            const char *ks = q + 1, *ke = ks;
            while (ke < name_end && *ke != '.' && *ke != '[' && *ke != ']') ke++;
            if ((size_t)(ke - ks) >= sizeof key) {
                rc = jj_error(c, "format field name too long");
                break;
            }
            memcpy(key, ks, (size_t)(ke - ks));
            key[ke - ks] = 0;
            jj_val kv;
            if (dot) {
                if (jj_str_dup(c, key, strlen(key), &kv) < 0 || jj_getattr(c, v, kv.u.s.p, &v) < 0) rc = -1;
            } else {
                bool digits = key[0] != 0;
                for (char *d = key; *d; d++) digits = digits && *d >= '0' && *d <= '9';
                if (digits) kv = jj_int(strtoll(key, NULL, 10));
                else if (jj_str_dup(c, key, strlen(key), &kv) < 0) rc = -1;
                if (rc == 0 && jj_getitem(c, v, kv, &v) < 0) rc = -1;
                if (ke < name_end && *ke == ']') ke++;
            }
            q = ke;
        }
        if (rc < 0) break;
        if (conv && conv < spec) {
            char cv = conv + 1 < spec ? conv[1] : 0;
            vc_strbuf t = {0};
            if (cv == 'r' || cv == 'a') rc = jj_to_repr(c, &t, v);
            else if (cv == 's') rc = jj_to_str(c, &t, v);
            else rc = jj_error(c, "Unknown conversion specifier %c", cv ? cv : '?');
            if (rc == 0) rc = jj_str_dup(c, t.s ? t.s : "", t.len, &v);
            vc_sb_free(&t);
            if (rc < 0) break;
        }
        if (v.t == JJ_UNDEF && spec == fe) continue; /* Undefined formats as "" */
        rc = apply_spec(c, &sb, v, spec < fe ? spec + 1 : fe, spec < fe ? (size_t)(fe - spec - 1) : 0);
    }
    if (rc == 0) rc = jj_str_dup(c, sb.s ? sb.s : "", sb.len, out);
    vc_sb_free(&sb);
    return rc;
}

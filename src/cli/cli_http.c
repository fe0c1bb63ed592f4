/* cli_http — see cli_http.h. */
#include "cli/cli_http.h"

#include "base/err.h"

#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>


int cli_http_parse_url(const char *url, cli_http_target *t) {
    if (strncmp(url, "http://", 7))
        return vc_err_set(VC_ERR_INVALID, "--url must start with http:// (no TLS): '%s'", url);
    const char *h = url + 7, *end = h + strcspn(h, "/");
    const char *colon = memchr(h, ':', (size_t)(end - h));
    size_t hl = (size_t)((colon ? colon : end) - h);
    if (hl == 0 || hl >= sizeof t->host) return vc_err_set(VC_ERR_INVALID, "bad --url '%s'", url);
    memcpy(t->host, h, hl);
    t->host[hl] = 0;
    if (colon) snprintf(t->port, sizeof t->port, "%.*s", (int)(end - colon - 1), colon + 1);
    else snprintf(t->port, sizeof t->port, "80");
    return VC_OK;
}

static int connect_to(const cli_http_target *t) {
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res = NULL;
    if (getaddrinfo(t->host, t->port, &hints, &res) != 0)
        return vc_err_set(VC_ERR_IO, "cannot resolve %s:%s", t->host, t->port);
    int fd = -1;
    for (struct addrinfo *a = res; a; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
        if (fd >= 0 && connect(fd, a->ai_addr, a->ai_addrlen) == 0) break;
        if (fd >= 0) close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0) return vc_err_set(VC_ERR_IO, "cannot connect to %s:%s", t->host, t->port);
    return fd;
}

/* Response body reader: undoes chunked transfer encoding. */
typedef struct {
    int fd;
    char buf[8192];
    size_t pos, len;
    bool chunked, eof;
    long chunk_left; /* -1: read a chunk header next */
} body_rd;

static int rd_byte(body_rd *r) {
    if (r->pos == r->len) {
        ssize_t n = read(r->fd, r->buf, sizeof r->buf);
        if (n <= 0) return -1;
        r->pos = 0;
        r->len = (size_t)n;
    }
    return (unsigned char)r->buf[r->pos++];
}

static int rd_line(body_rd *r, vc_strbuf *line) {
    vc_sb_clear(line);
    for (;;) {
        int c = rd_byte(r);
        if (c < 0) return line->len ? 0 : -1;
        if (c == '\n') break;
        if (c != '\r') vc_sb_putc(line, (char)c);
    }
    if (!line->s) vc_sb_puts(line, "");
    return 0;
}

/* Next byte of the de-chunked body, -1 at its end. */
static int body_byte(body_rd *r) {
    if (!r->chunked) return rd_byte(r);
    if (r->eof) return -1;
    if (r->chunk_left <= 0) {
        vc_strbuf l = {0};
        if (r->chunk_left == 0 && rd_line(r, &l) < 0) { vc_sb_free(&l); return -1; } /* CRLF after a chunk */
        if (rd_line(r, &l) < 0) { vc_sb_free(&l); return -1; }
        r->chunk_left = strtol(l.s, NULL, 16);
        vc_sb_free(&l);
        if (r->chunk_left <= 0) { r->eof = true; return -1; }
    }
    r->chunk_left--;
    return rd_byte(r);
}

int cli_http_call(const cli_http_target *t, const char *method, const char *path, const char *body, cli_sse_cb sse,
                  void *user, int *status_out, vc_strbuf *out) {
    int fd = connect_to(t);
    if (fd < 0) return fd;
    vc_strbuf req = {0};
    vc_sb_printf(&req, "%s %s HTTP/1.1\r\nHost: %s:%s\r\nConnection: close\r\n", method, path, t->host, t->port);
    if (t->key) vc_sb_printf(&req, "Authorization: Bearer %s\r\n", t->key);
    if (body) vc_sb_printf(&req, "Content-Type: application/json\r\nContent-Length: %zu\r\n", strlen(body));
    vc_sb_puts(&req, "\r\n");
    if (body) vc_sb_puts(&req, body);
    size_t off = 0;
    while (off < req.len) {
        ssize_t n = write(fd, req.s + off, req.len - off);
        if (n <= 0) { vc_sb_free(&req); close(fd); return vc_err_set(VC_ERR_IO, "write to the server failed"); }
        off += (size_t)n;
    }
    vc_sb_free(&req);
    body_rd r = {.fd = fd, .chunk_left = -1};
    vc_strbuf line = {0}, ev = {0};
    int status = 0, rc = VC_OK;
    if (rd_line(&r, &line) < 0 || sscanf(line.s, "HTTP/%*s %d", &status) != 1) {
        rc = vc_err_set(VC_ERR_IO, "no HTTP answer from the server");
        goto done;
    }
    while (rd_line(&r, &line) == 0 && line.len)
        if (!strncasecmp(line.s, "Transfer-Encoding:", 18) && strstr(line.s + 18, "chunked")) r.chunked = true;
    int c;
    while ((c = body_byte(&r)) >= 0) {
        if (!sse || status != 200) { vc_sb_putc(out, (char)c); continue; }
        if (c != '\n') { vc_sb_putc(&ev, (char)c); continue; }
        if (ev.len > 6 && !strncmp(ev.s, "data: ", 6)) sse(user, ev.s + 6);
        vc_sb_clear(&ev);
    }
done:
    if (status_out) *status_out = status;
    vc_sb_free(&ev);
    vc_sb_free(&line);
    close(fd);
    return rc;
}

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "base/mapfile.h"

#include "base/err.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

int vc_mapfile_open(vc_mapfile *m, const char *path) {
    m->data = NULL;
    m->size = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return vc_err_set(VC_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return vc_err_set(VC_ERR_IO, "%s: not a regular file", path);
    }
    if (st.st_size > 0) {
        void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            close(fd);
            return vc_err_set(VC_ERR_IO, "%s: mmap failed: %s", path, strerror(errno));
        }
        m->data = p;
        m->size = (size_t)st.st_size;
    }
    close(fd);
    return VC_OK;
}

void vc_mapfile_close(vc_mapfile *m) {
    if (m->data) munmap((void *)m->data, m->size);
    m->data = NULL;
    m->size = 0;
}

int vc_read_file(const char *path, char **out, size_t *out_len) {
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return vc_err_set(VC_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    if (!buf) { fclose(f); return vc_err_set(VC_ERR_OOM, "%s: out of memory", path); }
    for (;;) {
        if (len + 1 >= cap) {
            char *nb = realloc(buf, cap * 2);
            if (!nb) { free(buf); fclose(f); return vc_err_set(VC_ERR_OOM, "%s: out of memory", path); }
            buf = nb;
            cap *= 2;
        }
        size_t n = fread(buf + len, 1, cap - len - 1, f);
        len += n;
        if (n == 0) break;
    }
    int err = ferror(f);
    fclose(f);
    if (err) { free(buf); return vc_err_set(VC_ERR_IO, "%s: read error", path); }
    buf[len] = 0;
    *out = buf;
    if (out_len) *out_len = len;
    return VC_OK;
}

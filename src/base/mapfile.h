/* mapfile — read-only mmap of a whole file (weights are never copied).
 *   vc_mapfile m; if (vc_mapfile_open(&m, path) < 0) -> vc_err_msg()
 *   ... m.data[0 .. m.size) ...
 *   vc_mapfile_close(&m);
 * An empty file maps to data == NULL, size == 0 (not an error). */
#ifndef VC_MAPFILE_H
#define VC_MAPFILE_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    const uint8_t *data;
    size_t size;
} vc_mapfile;

int vc_mapfile_open(vc_mapfile *m, const char *path);
void vc_mapfile_close(vc_mapfile *m);

/* Read a whole (small) file into a NUL-terminated malloc'd buffer. */
int vc_read_file(const char *path, char **out, size_t *out_len);

#endif

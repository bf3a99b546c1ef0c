/* Reading and writing .safetensors files: the tensor exchange format of the PyTorch ecosystem,
 * used by ttt for tensors in and out (`ttt apply`) and for checkpoints.
 *
 * The format (https://github.com/huggingface/safetensors):
 *     8 bytes    N, the header length, unsigned little-endian
 *     N bytes    a JSON object, UTF-8, possibly padded at the end with spaces (0x20):
 *                  {"__metadata__": {"key": "value", ...},          (optional, string → string)
 *                   "name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ...}
 *     the rest   the data buffer; each tensor occupies bytes [begin, end) of it, row-major,
 *                little-endian. The tensors tile the buffer exactly: no overlap, no gap, nothing
 *                after the last one (the format forbids holes so a file cannot hide other data).
 *
 * In memory every tensor is float32 (the type of the whole library). The reader converts F32,
 * F64, F16 and BF16 to float; the writer always writes F32.
 *
 * The reader is written for hostile input: every length, offset and shape is validated against
 * the real size of the file before anything is allocated or read, the JSON parser is strict and
 * follows the schema (no recursion, no generic tree), and every rejection is a TTT_ERR_FORMAT
 * whose message names the file and what is wrong, e.g.
 *     x.safetensors: tensor 'q': data_offsets [0, 100] do not match shape (2, 3) of F32 (24 bytes)
 */
#ifndef TTT_SAFETENSORS_H
#define TTT_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "status.h"

#define TTT_ST_MAX_DIMS 8
/* Larger headers are refused (the reference implementation uses the same limit). */
#define TTT_ST_MAX_HEADER 100000000u

/* One tensor. For the writer fill name, ndim, shape and data; dtype is ignored. */
typedef struct ttt_st_tensor {
    char *name;                      /* UTF-8, non-empty, not "__metadata__" */
    int ndim;                        /* 0 (a scalar) … TTT_ST_MAX_DIMS */
    int64_t shape[TTT_ST_MAX_DIMS];
    float *data;                     /* numel floats, row-major; may be NULL when numel == 0 */
    char dtype[8];                   /* reader: the dtype stored in the file ("F32", "BF16", …) */
    int64_t *ints;                   /* reader: an I32 or I64 tensor's exact values (data holds
                                      * them rounded to float); NULL for the others */
} ttt_st_tensor;

/* A file read into memory: tensors in the order their entries appear in the header. */
typedef struct ttt_st_file {
    char *path;
    int n;
    ttt_st_tensor *t;
    int n_meta;
    char **meta_key, **meta_val; /* the __metadata__ pairs, in header order */
    char *pool_;                 /* private: the names and metadata strings */
    float *data_;                /* private: the floats of all tensors, one block */
    int64_t *ints_;              /* private: the integers of the I32 and I64 tensors */
} ttt_st_file;

/* Read a whole file. On error *out is NULL and err names the file and the problem. */
ttt_status ttt_st_read(const char *path, ttt_st_file **out, ttt_error *err);
/* The same from bytes in memory (for fuzzing and embedded data); `name` is used in messages. */
ttt_status ttt_st_read_mem(const void *bytes, size_t len, const char *name, ttt_st_file **out,
                           ttt_error *err);
void ttt_st_free(ttt_st_file *f);

/* The tensor called `name`, or NULL. */
const ttt_st_tensor *ttt_st_find(const ttt_st_file *f, const char *name);
/* The metadata value for `key`, or NULL. */
const char *ttt_st_meta(const ttt_st_file *f, const char *key);
/* Number of elements (1 for a scalar). Shapes from the reader never overflow. */
int64_t ttt_st_numel(const ttt_st_tensor *t);
/* "(2, 3)" into buf; returns buf. */
const char *ttt_st_shape_str(const ttt_st_tensor *t, char *buf, size_t len);

/* Write `n` tensors as F32, in the order given, with optional metadata: `meta_kv` holds 2·n_meta
 * strings key0, value0, key1, value1, … (may be NULL when n_meta == 0). Atomic: written under a
 * temporary name in the same folder, fsync'ed and renamed, so `path` holds either its old
 * contents or the complete new file. The header is padded with spaces to a multiple of 8 bytes
 * so the data buffer is 8-byte aligned. Empty, repeated or reserved names, negative dimensions
 * and more than TTT_ST_MAX_DIMS dimensions are errors. */
ttt_status ttt_st_write(const char *path, const ttt_st_tensor *ts, int n,
                        const char *const *meta_kv, int n_meta, ttt_error *err);

#endif

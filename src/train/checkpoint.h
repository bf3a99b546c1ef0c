/* Checkpoints of outer-loop training: everything needed to resume a run bit-identically.
 *
 * A checkpoint is one .safetensors file (src/results/safetensors.h, written atomically: temporary file,
 * fsync, rename) holding
 *     tensors   "param/<name>"    every parameter's values, in its shape
 *               "adamw.m/<name>"  AdamW first moments   (when an optimizer is saved)
 *               "adamw.v/<name>"  AdamW second moments  (when an optimizer is saved)
 *     metadata  "ttt.format"      "ttt-checkpoint-1"
 *               "ttt.step"        the caller's step counter, decimal
 *               "ttt.adamw_step"  AdamW's update counter, decimal (when an optimizer is saved)
 *               "ttt.rng"         the caller's random state words: 16 hex digits each, joined by
 *                                 ',' ("" for none). uint64 values cannot live in F32 tensors, so
 *                                 they are text; a ttt_rng is its 4 words s[0..3].
 *               "ttt.config_hash" an opaque string identifying the resolved configuration (e.g.
 *                                 ttt_checkpoint_config_hash of the resolved YAML text)
 *               "user.<key>"      the caller's extra string pairs
 *               "ttt.checksum"    FNV-1a 64 (16 hex digits) over the contents, see below
 *
 * The checksum covers every tensor (name, shape and the exact bits of every float) and every
 * metadata pair except itself, each list taken in byte order of the names so that the order of
 * the header does not matter. On load a mismatch is reported as corruption. (Truncation and most
 * header damage are already refused by the safetensors reader, which checks every offset against
 * the real file size; the checksum catches what stays well-formed, e.g. a flipped data bit.)
 *
 * In a folder the last two checkpoints are kept: saving renames ckpt-last.safetensors to
 * ckpt-prev.safetensors and then writes the new ckpt-last. Loading takes ckpt-last and falls back
 * to ckpt-prev when ckpt-last is missing or corrupt (a crash between the rename and the write
 * leaves only ckpt-prev). */
#ifndef TTT_CHECKPOINT_H
#define TTT_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "adamw.h"
#include "params.h"
#include "status.h"

#define TTT_CHECKPOINT_LAST "ckpt-last.safetensors"
#define TTT_CHECKPOINT_PREV "ckpt-prev.safetensors"
#define TTT_CHECKPOINT_FORMAT "ttt-checkpoint-1"

/* FNV-1a 64 over n bytes, continuing from h (start with TTT_FNV1A64_INIT). */
#define TTT_FNV1A64_INIT 0xcbf29ce484222325ULL
uint64_t ttt_fnv1a64(uint64_t h, const void *bytes, size_t n);
/* 16 lowercase hex digits + NUL of the FNV-1a 64 of a string (e.g. the resolved config). */
void ttt_checkpoint_config_hash(const char *text, char out[17]);

/* What ttt_checkpoint_load did. */
typedef struct ttt_checkpoint_info {
    char path[4096];                 /* the file that was loaded */
    int fell_back;                   /* 1: ckpt-last was missing or corrupt, ckpt-prev was used */
    char warning[TTT_ERROR_MSG_LEN]; /* why it fell back ("" otherwise), to show the user */
} ttt_checkpoint_info;

/* One checkpoint file. `opt` may be NULL (no optimizer state is saved); `rng` holds n_rng words
 * (may be NULL when n_rng == 0); config_hash may be NULL (stored as ""); meta_kv holds 2·n_meta
 * strings key0, value0, … stored as "user.<key>". */
ttt_status ttt_checkpoint_save_file(const char *path, const ttt_params *ps, const ttt_adamw *opt,
                                    int64_t step, const uint64_t *rng, int n_rng,
                                    const char *config_hash, const char *const *meta_kv, int n_meta,
                                    ttt_error *err);

/* Load one file into existing parameters (and `opt` when not NULL), *step and rng[0..n_rng-1]
 * (n_rng −1: the random state is not wanted, e.g. to only read the weights, and rng may be NULL).
 * Nothing is modified unless everything checks out. Errors:
 *     TTT_ERR_IO      the file does not exist or cannot be opened
 *     TTT_ERR_FORMAT  corrupt: unreadable, truncated, not a ttt checkpoint, checksum mismatch
 *     TTT_ERR_CONFIG  written by a different configuration (expected_config_hash is not NULL
 *                     and differs from the stored one)
 *     TTT_ERR_SHAPE   intact but not for this model: a parameter missing, extra or of another
 *                     shape, no optimizer state when one is asked for, another number of rng
 *                     words
 * Every message names the file. */
ttt_status ttt_checkpoint_load_file(const char *path, ttt_params *ps, ttt_adamw *opt, int64_t *step,
                                    uint64_t *rng, int n_rng, const char *expected_config_hash,
                                    ttt_error *err);

/* The folder variants (the folder is created when missing; its parent must exist). */
ttt_status ttt_checkpoint_save(const char *dir, const ttt_params *ps, const ttt_adamw *opt,
                               int64_t step, const uint64_t *rng, int n_rng,
                               const char *config_hash, const char *const *meta_kv, int n_meta,
                               ttt_error *err);
/* TTT_ERR_IO when the folder holds neither checkpoint (start fresh); a corrupt ckpt-last falls
 * back to ckpt-prev (info->fell_back, info->warning); TTT_ERR_FORMAT when neither is usable,
 * naming both files. TTT_ERR_CONFIG / TTT_ERR_SHAPE from ckpt-last are returned as they are (the
 * previous file comes from the same run, falling back would not help). info may be NULL. */
ttt_status ttt_checkpoint_load(const char *dir, ttt_params *ps, ttt_adamw *opt, int64_t *step,
                               uint64_t *rng, int n_rng, const char *expected_config_hash,
                               ttt_checkpoint_info *info, ttt_error *err);

/* The value of the caller's metadata `key` (saved as "user.<key>") in a checkpoint file, copied
 * into buf. TTT_ERR_CONFIG when the key is absent; the file is verified like a load. */
ttt_status ttt_checkpoint_read_meta(const char *path, const char *key, char *buf, size_t len,
                                    ttt_error *err);

#endif

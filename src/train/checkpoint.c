#include "checkpoint.h"
#include "fault.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "safetensors.h"

#define KEY_FORMAT "ttt.format"
#define KEY_STEP "ttt.step"
#define KEY_ADAMW_STEP "ttt.adamw_step"
#define KEY_RNG "ttt.rng"
#define KEY_CONFIG "ttt.config_hash"
#define KEY_CHECKSUM "ttt.checksum"
#define USER_PREFIX "user."

uint64_t ttt_fnv1a64(uint64_t h, const void *bytes, size_t n) {
    const unsigned char *b = bytes;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ULL;
    return h;
}

void ttt_checkpoint_config_hash(const char *text, char out[17]) {
    uint64_t h = ttt_fnv1a64(TTT_FNV1A64_INIT, text, strlen(text));
    snprintf(out, 17, "%016" PRIx64, h);
}

/* ------------------------------------------------------------------------------------------ */
/* The checksum: defined on (tensors, metadata) so that writer and reader compute it from the
 * same abstract contents. Lists are visited in strcmp order of their names; integers and floats
 * are fed as little-endian bytes so the value does not depend on the host. */

typedef struct named {
    const char *name;
    int index;
} named;

static int cmp_named(const void *a, const void *b) {
    return strcmp(((const named *)a)->name, ((const named *)b)->name);
}

static uint64_t hash_u64_le(uint64_t h, uint64_t x) {
    unsigned char b[8];
    for (int k = 0; k < 8; k++) b[k] = (unsigned char)(x >> (8 * k));
    return ttt_fnv1a64(h, b, 8);
}

static uint64_t hash_floats_le(uint64_t h, const float *x, size_t n) {
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i], 4);
        unsigned char b[4] = {(unsigned char)u, (unsigned char)(u >> 8), (unsigned char)(u >> 16),
                              (unsigned char)(u >> 24)};
        h = ttt_fnv1a64(h, b, 4);
    }
    return h;
}

static int64_t st_numel(const ttt_st_tensor *t) {
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++) n *= t->shape[d];
    return n;
}

/* Returns 0 and *out on success, -1 when out of memory. */
static int contents_checksum(const ttt_st_tensor *ts, int n, const char *const *keys,
                             const char *const *vals, int n_meta, uint64_t *out) {
    named *ord = ttt_fault_malloc(((size_t)(n > n_meta ? n : n_meta) + 1) * sizeof *ord);
    if (!ord) return -1;
    uint64_t h = TTT_FNV1A64_INIT;
    h = ttt_fnv1a64(h, TTT_CHECKPOINT_FORMAT, sizeof TTT_CHECKPOINT_FORMAT);
    h = hash_u64_le(h, (uint64_t)n);
    for (int i = 0; i < n; i++) ord[i] = (named){ts[i].name, i};
    qsort(ord, (size_t)n, sizeof *ord, cmp_named);
    for (int i = 0; i < n; i++) {
        const ttt_st_tensor *t = &ts[ord[i].index];
        h = ttt_fnv1a64(h, t->name, strlen(t->name) + 1);
        h = hash_u64_le(h, (uint64_t)t->ndim);
        for (int d = 0; d < t->ndim; d++) h = hash_u64_le(h, (uint64_t)t->shape[d]);
        h = hash_floats_le(h, t->data, (size_t)st_numel(t));
    }
    int m = 0;
    for (int i = 0; i < n_meta; i++)
        if (strcmp(keys[i], KEY_CHECKSUM) != 0) ord[m++] = (named){keys[i], i};
    qsort(ord, (size_t)m, sizeof *ord, cmp_named);
    h = hash_u64_le(h, (uint64_t)m);
    for (int i = 0; i < m; i++) {
        h = ttt_fnv1a64(h, keys[ord[i].index], strlen(keys[ord[i].index]) + 1);
        h = ttt_fnv1a64(h, vals[ord[i].index], strlen(vals[ord[i].index]) + 1);
    }
    free(ord);
    *out = h;
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Save */

static char *str_cat(const char *a, const char *b) {
    size_t na = strlen(a), nb = strlen(b);
    char *s = ttt_fault_malloc(na + nb + 1);
    if (!s) return NULL;
    memcpy(s, a, na);
    memcpy(s + na, b, nb + 1);
    return s;
}

static void put_meta(const char **keys, const char **vals, int *nm, const char *k, const char *v) {
    keys[*nm] = k;
    vals[*nm] = v;
    (*nm)++;
}

static void fill_tensor(ttt_st_tensor *t, char *name, const ttt_param *p, float *data) {
    memset(t, 0, sizeof *t);
    t->name = name;
    t->ndim = p->ndim;
    for (int d = 0; d < p->ndim; d++) t->shape[d] = p->shape[d];
    t->data = data;
}

ttt_status ttt_checkpoint_save_file(const char *path, const ttt_params *ps, const ttt_adamw *opt,
                                    int64_t step, const uint64_t *rng, int n_rng,
                                    const char *config_hash, const char *const *meta_kv, int n_meta,
                                    ttt_error *err) {
    if (opt) TTT_ASSERT(opt->n_params == ps->n);
    TTT_ASSERT(n_rng >= 0 && n_meta >= 0);
    int per = opt ? 3 : 1;
    int nt = per * ps->n;
    int nm_max = 6 + n_meta; /* format, step, adamw_step, rng, config, checksum + user pairs */
    ttt_st_tensor *ts = ttt_fault_calloc((size_t)nt + 1, sizeof *ts);
    const char **keys = ttt_fault_calloc((size_t)nm_max, sizeof *keys);
    const char **vals = ttt_fault_calloc((size_t)nm_max, sizeof *vals);
    char **user_keys = ttt_fault_calloc((size_t)n_meta + 1, sizeof *user_keys);
    const char **kv = ttt_fault_calloc(2 * (size_t)nm_max, sizeof *kv);
    char *rng_text = ttt_fault_malloc(17 * (size_t)n_rng + 1);
    ttt_status st = TTT_OK;
    int nm = 0, named_ok = 1;
    char step_text[32], adamw_text[32], sum_text[17];
    if (!ts || !keys || !vals || !user_keys || !kv || !rng_text) {
        st = ttt_error_set(err, TTT_ERR_NOMEM, "cannot write '%s': out of memory", path);
        goto done;
    }
    for (int i = 0; i < ps->n; i++) {
        const ttt_param *p = ps->p[i];
        char *a = str_cat("param/", p->name);
        named_ok &= a != NULL;
        fill_tensor(&ts[per * i], a, p, p->data);
        if (opt) {
            char *m = str_cat("adamw.m/", p->name), *v = str_cat("adamw.v/", p->name);
            named_ok &= m != NULL && v != NULL;
            fill_tensor(&ts[per * i + 1], m, p, opt->m[i]);
            fill_tensor(&ts[per * i + 2], v, p, opt->v[i]);
        }
    }
    if (!named_ok) {
        st = ttt_error_set(err, TTT_ERR_NOMEM, "cannot write '%s': out of memory", path);
        goto done;
    }

    /* metadata: fixed keys point at local strings; user keys are allocated (freed below) */
    snprintf(step_text, sizeof step_text, "%" PRId64, step);
    rng_text[0] = '\0';
    for (int i = 0, pos = 0; i < n_rng; i++) {
        if (i) rng_text[pos++] = ',';
        snprintf(rng_text + pos, 17, "%016" PRIx64, rng[i]);
        pos += 16;
    }
    put_meta(keys, vals, &nm, KEY_FORMAT, TTT_CHECKPOINT_FORMAT);
    put_meta(keys, vals, &nm, KEY_STEP, step_text);
    if (opt) {
        snprintf(adamw_text, sizeof adamw_text, "%" PRId64, opt->step);
        put_meta(keys, vals, &nm, KEY_ADAMW_STEP, adamw_text);
    }
    put_meta(keys, vals, &nm, KEY_RNG, rng_text);
    put_meta(keys, vals, &nm, KEY_CONFIG, config_hash ? config_hash : "");
    for (int i = 0; i < n_meta; i++) {
        user_keys[i] = str_cat(USER_PREFIX, meta_kv[2 * i]);
        keys[nm] = user_keys[i];
        vals[nm++] = meta_kv[2 * i + 1];
        if (!user_keys[i]) {
            st = ttt_error_set(err, TTT_ERR_NOMEM, "cannot write '%s': out of memory", path);
            goto done;
        }
    }
    uint64_t sum;
    if (contents_checksum(ts, nt, keys, vals, nm, &sum)) {
        st = ttt_error_set(err, TTT_ERR_NOMEM, "cannot write '%s': out of memory", path);
        goto done;
    }
    snprintf(sum_text, sizeof sum_text, "%016" PRIx64, sum);
    put_meta(keys, vals, &nm, KEY_CHECKSUM, sum_text);
    for (int i = 0; i < nm; i++) {
        kv[2 * i] = keys[i];
        kv[2 * i + 1] = vals[i];
    }
    st = ttt_st_write(path, ts, nt, kv, nm, err);
done:
    if (user_keys)
        for (int i = 0; i < n_meta; i++) free(user_keys[i]);
    free(user_keys);
    if (ts)
        for (int i = 0; i < nt; i++) free(ts[i].name);
    free(rng_text);
    free(kv);
    free(vals);
    free(keys);
    free(ts);
    return st;
}

/* ------------------------------------------------------------------------------------------ */
/* Load */

static int parse_i64(const char *s, int64_t *out) {
    if (!s || !*s) return -1;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end) return -1;
    *out = (int64_t)v;
    return 0;
}

/* "h16,h16,…" with exactly n words of 16 hex digits; returns the number of words or -1. */
static int parse_rng(const char *s, uint64_t *out, int cap) {
    if (!*s) return 0;
    int n = 0;
    for (;;) {
        uint64_t x = 0;
        for (int k = 0; k < 16; k++) {
            char c = s[k];
            int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
            if (d < 0) return -1;
            x = x << 4 | (uint64_t)d;
        }
        if (out && n < cap) out[n] = x;
        n++;
        s += 16;
        if (*s == '\0') return n;
        if (*s != ',') return -1;
        s++;
    }
}

static int same_shape(const ttt_st_tensor *t, const ttt_param *p) {
    if (t->ndim != p->ndim) return 0;
    for (int d = 0; d < p->ndim; d++)
        if (t->shape[d] != p->shape[d]) return 0;
    return 1;
}

static int file_exists(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0;
}

/* Read and verify the integrity of a checkpoint file (reader checks, format, checksum). */
static ttt_status open_verified(const char *path, ttt_st_file **out, ttt_error *err) {
    *out = NULL;
    struct stat sb;
    if (stat(path, &sb) != 0)
        return ttt_error_set(err, TTT_ERR_IO, "checkpoint '%s' does not exist", path);
    /* a FIFO would block the read for ever, a directory is no checkpoint: refused like a damaged
     * file, so that the previous checkpoint is tried (ttt_st_read checks the mode again on the
     * descriptor it opens, docs/hardening.md "Inputs that are not files") */
    if (!S_ISREG(sb.st_mode))
        return ttt_error_set(err, TTT_ERR_FORMAT,
                             "checkpoint '%s' is not a regular file (%s); expected a "
                             ".safetensors file", path,
                             S_ISFIFO(sb.st_mode) ? "a FIFO" : S_ISDIR(sb.st_mode) ? "a directory"
                                                                                 : "a device or "
                                                                                   "socket");
    ttt_st_file *f;
    ttt_status st = ttt_st_read(path, &f, err);
    if (st != TTT_OK) {
        /* the file exists: whatever the reader refuses (short, malformed) is corruption */
        if (st != TTT_ERR_NOMEM) st = TTT_ERR_FORMAT;
        if (err) err->status = st;
        ttt_error_prefix(err, "corrupt checkpoint");
        return st;
    }
    const char *fmt = ttt_st_meta(f, KEY_FORMAT);
    if (!fmt || strcmp(fmt, TTT_CHECKPOINT_FORMAT) != 0) {
        ttt_error_set(err, TTT_ERR_FORMAT,
                      "'%s' is not a ttt checkpoint (metadata %s is %s%.100s%s, expected '%s')",
                      path, KEY_FORMAT, fmt ? "'" : "", fmt ? fmt : "missing", fmt ? "'" : "",
                      TTT_CHECKPOINT_FORMAT);
        ttt_st_free(f);
        return TTT_ERR_FORMAT;
    }
    const char *stored = ttt_st_meta(f, KEY_CHECKSUM);
    uint64_t sum;
    if (contents_checksum(f->t, f->n, (const char *const *)f->meta_key,
                          (const char *const *)f->meta_val, f->n_meta, &sum)) {
        ttt_st_free(f);
        return ttt_error_set(err, TTT_ERR_NOMEM, "%s: out of memory", path);
    }
    char sum_text[17];
    snprintf(sum_text, sizeof sum_text, "%016" PRIx64, sum);
    if (!stored || strcmp(stored, sum_text) != 0) {
        ttt_error_set(err, TTT_ERR_FORMAT,
                      "corrupt checkpoint '%s': checksum %s does not match the contents (%s); the "
                      "file was damaged after it was written",
                      path, stored ? stored : "(missing)", sum_text);
        ttt_st_free(f);
        return TTT_ERR_FORMAT;
    }
    *out = f;
    return TTT_OK;
}

ttt_status ttt_checkpoint_load_file(const char *path, ttt_params *ps, ttt_adamw *opt, int64_t *step,
                                    uint64_t *rng, int n_rng, const char *expected_config_hash,
                                    ttt_error *err) {
    if (opt) TTT_ASSERT(opt->n_params == ps->n);
    ttt_st_file *f;
    TTT_TRY(open_verified(path, &f, err));
    ttt_status st = TTT_OK;
    const char *cfg = ttt_st_meta(f, KEY_CONFIG);
    const char *step_s = ttt_st_meta(f, KEY_STEP), *adamw_s = ttt_st_meta(f, KEY_ADAMW_STEP);
    const char *rng_s = ttt_st_meta(f, KEY_RNG);
    int64_t step_v = 0, adamw_v = 0;
    const ttt_st_tensor **src = NULL;
    int per = opt ? 3 : 1;

    /* The checksum passed, so missing or malformed entries mean another writer, not damage. */
    if (!cfg || !step_s || !rng_s || parse_i64(step_s, &step_v) ||
        (adamw_s && parse_i64(adamw_s, &adamw_v))) {
        st = ttt_error_set(err, TTT_ERR_FORMAT,
                           "'%s': missing or malformed metadata (%s, %s, %s or %s)", path,
                           KEY_CONFIG, KEY_STEP, KEY_ADAMW_STEP, KEY_RNG);
        goto done;
    }
    if (expected_config_hash && strcmp(cfg, expected_config_hash) != 0) {
        st = ttt_error_set(err, TTT_ERR_CONFIG,
                           "checkpoint '%s' was written by a different configuration (config "
                           "hash %s, this run has %s); resume with the same configuration or "
                           "start in a fresh output folder",
                           path, cfg, expected_config_hash);
        goto done;
    }
    int got_rng = parse_rng(rng_s, NULL, 0);
    if (got_rng < 0) {
        st = ttt_error_set(err, TTT_ERR_FORMAT, "'%s': malformed %s metadata", path, KEY_RNG);
        goto done;
    }
    if (n_rng >= 0 && got_rng != n_rng) {
        st = ttt_error_set(err, TTT_ERR_SHAPE,
                           "checkpoint '%s' holds %d random-state words, this run needs %d", path,
                           got_rng, n_rng);
        goto done;
    }
    if (opt && !adamw_s) {
        st = ttt_error_set(err, TTT_ERR_SHAPE, "checkpoint '%s' has no optimizer state", path);
        goto done;
    }

    /* Every tensor of the model is present with its shape, and nothing else is there. */
    src = ttt_fault_calloc((size_t)per * (size_t)ps->n + 1, sizeof *src);
    if (!src) {
        st = ttt_error_set(err, TTT_ERR_NOMEM, "%s: out of memory", path);
        goto done;
    }
    static const char *const prefixes[3] = {"param/", "adamw.m/", "adamw.v/"};
    for (int i = 0; i < ps->n; i++) {
        const ttt_param *p = ps->p[i];
        for (int k = 0; k < per; k++) {
            char name[TTT_PARAM_NAME_LEN + 16];
            snprintf(name, sizeof name, "%s%s", prefixes[k], p->name);
            const ttt_st_tensor *t = ttt_st_find(f, name);
            if (!t) {
                st = ttt_error_set(err, TTT_ERR_SHAPE,
                                   "checkpoint '%s' has no tensor '%s' (the model has a "
                                   "parameter the checkpoint does not)",
                                   path, name);
                goto done;
            }
            if (!same_shape(t, p)) {
                char a[96], b[96];
                ttt_tensor pv = ttt_param_view(p);
                st = ttt_error_set(err, TTT_ERR_SHAPE,
                                   "checkpoint '%s': tensor '%s' has shape %s, the model %s", path,
                                   name, ttt_st_shape_str(t, a, sizeof a),
                                   ttt_tensor_shape_str(&pv, b, sizeof b));
                goto done;
            }
            src[per * i + k] = t;
        }
    }
    for (int j = 0; j < f->n; j++) {
        const char *nm = f->t[j].name;
        int known = 0;
        for (int k = 0; k < 3 && !known; k++) {
            size_t lp = strlen(prefixes[k]);
            if (strncmp(nm, prefixes[k], lp) == 0 && ttt_params_find(ps, nm + lp)) known = 1;
        }
        if (!known) {
            st = ttt_error_set(err, TTT_ERR_SHAPE,
                               "checkpoint '%s' has tensor '%s', which this model does not have",
                               path, nm);
            goto done;
        }
    }

    /* Everything checks out: copy. */
    for (int i = 0; i < ps->n; i++) {
        ttt_param *p = ps->p[i];
        memcpy(p->data, src[per * i]->data, p->n * sizeof(float));
        if (opt) {
            memcpy(opt->m[i], src[per * i + 1]->data, p->n * sizeof(float));
            memcpy(opt->v[i], src[per * i + 2]->data, p->n * sizeof(float));
        }
    }
    if (opt) opt->step = adamw_v;
    if (step) *step = step_v;
    if (n_rng > 0) parse_rng(rng_s, rng, n_rng);
done:
    free(src);
    ttt_st_free(f);
    return st;
}

/* ------------------------------------------------------------------------------------------ */
/* Folder: last + previous */

static ttt_status join(char *out, size_t len, const char *dir, const char *file, ttt_error *err) {
    int n = snprintf(out, len, "%s/%s", dir, file);
    if (n < 0 || (size_t)n >= len)
        return ttt_error_set(err, TTT_ERR_IO, "checkpoint folder path '%s' is too long", dir);
    return TTT_OK;
}

ttt_status ttt_checkpoint_save(const char *dir, const ttt_params *ps, const ttt_adamw *opt,
                               int64_t step, const uint64_t *rng, int n_rng,
                               const char *config_hash, const char *const *meta_kv, int n_meta,
                               ttt_error *err) {
    char last[4096], prev[4096];
    TTT_TRY(join(last, sizeof last, dir, TTT_CHECKPOINT_LAST, err));
    TTT_TRY(join(prev, sizeof prev, dir, TTT_CHECKPOINT_PREV, err));
    if (mkdir(dir, 0777) != 0 && errno != EEXIST)
        return ttt_error_set(err, TTT_ERR_IO, "cannot create checkpoint folder '%s': %s", dir,
                             strerror(errno));
    /* rename is atomic: at every moment at least one complete checkpoint exists (after a crash
     * right here only ckpt-prev does, and loading falls back to it) */
    if (file_exists(last) && rename(last, prev) != 0)
        return ttt_error_set(err, TTT_ERR_IO, "cannot rename '%s' to '%s': %s", last, prev,
                             strerror(errno));
    return ttt_checkpoint_save_file(last, ps, opt, step, rng, n_rng, config_hash, meta_kv, n_meta,
                                    err);
}

ttt_status ttt_checkpoint_load(const char *dir, ttt_params *ps, ttt_adamw *opt, int64_t *step,
                               uint64_t *rng, int n_rng, const char *expected_config_hash,
                               ttt_checkpoint_info *info, ttt_error *err) {
    char last[4096], prev[4096];
    TTT_TRY(join(last, sizeof last, dir, TTT_CHECKPOINT_LAST, err));
    TTT_TRY(join(prev, sizeof prev, dir, TTT_CHECKPOINT_PREV, err));
    if (info) memset(info, 0, sizeof *info);
    int has_last = file_exists(last), has_prev = file_exists(prev);
    if (!has_last && !has_prev) return ttt_error_set(err, TTT_ERR_IO, "no checkpoint in '%s'", dir);

    ttt_error e1 = {0};
    if (has_last) {
        ttt_status st =
            ttt_checkpoint_load_file(last, ps, opt, step, rng, n_rng, expected_config_hash, &e1);
        if (st == TTT_OK) {
            if (info) snprintf(info->path, sizeof info->path, "%s", last);
            return TTT_OK;
        }
        if (st != TTT_ERR_FORMAT) return ttt_error_set(err, st, "%s", e1.msg);
        if (!has_prev)
            return ttt_error_set(err, TTT_ERR_FORMAT, "%s; and there is no '%s' to fall back to",
                                 e1.msg, prev);
    } else {
        snprintf(e1.msg, sizeof e1.msg, "'%.900s' is missing (interrupted while saving?)", last);
    }
    ttt_error e2 = {0};
    ttt_status st =
        ttt_checkpoint_load_file(prev, ps, opt, step, rng, n_rng, expected_config_hash, &e2);
    if (st == TTT_OK) {
        if (info) {
            snprintf(info->path, sizeof info->path, "%s", prev);
            info->fell_back = 1;
            snprintf(info->warning, sizeof info->warning, "%.600s; resumed from '%.380s' instead",
                     e1.msg, prev);
        }
        return TTT_OK;
    }
    if (st != TTT_ERR_FORMAT) return ttt_error_set(err, st, "%s", e2.msg);
    return ttt_error_set(err, TTT_ERR_FORMAT, "no usable checkpoint in '%s': %.400s; %.400s", dir,
                         e1.msg, e2.msg);
}

ttt_status ttt_checkpoint_read_meta(const char *path, const char *key, char *buf, size_t len,
                                    ttt_error *err) {
    ttt_st_file *f;
    TTT_TRY(open_verified(path, &f, err));
    char *full = str_cat(USER_PREFIX, key);
    if (!full) {
        ttt_st_free(f);
        return ttt_error_set(err, TTT_ERR_NOMEM, "%s: out of memory", path);
    }
    const char *v = ttt_st_meta(f, full);
    free(full);
    ttt_status st = TTT_OK;
    if (!v)
        st = ttt_error_set(err, TTT_ERR_CONFIG, "checkpoint '%s' has no metadata '%s'", path, key);
    else
        snprintf(buf, len, "%s", v);
    ttt_st_free(f);
    return st;
}

/* The bodies of the fuzz targets, shared by
 *   - tests/fuzz/fuzz_config.c, fuzz_safetensors.c: libFuzzer targets built with clang and
 *     -fsanitize=fuzzer,address,undefined (cmake -DTTT_FUZZ=ON, .ci/fuzz), and
 *   - tests/test_fuzz_regressions.c: a normal Check suite (gcc) that replays every kept input
 *     (tests/fuzz/regressions/<name>/ and the seeds in tests/fuzz/corpus/<name>/), so CI keeps
 *     checking every input that once broke something, with ASan/UBSan in the sanitizer build.
 *
 * Besides "no crash, no hang, no sanitizer report", each body checks properties a fuzzer cannot
 * see on its own (a violation is reported through `why` and makes the fuzz target abort):
 *   config:      every rejection carries a status and a non-empty message; an accepted tree
 *                written as YAML reads back to a tree that is written identically; every sweep
 *                point does too; an experiment that validates writes a resolved configuration
 *                that validates again to the same points and the same text;
 *   safetensors: every rejection carries a status and a message naming the file and *out stays
 *                NULL; an accepted file has sane names, shapes and data (every float is read,
 *                so ASan sees any out-of-bounds data pointer); `ttt apply` on it either works
 *                (outputs of the right shapes) or says why.
 *
 * Input format of the config target: YAML text. Comment lines "#set KEY=VALUE" are also passed
 * as --set overrides (YAML ignores them, so the same file is both). */
#ifndef TTT_FUZZ_HARNESS_H
#define TTT_FUZZ_HARNESS_H

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "apply.h"
#include "config.h"
#include "experiment.h"
#include "safetensors.h"

/* Inputs above these sizes are skipped: the loaders' own limits are far larger (16 MiB of YAML,
 * a 100 MB safetensors header) and are tested directly in tests/test_hardening.c; here they would
 * only slow the fuzzer down. */
#define FUZZ_CONFIG_MAX_BYTES (64 * 1024)
#define FUZZ_ST_MAX_BYTES (1024 * 1024)
#define FUZZ_MAX_SETS 8
/* Experiments with more points, or trees with more values, than these are validated but not
 * written back and re-read (correct but slow under the sanitizers: a 10000-point sweep, or the
 * 100000 values a few lines of aliases can make). */
#define FUZZ_MAX_ROUNDTRIP_POINTS 64
#define FUZZ_MAX_ROUNDTRIP_NODES 20000
/* ttt apply is run only when the layer's state and sequences are small (see fuzz_apply). */
#define FUZZ_APPLY_MAX_FLOATS (1 << 20)

typedef struct fuzz_report {
    char msg[2048];
    int failed;
} fuzz_report;

static inline void fuzz_fail(fuzz_report *r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static inline void fuzz_fail(fuzz_report *r, const char *fmt, ...) {
    if (r->failed) return; /* keep the first */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->msg, sizeof r->msg, fmt, ap);
    va_end(ap);
    r->failed = 1;
}

/* A rejection must say something: a known status and a non-empty, terminated message. */
static inline void fuzz_check_error(fuzz_report *r, const char *what, ttt_status s,
                             const ttt_error *err) {
    if (s <= TTT_OK || s >= TTT_STATUS_COUNT) {
        fuzz_fail(r, "%s: returned status %d", what, (int)s);
        return;
    }
    if (err->status != s)
        fuzz_fail(r, "%s: returned status %d but the error record says %d", what, (int)s,
                  (int)err->status);
    if (memchr(err->msg, '\0', sizeof err->msg) == NULL)
        fuzz_fail(r, "%s: the error message is not terminated", what);
    else if (err->msg[0] == '\0')
        fuzz_fail(r, "%s: status %d (%s) without a message", what, (int)s,
                  ttt_status_message(s));
}

/* ------------------------------------------------------------------------------------------ */
/* config                                                                                      */

/* The tree written as YAML (malloc'd). */
static inline char *fuzz_yaml_text(const ttt_cfg_node *n, size_t *len) {
    char *buf = NULL;
    size_t sz = 0;
    FILE *f = open_memstream(&buf, &sz);
    if (!f) abort();
    ttt_cfg_write_yaml(n, f);
    fclose(f);
    if (len) *len = sz;
    return buf;
}

static inline long fuzz_count_nodes(const ttt_cfg_node *n) {
    long c = 1;
    for (int i = 0; i < n->n; i++) c += fuzz_count_nodes(n->items[i]);
    return c;
}

/* Written, read back, written again: the same text. */
static inline void fuzz_roundtrip_tree(fuzz_report *r, const ttt_cfg_node *n, const char *what) {
    /* Aliases can make a few hundred bytes into 100000 values (the loader's limit); writing and
     * re-reading those is correct but takes seconds under the sanitizers, and adds nothing a
     * smaller tree does not test. */
    if (r->failed || fuzz_count_nodes(n) > FUZZ_MAX_ROUNDTRIP_NODES) return;
    char *flow = ttt_cfg_to_flow(n);
    if (!flow) fuzz_fail(r, "%s: ttt_cfg_to_flow returned NULL", what);
    free(flow);
    size_t len1 = 0;
    char *t1 = fuzz_yaml_text(n, &len1);
    if (strlen(t1) != len1) {
        fuzz_fail(r, "%s: the YAML written contains a NUL byte", what);
        free(t1);
        return;
    }
    ttt_cfg_node *back = NULL;
    ttt_error err = {0};
    ttt_status s = ttt_cfg_load_string(t1, "written.yaml", &back, &err);
    if (s != TTT_OK) {
        fuzz_fail(r, "%s: the YAML written does not read back: %s\n--- written:\n%.1500s", what,
                  err.msg, t1);
        free(t1);
        return;
    }
    char *t2 = fuzz_yaml_text(back, NULL);
    if (strcmp(t1, t2) != 0)
        fuzz_fail(r, "%s: written, read back and written again differs:\n--- first:\n%.900s\n"
                     "--- second:\n%.900s",
                  what, t1, t2);
    free(t1);
    free(t2);
    ttt_cfg_free(back);
}

/* The resolved configuration of an experiment (malloc'd). */
static inline char *fuzz_resolved_text(const ttt_experiment *e) {
    char *buf = NULL;
    size_t sz = 0;
    FILE *f = open_memstream(&buf, &sz);
    if (!f) abort();
    ttt_experiment_write_resolved(e, f);
    fclose(f);
    return buf;
}

static inline void fuzz_experiment(fuzz_report *r, const char *text, const char *const *sets,
                            int n_sets) {
    ttt_experiment *e = NULL;
    ttt_error err = {0};
    ttt_status s = ttt_experiment_load_string(text, "fuzz.yaml", sets, n_sets, &e, &err);
    if (s != TTT_OK) {
        fuzz_check_error(r, "ttt_experiment_load_string", s, &err);
        if (e) fuzz_fail(r, "ttt_experiment_load_string failed but returned an experiment");
        return;
    }
    if (e->n_points < 1) fuzz_fail(r, "an experiment with %d points", e->n_points);
    if (e->n_points <= FUZZ_MAX_ROUNDTRIP_POINTS && !r->failed &&
        fuzz_count_nodes(e->root) <= FUZZ_MAX_ROUNDTRIP_NODES) {
        /* What a run folder records must run again as the same experiment. */
        char *t1 = fuzz_resolved_text(e);
        ttt_experiment *e2 = NULL;
        s = ttt_experiment_load_string(t1, "fuzz.yaml", NULL, 0, &e2, &err);
        if (s != TTT_OK) {
            fuzz_fail(r, "the resolved configuration does not validate: %s\n--- resolved:\n%.1500s",
                      err.msg, t1);
        } else {
            if (e2->n_points != e->n_points)
                fuzz_fail(r, "the resolved configuration has %d points, the experiment %d",
                          e2->n_points, e->n_points);
            char *t2 = fuzz_resolved_text(e2);
            if (strcmp(t1, t2) != 0)
                fuzz_fail(r, "resolving the resolved configuration changes it:\n--- first:\n"
                             "%.900s\n--- second:\n%.900s",
                          t1, t2);
            free(t2);
        }
        ttt_experiment_free(e2);
        free(t1);
    }
    ttt_experiment_free(e);
}

/* Returns 0 when every property holds; else 1 with the reason in r->msg. */
static inline int fuzz_config_one(const uint8_t *data, size_t size, fuzz_report *r) {
    memset(r, 0, sizeof *r);
    if (size > FUZZ_CONFIG_MAX_BYTES) return 0;
    /* The loader takes a C string: an embedded NUL ends the text, as it would for a caller. */
    char *text = malloc(size + 1);
    char *lines = malloc(size + 1);
    if (!text || !lines) abort();
    memcpy(text, data, size);
    text[size] = '\0';
    memcpy(lines, text, size + 1);
    const char *sets[FUZZ_MAX_SETS];
    int n_sets = 0;
    for (char *p = lines; p && *p && n_sets < FUZZ_MAX_SETS;) {
        char *nl = strchr(p, '\n');
        if (nl) *nl = '\0';
        if (strncmp(p, "#set ", 5) == 0) sets[n_sets++] = p + 5;
        p = nl ? nl + 1 : NULL;
    }

    /* 1. the tree: load, overrides, sweep expansion, writing */
    ttt_cfg_node *root = NULL;
    ttt_error err = {0};
    ttt_status s = ttt_cfg_load_string(text, "fuzz.yaml", &root, &err);
    if (s != TTT_OK) {
        fuzz_check_error(r, "ttt_cfg_load_string", s, &err);
        if (root) fuzz_fail(r, "ttt_cfg_load_string failed but returned a tree");
    } else {
        fuzz_roundtrip_tree(r, root, "the file");
        for (int i = 0; i < n_sets; i++) {
            s = ttt_cfg_apply_set(root, sets[i], &err);
            if (s != TTT_OK) fuzz_check_error(r, "ttt_cfg_apply_set", s, &err);
        }
        if (n_sets) fuzz_roundtrip_tree(r, root, "the file with --set overrides");
        ttt_cfg_node **pts = NULL;
        char **labels = NULL;
        int n = 0;
        s = ttt_cfg_sweep_expand(root, &pts, &labels, &n, &err);
        if (s != TTT_OK) {
            fuzz_check_error(r, "ttt_cfg_sweep_expand", s, &err);
            if (pts || labels || n) fuzz_fail(r, "ttt_cfg_sweep_expand failed but left points");
        } else {
            if (n < 1) fuzz_fail(r, "sweep expansion gave %d points", n);
            for (int i = 0; i < n && !r->failed; i++) {
                if (!pts[i] || pts[i]->kind != TTT_CFG_MAP || !labels[i])
                    fuzz_fail(r, "sweep point %d is not a mapping with a label", i);
                else if (ttt_cfg_get(pts[i], "sweep"))
                    fuzz_fail(r, "sweep point %d still has a sweep", i);
                else if (i < 4)
                    fuzz_roundtrip_tree(r, pts[i], "a sweep point");
            }
            ttt_cfg_points_free(pts, labels, n);
        }
        ttt_cfg_free(root);
    }

    /* 2. the experiment: the same through the path `ttt run` and `ttt check` take */
    if (!r->failed) fuzz_experiment(r, text, sets, n_sets);
    free(lines);
    free(text);
    return r->failed;
}

/* ------------------------------------------------------------------------------------------ */
/* safetensors                                                                                 */

static inline void fuzz_apply(fuzz_report *r, const ttt_st_file *f, unsigned pick) {
    /* Layers `ttt apply` is tried with: one per closed-form family and the generic driver with a
     * stateful optimizer and a model with several weights. */
    static const char *const fuzz_layers[] = {
        "layer: {preset: deltanet}\n",
        "layer: {preset: gated_deltanet, form: parallel}\n",
        "layer: {preset: gla}\n",
        "layer: {preset: linear_attention, form: parallel, normalize: ratio}\n",
        "layer: {preset: ttt_linear, mini_batch: 4}\n",
        "layer: {preset: titans, mini_batch: 4}\n",
        "layer: {preset: lact, mini_batch: 4}\n",
        "layer: {model: linear, loss: squared, optimizer: adam, mini_batch: 2, rope: true}\n",
    };
    /* Only inputs whose work is small: every sequence's state and the outputs are bounded by
     * the file's own shapes, which can claim huge dimensions with zero tokens (T = 0). Sizes
     * beyond the machine are refused by ttt_apply (tested in test_hardening.c); sizes that fit
     * but take gigabytes are legal and only slow here. */
    const ttt_st_tensor *q = ttt_st_find(f, "q"), *v = ttt_st_find(f, "v");
    if (q && v && q->ndim == 4 && v->ndim == 4) {
        double B = (double)q->shape[0], T = (double)q->shape[1], H = (double)q->shape[2];
        double dk = (double)q->shape[3], dv = (double)v->shape[3];
        double seqs = B * H, state = 4 * dk * (dk > dv ? dk : dv);
        if (seqs * state > FUZZ_APPLY_MAX_FLOATS || seqs * T * (dk + dv) > FUZZ_APPLY_MAX_FLOATS ||
            seqs > 4096)
            return;
    }
    const char *yaml = fuzz_layers[pick % (sizeof fuzz_layers / sizeof fuzz_layers[0])];
    ttt_cfg_node *root = NULL;
    ttt_error err = {0};
    if (ttt_cfg_load_string(yaml, "layer.yaml", &root, &err) != TTT_OK) {
        fuzz_fail(r, "the harness's layer does not load: %s", err.msg);
        return;
    }
    ttt_apply_out out;
    ttt_status s = ttt_apply((ttt_cfg_node *)ttt_cfg_get(root, "layer"), f, &out, &err);
    if (s != TTT_OK) {
        fuzz_check_error(r, "ttt_apply", s, &err);
    } else {
        if (out.n < 2 || strcmp(out.t[0].name, "o") != 0 || out.t[0].ndim != 4)
            fuzz_fail(r, "ttt_apply: the outputs are not o and final_state");
        else if (q && v && (out.t[0].shape[0] != q->shape[0] || out.t[0].shape[1] != q->shape[1] ||
                            out.t[0].shape[2] != q->shape[2] || out.t[0].shape[3] != v->shape[3]))
            fuzz_fail(r, "ttt_apply: o does not have shape (B, T, H, d_v)");
        ttt_apply_out_free(&out);
    }
    ttt_cfg_free(root);
}

static inline int fuzz_safetensors_one(const uint8_t *data, size_t size, fuzz_report *r) {
    memset(r, 0, sizeof *r);
    if (size > FUZZ_ST_MAX_BYTES) return 0;
    ttt_st_file *f = (ttt_st_file *)(uintptr_t)1; /* must be overwritten */
    ttt_error err = {0};
    ttt_status s = ttt_st_read_mem(data, size, "fuzz.safetensors", &f, &err);
    if (s != TTT_OK) {
        fuzz_check_error(r, "ttt_st_read_mem", s, &err);
        if (f) fuzz_fail(r, "ttt_st_read_mem failed but *out is not NULL");
        if (!r->failed && strncmp(err.msg, "fuzz.safetensors", 16) != 0)
            fuzz_fail(r, "ttt_st_read_mem: the message does not name the file: %s", err.msg);
        return r->failed;
    }
    if (!f) {
        fuzz_fail(r, "ttt_st_read_mem succeeded without a file");
        return 1;
    }
    /* the reader's promises (safetensors.h) */
    double total = 0;
    volatile float sink = 0;
    for (int i = 0; i < f->n && !r->failed; i++) {
        const ttt_st_tensor *t = &f->t[i];
        if (!t->name || !t->name[0] || strcmp(t->name, "__metadata__") == 0) {
            fuzz_fail(r, "tensor %d has no valid name", i);
            break;
        }
        if (t->ndim < 0 || t->ndim > TTT_ST_MAX_DIMS) {
            fuzz_fail(r, "tensor '%.64s' has %d dims", t->name, t->ndim);
            break;
        }
        double numel = 1;
        for (int d = 0; d < t->ndim; d++) {
            if (t->shape[d] < 0) fuzz_fail(r, "tensor '%.64s' has a negative dim", t->name);
            numel *= (double)t->shape[d];
        }
        if (numel != (double)ttt_st_numel(t))
            fuzz_fail(r, "tensor '%.64s': ttt_st_numel disagrees with the shape", t->name);
        if (numel > 0 && !t->data) fuzz_fail(r, "tensor '%.64s' has no data", t->name);
        if (ttt_st_find(f, t->name) != t)
            fuzz_fail(r, "tensor name '%.64s' is not unique", t->name);
        total += numel;
        for (int64_t j = 0; j < ttt_st_numel(t) && t->data; j++) sink += t->data[j];
        char buf[256];
        ttt_st_shape_str(t, buf, sizeof buf);
    }
    (void)sink;
    /* every element takes at least 2 bytes of the file */
    if (!r->failed && total * 2 > (double)size)
        fuzz_fail(r, "%.0f elements from a %zu-byte file", total, size);
    for (int i = 0; i < f->n_meta && !r->failed; i++)
        if (!f->meta_key[i] || !f->meta_val[i] ||
            ttt_st_meta(f, f->meta_key[i]) != f->meta_val[i])
            fuzz_fail(r, "metadata entry %d is missing or its key is not unique", i);
    if (!r->failed) fuzz_apply(r, f, size ? data[size - 1] : 0u);
    ttt_st_free(f);
    return r->failed;
}

#endif

/* Export and import of a model's parameters in PyTorch's names and layouts (export.h). */
#include "export.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autograd.h"
#include "safetensors.h"

void ttt_export_name(char *buf, size_t len, const char *name, int kind) {
    char tmp[TTT_PARAM_NAME_LEN + 16];
    const char *rest = name;
    int l = -1, used = 0;
    /* "layer<N>." → "layers.<N>." */
    if (sscanf(name, "layer%d.%n", &l, &used) == 1 && used > 0) {
        snprintf(tmp, sizeof tmp, "layers.%d.", l);
        rest = name + used;
    } else {
        tmp[0] = '\0';
    }
    const size_t n = strlen(rest);
    if (kind == TTT_EXPORT_BIAS && n >= 2 && strcmp(rest + n - 2, ".b") == 0)
        snprintf(buf, len, "%s%.*s.bias", tmp, (int)(n - 2), rest);
    else
        snprintf(buf, len, "%s%s.%s", tmp, rest, kind == TTT_EXPORT_BIAS ? "bias" : "weight");
}

/* The recorded forward of ttt_export_kinds, under ttt_arena_run (its entries live in the
 * arena, which ttt_export_kinds frees whatever happened). */
typedef struct kinds_forward {
    ttt_ctx *ctx;
    const ttt_seq_model *m;
    const ttt_seq_batch *b;
} kinds_forward;

static ttt_status kinds_forward_work(void *arg, ttt_error *err) {
    const kinds_forward *w = arg;
    ttt_tensor *y;
    return ttt_seq_model_forward(w->ctx, w->m, NULL, w->b, &y, err);
}

ttt_status ttt_export_kinds(int *kind, const ttt_seq_model *m, ttt_error *err) {
    const int n = m->params.n;
    memset(kind, 0, (size_t)n * sizeof *kind);
    const ttt_seq_model_config *c = &m->cfg;
    ttt_arena a;
    ttt_arena_init(&a, 0);
    ttt_tape tape;
    ttt_tape_init(&tape);
    ttt_ctx ctx = {.arena = &a, .grad = 1, .tape = &tape};
    /* one token (or one input vector) is enough for every parameter to enter the graph */
    int tok = 0, lab = 0;
    float *in = calloc((size_t)(c->io.in_dim > 0 ? c->io.in_dim : 1), sizeof *in);
    float tgt[1] = {0}, mask[1] = {1};
    ttt_seq_batch b = {.B = 1, .T = 1, .labels = &lab};
    if (c->io.vocab > 0) b.tokens = &tok;
    else b.inputs = in, b.targets = tgt, b.mask = mask;
    kinds_forward w = {.ctx = &ctx, .m = m, .b = &b};
    /* armed: the graph's tensors that cannot be had end in TTT_ERR_NOMEM, not the process */
    ttt_status s = in ? ttt_arena_run(&a, kinds_forward_work, &w, "export: the model's graph",
                                      err)
                      : ttt_error_set(err, TTT_ERR_NOMEM, "export: out of memory");
    for (const ttt_tape_entry *e = tape.last; s == TTT_OK && e; e = e->prev) {
        if (e->n_in < 2) continue;
        const int mm = e->kind == TTT_TAPE_PRODUCT && !e->iarg[1], add = e->kind == TTT_TAPE_SUM;
        if (!mm && !add) continue;
        /* the right operand, or when it is a packed weight (projections side by side, one
         * product: seqmodel.c ttt_mixer_qkv_packed) the parameters it was joined from */
        const ttt_tensor *const *ops = (const ttt_tensor *const *)&e->in[1];
        int n_ops = 1;
        for (const ttt_tape_entry *f = e->prev; mm && f; f = f->prev)
            if (f->out == e->in[1] && f->kind == TTT_TAPE_JOIN_COLS) {
                ops = (const ttt_tensor *const *)f->in;
                n_ops = f->n_in;
                break;
            }
        for (int o = 0; o < n_ops; o++)
            for (int i = 0; i < n; i++)
                if (ops[o] == &m->pt[i] && m->pt[i].ndim == (mm ? 2 : 1))
                    kind[i] = mm ? TTT_EXPORT_LINEAR : TTT_EXPORT_BIAS;
    }
    free(in);
    ttt_tape_free(&tape);
    ttt_arena_free(&a);
    return s;
}

ttt_status ttt_export_write(const char *path, const ttt_seq_model *m, const char *config_yaml,
                            int point, ttt_error *err) {
    const int n = m->params.n;
    int *kind = calloc((size_t)n, sizeof *kind);
    ttt_st_tensor *ts = calloc((size_t)n, sizeof *ts);
    /* metadata: format, config, point, then per tensor "ttt.<export name>" → its layout and
     * "ttt.source.<export name>" → its ttt name */
    const char **kv = calloc((size_t)(2 * (3 + 2 * n)), sizeof *kv);
    char point_s[24];
    snprintf(point_s, sizeof point_s, "%d", point);
    /* per tensor: its export name and its two metadata keys */
    typedef struct {
        char name[TTT_PARAM_NAME_LEN + 32], key[TTT_PARAM_NAME_LEN + 40],
            skey[TTT_PARAM_NAME_LEN + 48];
    } tensor_names;
    tensor_names *names = calloc((size_t)n, sizeof *names);
    ttt_status s = kind && ts && kv && names
                       ? TTT_OK
                       : ttt_error_set(err, TTT_ERR_NOMEM, "export: out of memory");
    if (s == TTT_OK) s = ttt_export_kinds(kind, m, err);
    int made = 0;
    for (int i = 0; s == TTT_OK && i < n; i++, made++) {
        const ttt_param *p = m->params.p[i];
        char *ename = names[i].name, *key = names[i].key, *skey = names[i].skey;
        ttt_export_name(ename, sizeof names[i].name, p->name, kind[i]);
        ts[i].name = ename;
        ts[i].ndim = p->ndim;
        for (int d = 0; d < p->ndim; d++) ts[i].shape[d] = p->shape[d];
        if (kind[i] == TTT_EXPORT_LINEAR) { /* (in, out) → (out, in) */
            const int r = p->shape[0], c = p->shape[1];
            float *t = malloc(p->n * sizeof *t);
            if (!t) {
                s = ttt_error_set(err, TTT_ERR_NOMEM, "export: out of memory for '%s'", p->name);
                break;
            }
            for (int a = 0; a < r; a++)
                for (int b = 0; b < c; b++) t[(size_t)b * r + a] = p->data[(size_t)a * c + b];
            ts[i].shape[0] = c;
            ts[i].shape[1] = r;
            ts[i].data = t;
        } else {
            ts[i].data = p->data;
        }
        snprintf(key, sizeof names[i].key, "ttt.%s", ename);
        kv[6 + 4 * i] = key;
        kv[7 + 4 * i] = kind[i] == TTT_EXPORT_LINEAR ? "linear"
                        : kind[i] == TTT_EXPORT_BIAS ? "bias"
                                                     : "as_is";
        snprintf(skey, sizeof names[i].skey, "ttt.source.%s", ename);
        kv[8 + 4 * i] = skey;
        kv[9 + 4 * i] = p->name;
    }
    if (s == TTT_OK) {
        kv[0] = "ttt.format";
        kv[1] = TTT_EXPORT_FORMAT;
        kv[2] = "ttt.config";
        kv[3] = config_yaml ? config_yaml : "";
        kv[4] = "ttt.point";
        kv[5] = point_s;
        s = ttt_st_write(path, ts, n, kv, 3 + 2 * n, err);
    }
    for (int i = 0; i < made && ts; i++)
        if (kind && kind[i] == TTT_EXPORT_LINEAR) free(ts[i].data);
    free(kind), free(ts), free(kv), free(names);
    return s;
}

ttt_status ttt_export_read(ttt_seq_model *m, const char *path, ttt_error *err) {
    const int n = m->params.n;
    int *kind = calloc((size_t)n, sizeof *kind);
    if (!kind) return ttt_error_set(err, TTT_ERR_NOMEM, "import: out of memory");
    ttt_status s = ttt_export_kinds(kind, m, err);
    ttt_st_file *f = NULL;
    if (s == TTT_OK) s = ttt_st_read(path, &f, err);
    /* every tensor checked before any parameter changes */
    for (int pass = 0; pass < 2 && s == TTT_OK; pass++)
        for (int i = 0; i < n && s == TTT_OK; i++) {
            ttt_param *p = m->params.p[i];
            char ename[TTT_PARAM_NAME_LEN + 32];
            ttt_export_name(ename, sizeof ename, p->name, kind[i]);
            const ttt_st_tensor *t = ttt_st_find(f, ename);
            const int lin = kind[i] == TTT_EXPORT_LINEAR;
            int want[2] = {lin ? p->shape[1] : p->shape[0],
                           lin ? p->shape[0] : (p->ndim > 1 ? p->shape[1] : 0)};
            int ok = t && t->ndim == p->ndim;
            for (int d = 0; ok && d < p->ndim; d++)
                ok = t->shape[d] == (d < 2 ? want[d] : p->shape[d]);
            if (!ok) {
                char sh[96] = "missing";
                if (t) ttt_st_shape_str(t, sh, sizeof sh);
                s = ttt_error_set(err, TTT_ERR_SHAPE,
                                  "import: '%s': tensor '%s' (the model's %s) is %s; expected "
                                  "%d dimensions%s",
                                  path, ename, p->name, sh, p->ndim,
                                  lin ? ", (out, in) as torch.nn.Linear stores it" : "");
                break;
            }
            if (pass == 0) continue;
            if (lin) {
                const int r = p->shape[0], c = p->shape[1];
                for (int a = 0; a < r; a++)
                    for (int b = 0; b < c; b++)
                        p->data[(size_t)a * c + b] = t->data[(size_t)b * r + a];
            } else {
                memcpy(p->data, t->data, p->n * sizeof(float));
            }
        }
    ttt_st_free(f);
    free(kind);
    return s;
}

/* The forward of ttt_export_logits, under ttt_arena_run; y (B·T, V) lives in the arena. */
typedef struct logits_forward {
    ttt_ctx *ctx;
    const ttt_seq_model *m;
    const ttt_seq_batch *b;
    ttt_tensor *y;
} logits_forward;

static ttt_status logits_forward_work(void *arg, ttt_error *err) {
    logits_forward *w = arg;
    return ttt_seq_model_forward(w->ctx, w->m, NULL, w->b, &w->y, err);
}

ttt_status ttt_export_logits(const char *out_path, const ttt_seq_model *m, const char *in_path,
                             ttt_error *err) {
    const int V = m->cfg.io.vocab;
    if (V <= 0)
        return ttt_error_set(err, TTT_ERR_ARG,
                             "logits: the model reads vectors, not token ids (a token task's "
                             "model has logits: mqar, lm)");
    ttt_st_file *f = NULL;
    TTT_TRY(ttt_st_read(in_path, &f, err));
    const ttt_st_tensor *t = ttt_st_find(f, "tokens");
    ttt_status s = TTT_OK;
    char sh[96] = "missing";
    if (t) ttt_st_shape_str(t, sh, sizeof sh);
    if (f->n != 1 || !t || t->ndim != 2 || t->shape[0] < 1 || t->shape[1] < 1 ||
        t->shape[0] * t->shape[1] > (1 << 24))
        s = ttt_error_set(err, TTT_ERR_SHAPE,
                          "logits: '%s': expected one tensor 'tokens' of shape (B, T), B, T >= 1 "
                          "and B·T <= 2^24; it has %d tensor(s), 'tokens' %s",
                          in_path, f->n, sh);
    const int B = s == TTT_OK ? (int)t->shape[0] : 0, T = s == TTT_OK ? (int)t->shape[1] : 0;
    int *tok = s == TTT_OK ? malloc((size_t)B * (size_t)T * sizeof *tok) : NULL;
    if (s == TTT_OK && !tok) s = ttt_error_set(err, TTT_ERR_NOMEM, "logits: out of memory");
    for (long i = 0; s == TTT_OK && i < (long)B * T; i++) {
        /* ids are exact in float32 up to 2^24, far above any vocabulary ttt builds */
        const float x = t->data[i];
        if (!(x >= 0.0f && x < (float)V && x == (float)(int)x))
            s = ttt_error_set(err, TTT_ERR_RANGE,
                              "logits: '%s': tokens[%ld][%ld] = %g; expected a token id, an "
                              "integer in [0, %d)",
                              in_path, i / T, i % T, (double)x, V);
        else
            tok[i] = (int)x;
    }
    if (s == TTT_OK) {
        ttt_arena a;
        ttt_arena_init(&a, 0);
        ttt_ctx ctx = {.arena = &a};
        const ttt_seq_batch b = {.B = B, .T = T, .tokens = tok};
        logits_forward w = {.ctx = &ctx, .m = m, .b = &b};
        /* armed: an arena block that cannot be had ends in TTT_ERR_NOMEM, not the process
         * (docs/hardening.md "Out of memory") */
        s = ttt_arena_run(&a, logits_forward_work, &w, "logits: the model's forward", err);
        if (s == TTT_OK) {
            ttt_st_tensor o = {.name = "logits", .ndim = 3, .shape = {B, T, V},
                               .data = w.y->data};
            s = ttt_st_write(out_path, &o, 1, NULL, 0, err);
        }
        ttt_arena_free(&a);
    }
    free(tok);
    ttt_st_free(f);
    return s;
}

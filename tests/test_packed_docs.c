/* Packed documents in the trained language model (the lm task's doc_separator; seqmodel.h
 * ttt_seq_model_io.packed; docs/training.md "Packed documents").
 *
 * - For every registered mixer (and TTT layers of several kinds: chunked, mini-batch, gated,
 *   with RoPE in the layer; softmax with learned positions and with RoPE), a packed batch (two
 *   windows of 16 tokens holding eight documents of lengths 1 to 9, three of length 3 and two of
 *   length 1, a window that begins at a separator and one that ends on one) equals running its
 *   documents one by one as sequences of their own, with packing off (each document a batch of
 *   one sequence, its loss over the packed batch's count of scored positions, the gradients
 *   summed over the documents): the logits of every position, the summed loss and every
 *   parameter gradient.
 *   The two are the same function evaluated by different sequences of float32 operations: the
 *   products block their rows (a row of a (5, d) product may go through another kernel than the
 *   same row of a (32, d) one, with or without FMA, in another order over d; measured: the
 *   logits differ in their last bits), and a parameter's gradient sums its per-row terms over
 *   all B·T rows of the packed batch at once but per document, then across documents, in the
 *   reference. Tolerance (docs/hardening.md "Portable tolerances"), ε = 2^-24: each float32
 *   evaluation is within n_r·ε·scale of the exact (float64) value, with n_r the roundings per
 *   entry along the network as tests/test_model.c counts them,
 *       n_r = layers·(11·d + mlp·d + conv + 16 + T + 10) + d + 10,
 *   so two evaluations differ by at most 2·n_r·ε·scale:
 *     logits: scale = max|logit| (≈ 4e-5 relative for the models here);
 *     loss: the float64 sum of the nats of the scored positions, within the logits' tolerance
 *       per position and term (a logit moves the cross-entropy by at most twice its change);
 *     gradients, per tensor: 2·(n_r + B·T)·ε·Σ_doc max|g_doc|, the sum over the B·T rows
 *       adding its n roundings (γ_n of a sum of n terms) and Σ_doc max|g_doc| standing for the
 *       scale of the terms summed.
 *   Measured (TTT_TEST_VERBOSE=1 prints each model's worst ratio): at most 0.011 of the
 *   tolerance, the bound being a worst case of the rounding and not its typical size. A wrong
 *   reset is O(1): a window run as one document, one mixer not reset (rwkv7) and learned
 *   positions not restarted were each tried and fail here at 2–3 absolute against tolerances
 *   near 1e-4.
 *   The packed loss also differs from the same batch run without packing (one document per
 *   window) by far more than the tolerance, so the comparison sees a missing reset.
 * - ttt_batch_ignore_label leaves exactly the labels that are not the separator.
 * - task.doc_separator's bad input: an id outside the vocabulary, below -1, not a number, and
 *   packing beside train.device: cuda (refused by `ttt check` on any machine, and by
 *   ttt_train_device_ready for a configuration made in code), each naming the
 *   option and what was expected; a run with the option trains and scores fewer tokens than
 *   one without (the separators are not targets); config.resolved.yaml shows the option only
 *   when it is given, and the configuration hash counts -1 as the option left out. */
#define _GNU_SOURCE /* asprintf */
#include <check.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autograd.h"
#include "batch.h"
#include "mixer.h"
#include "ops.h"
#include "plan.h"
#include "seqmodel.h"
#include "train.h"
#include "testutil.h"

#define NV 11 /* vocabulary */
#define NT 16 /* window length */
#define NB 2  /* windows per batch */
#define SEP 0 /* the separator token */

/* Separator positions per window (every window also begins a document at 0): window 0 holds
 * documents of lengths 5, 1, 7, 3; window 1 begins at a separator and holds 9, 3, 3, 1. */
static const int SEPS[NB][4] = {{5, 6, 13, -1}, {0, 9, 12, 15}};

typedef struct fixture {
    ttt_seq_model m;
    ttt_arena arena;
    ttt_tape tape;
    ttt_ctx ctx;
    int tokens[NB * NT], labels[NB * NT];
} fixture;

static void build(fixture *f, const char *model_yaml, const char *layer_yaml) {
    char text[1024];
    snprintf(text, sizeof text, "model: %s\nlayer: %s\n", model_yaml, layer_yaml);
    ttt_cfg_node *root = NULL;
    ttt_error err = {0};
    ck_assert_int_eq(ttt_cfg_load_string(text, "<test>", &root, &err), TTT_OK);
    ttt_seq_model_io io = {.vocab = NV, .seq_len = NT, .packed = 1, .doc_sep = SEP};
    ttt_seq_model_config c;
    ttt_status s = ttt_seq_model_parse((ttt_cfg_node *)ttt_cfg_get(root, "model"),
                                       (ttt_cfg_node *)ttt_cfg_get(root, "layer"), &io, &c, &err);
    ck_assert_msg(s == TTT_OK, "%s: %s", model_yaml, err.msg);
    s = ttt_seq_model_init(&f->m, &c, 7, &err);
    ck_assert_msg(s == TTT_OK, "%s", err.msg);
    ttt_cfg_free(root);
    ttt_arena_init(&f->arena, 0);
    ttt_tape_init(&f->tape);
    f->ctx = (ttt_ctx){.arena = &f->arena, .grad = 0, .tape = &f->tape};
    /* a token stream of windows of NT + 1 (inputs and next tokens), separators placed */
    ttt_rng r;
    ttt_rng_seed(&r, 99);
    int stream[NB][NT + 1];
    for (int b = 0; b < NB; b++) {
        for (int t = 0; t <= NT; t++) stream[b][t] = 1 + (int)ttt_rng_below(&r, NV - 1);
        for (int j = 0; j < 4; j++)
            if (SEPS[b][j] >= 0) stream[b][SEPS[b][j]] = SEP;
        for (int t = 0; t < NT; t++) {
            f->tokens[b * NT + t] = stream[b][t];
            f->labels[b * NT + t] = stream[b][t + 1];
        }
    }
    ttt_batch bt = {.B = NB, .L = NT, .tokens = f->tokens, .labels = f->labels};
    ttt_batch_ignore_label(&bt, SEP);
}

static void destroy(fixture *f) {
    ttt_seq_model_free(&f->m);
    ttt_tape_free(&f->tape);
    ttt_arena_free(&f->arena);
}

/* The documents: starts (row indices into the batch) and lengths; returns their number. */
static int documents(const fixture *f, int *row, int *len) {
    int n = 0;
    for (int r = 0; r < NB * NT; r++)
        if (r % NT == 0 || f->tokens[r] == SEP) row[n++] = r;
    for (int i = 0; i < n; i++) len[i] = (i + 1 < n ? row[i + 1] : NB * NT) - row[i];
    return n;
}

/* Loss (and gradients into the parameters' grads, accumulating) of one batch; the logits
 * copied into `logits` when not NULL. */
static void run(fixture *f, const ttt_seq_batch *b, double denominator, ttt_seq_stats *st,
                float *logits) {
    ttt_tensor *loss, *y;
    ttt_error err = {0};
    f->ctx.grad = 1;
    ttt_status s = ttt_seq_model_loss(&f->ctx, &f->m, NULL, b, denominator, &loss, st, &y, &err);
    ck_assert_msg(s == TTT_OK, "%s", err.msg);
    if (logits) memcpy(logits, y->data, y->n * sizeof(float));
    ttt_backward(&f->ctx, loss);
    ttt_tape_reset(&f->tape);
    ttt_arena_reset(&f->arena);
    f->ctx.grad = 0;
}

/* The parameters' gradients, concatenated (a malloc'd copy). */
static float *grads(const fixture *f) {
    size_t n = 0;
    for (int p = 0; p < f->m.params.n; p++) n += f->m.params.p[p]->n;
    float *g = malloc(n * sizeof *g), *o = g;
    for (int p = 0; p < f->m.params.n; p++) {
        memcpy(o, f->m.params.p[p]->grad, f->m.params.p[p]->n * sizeof(float));
        o += f->m.params.p[p]->n;
    }
    return g;
}

static void check_packed(const char *model_yaml, const char *layer_yaml) {
    fixture f;
    build(&f, model_yaml, layer_yaml);
    const int verbose = getenv("TTT_TEST_VERBOSE") != NULL;
    int row[NB * NT], len[NB * NT];
    const int nd = documents(&f, row, len);
    ck_assert_int_eq(nd, 8);
    /* packed */
    const ttt_seq_batch packed = {.B = NB, .T = NT, .tokens = f.tokens, .labels = f.labels};
    float *lp = malloc((size_t)NB * NT * NV * sizeof(float));
    ttt_seq_stats sp;
    ttt_params_zero_grad(&f.m.params);
    run(&f, &packed, 0, &sp, lp);
    float *gp = grads(&f);
    /* the same with every block recomputed in the backward (train.recompute, which runs each
     * block again on the batch's documents): the same bits */
    {
        size_t ngp = 0;
        for (int p = 0; p < f.m.params.n; p++) ngp += f.m.params.p[p]->n;
        float *lr = malloc((size_t)NB * NT * NV * sizeof(float));
        ttt_seq_stats sr;
        f.ctx.recompute = f.m.cfg.n_layers;
        ttt_params_zero_grad(&f.m.params);
        run(&f, &packed, 0, &sr, lr);
        f.ctx.recompute = 0;
        float *gr = grads(&f);
        ck_assert_msg(memcmp(lp, lr, (size_t)NB * NT * NV * sizeof(float)) == 0 &&
                          memcmp(gp, gr, ngp * sizeof(float)) == 0 && sr.loss_sum == sp.loss_sum,
                      "%s %s: packed documents with every block recomputed differ", model_yaml,
                      layer_yaml);
        free(lr), free(gr);
    }
    /* the documents alone, packing off; each loss over the packed batch's count, so that their
     * gradients sum to the packed mean's */
    f.m.cfg.io.packed = 0;
    float *ld = malloc((size_t)NB * NT * NV * sizeof(float));
    size_t ng = 0;
    for (int p = 0; p < f.m.params.n; p++) ng += f.m.params.p[p]->n;
    float *gd = calloc(ng, sizeof(float));
    double scale_doc[256] = {0}; /* per tensor: the sum over documents of max |g_doc| */
    ck_assert_int_le(f.m.params.n, 256);
    double sum_docs = 0;
    long count_docs = 0;
    for (int i = 0; i < nd; i++) {
        const ttt_seq_batch one = {.B = 1, .T = len[i], .tokens = f.tokens + row[i],
                                   .labels = f.labels + row[i]};
        ttt_seq_stats s1;
        ttt_params_zero_grad(&f.m.params);
        run(&f, &one, (double)sp.count, &s1, ld + (size_t)row[i] * NV);
        sum_docs += s1.loss_sum;
        count_docs += s1.count;
        float *g1 = grads(&f);
        size_t o = 0;
        for (int p = 0; p < f.m.params.n; p++) {
            double mx = 0;
            for (size_t e = 0; e < f.m.params.p[p]->n; e++, o++) {
                gd[o] += g1[o];
                mx = fmax(mx, fabs(g1[o]));
            }
            scale_doc[p] += mx;
        }
        free(g1);
    }
    /* the same batch as one document per window: must differ (the comparison sees resets) */
    ttt_seq_stats so;
    ttt_params_zero_grad(&f.m.params);
    run(&f, &packed, 0, &so, NULL);
    f.m.cfg.io.packed = 1;

    /* the rounding budget (see the header): n_r roundings per entry along the network */
    const ttt_seq_model_config *c = &f.m.cfg;
    const double eps = ldexp(1.0, -24), n = NB * NT;
    const double n_r = c->n_layers * (11.0 * c->d_model + c->mlp * c->d_model + c->conv + 16 +
                                      NT + 10) +
                       c->d_model + 10;
    double lmax = 0, ldiff = 0;
    for (size_t i = 0; i < (size_t)NB * NT * NV; i++) {
        lmax = fmax(lmax, fabs(ld[i]));
        ldiff = fmax(ldiff, fabs((double)lp[i] - ld[i]));
    }
    const double ltol = 2 * n_r * eps * lmax;
    double worst = ldiff / ltol;
    TU_ASSERT_LE(ldiff, ltol, "%s %s: logits packed vs documents %.3g > tolerance %.3g",
                 model_yaml, layer_yaml, ldiff, ltol);
    ck_assert_int_eq(sp.count, count_docs);
    /* the loss from those logits: within the logits' tolerance per scored position */
    ck_assert_msg(fabs(sp.loss_sum - sum_docs) <= 2 * ltol * (double)sp.count,
                  "%s %s: loss packed %.17g, documents %.17g", model_yaml, layer_yaml,
                  sp.loss_sum, sum_docs);
    ck_assert_msg(fabs(so.loss_sum - sum_docs) > 10 * 2 * ltol * (double)sp.count,
                  "%s %s: the batch without packing has the packed loss %.9g (documents "
                  "%.9g): the test cannot see a reset",
                  model_yaml, layer_yaml, so.loss_sum, sum_docs);
    if (verbose)
        fprintf(stderr, "  control: |loss without packing - documents| = %.3g = %.3g x the "
                "loss tolerance\n", fabs(so.loss_sum - sum_docs),
                fabs(so.loss_sum - sum_docs) / (2 * ltol * (double)sp.count));
    size_t o = 0;
    for (int p = 0; p < f.m.params.n; p++) {
        const double tol = 2 * (n_r + n) * eps * scale_doc[p];
        double d = 0;
        for (size_t e = 0; e < f.m.params.p[p]->n; e++, o++)
            d = fmax(d, fabs((double)gp[o] - (double)gd[o]));
        if (tol > 0) worst = fmax(worst, d / tol);
        TU_ASSERT_LE(d, tol, "%s %s: gradient of %s: packed vs documents %.3g > tolerance %.3g",
                     model_yaml, layer_yaml, f.m.params.p[p]->name, d, tol);
    }
    if (verbose)
        fprintf(stderr, "%-70s %-44s worst |diff|/tolerance %.3g\n", model_yaml,
                layer_yaml, worst);
    free(lp), free(ld), free(gp), free(gd);
    destroy(&f);
}

#define SMALL "d_model: 8, heads: 2, layers: 2, mlp: 2, conv: 3, init_std: 0.3"

START_TEST(packed_equals_documents_alone_every_mixer) {
    for (int i = 0; i < ttt_mixer_count(); i++) {
        char model[256];
        snprintf(model, sizeof model, "{mixer: %s, " SMALL "}", ttt_mixer_at(i)->name);
        check_packed(model, "{preset: titans, mini_batch: 3, form: generic}");
    }
}
END_TEST

START_TEST(packed_equals_documents_alone_layers) {
    static const char *const layers[] = {
        "{preset: gla}",
        "{preset: deltanet}",
        "{preset: gated_deltanet}",
        "{preset: mamba2}",
        "{preset: retnet}",
        "{preset: ttt_linear, mini_batch: 4}",
        "{preset: deltanet, rope: true}",
    };
    for (size_t i = 0; i < sizeof layers / sizeof layers[0]; i++)
        check_packed("{mixer: ttt, " SMALL "}", layers[i]);
}
END_TEST

START_TEST(packed_equals_documents_alone_positions) {
    check_packed("{mixer: softmax, positions: learned, " SMALL "}", "{}");
    check_packed("{mixer: softmax, positions: rope, " SMALL "}", "{}");
    check_packed("{mixer: fox, positions: rope, " SMALL "}", "{}");
    check_packed("{mixer: ttt, positions: learned, " SMALL "}", "{preset: gla}");
    check_packed("{mixer: softmax, positions: learned, norm: layer, conv: 0, d_model: 8, "
                 "heads: 2, layers: 1, mlp: 0, init_std: 0.3}",
                 "{}");
}
END_TEST

START_TEST(ignore_label_masks_the_separator_only) {
    int tok[6] = {0}, lab[6] = {3, 0, 5, TTT_LABEL_IGNORE, 0, 7};
    ttt_batch b = {.B = 2, .L = 3, .tokens = tok, .labels = lab};
    ttt_batch_ignore_label(&b, 0);
    const int want[6] = {3, TTT_LABEL_IGNORE, 5, TTT_LABEL_IGNORE, TTT_LABEL_IGNORE, 7};
    for (int i = 0; i < 6; i++) ck_assert_int_eq(lab[i], want[i]);
}
END_TEST

/* ---- the option ------------------------------------------------------------------------- */

static char *text_path;

/* `ttt check` (or run) on an lm experiment with `task_extra` in the task and `train_extra` in
 * the train section; returns the exit status, *err the stderr (malloc'd). */
static int ttt_on(const char *cmd, const char *task_extra, const char *train_extra, char **out,
                  char **err) {
    char *yaml, *cfg, *args;
    ck_assert(asprintf(&yaml,
                       "task: {kind: lm, path: %s, seq_len: 32, eval_windows: 4, eval_batch: 4%s}\n"
                       "model: {d_model: 16, layers: 1, heads: 2, mlp: 0}\n"
                       "layer: {preset: deltanet}\n"
                       "train: {steps: 3, batch: 2, log_every: 1, eval_every: 0, "
                       "checkpoint_every: 0%s}\n",
                       text_path, task_extra, train_extra) > 0);
    cfg = tu_dir_write("lm.yaml", yaml);
    const int run = strcmp(cmd, "run") == 0;
    ck_assert(asprintf(&args, "%s %s%s%s%s", cmd, cfg, run ? " --quiet --out " : "",
                       run ? tu_dir : "", run ? "/run" : "") > 0);
    const int rc = tu_run_ttt(args, out, err);
    free(yaml), free(cfg), free(args);
    return rc;
}

static void setup_text(void) {
    tu_dir_setup();
    /* lines of a few words: newline (10) separates the documents */
    char text[8192];
    size_t n = 0;
    for (int i = 0; n + 64 < sizeof text; i++)
        n += (size_t)snprintf(text + n, sizeof text - n, "line %d of the text, %s\n", i,
                              i % 3 ? "short" : "a somewhat longer line");
    text_path = tu_dir_write("text.txt", text);
}

static void teardown_text(void) {
    free(text_path);
    text_path = NULL;
    tu_dir_teardown();
}

static void expect_refused(const char *task_extra, const char *train_extra, const char *want1,
                           const char *want2) {
    char *out = NULL, *err = NULL;
    const int rc = ttt_on("check", task_extra, train_extra, &out, &err);
    ck_assert_msg(rc != 0, "check accepted%s%s", task_extra, train_extra);
    ck_assert_msg(err && strstr(err, "lm.yaml:1:") && strstr(err, want1) &&
                      (!want2 || strstr(err, want2)),
                  "%s%s: %s", task_extra, train_extra, err ? err : "(no stderr)");
    free(out), free(err);
}

START_TEST(option_bad_input) {
    /* a text file's tokens are bytes */
    expect_refused(", doc_separator: 256", "", "task.doc_separator: 256 is not a token id",
                   "expected -1 (off) or an id in [0, 256)");
    expect_refused(", doc_separator: -2", "", "task.doc_separator", "-1");
    expect_refused(", doc_separator: newline", "", "task.doc_separator", NULL);
    expect_refused(", doc_separator: 10", ", device: cuda",
                   "task.doc_separator: packed documents train on the host only",
                   "train.device");
    expect_refused(", doc_separator: 10", ", devices: 2",
                   "task.doc_separator: packed documents train on the host only",
                   "train.devices");
    char *out = NULL, *err = NULL;
    ck_assert_msg(ttt_on("check", ", doc_separator: 10", "", &out, &err) == 0, "%s", err);
    free(out), free(err);
}
END_TEST

/* eval_bytes of the summary row of a run folder (the last column named so). */
static long eval_bytes(const char *run) {
    char p[700];
    snprintf(p, sizeof p, "%s/summary.csv", run);
    char *sum = tu_read_file(p);
    ck_assert_msg(sum, "no %s", p);
    char *body = strchr(sum, '\n');
    ck_assert(body);
    *body++ = '\0';
    int col = -1, c = 0;
    for (char *h = strtok(sum, ","); h; h = strtok(NULL, ","), c++)
        if (strcmp(h, "eval_bytes") == 0) col = c;
    ck_assert_int_ge(col, 0);
    char *f = body;
    for (int i = 0; i < col; i++) f = strchr(f, ',') + 1;
    const long v = strtol(f, NULL, 10);
    free(sum);
    return v;
}

/* A run with newline as the separator trains, and scores the bytes of the validation windows
 * that are not newlines: 4 windows of 32 labels less the newlines among them (counted here from
 * the file), where the same run without the option scores all 128. config.resolved.yaml shows
 * the option when it is given, and leaves it out when it is not. */
START_TEST(option_trains_and_skips_separator_targets) {
    char *out = NULL, *err = NULL, run[600], p[700];
    ck_assert_msg(ttt_on("run", ", doc_separator: 10", "", &out, &err) == 0, "%s", err);
    free(out), free(err);
    snprintf(run, sizeof run, "%s/run", tu_dir);
    char *text = tu_read_file(text_path);
    const size_t size = strlen(text), n_val = (size_t)floor((double)size * 0.1);
    long newlines = 0;
    for (size_t i = size - n_val + 1; i <= size - n_val + 4 * 32; i++) newlines += text[i] == '\n';
    ck_assert_int_gt(newlines, 0);
    ck_assert_int_eq(eval_bytes(run), 4 * 32 - newlines);
    snprintf(p, sizeof p, "%s/config.resolved.yaml", run);
    char *resolved = tu_read_file(p);
    ck_assert_msg(resolved && strstr(resolved, "doc_separator: 10"), "%s", resolved);
    free(resolved);
    /* without it: every label scored, the option not in the resolved configuration */
    char *sub;
    ck_assert(asprintf(&sub, "%s/plain", tu_dir) > 0);
    char *yaml, *cfg, *args;
    ck_assert(asprintf(&yaml,
                       "task: {kind: lm, path: %s, seq_len: 32, eval_windows: 4, eval_batch: 4}\n"
                       "model: {d_model: 16, layers: 1, heads: 2, mlp: 0}\n"
                       "layer: {preset: deltanet}\n"
                       "train: {steps: 3, batch: 2, log_every: 1, eval_every: 0, "
                       "checkpoint_every: 0}\n",
                       text_path) > 0);
    cfg = tu_dir_write("plain.yaml", yaml);
    ck_assert(asprintf(&args, "run %s --quiet --out %s", cfg, sub) > 0);
    ck_assert_msg(tu_run_ttt(args, &out, &err) == 0, "%s", err);
    ck_assert_int_eq(eval_bytes(sub), 4 * 32);
    snprintf(p, sizeof p, "%s/config.resolved.yaml", sub);
    resolved = tu_read_file(p);
    ck_assert_msg(resolved && !strstr(resolved, "doc_separator"), "%s", resolved);
    free(resolved), free(out), free(err), free(yaml), free(cfg), free(args), free(sub), free(text);
}
END_TEST

/* The configuration hash (checkpoints resume under it): doc_separator: -1 hashes as the option
 * left out (a run that names it continues one that did not); a separator is another hash. */
static void hash_of(const char *extra, char hash[17]) {
    char *yaml;
    ck_assert(asprintf(&yaml,
                       "name: h\ntask: {kind: lm, path: %s, seq_len: 32%s}\n"
                       "model: {d_model: 8, layers: 1, heads: 1}\nlayer: {preset: deltanet}\n"
                       "train: {steps: 3, batch: 2}\n",
                       text_path, extra) > 0);
    ttt_error err = {0};
    ttt_cfg_node *doc = NULL;
    ck_assert_msg(ttt_cfg_load_string(yaml, "exp.yaml", &doc, &err) == TTT_OK, "%s", err.msg);
    ttt_plan *p = NULL;
    ck_assert_msg(ttt_plan_build(doc, "exp", &p, &err) == TTT_OK, "%s", err.msg);
    memcpy(hash, p->points[0].config_hash, 17);
    ttt_plan_free(p);
    ttt_cfg_free(doc);
    free(yaml);
}

START_TEST(off_hashes_as_absent) {
    char none[17], off[17], on[17];
    hash_of("", none);
    hash_of(", doc_separator: -1", off);
    hash_of(", doc_separator: 10", on);
    ck_assert_str_eq(none, off);
    ck_assert_str_ne(none, on);
}
END_TEST

/* A configuration made in code (no file, no lm task) is refused on a CUDA device by the one
 * place that decides where a step runs (ttt_train_device_ready), which needs no GPU to say so. */
START_TEST(device_ready_refuses_packed) {
    fixture f;
    build(&f, "{mixer: softmax, " SMALL "}", "{}");
    ttt_train_config tc;
    memset(&tc, 0, sizeof tc);
    ck_assert(ttt_train_parse_device("cuda", &tc.device));
    ttt_error err = {0};
    ck_assert_int_eq(ttt_train_device_ready(&tc, &f.m.cfg, &err), TTT_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(err.msg, "train.device: cuda:0: packed documents (task.doc_separator) "
                                  "train on the host only"),
                  "%s", err.msg);
    /* on the host it trains */
    tc.device = ttt_device_host();
    ck_assert_int_eq(ttt_train_device_ready(&tc, &f.m.cfg, &err), TTT_OK);
    destroy(&f);
}
END_TEST

Suite *packed_docs_suite(void) {
    Suite *s = suite_create("packed_docs");
    TCase *tc = tcase_create("model");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, packed_equals_documents_alone_every_mixer);
    tcase_add_test(tc, packed_equals_documents_alone_layers);
    tcase_add_test(tc, packed_equals_documents_alone_positions);
    tcase_add_test(tc, ignore_label_masks_the_separator_only);
    tcase_add_test(tc, device_ready_refuses_packed);
    suite_add_tcase(s, tc);
    TCase *to = tcase_create("option");
    tcase_set_timeout(to, 600);
    tcase_add_checked_fixture(to, setup_text, teardown_text);
    tcase_add_test(to, option_bad_input);
    tcase_add_test(to, off_hashes_as_absent);
    tcase_add_test(to, option_trains_and_skips_separator_targets);
    suite_add_tcase(s, to);
    return s;
}

int main(void) { return tu_run(packed_docs_suite()); }

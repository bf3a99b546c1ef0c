/* train.dtype: bfloat16 on a CUDA device (docs/gpu.md "bfloat16 training"): mixed precision, the
 * products' operands rounded to bf16 (u = 2^-8, src/core/bf16.h) and summed in fp32, the master
 * weights, gradients, AdamW moments, norms, softmax, loss and the forms' state in fp32. What is
 * checked, each comparison with a control it must reject:
 *
 * 1. The cast kernel rounds as the host's ttt_bf16_from_float (tests/test_bf16.c checks that one
 *    against an independent nearest-even reference), bit for bit; widening is exact. Control:
 *    the host's truncation differs from the kernel on about half of the values.
 *
 * 2. The bf16 product is the fp32 product of the rounded operands: against a float64 product of
 *    the same rounded values, |C − C_ref| ≤ 2K·2^-24·(|Ã||B̃|) element-wise. The products of two
 *    bf16 values are exact in fp32 (8 + 8 significant bits ≤ 24), so only the K − 1 additions
 *    round: γ_K ≈ K·2^-24 (Higham, Thm 3.5); the 2 allows for tensor-core accumulation that
 *    truncates instead of rounding (an error up to 2^-23 per addition). Control: the float64
 *    product of the unrounded operands is rejected by the same bound (the operands' rounding is
 *    about 2^-8/√K relative, far above K·2^-23 at K = 256).
 *
 * 3. One step's gradients under bf16 against fp32, on the device, for every mixer that runs
 *    there. The bound for parameter p: rel. RMS(g_bf16 − g_fp32) ≤ G·(spread_u(p) + u/√K), with
 *    u = 2^-8, K = B·T (the positions a weight's gradient sums) and G = 4. spread_u(p) is the
 *    gradient's conditioning at bf16's scale, measured: the largest relative RMS change of g_p
 *    in fp32 when every weight is multiplied by 1 + r·u (r uniform in [−1, 1], ENSEMBLE draws)
 *    for the step — the effect of rounding the weights, which the bf16 step does (their twin).
 *    The bf16 step rounds, per weight product, three distinct operands — the weight, the
 *    activation x, and the gradient dY in the backward (dW = dYᵀX reuses x's rounding, dX = dY·W
 *    the weight's) — each by at most u like the weights' perturbation: summed without
 *    cancellation they are at most 3·spread_u, and G = 4 leaves one more for the forms' own bf16
 *    q, k, v, o and dO (what the ttt mixer hands the form). u/√K: the rounding of the gradient's
 *    own product (K terms, each factor off by at most u, independent signs: about u·√K·|term|,
 *    relative u/√K for K terms of one size) that the weights' perturbation does not show.
 *    Controls: the bf16 gradient of a batch with one sequence replaced is rejected, and the bf16
 *    gradient is not the fp32 one (it rounds: some parameter differs by more than u/(64·√K)).
 *
 * 4. The loss curve: a bf16 run of STEPS updates stays within a band of the fp32 run from the
 *    same initialization on the same batches: |L_bf16(s) − L_fp32(s)| / L_fp32(s) ≤ band(s) with
 *        band(s) = G·(max over s' ≤ s of spread_u(s') + LOSS_FLOOR),
 *    spread_u(s) the largest relative loss difference at step s of ENSEMBLE fp32 runs whose
 *    weights are multiplied by 1 + r·u for each step's forward and backward (the master weights
 *    kept: as the bf16 twin is) from the unperturbed fp32 run, G = 4 as in 3 (the rounding sites
 *    per weight product), LOSS_FLOOR = 16·2^-24 the loss's own rounding (tests/test_train_gpu.c).
 *    The ensemble runs on the host (ttt_train's step written out so that the weights can be
 *    perturbed); it measures the trajectory's sensitivity, which the device's fp32 step shares.
 *    Control: an fp32 run whose first two batches have a sequence replaced is rejected.
 *    Checkpoints hold the fp32 master weights: a bf16 run stopped halfway and resumed in fp32
 *    (and the reverse, and on the CPU) stays within the band of the fp32 run.
 *
 * Without CUDA in the build, or without a GPU, it prints why and exits 77 (ctest: skipped).
 * TTT_TRAIN_BF16_SELF=1 runs 3 and 4 on the host with the host's bf16 products standing in for
 * the device's (src/core/ops.c, ttt_ctx.mixed: every matmul and gemm operand rounded to bf16,
 * fp32 sums; the ttt mixer's forms then run in fp32 on the host, where the device's get bf16 q,
 * k, v, o), which checks the harness, its bounds and its controls on machines without a GPU. */
#define _GNU_SOURCE
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "adamw.h"
#include "autograd.h"
#include "bf16.h"
#include "config.h"
#include "cuda_kernels.h"
#include "data.h"
#include "device.h"
#include "ops.h"
#include "rng.h"
#include "seqmodel.h"
#include "testutil.h"
#include "train.h"
#include "train_device.h"

#define EPS32 5.9604644775390625e-8 /* 2^-24 */
#define U16 0.00390625              /* 2^-8: bfloat16's unit roundoff */
#define ENSEMBLE 3
#define G 4.0
#define LOSS_FLOOR (16.0 * EPS32)
#define STEPS 20
#define BATCH 8
#define SEQ 32

static int self_mode; /* the host stands in for the device (TTT_TRAIN_BF16_SELF) */

/* ---- data: MQAR batches, batch k drawn from its own stream (replayable after a resume) ---- */

typedef struct mq_data {
    ttt_mqar gen;
    int *tokens, *labels;
    uint64_t k;  /* batches drawn so far */
    int perturb; /* batches below this have sequence 0 replaced by sequence 1 (controls) */
} mq_data;

static void draw(mq_data *d, uint64_t stream, int perturb) {
    ttt_rng r;
    ttt_rng_seed(&r, 1000 + stream);
    for (int b = 0; b < BATCH; b++)
        ttt_mqar_example(&d->gen, &r, d->tokens + b * SEQ, d->labels + b * SEQ);
    if (perturb) {
        memcpy(d->tokens, d->tokens + SEQ, SEQ * sizeof(int));
        memcpy(d->labels, d->labels + SEQ, SEQ * sizeof(int));
    }
}

static ttt_status mq_next(void *user, ttt_seq_batch *out, ttt_error *err) {
    (void)err;
    mq_data *d = user;
    draw(d, d->k, d->k < (uint64_t)d->perturb);
    d->k++;
    *out = (ttt_seq_batch){.B = BATCH, .T = SEQ, .tokens = d->tokens, .labels = d->labels};
    return TTT_OK;
}

static ttt_status mq_eval(void *user, int i, ttt_seq_batch *out, ttt_error *err) {
    (void)err;
    mq_data *d = user;
    draw(d, 999999 + (uint64_t)i, 0);
    *out = (ttt_seq_batch){.B = BATCH, .T = SEQ, .tokens = d->tokens, .labels = d->labels};
    return TTT_OK;
}

static void mq_get(void *user, uint64_t *w) { w[0] = ((mq_data *)user)->k; }
static ttt_status mq_set(void *user, const uint64_t *w, ttt_error *err) {
    (void)err;
    ((mq_data *)user)->k = w[0];
    return TTT_OK;
}

static void mq_init(mq_data *d) {
    memset(d, 0, sizeof *d);
    ttt_mqar_config c;
    ttt_mqar_config_default(&c);
    c.vocab = 32;
    c.seq_len = SEQ;
    c.n_pairs = 4;
    ttt_error err = {0};
    ck_assert_msg(ttt_mqar_init(&d->gen, &c, &err) == TTT_OK, "%s", err.msg);
    d->tokens = calloc(BATCH * SEQ, sizeof(int));
    d->labels = calloc(BATCH * SEQ, sizeof(int));
}

static void mq_free(mq_data *d) {
    ttt_mqar_free(&d->gen);
    free(d->tokens);
    free(d->labels);
}

/* ---- the mixers under test ---- */

static const struct {
    const char *name, *layer;
} cases[] = {
    {"softmax", "layer: {mixer: softmax}\n"},
    {"deltanet", "layer: {preset: deltanet}\n"},
    {"gated_deltanet", "layer: {preset: gated_deltanet}\n"},
    {"gla", "layer: {preset: gla}\n"},
    {"retnet", "layer: {preset: retnet}\n"},
    {"mamba2", "layer: {preset: mamba2}\n"},
};
enum { N_CASES = sizeof cases / sizeof cases[0] };

typedef struct setup {
    ttt_cfg_node *root;
    ttt_seq_model_config mc;
    ttt_train_config tc;
} setup;

/* The model and training of case i on `device` in `dtype`, STEPS updates. */
static void setup_make(setup *s, int i, const char *device, const char *dtype, int stop_at) {
    char text[2048];
    snprintf(text, sizeof text,
             "model: {d_model: 32, heads: 4, layers: 2, mlp: 2}\n"
             "%s"
             "train: {steps: %d, batch: %d, shards: 1, warmup: 5, lr: 3e-3, clip: 1.0,\n"
             "        log_every: 1, checkpoint_every: 0, stop_at: %d, device: %s, dtype: %s}\n",
             cases[i].layer, STEPS, BATCH, stop_at, device, dtype);
    ttt_error err = {0};
    s->root = NULL;
    ck_assert_msg(ttt_cfg_load_string(text, "bf16.yaml", &s->root, &err) == TTT_OK, "%s",
                  err.msg);
    ttt_seq_model_io io = {.vocab = 32, .seq_len = SEQ};
    ck_assert_msg(ttt_seq_model_parse((ttt_cfg_node *)ttt_cfg_get(s->root, "model"),
                                      (ttt_cfg_node *)ttt_cfg_get(s->root, "layer"), &io, &s->mc,
                                      &err) == TTT_OK,
                  "%s: %s", cases[i].name, err.msg);
    ck_assert_msg(ttt_train_config_parse((ttt_cfg_node *)ttt_cfg_get(s->root, "train"), &s->tc,
                                         &err) == TTT_OK,
                  "%s: %s", cases[i].name, err.msg);
}

/* ---- weights: flat copies, perturbed or rounded in place ---- */

static float *weights_save(const ttt_seq_model *m) {
    float *w = malloc(ttt_params_numel(&m->params) * sizeof(float));
    size_t at = 0;
    for (int p = 0; p < m->params.n; p++) {
        memcpy(w + at, m->params.p[p]->data, m->params.p[p]->n * sizeof(float));
        at += m->params.p[p]->n;
    }
    return w;
}

static void weights_load(ttt_seq_model *m, const float *w) {
    size_t at = 0;
    for (int p = 0; p < m->params.n; p++) {
        memcpy(m->params.p[p]->data, w + at, m->params.p[p]->n * sizeof(float));
        at += m->params.p[p]->n;
    }
}

/* Every weight times 1 + r·u, r uniform in [−1, 1]. */
static void weights_shake(ttt_seq_model *m, ttt_rng *r) {
    for (int p = 0; p < m->params.n; p++)
        for (size_t j = 0; j < m->params.p[p]->n; j++) {
            float *w = &m->params.p[p]->data[j];
            const double x = 2.0 * ttt_rng_uniform(r) - 1.0;
            *w = (float)((double)*w * (1.0 + x * U16));
        }
}

/* The host's mixed precision (src/core/ops.c mixed_operand): every product operand rounded to
 * bf16, no twin (each is rounded into scratch). */
static const ttt_mixed host_mixed = {0};

/* ---- runs ---- */

typedef struct run_out {
    double loss[STEPS];
    int n;
} run_out;

static void read_losses(const char *path, run_out *o) {
    char *text = tu_read_file(path);
    ck_assert_ptr_nonnull(text);
    o->n = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        if (!strstr(line, "\"kind\":\"train\"")) continue;
        const char *p = strstr(line, "\"loss\":");
        const char *st = strstr(line, "\"step\":");
        ck_assert(p && st);
        const int step = atoi(st + 7);
        if (step >= 1 && step <= STEPS) o->loss[step - 1] = strtod(p + 7, NULL);
        if (step > o->n) o->n = step;
    }
    free(text);
}

/* ttt_train of case i on `device` in `dtype` (until stop_at; resuming from `dir` when it holds a
 * checkpoint), the first `perturb` batches perturbed. */
static void train(int i, const char *device, const char *dtype, int perturb, const char *dir,
                  int stop_at, run_out *o) {
    setup s;
    setup_make(&s, i, device, dtype, stop_at);
    ttt_seq_model m;
    ttt_error err = {0};
    ck_assert_msg(ttt_seq_model_init(&m, &s.mc, 5, &err) == TTT_OK, "%s", err.msg);
    mq_data d;
    mq_init(&d);
    d.perturb = perturb;
    ttt_train_data td = {.user = &d, .next = mq_next, .n_state = 1, .get_state = mq_get,
                         .set_state = mq_set, .n_eval = 1, .eval_batch = mq_eval};
    char journal[4096];
    snprintf(journal, sizeof journal, "%s/journal.jsonl", dir);
    ttt_train_run tr = {.ckpt_dir = dir, .config_hash = "bf16", .stream_path = journal,
                        .series = "t"};
    ttt_train_result res;
    const ttt_status st = ttt_train(&m, &s.tc, &td, &tr, &res, &err);
    ck_assert_msg(st == TTT_OK, "%s on %s in %s: %s", cases[i].name, device, dtype, err.msg);
    read_losses(journal, o);
    mq_free(&d);
    ttt_seq_model_free(&m);
    ttt_cfg_free(s.root);
}

/* ttt_train's host step written out (one shard), the weights changed for each step's forward
 * and backward and restored before the update: multiplied by 1 + r·u from stream k (k ≥ 0), or
 * left alone (k = −2); k = −1: the host's bf16 products (the self mode's bf16 run). */
static void loop_run(int i, int k, run_out *o) {
    setup s;
    setup_make(&s, i, "cpu", "float32", 0);
    ttt_seq_model m;
    ttt_error err = {0};
    ck_assert_msg(ttt_seq_model_init(&m, &s.mc, 5, &err) == TTT_OK, "%s", err.msg);
    ttt_adamw opt;
    ck_assert(ttt_adamw_init(&opt, &m.params, &s.tc.adamw, &err) == TTT_OK);
    mq_data d;
    mq_init(&d);
    ttt_arena a;
    ttt_arena_init(&a, 0);
    ttt_tape tape;
    ttt_tape_init(&tape);
    ttt_ctx ctx = {.arena = &a, .grad = 1, .tape = &tape, .mixed = k == -1 ? &host_mixed : NULL};
    ttt_rng r;
    ttt_rng_seed(&r, 77 + (uint64_t)(k < 0 ? 0 : k));
    for (int step = 0; step < STEPS; step++) {
        ttt_seq_batch b;
        mq_next(&d, &b, &err);
        long count = 0;
        for (long j = 0; j < (long)b.B * b.T; j++) count += b.labels[j] >= 0;
        float *w = weights_save(&m);
        if (k >= 0) weights_shake(&m, &r);
        for (int p = 0; p < m.params.n; p++) ttt_tensor_grad_overwrite(&m.pt[p]);
        ttt_tensor *l = NULL;
        ttt_seq_stats st;
        ck_assert(ttt_seq_model_loss(&ctx, &m, NULL, &b, (double)count, &l, &st, NULL, &err) ==
                  TTT_OK);
        ttt_backward(&ctx, l);
        for (int p = 0; p < m.params.n; p++) ttt_tensor_grad_settle(&m.pt[p]);
        weights_load(&m, w);
        free(w);
        o->loss[step] = st.loss_sum / (double)st.count;
        ck_assert(ttt_adamw_step(&opt, &m.params, NULL, &err) == TTT_OK);
        ttt_tape_reset(&tape);
        ttt_arena_reset(&a);
    }
    o->n = STEPS;
    ttt_tape_free(&tape);
    ttt_arena_free(&a);
    ttt_adamw_free(&opt);
    mq_free(&d);
    ttt_seq_model_free(&m);
    ttt_cfg_free(s.root);
}

static char *fresh_dir(void) {
    char *d = tu_mkdtemp();
    ck_assert_ptr_nonnull(d);
    return d;
}

static double worst_ratio(const run_out *got, const run_out *ref, const double *band) {
    double w = 0;
    for (int s = 0; s < STEPS; s++) {
        const double e = fabs(got->loss[s] - ref->loss[s]) / fabs(ref->loss[s]);
        if (e / band[s] > w) w = e / band[s];
    }
    return w;
}

/* ---- 4. the loss curve ---- */

START_TEST(the_bf16_loss_curve_stays_in_the_band) {
    const int i = _i;
    const char *dev = self_mode ? "cpu" : "cuda";
    run_out f32, b16, ens, base, ctl;
    char *d0 = fresh_dir(), *d1 = fresh_dir(), *d2 = fresh_dir();
    train(i, dev, "float32", 0, d0, 0, &f32);
    if (self_mode)
        loop_run(i, -1, &b16);
    else
        train(i, dev, "bfloat16", 0, d1, 0, &b16);
    ck_assert_int_eq(f32.n, STEPS);
    ck_assert_int_eq(b16.n, STEPS);
    loop_run(i, -2, &base);
    double spread[STEPS] = {0}, band[STEPS], env = 0;
    for (int k = 0; k < ENSEMBLE; k++) {
        loop_run(i, k, &ens);
        for (int s = 0; s < STEPS; s++) {
            const double e = fabs(ens.loss[s] - base.loss[s]) / fabs(base.loss[s]);
            if (e > spread[s]) spread[s] = e;
        }
    }
    for (int s = 0; s < STEPS; s++) {
        if (spread[s] > env) env = spread[s];
        band[s] = G * (env + LOSS_FLOOR);
    }
    const double w = worst_ratio(&b16, &f32, band);
    double worst_rel = 0;
    for (int s = 0; s < STEPS; s++) {
        const double e = fabs(b16.loss[s] - f32.loss[s]) / fabs(f32.loss[s]);
        if (e > worst_rel) worst_rel = e;
    }
    printf("%-16s bf16 loss: worst |bf16 - fp32| / fp32 = %.2e, %.3f x band (band at step 1 "
           "%.2e, at step %d %.2e)",
           cases[i].name, worst_rel, w, band[0], STEPS, band[STEPS - 1]);
    TU_ASSERT_LE(w, 1.0, "%s: the bf16 losses leave the fp32 band by %.2f times",
                 cases[i].name, w);
    /* control: an fp32 run whose first two batches have a sequence replaced */
    train(i, dev, "float32", 2, d2, 0, &ctl);
    const double wc = worst_ratio(&ctl, &f32, band);
    printf("; control %.1f x band\n", wc);
    ck_assert_msg(wc > 1.0, "%s: the control (perturbed batches) passed: %.3f", cases[i].name,
                  wc);
    if (!self_mode) {
        /* checkpoints hold the fp32 master weights: stopped halfway in one dtype, resumed in
         * the other (or on the CPU), the run stays in the band of the fp32 run */
        static const char *const plan[][4] = {{"cuda", "bfloat16", "cuda", "float32"},
                                              {"cuda", "float32", "cuda", "bfloat16"},
                                              {"cuda", "bfloat16", "cpu", "float32"}};
        for (int j = 0; j < 3; j++) {
            char *dc = fresh_dir();
            run_out a, b;
            train(i, plan[j][0], plan[j][1], 0, dc, STEPS / 2, &a);
            train(i, plan[j][2], plan[j][3], 0, dc, 0, &b);
            ck_assert_int_eq(b.n, STEPS);
            const double wr = worst_ratio(&b, &f32, band);
            printf("%-16s %s %s, resumed on %s in %s: %.3f x band\n", cases[i].name,
                   plan[j][0], plan[j][1], plan[j][2], plan[j][3], wr);
            TU_ASSERT_LE(wr, 1.0, "%s: resumed in %s: %.2f x band", cases[i].name, plan[j][3],
                         wr);
            tu_rmtree(dc);
            free(dc);
        }
    }
    tu_rmtree(d0), tu_rmtree(d1), tu_rmtree(d2);
    free(d0), free(d1), free(d2);
}
END_TEST

/* ---- 3. one step's gradients ---- */

enum { G_HOST, G_DEV32, G_DEV16 };

static float *host_grad(ttt_seq_model *m, const ttt_seq_batch *b, int mixed) {
    ttt_arena a;
    ttt_arena_init(&a, 0);
    ttt_tape tape;
    ttt_tape_init(&tape);
    ttt_ctx ctx = {.arena = &a, .grad = 1, .tape = &tape, .mixed = mixed ? &host_mixed : NULL};
    for (int i = 0; i < m->params.n; i++) ttt_tensor_grad_overwrite(&m->pt[i]);
    ttt_tensor *l = NULL;
    ttt_error err = {0};
    ck_assert_msg(ttt_seq_model_loss(&ctx, m, NULL, b, 0, &l, NULL, NULL, &err) == TTT_OK, "%s",
                  err.msg);
    ttt_backward(&ctx, l);
    for (int i = 0; i < m->params.n; i++) ttt_tensor_grad_settle(&m->pt[i]);
    float *g = malloc(ttt_params_numel(&m->params) * sizeof(float));
    size_t at = 0;
    for (int i = 0; i < m->params.n; i++) {
        memcpy(g + at, m->params.p[i]->grad, m->params.p[i]->n * sizeof(float));
        at += m->params.p[i]->n;
    }
    ttt_tape_free(&tape);
    ttt_arena_free(&a);
    return g;
}

static float *device_grad(ttt_seq_model *m, const ttt_seq_batch *b, ttt_dtype dtype) {
    ttt_train_dev D;
    ttt_error err = {0};
    ck_assert_msg(ttt_train_dev_init_dtype(&D, m, ttt_device_cuda(0), dtype, &err) == TTT_OK,
                  "%s", err.msg);
    double loss;
    ttt_seq_stats st;
    ck_assert_msg(ttt_train_dev_step(&D, b, 1, 0, &loss, &st, &err) == TTT_OK, "%s", err.msg);
    ttt_train_dev_reset(&D);
    float *g = malloc(ttt_params_numel(&m->params) * sizeof(float));
    size_t at = 0;
    for (int i = 0; i < m->params.n; i++) {
        ck_assert(ttt_device_copy(g + at, ttt_device_host(), D.grad + D.off[i], D.device,
                                  m->params.p[i]->n * sizeof(float), D.stream, &err) == TTT_OK);
        at += m->params.p[i]->n;
    }
    ck_assert(ttt_device_sync(D.device, D.stream, &err) == TTT_OK);
    ttt_train_dev_free(&D);
    return g;
}

/* The gradient of batch b in `how`; in the self mode the host computes them, the bf16 one with
 * the host's bf16 products. */
static float *grad_of(ttt_seq_model *m, const ttt_seq_batch *b, int how) {
    if (how == G_HOST) return host_grad(m, b, 0);
    if (self_mode) return host_grad(m, b, how == G_DEV16);
    return device_grad(m, b, how == G_DEV16 ? TTT_DTYPE_BF16 : TTT_DTYPE_F32);
}

static double rel_rms(const float *a, const float *b, size_t n) {
    double num = 0, den = 0;
    for (size_t j = 0; j < n; j++) {
        const double e = (double)a[j] - b[j];
        num += e * e;
        den += (double)b[j] * b[j];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

START_TEST(one_step_bf16_gradients_are_within_the_bound) {
    const int i = _i;
    setup s;
    setup_make(&s, i, "cpu", "float32", 0);
    ttt_seq_model m;
    ttt_error err = {0};
    ck_assert_msg(ttt_seq_model_init(&m, &s.mc, 5, &err) == TTT_OK, "%s", err.msg);
    mq_data d;
    mq_init(&d);
    ttt_seq_batch b;
    mq_next(&d, &b, &err);
    float *g32 = grad_of(&m, &b, G_DEV32), *g16 = grad_of(&m, &b, G_DEV16);
    /* the spread: the fp32 gradient from weights multiplied by 1 + r·u */
    double *spread = calloc((size_t)m.params.n, sizeof(double));
    float *w0 = weights_save(&m);
    ttt_rng r;
    ttt_rng_seed(&r, 91);
    for (int k = 0; k < ENSEMBLE; k++) {
        weights_shake(&m, &r);
        float *gk = grad_of(&m, &b, G_DEV32);
        weights_load(&m, w0);
        size_t at = 0;
        for (int p = 0; p < m.params.n; p++) {
            const double e = rel_rms(gk + at, g32 + at, m.params.p[p]->n);
            if (e > spread[p]) spread[p] = e;
            at += m.params.p[p]->n;
        }
        free(gk);
    }
    const double K = (double)BATCH * SEQ, floor_k = U16 / sqrt(K);
    double worst = 0, most = 0;
    size_t at = 0;
    for (int p = 0; p < m.params.n; p++) {
        const size_t n = m.params.p[p]->n;
        const double e = rel_rms(g16 + at, g32 + at, n), tol = G * (spread[p] + floor_k);
        if (e / tol > worst) worst = e / tol;
        if (e > most) most = e;
        TU_ASSERT_LE(e, tol, "%s: bf16 gradient of %s: rel. RMS %.3e > %.3e (spread %.3e)",
                     cases[i].name, m.params.p[p]->name, e, tol, spread[p]);
        at += n;
    }
    printf("%-16s bf16 gradients: largest rel. RMS difference %.2e, worst ratio to the bound "
           "%.3f",
           cases[i].name, most, worst);
    /* control: bf16 rounds (the gradients are not the fp32 ones) */
    ck_assert_msg(most > floor_k / 64.0, "%s: the bf16 gradients equal the fp32 ones (%.3e)",
                  cases[i].name, most);
    /* control: the bf16 gradient of a perturbed batch is rejected */
    draw(&d, 0, 1);
    float *gx = grad_of(&m, &b, G_DEV16);
    double ctl = 0;
    at = 0;
    for (int p = 0; p < m.params.n; p++) {
        const size_t n = m.params.p[p]->n;
        const double q = rel_rms(gx + at, g32 + at, n) / (G * (spread[p] + floor_k));
        if (q > ctl) ctl = q;
        at += n;
    }
    printf("; control %.1f x bound\n", ctl);
    ck_assert_msg(ctl > 1.0, "%s: the control (a perturbed batch) passed: %.3f", cases[i].name,
                  ctl);
    free(gx), free(g16), free(g32), free(w0), free(spread);
    mq_free(&d);
    ttt_seq_model_free(&m);
    ttt_cfg_free(s.root);
}
END_TEST

#ifdef TTT_HAVE_CUDA
/* ---- 1. the cast kernel ---- */

START_TEST(the_cast_kernel_rounds_as_the_host) {
    enum { N = 1 << 20 };
    uint32_t *bits = malloc(N * sizeof *bits);
    uint16_t *got = malloc(N * sizeof *got);
    float *back = malloc(N * sizeof *back);
    ttt_rng r;
    ttt_rng_seed(&r, 5);
    static const uint32_t special[] = {0x3f808000u, 0x3f818000u, 0x7f7f8000u, 0x7f7fffffu,
                                       0x7f800000u, 0xff800000u, 0x7f800001u, 0xffffffffu,
                                       0x00008000u, 0x00018000u, 0x80000000u, 0x007fffffu};
    for (int j = 0; j < N; j++) bits[j] = (uint32_t)ttt_rng_u64(&r);
    memcpy(bits, special, sizeof special);
    ttt_error err = {0};
    const ttt_device dev = ttt_device_cuda(0);
    ttt_device_buffer buf;
    ck_assert(ttt_device_alloc(&buf, dev, (size_t)N * (4 + 2 + 4), NULL, "cast test", &err) ==
              TTT_OK);
    float *dx = buf.ptr, *dy = dx + N;
    uint16_t *dh = (uint16_t *)(dy + N);
    ck_assert(ttt_device_copy(dx, dev, bits, ttt_device_host(), N * 4, NULL, &err) == TTT_OK);
    ck_assert_msg(ttt_cuda_to_bf16(dh, dx, N, NULL, &err) == TTT_OK, "%s", err.msg);
    ck_assert_msg(ttt_cuda_from_bf16(dy, 0, dh, N, NULL, &err) == TTT_OK, "%s", err.msg);
    ck_assert(ttt_device_copy(got, ttt_device_host(), dh, dev, N * 2, NULL, &err) == TTT_OK);
    ck_assert(ttt_device_copy(back, ttt_device_host(), dy, dev, N * 4, NULL, &err) == TTT_OK);
    ck_assert(ttt_device_sync(dev, NULL, &err) == TTT_OK);
    long trunc_differs = 0;
    for (int j = 0; j < N; j++) {
        float x;
        memcpy(&x, &bits[j], 4);
        const uint16_t want = ttt_bf16_from_float(x);
        ck_assert_msg(got[j] == want, "0x%08x: the kernel 0x%04x, the host 0x%04x", bits[j],
                      got[j], want);
        const float w = ttt_bf16_to_float(want);
        ck_assert_msg(memcmp(&back[j], &w, 4) == 0, "widening 0x%04x is not exact", want);
        trunc_differs += !isnan(x) && (uint16_t)(bits[j] >> 16) != got[j];
    }
    ck_assert_msg(trunc_differs > N / 4, "truncation agreed with the kernel on %ld of %d",
                  N - trunc_differs, N);
    /* add: y + widened */
    ck_assert(ttt_cuda_from_bf16(dy, 1, dh, N, NULL, &err) == TTT_OK);
    ck_assert(ttt_device_copy(back, ttt_device_host(), dy, dev, N * 4, NULL, &err) == TTT_OK);
    ck_assert(ttt_device_sync(dev, NULL, &err) == TTT_OK);
    for (int j = 0; j < N; j++) {
        const float w = ttt_bf16_to_float(got[j]), want = w + w;
        if (isnan(want)) continue;
        ck_assert_msg(memcmp(&back[j], &want, 4) == 0, "add: %.9g, expected %.9g",
                      (double)back[j], (double)want);
    }
    ttt_device_free(&buf);
    free(bits), free(got), free(back);
}
END_TEST

/* ---- 2. the bf16 product ---- */

static void gemm_case(int ta, int tb, int batch) {
    const int m = 37, n = 29, k = 256;
    const size_t na = (size_t)batch * m * k, nb = (size_t)batch * k * n, nc = (size_t)batch * m * n;
    float *a = malloc(na * 4), *b = malloc(nb * 4), *c = malloc(nc * 4);
    ttt_rng r;
    ttt_rng_seed(&r, 17 + (uint64_t)(ta * 2 + tb));
    for (size_t j = 0; j < na; j++) a[j] = (float)(2.0 * ttt_rng_uniform(&r) - 1.0);
    for (size_t j = 0; j < nb; j++) b[j] = (float)(2.0 * ttt_rng_uniform(&r) - 1.0);
    ttt_error err = {0};
    const ttt_device dev = ttt_device_cuda(0);
    ttt_device_buffer buf;
    ck_assert(ttt_device_alloc(&buf, dev, (na + nb + nc) * 4 + (na + nb) * 2 + 512, NULL,
                               "gemm test", &err) == TTT_OK);
    float *da = buf.ptr, *db = da + na, *dc = db + nb;
    uint16_t *ha = (uint16_t *)(dc + nc), *hb = ha + na;
    ck_assert(ttt_device_copy(da, dev, a, ttt_device_host(), na * 4, NULL, &err) == TTT_OK);
    ck_assert(ttt_device_copy(db, dev, b, ttt_device_host(), nb * 4, NULL, &err) == TTT_OK);
    ck_assert(ttt_cuda_to_bf16(ha, da, na, NULL, &err) == TTT_OK);
    ck_assert(ttt_cuda_to_bf16(hb, db, nb, NULL, &err) == TTT_OK);
    /* stored A is (m, k) or, transposed, (k, m); B (k, n) or (n, k) */
    const int lda = ta ? m : k, ldb = tb ? k : n;
    ck_assert_msg(ttt_cuda_gemm_bf16(dc, 1.0f, ha, ta, lda, (long long)m * k, hb, tb, ldb,
                                     (long long)k * n, 0.0f, (long long)m * n, m, n, k, batch,
                                     NULL, &err) == TTT_OK,
                  "%s", err.msg);
    ck_assert(ttt_device_copy(c, ttt_device_host(), dc, dev, nc * 4, NULL, &err) == TTT_OK);
    ck_assert(ttt_device_sync(dev, NULL, &err) == TTT_OK);
    double worst = 0, ctl = 0;
    for (int q = 0; q < batch; q++)
        for (int i = 0; i < m; i++)
            for (int j = 0; j < n; j++) {
                double ref = 0, raw = 0, mag = 0;
                for (int l = 0; l < k; l++) {
                    const float x = a[(size_t)q * m * k + (ta ? (size_t)l * m + i : (size_t)i * k + l)];
                    const float y = b[(size_t)q * k * n + (tb ? (size_t)j * k + l : (size_t)l * n + j)];
                    const double xr = ttt_bf16_round(x), yr = ttt_bf16_round(y);
                    ref += xr * yr;
                    raw += (double)x * y;
                    mag += fabs(xr * yr);
                }
                const double got = c[(size_t)q * m * n + (size_t)i * n + j];
                const double tol = 2.0 * k * EPS32 * mag;
                if (fabs(got - ref) / tol > worst) worst = fabs(got - ref) / tol;
                if (fabs(raw - ref) / tol > ctl) ctl = fabs(raw - ref) / tol;
            }
    printf("bf16 gemm ta=%d tb=%d batch=%d: worst %.3f x bound; control %.1f x bound\n", ta, tb,
           batch, worst, ctl);
    TU_ASSERT_LE(worst, 1.0, "bf16 gemm ta=%d tb=%d: %.3f x the bound", ta, tb, worst);
    ck_assert_msg(ctl > 1.0, "the unrounded product passed (%.3f): the bound cannot tell", ctl);
    ttt_device_free(&buf);
    free(a), free(b), free(c);
}

START_TEST(the_bf16_product_is_the_fp32_product_of_rounded_operands) {
    gemm_case(0, 0, 1);
    gemm_case(1, 0, 1);
    gemm_case(0, 1, 1);
    gemm_case(1, 1, 3);
}
END_TEST
#endif

static int run(Suite *s) {
    SRunner *r = srunner_create(s);
    /* no fork: the CUDA context of this process is not usable in a child */
    srunner_set_fork_status(r, CK_NOFORK);
    srunner_run_all(r, CK_NORMAL);
    const int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? 1 : 0;
}

int main(void) {
    const char *self = getenv("TTT_TRAIN_BF16_SELF");
    if (self && strcmp(self, "1") == 0) { /* the harness alone, the host as the device */
        self_mode = 1;
        Suite *s = suite_create("train_bf16_self");
        TCase *tc = tcase_create("self");
        tcase_set_timeout(tc, 600);
        tcase_add_loop_test(tc, one_step_bf16_gradients_are_within_the_bound, 0, N_CASES);
        tcase_add_loop_test(tc, the_bf16_loss_curve_stays_in_the_band, 0, N_CASES);
        suite_add_tcase(s, tc);
        return run(s);
    }
#ifndef TTT_HAVE_CUDA
    printf("skipped: built without CUDA (configure with -DTTT_CUDA=ON)\n");
    return 77;
#else
    ttt_error e = {0};
    if (ttt_device_usable(ttt_device_cuda(0), &e) != TTT_OK) {
        printf("skipped: no usable CUDA device: %s\n", e.msg);
        return 77;
    }
    Suite *s = suite_create("train_bf16");
    TCase *tc = tcase_create("gpu");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, the_cast_kernel_rounds_as_the_host);
    tcase_add_test(tc, the_bf16_product_is_the_fp32_product_of_rounded_operands);
    tcase_add_loop_test(tc, one_step_bf16_gradients_are_within_the_bound, 0, N_CASES);
    tcase_add_loop_test(tc, the_bf16_loss_curve_stays_in_the_band, 0, N_CASES);
    suite_add_tcase(s, tc);
    return run(s);
#endif
}

/* The training step on a CUDA device against the same step on the CPU (docs/training.md "Device
 * and precision"): small MQAR models of each mixer that runs on a device (softmax attention, and
 * the ttt mixer with the delta rule, the gated delta rule, GLA's per-key gate, RetNet's
 * multi-scale decay and Mamba2's scalar gate, FoX, the LRU, Mamba and RWKV-7), trained by
 * ttt_train with train.device: cuda and
 * train.device: cpu from the same initialization on the same batches.
 *
 * Tolerances, as tests/bench/compare_torch_steps.py and docs/hardening.md "Portable tolerances"
 * derive them: never from one machine's float32 output, but from how much the trajectory itself
 * moves under perturbations of the size of one rounding. ENSEMBLE more CPU runs multiply every
 * weight by 1 + u·2^-24 (u uniform in [−1, 1]) after every update — the storage rounding any
 * float32 trainer commits at each step, and nothing else; spread(s) is the largest relative loss
 * difference of those runs from the same loop unperturbed at step s, and
 *     tol(s) = GROWTH · (max over s' ≤ s of spread(s') + LOSS_FLOOR)
 * with GROWTH = 8 and LOSS_FLOOR = 16ε (ε = 2^-24), compare_torch_steps.py's constants, is how far
 * one float32 trainer may be from the exact trajectory; the device and the CPU are two such
 * trainers, so they may be PATHS·tol(s) apart, PATHS = 2 (docs/hardening.md "Portable
 * tolerances": a float32 path is bounded against the exact one, and two paths by the sum).
 * GROWTH because a float32 step rounds at more places than the perturbation of the weights (every
 * product of the device accumulates in another order than OpenBLAS, the reductions in another
 * order in double); the floor is the rounding of the loss itself. The ensemble here is float32 CPU runs (the C
 * trainer has no float64 twin), ttt_train's host step written out (one shard) so that the weights
 * can be perturbed between updates: the perturbation measures the trajectory's conditioning,
 * which is what the bound scales with. The final parameters are held to the same rule on their
 * relative RMS difference over all parameters.
 *
 * One step's gradients: the relative RMS difference of each parameter's gradient on the device
 * from the CPU's is within 2(K + 2)·(spread_g + ε). spread_g, the largest relative RMS change of
 * that gradient when every weight is multiplied by 1 + u·2^-24, measures its conditioning κ
 * (spread_g ≈ κε; at least ε, the rounding of the result); a float32 sum of K terms is within
 * γ_K ≈ Kε of the sum of their magnitudes (Higham, Thm 3.5) on each side, with K the most terms
 * any gradient element sums: every position of the batch (B·T) for a weight.
 *
 * AdamW on the device: its update is the host's formulas rounded at the same places
 * (adamw_device.h), so without clipping one update from the same state gives the same bits;
 * with clipping the scale's float may differ by one rounding (the norm is summed in another
 * order in double), so the weights agree within 8ε of their size and their change (below).
 *
 * Each comparison has a control that must be rejected: a run whose first batch has sequence 0
 * replaced by sequence 1 (a perturbed input), the gradient of that batch, and one AdamW update
 * from a gradient with one element moved by 2^-8 of itself (less can vanish in the rounding of
 * the moments).
 *
 * Checkpoints: a run stopped on the device and resumed on the CPU (and the reverse) ends within
 * the trajectory bound of the uninterrupted CPU run.
 *
 * Faults (the case `faults`, docs/hardening.md "Faults on the GPU"): out of device memory at a
 * step in the middle of a run (the device pool capped between what its steps take), memory the
 * device does not have, and kill -9 of a training process then the same run again; a resumed run
 * is held to the uninterrupted one by the same trajectory bound (two runs on the device may sum
 * in other orders: the backward's atomics), with the same bits required on the CPU.
 *
 * Without CUDA in the build, or without a GPU, it prints why and exits 77 (ctest: skipped).
 * TTT_TRAIN_GPU_SELF=1 runs the trajectory, vector, recompute and kill -9 cases with the CPU
 * standing in for the device (every error is then 0 and every control must still be rejected): a check of
 * the harness itself on machines without a GPU. */
#define _GNU_SOURCE
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "adamw.h"
#include "autograd.h"
#include "config.h"
#include "data.h"
#include "device.h"
#include "ops.h"
#include "rng.h"
#include "seqmodel.h"
#include "testutil.h"
#include "train.h"
#include "train_device.h"

#define EPS32 5.9604644775390625e-8 /* 2^-24 */
#define ENSEMBLE 3
#define GROWTH 8.0
#define LOSS_FLOOR (16.0 * EPS32)
#define PATHS 2.0
#define STEPS 20
#define BATCH 8
#define SEQ 32
#define MAX_STEPS 64 /* the longest run (the kill -9 case's KILL_STEPS) */
#define BIG 64        /* a batch of BIG·BATCH sequences (the out-of-memory case) */

/* "cuda", or "cpu" when the CPU stands in for the device (TTT_TRAIN_GPU_SELF) */
static const char *dev_name = "cuda";

/* ---- data: MQAR batches, batch k drawn from its own stream (replayable after a resume) ---- */

typedef struct mq_data {
    ttt_mqar gen;
    int *tokens, *labels;
    uint64_t k;     /* batches drawn so far */
    int perturb;    /* nonzero: batch 0's sequence 0 is sequence 1 (the control) */
    long big_at;    /* ≥ 0: batch big_at holds BIG·BATCH sequences (−1: none) */
    /* when batch big_at is drawn: snap_dir's checkpoint files as they are then */
    const char *snap_dir;
    void *snap[2];
    size_t snap_len[2];
    int snapped;
} mq_data;

static void draw_n(mq_data *d, uint64_t stream, int perturb, int nb) {
    ttt_rng r;
    ttt_rng_seed(&r, 1000 + stream);
    for (int b = 0; b < nb; b++)
        ttt_mqar_example(&d->gen, &r, d->tokens + b * SEQ, d->labels + b * SEQ);
    if (perturb) {
        memcpy(d->tokens, d->tokens + SEQ, SEQ * sizeof(int));
        memcpy(d->labels, d->labels + SEQ, SEQ * sizeof(int));
    }
}

static void draw(mq_data *d, uint64_t stream, int perturb) { draw_n(d, stream, perturb, BATCH); }

static void snapshot(mq_data *d);

static ttt_status mq_next(void *user, ttt_seq_batch *out, ttt_error *err) {
    (void)err;
    mq_data *d = user;
    const int nb = d->big_at >= 0 && d->k == (uint64_t)d->big_at ? BIG * BATCH : BATCH;
    if (nb != BATCH && d->snap_dir) snapshot(d);
    draw_n(d, d->k, d->perturb && d->k == 0, nb);
    d->k++;
    *out = (ttt_seq_batch){.B = nb, .T = SEQ, .tokens = d->tokens, .labels = d->labels};
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
    d->tokens = calloc(BIG * BATCH * SEQ, sizeof(int));
    d->labels = calloc(BIG * BATCH * SEQ, sizeof(int));
    d->big_at = -1;
}

static void mq_free(mq_data *d) {
    ttt_mqar_free(&d->gen);
    free(d->tokens);
    free(d->labels);
    free(d->snap[0]), free(d->snap[1]);
}

/* The bytes of file `path` (NULL, *len = 0 when it does not exist). */
static void *read_bytes(const char *path, size_t *len) {
    *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    for (size_t got; (got = fread(buf + n, 1, cap - n, f)) > 0;) {
        n += got;
        if (n == cap) buf = realloc(buf, cap *= 2);
    }
    fclose(f);
    *len = n;
    return buf;
}

static const char *const ckpt_files[2] = {"ckpt-last.safetensors", "ckpt-prev.safetensors"};

static void snapshot(mq_data *d) {
    for (int i = 0; i < 2; i++) {
        char p[4200];
        snprintf(p, sizeof p, "%s/%s", d->snap_dir, ckpt_files[i]);
        free(d->snap[i]);
        d->snap[i] = read_bytes(p, &d->snap_len[i]);
    }
    d->snapped = 1;
}

/* ---- the mixers under test ---- */

typedef struct mixer_case {
    const char *name;
    const char *layer; /* the `layer:` and model lines */
} mixer_case;

static const mixer_case cases[] = {
    {"softmax", "layer: {mixer: softmax}\n"},
    {"deltanet", "layer: {preset: deltanet}\n"},
    {"gated_deltanet", "layer: {preset: gated_deltanet}\n"},
    {"gla", "layer: {preset: gla}\n"},
    {"retnet", "layer: {preset: retnet}\n"},
    {"mamba2", "layer: {preset: mamba2}\n"},
    /* the mixers whose blocks run on the device ops, the recurrences among them
     * (docs/device_ops.md "Recurrences") */
    {"fox", "layer: {mixer: fox}\n"},
    {"lru", "layer: {mixer: lru}\n"},
    {"mamba", "layer: {mixer: mamba}\n"},
    {"rwkv7", "layer: {mixer: rwkv7}\n"},
};
enum { N_CASES = sizeof cases / sizeof cases[0] };

typedef struct setup {
    ttt_cfg_node *root;
    ttt_seq_model_config mc;
    ttt_train_config tc;
} setup;

/* The model and training of case i on `device` ("cpu" or "cuda"), `steps` updates; with
 * `devices` (not NULL) over those ranks instead (train.devices, docs/scaling.md "Several
 * GPUs"). */
static void setup_make_on(setup *s, int i, const char *device, const char *devices, int steps,
                          int stop_at) {
    char text[2048], place[256];
    if (devices) snprintf(place, sizeof place, "devices: '%s'", devices);
    else snprintf(place, sizeof place, "device: %s", device);
    snprintf(text, sizeof text,
             "model: {d_model: 32, heads: 4, layers: 2, mlp: 2}\n"
             "%s"
             "train: {steps: %d, batch: %d, shards: 1, warmup: 5, lr: 3e-3, clip: 1.0,\n"
             "        log_every: 1, checkpoint_every: 0, stop_at: %d, %s}\n",
             cases[i].layer, steps, BATCH, stop_at, place);
    ttt_error err = {0};
    s->root = NULL;
    ck_assert_msg(ttt_cfg_load_string(text, "gpu.yaml", &s->root, &err) == TTT_OK, "%s",
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

static void setup_make(setup *s, int i, const char *device, int steps, int stop_at) {
    setup_make_on(s, i, device, NULL, steps, stop_at);
}

/* Every initial weight times 1 + u·2^-24, u uniform in [−1, 1] from stream k. */
static void perturb_weights(ttt_seq_model *m, int k) {
    ttt_rng r;
    ttt_rng_seed(&r, 77 + (uint64_t)k);
    for (int i = 0; i < m->params.n; i++)
        for (size_t j = 0; j < m->params.p[i]->n; j++) {
            const double u = 2.0 * ttt_rng_uniform(&r) - 1.0;
            m->params.p[i]->data[j] = (float)((double)m->params.p[i]->data[j] * (1.0 + u * EPS32));
        }
}

/* A run: losses per step (from the journal) and the final parameters. */
typedef struct run_out {
    double loss[MAX_STEPS];
    int n;
    float *params;
    size_t numel;
} run_out;

static void run_free(run_out *r) { free(r->params); }

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
        if (step >= 1 && step <= MAX_STEPS) o->loss[step - 1] = strtod(p + 7, NULL);
        if (step > o->n) o->n = step;
    }
    free(text);
}

/* One training run of case i by ttt_train: on `device`, `steps` updates (or until stop_at),
 * resuming from `dir` when it holds a checkpoint, a checkpoint every ckpt_every steps (0: at the
 * end only); weights perturbed by ensemble member k ≥ 0; data perturbed when asked; batch big_at
 * BIG times larger (−1: none), with the checkpoint files of snap_dir read when it is drawn. */
typedef struct train_spec {
    int i;
    const char *device;
    const char *devices; /* train.devices instead of device (NULL: none) */
    int k, perturb, steps, stop_at, ckpt_every;
    int recompute; /* train.recompute */
    long big_at;
    const char *dir, *snap_dir;
} train_spec;

/* What a run left: its status (err), its result, the losses and parameters (when it ended
 * well) and the snapshot of the checkpoint files taken at the large batch. */
typedef struct train_got {
    ttt_status status;
    ttt_error err;
    ttt_train_result res;
    void *snap[2];
    size_t snap_len[2];
    int snapped;
} train_got;

static void got_free(train_got *g) { free(g->snap[0]), free(g->snap[1]); }

static void train_ex(const train_spec *sp, run_out *o, train_got *g) {
    memset(g, 0, sizeof *g);
    memset(o, 0, sizeof *o);
    setup s;
    setup_make_on(&s, sp->i, sp->device, sp->devices, sp->steps ? sp->steps : STEPS,
                  sp->stop_at);
    s.tc.checkpoint_every = sp->ckpt_every;
    s.tc.recompute = sp->recompute;
    ttt_seq_model m;
    ttt_error err = {0};
    ck_assert_msg(ttt_seq_model_init(&m, &s.mc, 5, &err) == TTT_OK, "%s", err.msg);
    if (sp->k >= 0) perturb_weights(&m, sp->k);
    mq_data d;
    mq_init(&d);
    d.perturb = sp->perturb;
    d.big_at = sp->big_at;
    d.snap_dir = sp->snap_dir;
    ttt_train_data td = {.user = &d, .next = mq_next, .n_state = 1, .get_state = mq_get,
                         .set_state = mq_set, .n_eval = 1, .eval_batch = mq_eval};
    char journal[4096];
    snprintf(journal, sizeof journal, "%s/journal.jsonl", sp->dir);
    ttt_train_run tr = {.ckpt_dir = sp->dir, .config_hash = "gpu", .stream_path = journal,
                        .series = "t"};
    g->status = ttt_train(&m, &s.tc, &td, &tr, &g->res, &g->err);
    if (g->status == TTT_OK) {
        read_losses(journal, o);
        o->numel = ttt_params_numel(&m.params);
        o->params = malloc(o->numel * sizeof(float));
        size_t at = 0;
        for (int p = 0; p < m.params.n; p++) {
            memcpy(o->params + at, m.params.p[p]->data, m.params.p[p]->n * sizeof(float));
            at += m.params.p[p]->n;
        }
    }
    for (int j = 0; j < 2; j++) { /* the snapshot moves to g */
        g->snap[j] = d.snap[j], g->snap_len[j] = d.snap_len[j];
        d.snap[j] = NULL;
    }
    g->snapped = d.snapped;
    mq_free(&d);
    ttt_seq_model_free(&m);
    ttt_cfg_free(s.root);
}

/* Train case i on `device` for STEPS updates (or until stop_at, resuming from `dir` when it
 * holds a checkpoint); weights perturbed by ensemble member k ≥ 0; data perturbed when asked. */
static void train(int i, const char *device, int k, int perturb_data, const char *dir,
                  int stop_at, run_out *o) {
    const train_spec sp = {.i = i, .device = device, .k = k, .perturb = perturb_data,
                           .stop_at = stop_at, .big_at = -1, .dir = dir};
    train_got g;
    train_ex(&sp, o, &g);
    ck_assert_msg(g.status == TTT_OK, "%s on %s: %s", cases[i].name, device, g.err.msg);
    got_free(&g);
}

/* The ensemble's loop: ttt_train's host step with one shard (forward with the batch's scored
 * positions as the denominator, backward, AdamW), the loss of each step as the trainer records
 * it (the summed loss over the scored positions), and when k ≥ 0 every weight multiplied by
 * 1 + u·2^-24 after each update (stream k). */
static void loop_run_n(int i, int k, int steps, long big_at, run_out *o);
static void loop_run(int i, int k, run_out *o) { loop_run_n(i, k, STEPS, -1, o); }

/* loop_run over `steps` updates with batch big_at BIG times larger (−1: none). */
static void loop_run_n(int i, int k, int steps, long big_at, run_out *o) {
    setup s;
    setup_make(&s, i, "cpu", steps, 0);
    ttt_seq_model m;
    ttt_error err = {0};
    ck_assert_msg(ttt_seq_model_init(&m, &s.mc, 5, &err) == TTT_OK, "%s", err.msg);
    ttt_adamw opt;
    ck_assert(ttt_adamw_init(&opt, &m.params, &s.tc.adamw, &err) == TTT_OK);
    mq_data d;
    mq_init(&d);
    d.big_at = big_at;
    ttt_arena a;
    ttt_arena_init(&a, 0);
    ttt_tape tape;
    ttt_tape_init(&tape);
    ttt_ctx ctx = {.arena = &a, .grad = 1, .tape = &tape};
    ttt_rng r;
    ttt_rng_seed(&r, 77 + (uint64_t)(k < 0 ? 0 : k));
    for (int step = 0; step < steps; step++) {
        ttt_seq_batch b;
        mq_next(&d, &b, &err);
        long count = 0;
        for (long j = 0; j < (long)b.B * b.T; j++) count += b.labels[j] >= 0;
        for (int p = 0; p < m.params.n; p++) ttt_tensor_grad_overwrite(&m.pt[p]);
        ttt_tensor *l = NULL;
        ttt_seq_stats st;
        ck_assert(ttt_seq_model_loss(&ctx, &m, NULL, &b, (double)count, &l, &st, NULL, &err) ==
                  TTT_OK);
        ttt_backward(&ctx, l);
        for (int p = 0; p < m.params.n; p++) ttt_tensor_grad_settle(&m.pt[p]);
        o->loss[step] = st.loss_sum / (double)st.count;
        ck_assert(ttt_adamw_step(&opt, &m.params, NULL, &err) == TTT_OK);
        if (k >= 0)
            for (int p = 0; p < m.params.n; p++)
                for (size_t j = 0; j < m.params.p[p]->n; j++) {
                    const double u = 2.0 * ttt_rng_uniform(&r) - 1.0;
                    float *w = &m.params.p[p]->data[j];
                    *w = (float)((double)*w * (1.0 + u * EPS32));
                }
        ttt_tape_reset(&tape);
        ttt_arena_reset(&a);
    }
    o->n = steps;
    o->numel = ttt_params_numel(&m.params);
    o->params = malloc(o->numel * sizeof(float));
    size_t at = 0;
    for (int p = 0; p < m.params.n; p++) {
        memcpy(o->params + at, m.params.p[p]->data, m.params.p[p]->n * sizeof(float));
        at += m.params.p[p]->n;
    }
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

static double rel_rms(const float *a, const float *b, size_t n) {
    double num = 0, den = 0;
    for (size_t j = 0; j < n; j++) {
        const double e = (double)a[j] - b[j];
        num += e * e;
        den += (double)b[j] * b[j];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* The worst ratio of |loss(s) − ref(s)| / ref(s) to tol(s) over the steps. */
static double worst_ratio(const run_out *got, const run_out *ref, const double *tol) {
    double w = 0;
    for (int s = 0; s < STEPS; s++) {
        const double e = fabs(got->loss[s] - ref->loss[s]) / fabs(ref->loss[s]);
        if (e / tol[s] > w) w = e / tol[s];
    }
    return w;
}

/* ---- the trajectory ---- */

static void trajectory_case(int i) {
    run_out cpu, gpu, ens[ENSEMBLE], ctl, base;
    char *d0 = fresh_dir(), *d1 = fresh_dir(), *d2 = fresh_dir();
    train(i, "cpu", -1, 0, d0, 0, &cpu);
    train(i, dev_name, -1, 0, d1, 0, &gpu);
    ck_assert_int_eq(cpu.n, STEPS);
    ck_assert_int_eq(gpu.n, STEPS);
    double tol[STEPS], env = 0, ptol = 0;
    loop_run(i, -1, &base);
    /* the loop is the trainer's host step: the same losses (to the rounding of their mean) */
    for (int s = 0; s < STEPS; s++)
        TU_ASSERT_LE(fabs(base.loss[s] - cpu.loss[s]), 4.0 * 0x1p-53 * fabs(cpu.loss[s]),
                     "%s: the ensemble's loop is not ttt_train's step at step %d", cases[i].name,
                     s + 1);
    for (int k = 0; k < ENSEMBLE; k++) {
        loop_run(i, k, &ens[k]);
        const double pr = rel_rms(ens[k].params, base.params, base.numel);
        if (pr > ptol) ptol = pr;
    }
    for (int s = 0; s < STEPS; s++) {
        for (int k = 0; k < ENSEMBLE; k++) {
            const double e = fabs(ens[k].loss[s] - base.loss[s]) / fabs(base.loss[s]);
            if (e > env) env = e;
        }
        tol[s] = PATHS * GROWTH * (env + LOSS_FLOOR);
    }
    const double w = worst_ratio(&gpu, &cpu, tol);
    printf("%-16s loss: worst |gpu - cpu| / tol = %.3f (tol at step %d: %.2e)", cases[i].name, w,
           STEPS, tol[STEPS - 1]);
    TU_ASSERT_LE(w, 1.0, "%s: the GPU's losses leave the CPU's by %.2f times the bound",
                 cases[i].name, w);
    const double pt = PATHS * GROWTH * (ptol + LOSS_FLOOR);
    const double pe = rel_rms(gpu.params, cpu.params, cpu.numel);
    printf("; params rel. RMS %.2e (tol %.2e)", pe, pt);
    TU_ASSERT_LE(pe, pt, "%s: final parameters %.3e from the CPU's (bound %.3e)", cases[i].name,
                 pe, pt);
    /* control: the CPU run on a perturbed first batch is rejected by the same bound */
    train(i, "cpu", -1, 1, d2, 0, &ctl);
    const double wc = worst_ratio(&ctl, &gpu, tol);
    printf("; control %.1f x tol\n", wc);
    ck_assert_msg(wc > 1.0, "%s: the control (a perturbed batch) passed: %.3f", cases[i].name,
                  wc);
    /* checkpoints across devices: stopped at STEPS/2 on the GPU, resumed on the CPU (and the
     * reverse); each ends within the bound of the uninterrupted CPU run */
    for (int dir = 0; dir < 2; dir++) {
        char *dc = fresh_dir();
        run_out a, b;
        train(i, dir ? "cpu" : dev_name, -1, 0, dc, STEPS / 2, &a);
        train(i, dir ? dev_name : "cpu", -1, 0, dc, 0, &b);
        ck_assert_int_eq(b.n, STEPS);
        const double wr = worst_ratio(&b, &cpu, tol);
        printf("%-16s resumed on %s: worst %.3f x tol\n", cases[i].name,
               dir ? dev_name : "cpu", wr);
        TU_ASSERT_LE(wr, 1.0, "%s: a run resumed on %s leaves the CPU's losses (%.2f x tol)",
                     cases[i].name, dir ? "cuda" : "cpu", wr);
        run_free(&a);
        run_free(&b);
        tu_rmtree(dc);
        free(dc);
    }
    for (int k = 0; k < ENSEMBLE; k++) run_free(&ens[k]);
    run_free(&cpu);
    run_free(&gpu);
    run_free(&ctl);
    run_free(&base);
    tu_rmtree(d0), tu_rmtree(d1), tu_rmtree(d2);
    free(d0), free(d1), free(d2);
}

START_TEST(the_first_steps_follow_the_cpu) { trajectory_case(_i); }
END_TEST

/* ---- one step's gradients ---- */

/* The gradient of one batch's loss, every parameter flat, on the host or the device. */
static float *host_grad(ttt_seq_model *m, const ttt_seq_batch *b) {
    ttt_arena a;
    ttt_arena_init(&a, 0);
    ttt_tape tape;
    ttt_tape_init(&tape);
    ttt_ctx ctx = {.arena = &a, .grad = 1, .tape = &tape};
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

static float *device_grad(ttt_seq_model *m, const ttt_seq_batch *b) {
    ttt_train_dev D;
    ttt_error err = {0};
    ck_assert_msg(ttt_train_dev_init(&D, m, ttt_device_cuda(0), &err) == TTT_OK, "%s", err.msg);
    double loss;
    ttt_seq_stats st;
    long count = 0;
    for (long j = 0; j < (long)b->B * b->T; j++) count += b->labels[j] >= 0;
    ck_assert_msg(ttt_train_dev_step(&D, b, 1, (double)count, &loss, &st, &err) == TTT_OK, "%s",
                  err.msg);
    ck_assert_int_eq(st.count, count);
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

START_TEST(one_step_gradients_match_the_cpu) {
    const int i = _i;
    setup s;
    setup_make(&s, i, "cpu", STEPS, 0);
    ttt_seq_model m;
    ttt_error err = {0};
    ck_assert_msg(ttt_seq_model_init(&m, &s.mc, 5, &err) == TTT_OK, "%s", err.msg);
    mq_data d;
    mq_init(&d);
    ttt_seq_batch b;
    mq_next(&d, &b, &err);
    float *gc = host_grad(&m, &b), *gd = device_grad(&m, &b);
    /* the spread: the CPU gradient from weights perturbed by one rounding */
    const size_t N = ttt_params_numel(&m.params);
    float *w0 = malloc(N * sizeof(float));
    size_t at = 0;
    for (int p = 0; p < m.params.n; p++) {
        memcpy(w0 + at, m.params.p[p]->data, m.params.p[p]->n * sizeof(float));
        at += m.params.p[p]->n;
    }
    double *spread = calloc((size_t)m.params.n, sizeof(double));
    for (int k = 0; k < ENSEMBLE; k++) {
        perturb_weights(&m, k);
        float *gk = host_grad(&m, &b);
        at = 0;
        for (int p = 0; p < m.params.n; p++) {
            const double e = rel_rms(gk + at, gc + at, m.params.p[p]->n);
            if (e > spread[p]) spread[p] = e;
            memcpy(m.params.p[p]->data, w0 + at, m.params.p[p]->n * sizeof(float));
            at += m.params.p[p]->n;
        }
        free(gk);
    }
    const double K = (double)BATCH * SEQ, gamma = 2.0 * (K + 2.0);
    double worst = 0;
    at = 0;
    for (int p = 0; p < m.params.n; p++) {
        const size_t n = m.params.p[p]->n;
        const double e = rel_rms(gd + at, gc + at, n), tol = gamma * (spread[p] + EPS32);
        if (e / tol > worst) worst = e / tol;
        TU_ASSERT_LE(e, tol, "%s: gradient of %s: rel. RMS %.3e > %.3e", cases[i].name,
                     m.params.p[p]->name, e, tol);
        at += n;
    }
    printf("%-16s gradients: worst ratio to the bound %.3f\n", cases[i].name, worst);
    /* control: the gradient of a perturbed batch (sequence 0 replaced) is rejected */
    draw(&d, 0, 1);
    float *gx = device_grad(&m, &b);
    double ctl = 0;
    at = 0;
    for (int p = 0; p < m.params.n; p++) {
        const size_t n = m.params.p[p]->n;
        const double r = rel_rms(gx + at, gc + at, n) / (gamma * (spread[p] + EPS32));
        if (r > ctl) ctl = r;
        at += n;
    }
    ck_assert_msg(ctl > 1.0, "%s: the control (a perturbed batch) passed: %.3f", cases[i].name,
                  ctl);
    free(gx), free(gc), free(gd), free(w0), free(spread);
    mq_free(&d);
    ttt_seq_model_free(&m);
    ttt_cfg_free(s.root);
}
END_TEST

/* ---- a vector task, and a NaN in its data ---- */

/* Features in, one output out (the regression task's path: inputs, targets and mask copied to
 * the device, the squared error's statistics read back); the 4th batch holds a NaN. */
typedef struct vec_data {
    float x[4 * 3 * 2], y[4 * 3], mask[4 * 3];
    int calls;
} vec_data;

static ttt_status vec_next(void *user, ttt_seq_batch *out, ttt_error *err) {
    (void)err;
    vec_data *d = user;
    for (int i = 0; i < 24; i++) d->x[i] = (float)((i * 7 + d->calls) % 5) - 2.0f;
    for (int i = 0; i < 12; i++) {
        d->y[i] = d->x[2 * i] - d->x[2 * i + 1];
        d->mask[i] = i % 3 != 0; /* some positions unscored */
    }
    if (++d->calls == 4) d->x[5] = NAN;
    *out = (ttt_seq_batch){.B = 4, .T = 3, .inputs = d->x, .targets = d->y, .mask = d->mask};
    return TTT_OK;
}

static void vec_get(void *user, uint64_t *w) { w[0] = (uint64_t)((vec_data *)user)->calls; }
static ttt_status vec_set(void *user, const uint64_t *w, ttt_error *err) {
    (void)err;
    ((vec_data *)user)->calls = (int)w[0];
    return TTT_OK;
}

static ttt_status vec_run(const char *device, ttt_error *err, double *loss1) {
    ttt_cfg_node *root = NULL;
    char text[512];
    snprintf(text, sizeof text,
             "model: {d_model: 8, heads: 2, layers: 1, mlp: 0}\n"
             "layer: {preset: deltanet}\n"
             "train: {steps: 10, batch: 4, shards: 1, warmup: 0, log_every: 1,\n"
             "        checkpoint_every: 2, device: %s}\n",
             device);
    ck_assert_int_eq(ttt_cfg_load_string(text, "<v>", &root, err), TTT_OK);
    ttt_seq_model_io io = {.in_dim = 2, .out_dim = 1, .seq_len = 3};
    ttt_seq_model_config mc;
    ttt_train_config tc;
    ck_assert_msg(ttt_seq_model_parse((ttt_cfg_node *)ttt_cfg_get(root, "model"),
                                      (ttt_cfg_node *)ttt_cfg_get(root, "layer"), &io, &mc,
                                      err) == TTT_OK,
                  "%s", err->msg);
    ck_assert_msg(ttt_train_config_parse((ttt_cfg_node *)ttt_cfg_get(root, "train"), &tc, err) ==
                      TTT_OK,
                  "%s", err->msg);
    ttt_seq_model m;
    ck_assert_int_eq(ttt_seq_model_init(&m, &mc, 1, err), TTT_OK);
    vec_data d = {0};
    ttt_train_data td = {.user = &d, .next = vec_next, .n_state = 1, .get_state = vec_get,
                         .set_state = vec_set};
    char *dir = fresh_dir(), journal[4096];
    snprintf(journal, sizeof journal, "%s/journal.jsonl", dir);
    ttt_train_run tr = {.ckpt_dir = dir, .config_hash = "v", .stream_path = journal,
                        .series = "t"};
    ttt_train_result res;
    const ttt_status st = ttt_train(&m, &tc, &td, &tr, &res, err);
    run_out o = {0};
    read_losses(journal, &o);
    ck_assert_int_eq(o.n, 3);
    *loss1 = o.loss[0];
    /* the message names the run's folder: "DIR" in its place, so that two runs compare */
    char *at = strstr(err->msg, dir);
    if (at) {
        const size_t n = strlen(dir);
        memmove(at + 3, at + n, strlen(at + n) + 1);
        memcpy(at, "DIR", 3);
    }
    /* the checkpoint of step 2 before the NaN's step resumes: the same run again stops at the
     * same step with the same message */
    ttt_seq_model m2;
    ck_assert_int_eq(ttt_seq_model_init(&m2, &mc, 1, err), TTT_OK);
    vec_data d2 = {0};
    td.user = &d2;
    ttt_error e2 = {0};
    const ttt_status st2 = ttt_train(&m2, &tc, &td, &tr, &res, &e2);
    ck_assert_int_eq(st2, st);
    ck_assert_int_eq(res.resumed_from, 2);
    ttt_seq_model_free(&m2);
    ttt_seq_model_free(&m);
    ttt_cfg_free(root);
    tu_rmtree(dir);
    free(dir);
    return st;
}

/* The vector path on the device gives the CPU's loss at the first step (the forward from the
 * same weights: within the trajectory bound's floor, PATHS·GROWTH·16ε, as at step 1 of the
 * trajectory cases), and the NaN of the 4th batch stops both runs at the same step with the same
 * message, naming the checkpoint of step 2; run again, each resumes from it and stops there
 * again. */
START_TEST(a_vector_task_and_a_nan_behave_as_on_the_cpu) {
    ttt_error ec = {0}, eg = {0};
    double lc, lg;
    const ttt_status sc = vec_run("cpu", &ec, &lc), sg = vec_run(dev_name, &eg, &lg);
    ck_assert_int_eq(sc, TTT_ERR_NUMERIC);
    ck_assert_int_eq(sg, TTT_ERR_NUMERIC);
    ck_assert_msg(strstr(ec.msg, "step 4: the training loss is nan"), "%s", ec.msg);
    ck_assert_msg(strcmp(ec.msg, eg.msg) == 0, "cpu: %s\ncuda: %s", ec.msg, eg.msg);
    const double e = fabs(lg - lc) / fabs(lc), tol = PATHS * GROWTH * LOSS_FLOOR;
    printf("vector task: loss at step 1 %.3e apart (bound %.2e)\n", e, tol);
    TU_ASSERT_LE(e, tol, "vector task: the GPU's loss at step 1 is %.3e from the CPU's", e);
}
END_TEST

/* ---- AdamW ---- */

static void adamw_case(double clip) {
    setup s;
    setup_make(&s, 1, "cpu", STEPS, 0);
    s.tc.adamw.clip_norm = clip;
    ttt_seq_model m;
    ttt_error err = {0};
    ck_assert_msg(ttt_seq_model_init(&m, &s.mc, 5, &err) == TTT_OK, "%s", err.msg);
    ttt_train_dev D;
    ck_assert_msg(ttt_train_dev_init(&D, &m, ttt_device_cuda(0), &err) == TTT_OK, "%s", err.msg);
    ttt_adamw oh, od;
    ck_assert(ttt_adamw_init(&oh, &m.params, &s.tc.adamw, &err) == TTT_OK);
    ck_assert(ttt_adamw_init(&od, &m.params, &s.tc.adamw, &err) == TTT_OK);
    const size_t N = ttt_params_numel(&m.params);
    float *w0 = malloc(N * sizeof(float)), *wd = malloc(N * sizeof(float));
    ttt_rng r;
    ttt_rng_seed(&r, 3);
    size_t at = 0;
    for (int p = 0; p < m.params.n; p++) {
        memcpy(w0 + at, m.params.p[p]->data, m.params.p[p]->n * sizeof(float));
        at += m.params.p[p]->n;
    }
    /* three updates with gradients of norm about 4 (clipped when clip = 1) */
    for (int step = 0; step < 3; step++) {
        for (int p = 0; p < m.params.n; p++) {
            ttt_param *q = m.params.p[p];
            for (size_t j = 0; j < q->n; j++)
                q->grad[j] = (float)(0.02 * (2.0 * ttt_rng_uniform(&r) - 1.0));
            ck_assert(ttt_device_copy(D.grad + D.off[p], D.device, q->grad, ttt_device_host(),
                                      q->n * sizeof(float), D.stream, &err) == TTT_OK);
        }
        ttt_adamw_stats sh, sd;
        ck_assert(ttt_adamw_step(&oh, &m.params, &sh, &err) == TTT_OK);
        ck_assert_msg(ttt_train_dev_adamw(&D, &od, &m.params, &sd, &err) == TTT_OK, "%s",
                      err.msg);
        /* the norm: double sums in two orders, within N·2^-53 relative */
        TU_ASSERT_LE(fabs(sd.grad_norm - sh.grad_norm), (double)N * 0x1p-53 * sh.grad_norm,
                     "gradient norm %.17g on the device, %.17g on the host", sd.grad_norm,
                     sh.grad_norm);
        ck_assert_int_eq(sd.clipped, sh.clipped);
    }
    /* the device's weights (host params hold the host's update) */
    at = 0;
    for (int p = 0; p < m.params.n; p++) {
        ck_assert(ttt_device_copy(wd + at, ttt_device_host(), D.data + D.off[p], D.device,
                                  m.params.p[p]->n * sizeof(float), D.stream, &err) == TTT_OK);
        at += m.params.p[p]->n;
    }
    ck_assert(ttt_device_sync(D.device, D.stream, &err) == TTT_OK);
    double worst = 0;
    at = 0;
    for (int p = 0; p < m.params.n; p++) {
        const ttt_param *q = m.params.p[p];
        for (size_t j = 0; j < q->n; j++) {
            const double e = fabs((double)wd[at + j] - q->data[j]);
            /* with clipping: the scale one rounding apart moves each of the 3 updates by ε of
             * its size, and each update's two roundings of w (the decay, the step) may then
             * fall the other way: 3·(2ε|w|) + 3·ε|Δw| < 8ε(|w| + |Δw|) */
            const double tol =
                clip > 0 ? 8.0 * EPS32 * (fabs((double)q->data[j]) +
                                          fabs((double)q->data[j] - w0[at + j]))
                         : 0;
            if (clip > 0) {
                if (e > tol) worst = e / tol > worst ? e / tol : worst;
                TU_ASSERT_LE(e, tol, "%s[%zu]: %.9g on the device, %.9g on the host", q->name, j,
                             wd[at + j], q->data[j]);
            } else {
                ck_assert_msg(memcmp(&wd[at + j], &q->data[j], sizeof(float)) == 0,
                              "%s[%zu]: %.9g on the device, %.9g on the host (not the same "
                              "bits)",
                              q->name, j, wd[at + j], q->data[j]);
            }
        }
        at += q->n;
    }
    /* control: one more update on each side, the device's gradient one ulp off in one element:
     * its weight must differ */
    for (int p = 0; p < m.params.n; p++) {
        ttt_param *q = m.params.p[p];
        for (size_t j = 0; j < q->n; j++)
            q->grad[j] = (float)(0.02 * (2.0 * ttt_rng_uniform(&r) - 1.0));
        ck_assert(ttt_device_copy(D.grad + D.off[p], D.device, q->grad, ttt_device_host(),
                                  q->n * sizeof(float), D.stream, &err) == TTT_OK);
    }
    const ttt_param *q0 = m.params.p[0];
    float moved = q0->grad[0] * (1.0f + 0x1p-8f);
    ck_assert(ttt_device_copy(D.grad + D.off[0], D.device, &moved, ttt_device_host(),
                              sizeof(float), D.stream, &err) == TTT_OK);
    ck_assert(ttt_device_sync(D.device, D.stream, &err) == TTT_OK);
    ck_assert(ttt_adamw_step(&oh, &m.params, NULL, &err) == TTT_OK);
    ck_assert(ttt_train_dev_adamw(&D, &od, &m.params, NULL, &err) == TTT_OK);
    float w_dev;
    ck_assert(ttt_device_copy(&w_dev, ttt_device_host(), D.data, D.device, sizeof(float),
                              D.stream, &err) == TTT_OK);
    ck_assert(ttt_device_sync(D.device, D.stream, &err) == TTT_OK);
    ck_assert_msg(memcmp(&w_dev, &q0->data[0], sizeof(float)) != 0,
                  "the control (a gradient one ulp off) gave the host's weight");
    ttt_adamw_free(&oh);
    ttt_adamw_free(&od);
    ttt_train_dev_free(&D);
    free(w0), free(wd);
    ttt_seq_model_free(&m);
    ttt_cfg_free(s.root);
}

START_TEST(adamw_on_the_device_is_the_hosts_update) {
    adamw_case(0.0);
    adamw_case(1.0);
}
END_TEST

/* ---- faults: out of device memory, kill -9 (docs/hardening.md "Faults on the GPU") ---- */

#define FAULT_CASE 2   /* gated_deltanet */
#define FAULT_CKPT 5   /* a checkpoint every 5 steps */
#define BIG_AT 6       /* batch 6 (step 7) holds BIG·BATCH sequences */
#define KILL_STEPS 60 /* the kill -9 case's run: long enough to be killed mid-run */

static double worst_ratio_n(const run_out *got, const run_out *ref, const double *tol, int n) {
    double w = 0;
    for (int s = 0; s < n; s++) {
        const double e = fabs(got->loss[s] - ref->loss[s]) / fabs(ref->loss[s]);
        if (e / tol[s] > w) w = e / tol[s];
    }
    return w;
}

/* The trajectory bound of the header for case i over `steps` updates with batch big_at large:
 * tol(s) for the losses, *ptol for the final parameters' relative RMS difference. Two float32
 * runs of the same trainer on the same device differ where the order of their float sums differs
 * (the atomics of the embedding's and the forms' backward, ops_shape.cu and chunkwise.cu): each
 * is a float32 path within tol of the exact one, so they are PATHS·tol apart at most, as the GPU
 * and the CPU are. */
static void trajectory_bound(int i, int steps, long big_at, double *tol, double *ptol) {
    run_out base, ens;
    loop_run_n(i, -1, steps, big_at, &base);
    double spread[MAX_STEPS] = {0}, pr = 0;
    for (int k = 0; k < ENSEMBLE; k++) {
        loop_run_n(i, k, steps, big_at, &ens);
        const double p = rel_rms(ens.params, base.params, base.numel);
        if (p > pr) pr = p;
        for (int s = 0; s < steps; s++) {
            const double e = fabs(ens.loss[s] - base.loss[s]) / fabs(base.loss[s]);
            if (e > spread[s]) spread[s] = e;
        }
        run_free(&ens);
    }
    double env = 0; /* the largest spread up to step s */
    for (int s = 0; s < steps; s++) {
        if (spread[s] > env) env = spread[s];
        tol[s] = PATHS * GROWTH * (env + LOSS_FLOOR);
    }
    *ptol = PATHS * GROWTH * (pr + LOSS_FLOOR);
    run_free(&base);
}

/* The same bits: every loss and every final parameter. */
static int same_bits(const run_out *a, const run_out *b) {
    return a->n == b->n && a->numel == b->numel &&
           memcmp(a->loss, b->loss, (size_t)a->n * sizeof(double)) == 0 &&
           memcmp(a->params, b->params, a->numel * sizeof(float)) == 0;
}

/* `got` is the run `ref` (resumed or not): the same bits, or within the trajectory bound; and
 * the control (a run on a perturbed first batch) is rejected by that bound. Returns whether the
 * bits were the same. */
static int same_run(const char *what, int i, int steps, long big_at, const run_out *got,
                    const run_out *ref) {
    ck_assert_int_eq(got->n, steps);
    ck_assert_int_eq(ref->n, steps);
    const int bits = same_bits(got, ref);
    double tol[MAX_STEPS], pt;
    trajectory_bound(i, steps, big_at, tol, &pt);
    const double w = worst_ratio_n(got, ref, tol, steps);
    const double pe = rel_rms(got->params, ref->params, ref->numel);
    char *dc = fresh_dir();
    const train_spec sc = {.i = i, .device = "cpu", .k = -1, .perturb = 1, .steps = steps,
                           .big_at = big_at, .dir = dc};
    run_out ctl;
    train_got g;
    train_ex(&sc, &ctl, &g);
    ck_assert_msg(g.status == TTT_OK, "%s", g.err.msg);
    got_free(&g);
    const double wc = worst_ratio_n(&ctl, ref, tol, steps);
    printf("%s: %s; losses worst %.3f x tol, params rel. RMS %.2e (tol %.2e); control %.1f x "
           "tol\n",
           what, bits ? "the same bits" : "not the same bits", w, pe, pt, wc);
    TU_ASSERT_LE(w, 1.0, "%s: the losses leave the uninterrupted run's by %.2f x the bound", what,
                 w);
    TU_ASSERT_LE(pe, pt, "%s: final parameters %.3e from the uninterrupted run's (bound %.3e)",
                 what, pe, pt);
    ck_assert_msg(wc > 1.0, "%s: the control (a perturbed batch) passed: %.3f", what, wc);
    run_free(&ctl);
    tu_rmtree(dc);
    free(dc);
    return bits;
}

/* A run capped by the device pool's limit (device.h ttt_device_pool_set_limit) halfway between
 * what its small steps take and what its large step 7 takes: step 7 fails with a message naming
 * the step, what was asked and the last good checkpoint; the pool hands out what it did before
 * the run (nothing leaked); the checkpoint of step 5 has the bytes it had when the large batch
 * was drawn; and the same run resumed without the cap is the uninterrupted run. */
START_TEST(out_of_device_memory_mid_run_keeps_the_last_checkpoint) {
    const int i = FAULT_CASE;
    const ttt_device dev = ttt_device_cuda(0);
    ttt_error err = {0};
    char *dref = fresh_dir(), *dsmall = fresh_dir(), *dcap = fresh_dir();
    run_out ref, small, capped, resumed;
    train_got g;
    train_spec sp = {.i = i, .device = dev_name, .k = -1, .ckpt_every = FAULT_CKPT,
                     .big_at = BIG_AT, .dir = dref};
    train_ex(&sp, &ref, &g);
    ck_assert_msg(g.status == TTT_OK, "uninterrupted: %s", g.err.msg);
    const size_t peak_big = g.res.device_peak;
    got_free(&g);
    sp.dir = dsmall;
    sp.stop_at = BIG_AT; /* the small steps alone */
    train_ex(&sp, &small, &g);
    ck_assert_msg(g.status == TTT_OK, "small steps: %s", g.err.msg);
    const size_t peak_small = g.res.device_peak;
    got_free(&g);
    printf("device pool peak: %zu bytes with batches of %d sequences, %zu with one of %d\n",
           peak_small, BATCH, peak_big, BIG * BATCH);
    ck_assert_msg(peak_small > 0 && peak_big > peak_small,
                  "the batch of %d sequences took no more of the device pool (%zu bytes) than "
                  "those of %d (%zu): this case cannot run out of memory mid-run",
                  BIG * BATCH, peak_big, BATCH, peak_small);
    ttt_device_pool_stats before, after;
    ck_assert_msg(ttt_device_pool_stats_get(dev, &before, &err) == TTT_OK, "%s", err.msg);
    const size_t cap = peak_small + (peak_big - peak_small) / 2;
    const size_t old = ttt_device_pool_set_limit(cap);
    sp.dir = sp.snap_dir = dcap;
    sp.stop_at = 0;
    train_ex(&sp, &capped, &g);
    ttt_device_pool_set_limit(old);
    ck_assert_msg(ttt_device_pool_stats_get(dev, &after, &err) == TTT_OK, "%s", err.msg);
    printf("capped at %zu bytes: %s\n", cap, g.err.msg);
    ck_assert_msg(g.status == TTT_ERR_NOMEM || g.status == TTT_ERR_DEVICE, "status %d: %s",
                  (int)g.status, g.err.msg);
    char want[160];
    snprintf(want, sizeof want, "the last good checkpoint (step %d)", FAULT_CKPT);
    ck_assert_msg(strstr(g.err.msg, "step 7") && strstr(g.err.msg, "out of") &&
                      strstr(g.err.msg, "memory") && strstr(g.err.msg, "iB") &&
                      strstr(g.err.msg, "TTT_CUDA_POOL_LIMIT") && strstr(g.err.msg, want),
                  "unclear message: %s", g.err.msg);
    ck_assert_msg(after.used == before.used,
                  "the failed run left %zu bytes of the device pool handed out (%zu before)",
                  after.used, before.used);
    ck_assert_msg(g.snapped && g.snap_len[0] > 0, "no checkpoint when the large batch was drawn");
    for (int j = 0; j < 2; j++) {
        char p[4200];
        snprintf(p, sizeof p, "%s/%s", dcap, ckpt_files[j]);
        size_t n;
        void *now = read_bytes(p, &n);
        ck_assert_msg(n == g.snap_len[j] && (n == 0 || memcmp(now, g.snap[j], n) == 0),
                      "%s changed after the failure (%zu bytes, %zu before)", ckpt_files[j], n,
                      g.snap_len[j]);
        free(now);
    }
    got_free(&g);
    sp.snap_dir = NULL; /* the same command again, without the cap */
    train_ex(&sp, &resumed, &g);
    ck_assert_msg(g.status == TTT_OK, "resumed: %s", g.err.msg);
    ck_assert_int_eq(g.res.resumed_from, FAULT_CKPT);
    got_free(&g);
    same_run("out of memory at step 7, resumed", i, STEPS, BIG_AT, &resumed, &ref);
    run_free(&ref), run_free(&small), run_free(&resumed);
    tu_rmtree(dref), tu_rmtree(dsmall), tu_rmtree(dcap);
    free(dref), free(dsmall), free(dcap);
}
END_TEST

/* The run of sp in a fresh folder against ref (the same batches): same_run's checks, named
 * `what`; its device pool's peak, and in *bits (when not NULL) whether the bits were the same. */
static size_t variant_same_run(train_spec sp, const char *what, const run_out *ref, int *bits) {
    char *dk = fresh_dir();
    sp.dir = dk;
    run_out o;
    train_got g;
    train_ex(&sp, &o, &g);
    ck_assert_msg(g.status == TTT_OK, "%s: %s", what, g.err.msg);
    const size_t peak = g.res.device_peak;
    got_free(&g);
    const int same = same_run(what, sp.i, STEPS, -1, &o, ref);
    if (bits) *bits = same;
    run_free(&o);
    tu_rmtree(dk);
    free(dk);
    return peak;
}

/* ---- recomputed blocks (train.recompute; docs/training.md "Memory of a training step") ---- */

/* Every mixer on the device with its first block and with both blocks recomputed in the
 * backward: the run that keeps every block's activations, step for step — the same bits, or
 * within the trajectory bound where the device's atomics (the embedding's scatter-add) order
 * the same sums differently — with the control (a perturbed batch) rejected by that bound; and
 * the device pool's peak no higher. tests/test_train_memory.c holds the host's recomputation to
 * the same bits. */
START_TEST(recomputed_blocks_follow_the_kept_run) {
    const int i = _i;
    char *d0 = fresh_dir();
    run_out ref;
    const train_spec s0 = {.i = i, .device = dev_name, .k = -1, .big_at = -1, .dir = d0};
    train_got g0;
    train_ex(&s0, &ref, &g0);
    ck_assert_msg(g0.status == TTT_OK, "%s: %s", cases[i].name, g0.err.msg);
    got_free(&g0);
    for (int r = 1; r <= 2; r++) {
        char what[128];
        snprintf(what, sizeof what, "%s, recompute %d", cases[i].name, r);
        const train_spec sp = {.i = i, .device = dev_name, .k = -1, .big_at = -1,
                               .recompute = r};
        int bits = 0;
        const size_t peak = variant_same_run(sp, what, &ref, &bits);
        /* the host's recomputation is exact (tests/test_train_memory.c): with the CPU standing
         * in for the device, the bits must be the same */
        if (strcmp(dev_name, "cpu") == 0)
            ck_assert_msg(bits, "%s: the CPU's recomputed run is not the kept run's bits", what);
        printf("%s: device pool peak %zu bytes (kept: %zu)\n", what, peak, g0.res.device_peak);
        ck_assert_msg(peak <= g0.res.device_peak,
                      "%s: the pool's peak %zu is above the kept run's %zu", what, peak,
                      g0.res.device_peak);
    }
    run_free(&ref);
    tu_rmtree(d0);
    free(d0);
}
END_TEST

/* ---- several ranks (docs/scaling.md "Several GPUs") ---- */

/* The mixers the rank cases run: softmax attention, the gated delta rule, GLA's per-key gate. */
static const int rank_cases[] = {0, 2, 3};

/* train.devices over one GPU: one rank (its gradient through NCCL, a group of one), two and
 * three ranks sharing the GPU (the ordered sum; three split the batch of 8 as 2, 3, 3). Each is
 * the single-GPU run of the same batches: the same bits, or within the trajectory bound (a rank
 * sums its rows' contributions apart, and the ranks' gradients are then added: another order of
 * the same float32 sums), with the control (a perturbed batch) rejected by that bound. And the
 * replicas end with the same weights (ttt_train checks it at the end of every run: a run whose
 * replicas differed fails). */
START_TEST(ranks_on_one_gpu_are_the_single_gpu_run) {
    const int i = rank_cases[_i];
    static const char *const devs[] = {"cuda:0", "cuda:0,cuda:0", "cuda:0,cuda:0,cuda:0"};
    char *d0 = fresh_dir();
    run_out ref;
    train(i, "cuda", -1, 0, d0, 0, &ref);
    for (int k = 0; k < 3; k++) {
        char what[128];
        snprintf(what, sizeof what, "%s, %d rank%s (%s)", cases[i].name, k + 1, k ? "s" : "",
                 devs[k]);
        const train_spec sp = {.i = i, .device = "cuda", .devices = devs[k], .k = -1,
                               .big_at = -1};
        variant_same_run(sp, what, &ref, NULL);
    }
    run_free(&ref);
    tu_rmtree(d0);
    free(d0);
}
END_TEST

/* A rank that fails mid-run loses no more than its step: two ranks sharing the GPU, the device
 * pool capped between what the small steps and the large step 7 take, no periodic checkpoint:
 * the run stops at step 7 saying that the checkpoint of step 6 was written; the same run again
 * (without the cap) resumes from step 6 and is the uninterrupted two-rank run (same bits or
 * within the trajectory bound, with its control). */
START_TEST(a_failed_rank_loses_only_its_step) {
    const int i = FAULT_CASE;
    char *dref = fresh_dir(), *dsmall = fresh_dir(), *dcap = fresh_dir();
    run_out ref, small, capped, resumed;
    train_got g;
    train_spec sp = {.i = i, .device = "cuda", .devices = "cuda:0,cuda:0", .k = -1,
                     .ckpt_every = 0, .big_at = BIG_AT, .dir = dref};
    train_ex(&sp, &ref, &g);
    ck_assert_msg(g.status == TTT_OK, "uninterrupted: %s", g.err.msg);
    const size_t peak_big = g.res.device_peak;
    got_free(&g);
    sp.dir = dsmall;
    sp.stop_at = BIG_AT;
    train_ex(&sp, &small, &g);
    ck_assert_msg(g.status == TTT_OK, "small steps: %s", g.err.msg);
    const size_t peak_small = g.res.device_peak;
    got_free(&g);
    ck_assert_msg(peak_small > 0 && peak_big > peak_small, "no larger step: %zu, %zu",
                  peak_small, peak_big);
    const size_t old = ttt_device_pool_set_limit(peak_small + (peak_big - peak_small) / 2);
    sp.dir = dcap;
    sp.stop_at = 0;
    train_ex(&sp, &capped, &g);
    ttt_device_pool_set_limit(old);
    printf("two ranks, capped: %s\n", g.err.msg);
    ck_assert_msg(g.status == TTT_ERR_NOMEM || g.status == TTT_ERR_DEVICE, "status %d: %s",
                  (int)g.status, g.err.msg);
    char want[128];
    snprintf(want, sizeof want, "the checkpoint of step %d, the last completed", BIG_AT);
    ck_assert_msg(strstr(g.err.msg, "step 7") && strstr(g.err.msg, "rank ") &&
                      strstr(g.err.msg, want),
                  "unclear message: %s", g.err.msg);
    got_free(&g);
    train_ex(&sp, &resumed, &g);
    ck_assert_msg(g.status == TTT_OK, "resumed: %s", g.err.msg);
    ck_assert_int_eq(g.res.resumed_from, BIG_AT);
    got_free(&g);
    same_run("two ranks, out of memory at step 7, resumed from step 6", i, STEPS, BIG_AT,
             &resumed, &ref);
    run_free(&ref), run_free(&small), run_free(&resumed);
    tu_rmtree(dref), tu_rmtree(dsmall), tu_rmtree(dcap);
    free(dref), free(dsmall), free(dcap);
}
END_TEST

typedef struct big_data {
    int *tokens, *labels;
    int B, T;
} big_data;

static ttt_status big_next(void *user, ttt_seq_batch *out, ttt_error *err) {
    (void)err;
    const big_data *d = user;
    *out = (ttt_seq_batch){.B = d->B, .T = d->T, .tokens = d->tokens, .labels = d->labels};
    return TTT_OK;
}

/* Memory the device does not have: the pool's own failure (cudaMallocFromPoolAsync, no cap) is
 * TTT_ERR_DEVICE naming the size and the use, and the device works on afterwards; a training
 * step whose first activation is larger than the device (a batch of 10^7 tokens of width 4096)
 * stops at step 1 with TTT_ERR_NOMEM naming the size, and leaves nothing handed out. */
START_TEST(more_than_the_device_has_is_a_clean_error) {
    const ttt_device dev = ttt_device_cuda(0);
    ttt_error err = {0};
    size_t free_b, total_b;
    ck_assert_msg(ttt_device_mem_info(dev, &free_b, &total_b, &err) == TTT_OK, "%s", err.msg);
    const size_t old = ttt_device_pool_set_limit(0);
    ttt_device_pool_stats before, after;
    ck_assert(ttt_device_pool_stats_get(dev, &before, &err) == TTT_OK);
    ttt_device_buffer b;
    ttt_status st = ttt_device_alloc(&b, dev, 2 * total_b, NULL, "a test buffer", &err);
    printf("twice the device (%zu bytes): %s\n", 2 * total_b, err.msg);
    ck_assert_int_eq(st, TTT_ERR_DEVICE);
    ck_assert_ptr_null(b.ptr);
    ck_assert_msg(strstr(err.msg, "out of memory") && strstr(err.msg, "a test buffer") &&
                      strstr(err.msg, "GiB") && strstr(err.msg, "cuda:0"),
                  "unclear message: %s", err.msg);
    ck_assert_int_eq(ttt_device_alloc(&b, dev, 1 << 20, NULL, "a test buffer", &err), TTT_OK);
    ttt_device_free(&b);
    /* the trainer: one layer of width 4096; T·d·4 bytes per sequence of the embedding's output */
    const int T = 32, d = 4096;
    const size_t per_seq = (size_t)T * d * sizeof(float);
    const int B = (int)(total_b / per_seq + total_b / per_seq / 5 + 1); /* 1.2 × the device */
    char text[512];
    snprintf(text, sizeof text,
             "model: {d_model: %d, heads: 32, layers: 1, mlp: 0}\n"
             "layer: {preset: deltanet}\n"
             "train: {steps: 2, batch: %d, shards: 1, warmup: 0, log_every: 1, device: cuda}\n",
             d, B);
    ttt_cfg_node *root = NULL;
    ck_assert_msg(ttt_cfg_load_string(text, "<big>", &root, &err) == TTT_OK, "%s", err.msg);
    ttt_seq_model_io io = {.vocab = 32, .seq_len = T};
    ttt_seq_model_config mc;
    ttt_train_config tc;
    ck_assert_msg(ttt_seq_model_parse((ttt_cfg_node *)ttt_cfg_get(root, "model"),
                                      (ttt_cfg_node *)ttt_cfg_get(root, "layer"), &io, &mc,
                                      &err) == TTT_OK,
                  "%s", err.msg);
    ck_assert_msg(ttt_train_config_parse((ttt_cfg_node *)ttt_cfg_get(root, "train"), &tc, &err) ==
                      TTT_OK,
                  "%s", err.msg);
    ttt_seq_model m;
    ck_assert_msg(ttt_seq_model_init(&m, &mc, 1, &err) == TTT_OK, "%s", err.msg);
    big_data dd = {.B = B, .T = T}; /* tokens i mod 32, labels the next */
    const size_t n = (size_t)B * T;
    dd.tokens = malloc(n * sizeof(int));
    dd.labels = malloc(n * sizeof(int));
    ck_assert(dd.tokens && dd.labels);
    for (size_t j = 0; j < n; j++) dd.tokens[j] = (int)(j % 32), dd.labels[j] = (int)((j + 1) % 32);
    ttt_train_data td = {.user = &dd, .next = big_next};
    ttt_train_run tr = {.config_hash = "big", .series = "t"};
    ttt_train_result res;
    st = ttt_train(&m, &tc, &td, &tr, &res, &err);
    ttt_error ignore = {0};
    (void)ttt_device_pool_stats_get(dev, &after, &ignore);
    printf("a batch of %d x %d tokens of width %d: %s\n", B, T, d, err.msg);
    ck_assert_msg(st == TTT_ERR_NOMEM, "status %d: %s", (int)st, err.msg);
    ck_assert_msg(strstr(err.msg, "step 1") && strstr(err.msg, "out of device memory") &&
                      strstr(err.msg, "GiB") && strstr(err.msg, "no checkpoint was written yet"),
                  "unclear message: %s", err.msg);
    ck_assert_msg(after.used == before.used,
                  "the failed run left %zu bytes of the device pool handed out (%zu before)",
                  after.used, before.used);
    ttt_device_pool_set_limit(old);
    free(dd.tokens), free(dd.labels);
    ttt_seq_model_free(&m);
    ttt_cfg_free(root);
    /* and the device trains on */
    char *dir = fresh_dir();
    run_out o;
    train(1, dev_name, -1, 0, dir, 0, &o);
    ck_assert_int_eq(o.n, STEPS);
    run_free(&o);
    tu_rmtree(dir);
    free(dir);
}
END_TEST

/* ---- kill -9 ---- */

static const char *child_dir; /* the child's run folder (--child DEVICE DIR) */

/* The child: the kill case's run, a checkpoint every step, into child_dir. */
START_TEST(child_run) {
    const train_spec sp = {.i = FAULT_CASE, .device = dev_name, .k = -1, .steps = KILL_STEPS,
                           .ckpt_every = 1, .big_at = -1, .dir = child_dir};
    run_out o;
    train_got g;
    train_ex(&sp, &o, &g);
    ck_assert_msg(g.status == TTT_OK, "%s", g.err.msg);
    got_free(&g);
    run_free(&o);
}
END_TEST

static long file_size(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 ? (long)st.st_size : -1;
}

static void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* This program again (a fresh process: a CUDA context does not survive fork) as the child. */
static pid_t spawn_child(const char *dir, const char *errpath) {
    char self[4096];
    const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    ck_assert(n > 0);
    self[n] = '\0';
    const pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        if (!freopen(errpath, "w", stderr) || !freopen("/dev/null", "w", stdout)) _exit(99);
        execl(self, self, "--child", dev_name, dir, (char *)NULL);
        _exit(98);
    }
    return pid;
}

/* kill -9 of a training process at random moments after it took a step (possibly while it
 * writes a checkpoint), three times, then the same run again to the end: the uninterrupted
 * run's losses and parameters, the same bits on the CPU; on the GPU the same bits or within the
 * trajectory bound (trajectory_bound: the atomics of the backward sum in an order that may
 * differ from run to run). */
START_TEST(kill_9_then_resume_is_the_uninterrupted_run) {
    const int i = FAULT_CASE;
    char *dref = fresh_dir(), *dk = fresh_dir();
    run_out ref, got;
    train_got g;
    train_spec sp = {.i = i, .device = dev_name, .k = -1, .steps = KILL_STEPS, .ckpt_every = 1,
                     .big_at = -1, .dir = dref};
    train_ex(&sp, &ref, &g);
    ck_assert_msg(g.status == TTT_OK, "uninterrupted: %s", g.err.msg);
    got_free(&g);
    const unsigned seed = (unsigned)time(NULL);
    srand(seed);
    char journal[4200], errpath[4200];
    snprintf(journal, sizeof journal, "%s/journal.jsonl", dk);
    snprintf(errpath, sizeof errpath, "%s/child.err", dk);
    int kills = 0;
    for (int attempt = 0; attempt < 3; attempt++) {
        const long size0 = file_size(journal);
        const pid_t pid = spawn_child(dk, errpath);
        /* a step of this process recorded (or its end), then a random moment of the next */
        int st = 0, ended = 0;
        for (int w = 0; w < 60000 && file_size(journal) <= size0; w++) {
            if (waitpid(pid, &st, WNOHANG) == pid) {
                ended = 1;
                break;
            }
            sleep_ms(1);
        }
        if (!ended) {
            sleep_ms(rand() % 40);
            kill(pid, SIGKILL);
            ck_assert_int_eq(waitpid(pid, &st, 0), pid);
        }
        if (WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL) {
            kills++;
        } else {
            char *e = tu_read_file(errpath);
            ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the child failed (seed %u): %s",
                          seed, e ? e : "");
            free(e);
        }
    }
    sp.dir = dk;
    train_ex(&sp, &got, &g);
    ck_assert_msg(g.status == TTT_OK, "resumed after %d kills (seed %u): %s", kills, seed,
                  g.err.msg);
    printf("kill -9: %d kills (seed %u), resumed from step %ld\n", kills, seed,
           g.res.resumed_from);
    got_free(&g);
    ck_assert_msg(kills > 0, "no run was killed mid-run (seed %u): each ended first", seed);
    const int bits = same_run("kill -9, resumed", i, KILL_STEPS, -1, &got, &ref);
    if (strcmp(dev_name, "cpu") == 0) /* the host's sums have one order */
        ck_assert_msg(bits, "on the CPU a resumed run is not the uninterrupted run's bits");
    run_free(&ref), run_free(&got);
    tu_rmtree(dref), tu_rmtree(dk);
    free(dref), free(dk);
}
END_TEST

static int run_suite(Suite *s) {
    SRunner *r = srunner_create(s);
    /* no fork: the CUDA context of this process is not usable in a child */
    srunner_set_fork_status(r, CK_NOFORK);
    srunner_run_all(r, CK_NORMAL);
    const int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? 1 : 0;
}

int main(int argc, char **argv) {
    if (argc == 4 && strcmp(argv[1], "--child") == 0) { /* the kill -9 case's training process */
        dev_name = strcmp(argv[2], "cpu") == 0 ? "cpu" : "cuda";
        child_dir = argv[3];
        unsetenv("CK_RUN_CASE"); /* the parent's selection is not the child's */
        unsetenv("CK_RUN_SUITE");
        Suite *s = suite_create("train_gpu_child");
        TCase *tc = tcase_create("child");
        tcase_set_timeout(tc, 600);
        tcase_add_test(tc, child_run);
        suite_add_tcase(s, tc);
        return run_suite(s);
    }
    const char *self = getenv("TTT_TRAIN_GPU_SELF");
    if (self && strcmp(self, "1") == 0) { /* the harness alone, the CPU as the device */
        dev_name = "cpu";
        Suite *s = suite_create("train_gpu_self");
        TCase *tc = tcase_create("self");
        tcase_set_timeout(tc, 600);
        tcase_add_loop_test(tc, the_first_steps_follow_the_cpu, 0, N_CASES);
        tcase_add_test(tc, a_vector_task_and_a_nan_behave_as_on_the_cpu);
        tcase_add_loop_test(tc, recomputed_blocks_follow_the_kept_run, 0, N_CASES);
        suite_add_tcase(s, tc);
        TCase *tf = tcase_create("faults");
        tcase_set_timeout(tf, 600);
        tcase_add_test(tf, kill_9_then_resume_is_the_uninterrupted_run);
        suite_add_tcase(s, tf);
        return run_suite(s);
    }
    /* decided at run time, so that the suite compiles (and its cases are used) in a build
     * without CUDA too */
    if (!ttt_device_cuda_built()) {
        printf("skipped: built without CUDA (configure with -DTTT_CUDA=ON)\n");
        return 77;
    }
    ttt_error e = {0};
    if (ttt_device_usable(ttt_device_cuda(0), &e) != TTT_OK) {
        printf("skipped: no usable CUDA device: %s\n", e.msg);
        return 77;
    }
    Suite *s = suite_create("train_gpu");
    TCase *tc = tcase_create("gpu");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, adamw_on_the_device_is_the_hosts_update);
    tcase_add_test(tc, a_vector_task_and_a_nan_behave_as_on_the_cpu);
    tcase_add_loop_test(tc, one_step_gradients_match_the_cpu, 0, N_CASES);
    tcase_add_loop_test(tc, the_first_steps_follow_the_cpu, 0, N_CASES);
    suite_add_tcase(s, tc);
    /* faults (CK_RUN_CASE=faults runs these alone) */
    TCase *tf = tcase_create("faults");
    tcase_set_timeout(tf, 600);
    tcase_add_test(tf, out_of_device_memory_mid_run_keeps_the_last_checkpoint);
    tcase_add_test(tf, more_than_the_device_has_is_a_clean_error);
    tcase_add_test(tf, kill_9_then_resume_is_the_uninterrupted_run);
    suite_add_tcase(s, tf);
    /* recomputed blocks (CK_RUN_CASE=recompute runs these alone) */
    TCase *tk = tcase_create("recompute");
    tcase_set_timeout(tk, 600);
    tcase_add_loop_test(tk, recomputed_blocks_follow_the_kept_run, 0, N_CASES);
    suite_add_tcase(s, tk);
    /* several ranks on this GPU (CK_RUN_CASE=ranks runs these alone) */
    TCase *tr = tcase_create("ranks");
    tcase_set_timeout(tr, 600);
    tcase_add_loop_test(tr, ranks_on_one_gpu_are_the_single_gpu_run, 0,
                        (int)(sizeof rank_cases / sizeof *rank_cases));
    tcase_add_test(tr, a_failed_rank_loses_only_its_step);
    suite_add_tcase(s, tr);
    return run_suite(s);
}

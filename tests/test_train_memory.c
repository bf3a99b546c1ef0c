/* The memory of a training run (docs/training.md "Memory of a training step"):
 *   - recycling activation gradients during backward (autograd.h) gives the same parameter
 *     gradients bit for bit as keeping every gradient, and takes at most half the gradient bytes
 *     (measured: 14 % on this model; one buffer per recorded tensor is what it replaced);
 *   - a soak of a few seconds: 200 training steps of a small DeltaNet with an evaluation batch
 *     four times the training batch at step 100. After step 50 the process takes no new memory
 *     from the system: its minor page faults over steps 51 … 199 stay under one per step on
 *     average (measured: 3 in all), and its resident set at step 200 is within 1 MiB of that at
 *     step 50 (measured: +72 KiB). The bounds are far from what they catch: the step's arenas
 *     hold 8.5 MiB, so arenas unmapped and mapped again at every step fault ≈ 330 000 pages over
 *     those steps (measured), and an evaluation that keeps the intermediates of its whole batch
 *     grows the resident set by 18 MiB (measured);
 *   - the step's arena peak is the sum of its parts (activations, their gradients, workspace) and
 *     the activations are the larger part of it. */
#define _GNU_SOURCE
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "autograd.h"
#include "testutil.h"
#include "mixer.h"
#include "train.h"

#define V 64  /* vocabulary */
#define L 64  /* sequence length */
#define BT 16 /* training batch */
#define BE 64 /* evaluation batch: 4 × the training batch */

static const char *const MODEL = "model: {d_model: 32, layers: 2, heads: 2, mlp: 0, conv: 4}\n"
                                 "layer: {preset: deltanet}\n"
                                 "train: {steps: 200, batch: 16, shards: 2, warmup: 10,\n"
                                 "        log_every: 1000, eval_every: 100}\n";

static void parse(ttt_seq_model_config *mc, ttt_train_config *tc, ttt_cfg_node **root) {
    ttt_error err = {0};
    ck_assert_int_eq(ttt_cfg_load_string(MODEL, "<t>", root, &err), TTT_OK);
    ttt_seq_model_io io = {.vocab = V, .seq_len = L};
    ck_assert_msg(ttt_seq_model_parse((ttt_cfg_node *)ttt_cfg_get(*root, "model"),
                                      (ttt_cfg_node *)ttt_cfg_get(*root, "layer"), &io, mc,
                                      &err) == TTT_OK,
                  "%s", err.msg);
    ck_assert_int_eq(
        ttt_train_config_parse((ttt_cfg_node *)ttt_cfg_get(*root, "train"), tc, &err), TTT_OK);
}

/* Tokens from a fixed generator; every other position scored with the next token. */
static void fill(int *tokens, int *labels, int rows, unsigned seed) {
    unsigned x = seed * 2654435761u + 1u;
    for (int i = 0; i < rows * L; i++) {
        x = x * 1664525u + 1013904223u;
        tokens[i] = (int)(x >> 16) % V;
    }
    for (int i = 0; i < rows * L; i++)
        labels[i] = (i % L) % 2 && (i % L) + 1 < L ? tokens[i + 1] : TTT_LABEL_IGNORE;
}

static long minor_faults(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_minflt;
}

static long rss_kib(void) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return -1;
    char line[256];
    long kb = -1;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "VmRSS:", 6) == 0) kb = atol(line + 6);
    fclose(f);
    return kb;
}

/* Parameter gradients of one loss, with or without recycling, the first `recompute` blocks
 * recomputed; the gradient bytes taken, and in *fwd (when not NULL) the arena's footprint when
 * the forward has computed the loss. */
static size_t gradients(const ttt_seq_model *m, const ttt_seq_batch *b, int recycle,
                        int recompute, float **out, size_t *fwd) {
    ttt_arena arena;
    ttt_arena_init(&arena, 0);
    ttt_tape tape;
    ttt_tape_init(&tape);
    tape.recycle = recycle;
    ttt_ctx ctx = {.arena = &arena, .grad = 1, .tape = &tape, .recompute = recompute};
    ttt_params_zero_grad((ttt_params *)&m->params);
    ttt_tensor *loss = NULL;
    ttt_error err = {0};
    ck_assert_msg(ttt_seq_model_loss(&ctx, m, m->pt, b, 0, &loss, NULL, NULL, &err) == TTT_OK,
                  "%s", err.msg);
    if (fwd) *fwd = ttt_arena_footprint(&arena);
    ttt_backward(&ctx, loss);
    const size_t bytes = tape.grad_bytes;
    for (int i = 0; i < m->params.n; i++) {
        const ttt_param *p = m->params.p[i];
        out[i] = malloc(p->n * sizeof(float));
        memcpy(out[i], p->grad, p->n * sizeof(float));
    }
    ttt_tape_free(&tape);
    ttt_arena_free(&arena);
    return bytes;
}

START_TEST(recycled_gradients_are_exact_and_smaller) {
    ttt_cfg_node *root;
    ttt_seq_model_config mc;
    ttt_train_config tc;
    parse(&mc, &tc, &root);
    ttt_seq_model m;
    ttt_error err = {0};
    ck_assert_int_eq(ttt_seq_model_init(&m, &mc, 3, &err), TTT_OK);
    static int tokens[4 * L], labels[4 * L];
    fill(tokens, labels, 4, 7);
    const ttt_seq_batch b = {.B = 4, .T = L, .tokens = tokens, .labels = labels};
    float **kept = calloc((size_t)m.params.n, sizeof *kept);
    float **recycled = calloc((size_t)m.params.n, sizeof *recycled);
    const size_t bytes_kept = gradients(&m, &b, 0, 0, kept, NULL);
    const size_t bytes_recycled = gradients(&m, &b, 1, 0, recycled, NULL);
    for (int i = 0; i < m.params.n; i++) {
        const ttt_param *p = m.params.p[i];
        double mag = 0;
        for (size_t j = 0; j < p->n; j++) mag += fabs(kept[i][j]);
        ck_assert_msg(mag > 0, "%s: no gradient reached it", p->name);
        ck_assert_msg(memcmp(kept[i], recycled[i], p->n * sizeof(float)) == 0,
                      "%s: the recycled gradient differs", p->name);
        free(kept[i]);
        free(recycled[i]);
    }
    fprintf(stderr, "gradient bytes: kept %zu, recycled %zu (%.0f %%)\n", bytes_kept,
            bytes_recycled, 100.0 * (double)bytes_recycled / (double)bytes_kept);
    ck_assert_uint_gt(bytes_recycled, 0);
    ck_assert_uint_le(2 * bytes_recycled, bytes_kept);
    free(kept);
    free(recycled);
    ttt_seq_model_free(&m);
    ttt_cfg_free(root);
}
END_TEST

/* The layer section of a mixer: the registered mixer by name, or for the one that runs the
 * `layer:` section's TTT layer (its trait uses_layer) the given preset. */
static void layer_of(const ttt_mixer *mx, const char *preset, char *out, size_t n) {
    if (mx->uses_layer)
        snprintf(out, n, "layer: {preset: %s}\n", preset);
    else
        snprintf(out, n, "layer: {mixer: %s}\n", mx->name);
}

/* train.recompute (docs/training.md "Memory of a training step"): for every registered mixer
 * (the TTT mixer under four presets), recomputing the first two blocks or all three gives the
 * parameter gradients of keeping every block bit for bit — the same ops in the same order on
 * the same bits — and the forward keeps less: the recomputed blocks' activations are released
 * at once. A recomputation that ran other kernels, lost a contribution to a block's input or
 * counted one twice would change the bits. */
START_TEST(recomputed_blocks_give_the_same_gradients_with_less_memory) {
    static const char *const presets[] = {"deltanet", "gated_deltanet", "gla", "mamba2"};
    for (int mi = 0; mi < ttt_mixer_count(); mi++) {
        const ttt_mixer *mx = ttt_mixer_at(mi);
        const int np = mx->uses_layer ? 4 : 1;
        for (int pi = 0; pi < np; pi++) {
            char text[512], layer[128];
            layer_of(mx, presets[pi], layer, sizeof layer);
            snprintf(text, sizeof text, "model: {d_model: 32, layers: 3, heads: 2, mlp: 2}\n%s",
                     layer);
            ttt_cfg_node *root;
            ttt_error err = {0};
            ck_assert_int_eq(ttt_cfg_load_string(text, "<t>", &root, &err), TTT_OK);
            ttt_seq_model_io io = {.vocab = V, .seq_len = L};
            ttt_seq_model_config mc;
            ck_assert_msg(ttt_seq_model_parse((ttt_cfg_node *)ttt_cfg_get(root, "model"),
                                              (ttt_cfg_node *)ttt_cfg_get(root, "layer"), &io,
                                              &mc, &err) == TTT_OK,
                          "%s: %s", layer, err.msg);
            ttt_seq_model m;
            ck_assert_int_eq(ttt_seq_model_init(&m, &mc, 5, &err), TTT_OK);
            static int tokens[2 * L], labels[2 * L];
            fill(tokens, labels, 2, 9);
            const ttt_seq_batch b = {.B = 2, .T = L, .tokens = tokens, .labels = labels};
            float **kept = calloc((size_t)m.params.n, sizeof *kept);
            size_t fwd_kept;
            gradients(&m, &b, 1, 0, kept, &fwd_kept);
            size_t fwd_prev = fwd_kept;
            for (int r = 2; r <= 3; r++) {
                float **rec = calloc((size_t)m.params.n, sizeof *rec);
                size_t fwd;
                gradients(&m, &b, 1, r, rec, &fwd);
                for (int i = 0; i < m.params.n; i++) {
                    const ttt_param *p = m.params.p[i];
                    ck_assert_msg(memcmp(kept[i], rec[i], p->n * sizeof(float)) == 0,
                                  "%s recompute %d: the gradient of %s differs", layer, r,
                                  p->name);
                    free(rec[i]);
                }
                free(rec);
                ck_assert_msg(fwd < fwd_prev, "%s recompute %d: the forward keeps %zu bytes, "
                              "not less than %zu", layer, r, fwd, fwd_prev);
                fwd_prev = fwd;
            }
            layer[strlen(layer) - 1] = 0;
            fprintf(stderr, "%-34s forward keeps %zu bytes, %zu with every block recomputed\n",
                    layer, fwd_kept, fwd_prev);
            for (int i = 0; i < m.params.n; i++) free(kept[i]);
            free(kept);
            ttt_seq_model_free(&m);
            ttt_cfg_free(root);
        }
    }
}
END_TEST

/* train.recompute: a count of blocks from 0, located when it is not; absent, the resolved
 * section does not name it (configurations that do not use it keep their bytes and hash). */
START_TEST(recompute_is_checked_and_absent_when_not_given) {
    static const char *const bad[] = {"train: {recompute: -1}\n", "train: {recompute: two}\n",
                                      "train: {recompute: 1.5}\n"};
    for (int i = 0; i < 3; i++) {
        ttt_cfg_node *root;
        ttt_error err = {0};
        ck_assert_int_eq(ttt_cfg_load_string(bad[i], "r.yaml", &root, &err), TTT_OK);
        ttt_train_config tc;
        ck_assert_int_ne(
            ttt_train_config_parse((ttt_cfg_node *)ttt_cfg_get(root, "train"), &tc, &err), TTT_OK);
        ck_assert_msg(strstr(err.msg, "r.yaml:1:") && strstr(err.msg, "recompute"),
                      "%s: %s", bad[i], err.msg);
        ttt_cfg_free(root);
    }
    ttt_cfg_node *root;
    ttt_error err = {0};
    ttt_train_config tc;
    ck_assert_int_eq(ttt_cfg_load_string("train: {recompute: 3}\n", "r.yaml", &root, &err),
                     TTT_OK);
    ck_assert_int_eq(
        ttt_train_config_parse((ttt_cfg_node *)ttt_cfg_get(root, "train"), &tc, &err), TTT_OK);
    ck_assert_int_eq(tc.recompute, 3);
    ttt_cfg_free(root);
    ck_assert_int_eq(ttt_cfg_load_string("train: {batch: 4}\n", "r.yaml", &root, &err), TTT_OK);
    ttt_cfg_node *tr = (ttt_cfg_node *)ttt_cfg_get(root, "train");
    ck_assert_int_eq(ttt_train_config_parse(tr, &tc, &err), TTT_OK);
    ck_assert_int_eq(tc.recompute, 0);
    ck_assert_ptr_null(ttt_cfg_get(ttt_cfg_get(root, "train"), "recompute"));
    ttt_cfg_free(root);
}
END_TEST

typedef struct soak {
    int *tokens, *labels; /* (8·BT, L): eight training batches in turn */
    int *eval_tokens, *eval_labels; /* (BE, L) */
    long calls;
    long faults_50, rss_50, faults_200, rss_200; /* at the start of steps 51 and 200 */
} soak;

static ttt_status soak_next(void *user, ttt_seq_batch *out, ttt_error *err) {
    (void)err;
    soak *d = user;
    if (d->calls == 50) {
        d->faults_50 = minor_faults();
        d->rss_50 = rss_kib();
    } else if (d->calls == 199) {
        d->faults_200 = minor_faults();
        d->rss_200 = rss_kib();
    }
    const size_t off = (size_t)(d->calls++ % 8) * BT * L;
    *out = (ttt_seq_batch){.B = BT, .T = L, .tokens = d->tokens + off, .labels = d->labels + off};
    return TTT_OK;
}

static ttt_status soak_eval(void *user, int i, ttt_seq_batch *out, ttt_error *err) {
    (void)i;
    (void)err;
    soak *d = user;
    *out = (ttt_seq_batch){.B = BE, .T = L, .tokens = d->eval_tokens, .labels = d->eval_labels};
    return TTT_OK;
}

START_TEST(training_takes_no_new_memory_after_its_first_steps) {
    ttt_cfg_node *root;
    ttt_seq_model_config mc;
    ttt_train_config tc;
    parse(&mc, &tc, &root);
    ttt_seq_model m;
    ttt_error err = {0};
    ck_assert_int_eq(ttt_seq_model_init(&m, &mc, 3, &err), TTT_OK);
    soak d = {0};
    d.tokens = malloc(sizeof(int) * 8 * BT * L);
    d.labels = malloc(sizeof(int) * 8 * BT * L);
    d.eval_tokens = malloc(sizeof(int) * BE * L);
    d.eval_labels = malloc(sizeof(int) * BE * L);
    fill(d.tokens, d.labels, 8 * BT, 11);
    fill(d.eval_tokens, d.eval_labels, BE, 12);
    ttt_train_data td = {.user = &d, .next = soak_next, .n_eval = 1, .eval_batch = soak_eval};
    ttt_train_run tr = {.config_hash = "h", .series = "t", .mixer = "m"};
    ttt_train_result res;
    ck_assert_msg(ttt_train(&m, &tc, &td, &tr, &res, &err) == TTT_OK, "%s", err.msg);
    ck_assert_int_eq(res.step, 200);
    const long faults = d.faults_200 - d.faults_50, grew = d.rss_200 - d.rss_50;
    const ttt_train_memory *mm = &res.mem;
    fprintf(stderr,
            "steps 51-199: %ld minor faults, resident set %ld -> %ld KiB; step arena peak %.2f "
            "MiB = activations %.2f + their gradients %.2f + workspace %.2f; held %.2f MiB\n",
            faults, d.rss_50, d.rss_200, res.arena_peak / 1048576.0,
            mm->activations / 1048576.0, mm->act_grads / 1048576.0, mm->workspace / 1048576.0,
            mm->arena_held / 1048576.0);
    ck_assert_int_gt(d.rss_50, 0);
    ck_assert_int_le(faults, 149); /* fewer than one per step */
    ck_assert_int_le(grew, 1024);
    ck_assert_uint_eq(res.arena_peak, mm->activations + mm->act_grads + mm->workspace);
    ck_assert_uint_gt(mm->activations, mm->act_grads);
    ck_assert_uint_gt(mm->activations, mm->workspace);
    ck_assert_uint_ge(mm->arena_held, res.arena_peak);
    free(d.tokens);
    free(d.labels);
    free(d.eval_tokens);
    free(d.eval_labels);
    ttt_seq_model_free(&m);
    ttt_cfg_free(root);
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("train_memory");
    TCase *c = tcase_create("train_memory");
    tcase_set_timeout(c, 120);
    tcase_add_test(c, recycled_gradients_are_exact_and_smaller);
    tcase_add_test(c, training_takes_no_new_memory_after_its_first_steps);
    tcase_add_test(c, recomputed_blocks_give_the_same_gradients_with_less_memory);
    tcase_add_test(c, recompute_is_checked_and_absent_when_not_given);
    suite_add_tcase(s, c);
    return s;
}

int main(void) { return tu_run(suite()); }

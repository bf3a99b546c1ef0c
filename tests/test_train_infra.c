/* Outer-loop training infrastructure: parameters, AdamW and its schedule, gradient clipping,
 * checkpoints (exact round trip, corruption and truncation refused, config mismatch refused,
 * fallback to the previous checkpoint) and a bit-identical resume of an interrupted run. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "adamw.h"
#include "checkpoint.h"
#include "data.h"
#include "params.h"
#include "testutil.h"

/* A small model: a matrix (decayed), a bias and a norm gain (not decayed). */
static void make_params(ttt_params *ps, uint64_t seed) {
    ttt_params_init(ps);
    ttt_param *w, *b, *g;
    ttt_error e;
    ck_assert_int_eq(ttt_params_add(ps, "layer0.w", 2, (int[]){3, 4}, 1, &w, &e), TTT_OK);
    ck_assert_int_eq(ttt_params_add(ps, "layer0.b", 1, (int[]){4}, 0, &b, &e), TTT_OK);
    ck_assert_int_eq(ttt_params_add(ps, "norm.gain", 1, (int[]){5}, 0, &g, &e), TTT_OK);
    ttt_rng r;
    ttt_rng_seed(&r, seed);
    ttt_param_init_normal(w, &r, 0.5f);
    ttt_param_init_normal(b, &r, 0.1f);
    ttt_param_init_ones(g);
}

static void fill_grads(ttt_params *ps, ttt_rng *r, float scale) {
    for (int i = 0; i < ps->n; i++) ttt_rng_fill_normal(r, ps->p[i]->grad, ps->p[i]->n, 0, scale);
}

/* ------------------------------------------------------------------------------------------ */
/* Parameters */

START_TEST(params_add_find_and_errors) {
    ttt_params ps;
    make_params(&ps, 1);
    ck_assert_int_eq(ps.n, 3);
    ck_assert_uint_eq(ttt_params_numel(&ps), 12 + 4 + 5);
    ttt_param *w = ttt_params_find(&ps, "layer0.w");
    ck_assert_ptr_nonnull(w);
    ck_assert_int_eq(w->decay, 1);
    ck_assert_int_eq(ttt_params_find(&ps, "norm.gain")->decay, 0);
    ck_assert_ptr_null(ttt_params_find(&ps, "nope"));
    ck_assert_uint_eq((uintptr_t)w->data % 64, 0);
    for (size_t j = 0; j < 5; j++)
        ck_assert_float_eq(ttt_params_find(&ps, "norm.gain")->data[j], 1.0f);
    /* pointers stay valid when the list grows */
    ttt_error e;
    for (int i = 0; i < 40; i++) {
        char name[32];
        snprintf(name, sizeof name, "extra%d", i);
        ck_assert_int_eq(ttt_params_add(&ps, name, 1, (int[]){2}, 0, NULL, &e), TTT_OK);
    }
    ck_assert_ptr_eq(ttt_params_find(&ps, "layer0.w"), w);
    ck_assert_int_eq(ttt_params_add(&ps, "layer0.w", 1, (int[]){2}, 0, NULL, &e), TTT_ERR_NAME);
    ck_assert_ptr_nonnull(strstr(e.msg, "layer0.w"));
    ck_assert_int_eq(ttt_params_add(&ps, "", 1, (int[]){2}, 0, NULL, &e), TTT_ERR_NAME);
    ck_assert_int_eq(ttt_params_add(&ps, "z", 1, (int[]){0}, 0, NULL, &e), TTT_ERR_SHAPE);
    ck_assert_int_eq(ttt_params_add(&ps, "z", 5, (int[]){1, 1, 1, 1, 1}, 0, NULL, &e),
                     TTT_ERR_SHAPE);
    /* the same seed initializes the same bits */
    ttt_params qs;
    make_params(&qs, 1);
    ck_assert(memcmp(ttt_params_find(&qs, "layer0.w")->data, w->data, 12 * sizeof(float)) == 0);
    ttt_tensor v = ttt_param_view(w);
    ck_assert_int_eq(v.ndim, 2);
    ck_assert_int_eq(v.shape[1], 4);
    ck_assert_ptr_eq(v.data, w->data);
    ttt_params_free(&qs);
    ttt_params_free(&ps);
}
END_TEST

START_TEST(grad_norm_and_clipping) {
    ttt_params ps;
    make_params(&ps, 2);
    ttt_rng r;
    ttt_rng_seed(&r, 3);
    fill_grads(&ps, &r, 2.0f);
    double ref = 0;
    for (int i = 0; i < ps.n; i++)
        for (size_t j = 0; j < ps.p[i]->n; j++) ref += (double)ps.p[i]->grad[j] * ps.p[i]->grad[j];
    ref = sqrt(ref);
    /* accumulated in double over 21 floats: equal to the reference up to double rounding */
    ck_assert_double_le(fabs(ttt_params_grad_norm(&ps) - ref), 1e-12 * ref);

    /* below the threshold: untouched */
    float before[4];
    memcpy(before, ps.p[1]->grad, sizeof before);
    ck_assert_double_eq_tol(ttt_params_clip_grad_norm(&ps, 2 * ref), ref, 1e-12 * ref);
    ck_assert(memcmp(before, ps.p[1]->grad, sizeof before) == 0);

    /* above: scaled to max_norm exactly up to float rounding (21 products, relative 1e-6),
     * direction kept */
    double max_norm = ref / 3;
    ck_assert_double_eq_tol(ttt_params_clip_grad_norm(&ps, max_norm), ref, 1e-12 * ref);
    ck_assert_double_le(fabs(ttt_params_grad_norm(&ps) - max_norm), 1e-6 * max_norm);
    for (int j = 0; j < 4; j++)
        ck_assert_double_le(fabs(ps.p[1]->grad[j] - before[j] / 3.0),
                            1e-6 * fabs(before[j]) + 1e-12);

    ttt_params_zero_grad(&ps);
    ck_assert_double_eq(ttt_params_grad_norm(&ps), 0.0);
    ttt_params_free(&ps);
}
END_TEST

START_TEST(nonfinite_values_are_located) {
    ttt_params ps;
    make_params(&ps, 4);
    ttt_error e;
    ck_assert_int_eq(ttt_params_check_finite(&ps, TTT_PARAMS_CHECK_BOTH, &e), TTT_OK);
    ttt_params_find(&ps, "layer0.w")->grad[6] = NAN; /* row 1, column 2 of (3, 4) */
    ck_assert_int_eq(ttt_params_check_finite(&ps, TTT_PARAMS_CHECK_DATA, &e), TTT_OK);
    ck_assert_int_eq(ttt_params_check_finite(&ps, TTT_PARAMS_CHECK_BOTH, &e), TTT_ERR_NUMERIC);
    ck_assert_msg(strstr(e.msg, "gradient") && strstr(e.msg, "'layer0.w'") &&
                      strstr(e.msg, "NaN") && strstr(e.msg, "element 6 = [1, 2]"),
                  "%s", e.msg);
    ttt_params_find(&ps, "norm.gain")->data[3] = -INFINITY;
    int pi, in_grad;
    size_t at;
    ck_assert(ttt_params_find_nonfinite(&ps, TTT_PARAMS_CHECK_DATA, &pi, &at, &in_grad));
    ck_assert_int_eq(pi, 2);
    ck_assert_uint_eq(at, 3);
    ck_assert_int_eq(in_grad, 0);
    ck_assert_int_eq(ttt_params_check_finite(&ps, TTT_PARAMS_CHECK_DATA, &e), TTT_ERR_NUMERIC);
    ck_assert_msg(strstr(e.msg, "value of parameter 'norm.gain' is -Inf at element 3"), "%s",
                  e.msg);
    ttt_params_free(&ps);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Schedule and AdamW */

START_TEST(schedule_values) {
    ttt_adamw_config c;
    ttt_adamw_config_default(&c);
    c.lr = 0.01;
    c.warmup = 10;
    c.total_steps = 110;
    c.min_lr_ratio = 0.1;
    /* written out from the formula in adamw.h */
    ck_assert_double_eq_tol(ttt_lr_schedule(&c, 0), 0.001, 1e-15); /* η·1/W */
    ck_assert_double_eq_tol(ttt_lr_schedule(&c, 4), 0.005, 1e-15); /* η·5/W */
    ck_assert_double_eq_tol(ttt_lr_schedule(&c, 9), 0.01, 1e-15);  /* last warm-up step: peak */
    ck_assert_double_eq_tol(ttt_lr_schedule(&c, 10), 0.01, 1e-15); /* cosine starts at peak */
    /* halfway through the cosine: r + (1 − r)/2 = 0.55 of the peak */
    ck_assert_double_eq_tol(ttt_lr_schedule(&c, 60), 0.0055, 1e-15);
    /* a quarter: cos(π/4) */
    ck_assert_double_eq_tol(ttt_lr_schedule(&c, 35), 0.01 * (0.1 + 0.9 * 0.5 * (1 + sqrt(0.5))),
                            1e-15);
    ck_assert_double_eq_tol(ttt_lr_schedule(&c, 110), 0.001, 1e-15); /* end: r·η */
    ck_assert_double_eq_tol(ttt_lr_schedule(&c, 500), 0.001, 1e-15);
    /* monotone decay after the peak */
    for (long s = 10; s < 110; s++) ck_assert(ttt_lr_schedule(&c, s + 1) <= ttt_lr_schedule(&c, s));
    c.warmup = 0;
    c.total_steps = 0;
    ck_assert_double_eq(ttt_lr_schedule(&c, 0), 0.01);
    ck_assert_double_eq(ttt_lr_schedule(&c, 123456), 0.01);
}
END_TEST

START_TEST(config_is_validated) {
    ttt_adamw_config c;
    ttt_error e;
    ttt_adamw_config_default(&c);
    ck_assert_int_eq(ttt_adamw_config_check(&c, &e), TTT_OK);
    c.beta2 = 1.0;
    ck_assert_int_eq(ttt_adamw_config_check(&c, &e), TTT_ERR_RANGE);
    ck_assert_ptr_nonnull(strstr(e.msg, "beta2"));
    ttt_adamw_config_default(&c);
    c.warmup = 100;
    c.total_steps = 50;
    ck_assert_int_eq(ttt_adamw_config_check(&c, &e), TTT_ERR_RANGE);
    ck_assert_ptr_nonnull(strstr(e.msg, "total_steps"));
    ttt_adamw_config_default(&c);
    c.lr = NAN;
    ck_assert_int_eq(ttt_adamw_config_check(&c, &e), TTT_ERR_RANGE);
}
END_TEST

/* Float64 reference of AdamW, written from the paper's algorithm with PyTorch's placement of ε
 * and of the decay (p ← p(1 − lr·λ)), independent of adamw.c. */
typedef struct ref_adam {
    double p[64], m[64], v[64];
} ref_adam;

static void ref_step(ref_adam *R, const double *g, int n, const int *decay, double lr, double b1,
                     double b2, double eps, double wd, int t) {
    for (int j = 0; j < n; j++) {
        if (decay[j]) R->p[j] -= lr * wd * R->p[j];
        R->m[j] = b1 * R->m[j] + (1 - b1) * g[j];
        R->v[j] = b2 * R->v[j] + (1 - b2) * g[j] * g[j];
        double mhat = R->m[j] / (1 - pow(b1, t));
        double vhat = R->v[j] / (1 - pow(b2, t));
        R->p[j] -= lr * mhat / (sqrt(vhat) + eps);
    }
}

/* Flatten parameters / gradients in order. */
static int flat(const ttt_params *ps, double *out, int grad) {
    int k = 0;
    for (int i = 0; i < ps->n; i++)
        for (size_t j = 0; j < ps->p[i]->n; j++)
            out[k++] = grad ? ps->p[i]->grad[j] : ps->p[i]->data[j];
    return k;
}

static void adamw_vs_reference(double clip, float grad_scale) {
    ttt_params ps;
    make_params(&ps, 5);
    ttt_adamw_config c;
    ttt_adamw_config_default(&c);
    c.lr = 0.05;
    c.beta1 = 0.8;
    c.beta2 = 0.95;
    c.eps = 1e-6;
    c.weight_decay = 0.3;
    c.warmup = 3;
    c.total_steps = 12;
    c.min_lr_ratio = 0.2;
    c.clip_norm = clip;
    ttt_adamw opt;
    ttt_error e;
    ck_assert_int_eq(ttt_adamw_init(&opt, &ps, &c, &e), TTT_OK);

    ref_adam R;
    memset(&R, 0, sizeof R);
    int n = flat(&ps, R.p, 0), decay[64];
    for (int i = 0, k = 0; i < ps.n; i++)
        for (size_t j = 0; j < ps.p[i]->n; j++) decay[k++] = ps.p[i]->decay;
    ttt_rng r;
    ttt_rng_seed(&r, 6);
    int clipped_any = 0;
    for (int t = 1; t <= 15; t++) { /* past total_steps: the floor of the schedule too */
        fill_grads(&ps, &r, grad_scale);
        double g[64];
        flat(&ps, g, 1);
        double norm = 0;
        for (int j = 0; j < n; j++) norm += g[j] * g[j];
        norm = sqrt(norm);
        if (clip > 0 && norm > clip)
            for (int j = 0; j < n; j++) g[j] *= clip / norm;
        /* the schedule, written out independently: warm-up (t/W), cosine, floor */
        long s = t - 1;
        double lr = s < 3 ? 0.05 * (s + 1) / 3.0
                    : s <= 12
                        ? 0.05 * (0.2 + 0.8 * 0.5 * (1 + cos(3.141592653589793 * (s - 3) / 9.0)))
                        : 0.05 * 0.2;
        ref_step(&R, g, n, decay, lr, 0.8, 0.95, 1e-6, 0.3, t);
        ttt_adamw_stats st;
        ck_assert_int_eq(ttt_adamw_step(&opt, &ps, &st, &e), TTT_OK);
        ck_assert_double_eq_tol(st.lr, lr, 1e-15);
        ck_assert_double_le(fabs(st.grad_norm - norm), 1e-12 * norm);
        ck_assert_int_eq(st.clipped, clip > 0 && norm > clip);
        clipped_any |= st.clipped;
        /* float32 state against float64: each step rounds p (|p| ≲ 1.1, half an ulp = 6e-8),
         * m, v and the update (relative 6e-8 of at most lr ≈ 0.05) to float; 15 steps of such
         * independent roundings stay well below 5e-7 + 5e-7·max|p| ≈ 1e-6 (measured: at most
         * 3e-7 after 15 steps; a missing bias correction or a misplaced ε is ≥ 3e-5 off). */
        float got[64];
        for (int i = 0, k = 0; i < ps.n; i++)
            for (size_t j = 0; j < ps.p[i]->n; j++) got[k++] = ps.p[i]->data[j];
        TU_ASSERT_CLOSE(got, R.p, (size_t)n, 5e-7, 5e-7);
    }
    ck_assert_int_eq(opt.step, 15);
    if (clip > 0) ck_assert(clipped_any);
    ttt_adamw_free(&opt);
    ttt_params_free(&ps);
}

START_TEST(adamw_matches_float64_reference) { adamw_vs_reference(0.0, 1.0f); }
END_TEST
START_TEST(adamw_with_clipping_matches_reference) { adamw_vs_reference(1.5, 1.0f); }
END_TEST
/* gradients of size ~1e-6: ε (1e-6) is comparable to √v̂, so its placement matters */
START_TEST(adamw_small_gradients_epsilon_matters) { adamw_vs_reference(0.0, 1e-6f); }
END_TEST

START_TEST(adamw_decay_only_where_flagged) {
    ttt_params ps;
    make_params(&ps, 7);
    ttt_adamw_config c;
    ttt_adamw_config_default(&c);
    c.lr = 0.1;
    c.weight_decay = 0.5;
    ttt_adamw opt;
    ttt_error e;
    ck_assert_int_eq(ttt_adamw_init(&opt, &ps, &c, &e), TTT_OK);
    float w0[12], b0[4];
    memcpy(w0, ps.p[0]->data, sizeof w0);
    memcpy(b0, ps.p[1]->data, sizeof b0);
    /* zero gradients: m = v = 0, the Adam part is 0/(0 + ε) = 0, only the decay moves */
    ck_assert_int_eq(ttt_adamw_step(&opt, &ps, NULL, &e), TTT_OK);
    for (int j = 0; j < 12; j++) ck_assert_float_eq(ps.p[0]->data[j], w0[j] * (float)(1.0 - 0.05));
    ck_assert(memcmp(ps.p[1]->data, b0, sizeof b0) == 0);
    ttt_adamw_free(&opt);
    ttt_params_free(&ps);
}
END_TEST

START_TEST(adamw_nan_gradient_stops_with_a_clear_message) {
    ttt_params ps;
    make_params(&ps, 8);
    ttt_adamw_config c;
    ttt_adamw_config_default(&c);
    ttt_adamw opt;
    ttt_error e;
    ck_assert_int_eq(ttt_adamw_init(&opt, &ps, &c, &e), TTT_OK);
    ttt_rng r;
    ttt_rng_seed(&r, 9);
    fill_grads(&ps, &r, 1.0f);
    ps.p[1]->grad[2] = NAN;
    float d0[4];
    memcpy(d0, ps.p[1]->data, sizeof d0);
    ck_assert_int_eq(ttt_adamw_step(&opt, &ps, NULL, &e), TTT_ERR_NUMERIC);
    ck_assert_msg(strstr(e.msg, "AdamW update 0") && strstr(e.msg, "'layer0.b'") &&
                      strstr(e.msg, "NaN") && strstr(e.msg, "element 2"),
                  "%s", e.msg);
    ck_assert_int_eq(opt.step, 0);
    ck_assert(memcmp(ps.p[1]->data, d0, sizeof d0) == 0);
    ttt_adamw_free(&opt);
    ttt_params_free(&ps);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Checkpoints */

static const char *HASH = "0123456789abcdef";

/* Params + optimizer after a few steps, so m, v and step are non-trivial. */
static void trained(ttt_params *ps, ttt_adamw *opt, uint64_t seed) {
    make_params(ps, seed);
    ttt_adamw_config c;
    ttt_adamw_config_default(&c);
    c.warmup = 2;
    c.total_steps = 50;
    ttt_error e;
    ck_assert_int_eq(ttt_adamw_init(opt, ps, &c, &e), TTT_OK);
    ttt_rng r;
    ttt_rng_seed(&r, seed + 100);
    for (int k = 0; k < 3; k++) {
        fill_grads(ps, &r, 1.0f);
        ck_assert_int_eq(ttt_adamw_step(opt, ps, NULL, &e), TTT_OK);
    }
}

static void assert_same_state(const ttt_params *a, const ttt_adamw *oa, const ttt_params *b,
                              const ttt_adamw *ob) {
    ck_assert_int_eq(a->n, b->n);
    for (int i = 0; i < a->n; i++) {
        size_t bytes = a->p[i]->n * sizeof(float);
        ck_assert_msg(memcmp(a->p[i]->data, b->p[i]->data, bytes) == 0, "param %s differs",
                      a->p[i]->name);
        if (oa) {
            ck_assert(memcmp(oa->m[i], ob->m[i], bytes) == 0);
            ck_assert(memcmp(oa->v[i], ob->v[i], bytes) == 0);
        }
    }
    if (oa) ck_assert_int_eq(oa->step, ob->step);
}

static char *path_in(const char *dir, const char *file) {
    char *p = malloc(strlen(dir) + strlen(file) + 2);
    sprintf(p, "%s/%s", dir, file);
    return p;
}

static long file_size(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 ? (long)sb.st_size : -1;
}

static unsigned char *slurp(const char *path, long *n) {
    *n = file_size(path);
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    unsigned char *b = malloc((size_t)*n + 1);
    ck_assert_int_eq((long)fread(b, 1, (size_t)*n, f), *n);
    fclose(f);
    return b;
}

static void spit(const char *path, const unsigned char *b, long n) {
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq((long)fwrite(b, 1, (size_t)n, f), n);
    fclose(f);
}

START_TEST(checkpoint_round_trip_is_exact) {
    char *dir = tu_mkdtemp();
    char *file = path_in(dir, "a.safetensors");
    ttt_params ps;
    ttt_adamw opt;
    trained(&ps, &opt, 10);
    /* include values whose bits must survive: a negative zero, a subnormal, the largest float */
    ps.p[1]->data[0] = -0.0f;
    ps.p[1]->data[1] = 1e-42f;
    ps.p[1]->data[2] = 3.4028235e38f;
    uint64_t rng[5] = {0, 1, UINT64_MAX, 0x8000000000000000ULL, 0x0123456789abcdefULL};
    const char *meta[] = {"note", "hello \"world\"", "empty", ""};
    ttt_error e;
    ck_assert_int_eq(
        ttt_checkpoint_save_file(file, &ps, &opt, 123456789012LL, rng, 5, HASH, meta, 2, &e),
        TTT_OK);

    ttt_params qs;
    ttt_adamw q_opt;
    trained(&qs, &q_opt, 99); /* different values everywhere */
    int64_t step = 0;
    uint64_t rng2[5] = {0};
    ck_assert_int_eq(ttt_checkpoint_load_file(file, &qs, &q_opt, &step, rng2, 5, HASH, &e), TTT_OK);
    assert_same_state(&ps, &opt, &qs, &q_opt);
    ck_assert_int_eq(step, 123456789012LL);
    for (int i = 0; i < 5; i++) ck_assert_uint_eq(rng2[i], rng[i]);
    char buf[64];
    ck_assert_int_eq(ttt_checkpoint_read_meta(file, "note", buf, sizeof buf, &e), TTT_OK);
    ck_assert_str_eq(buf, "hello \"world\"");
    ck_assert_int_eq(ttt_checkpoint_read_meta(file, "empty", buf, sizeof buf, &e), TTT_OK);
    ck_assert_str_eq(buf, "");
    ck_assert_int_eq(ttt_checkpoint_read_meta(file, "other", buf, sizeof buf, &e), TTT_ERR_CONFIG);

    /* without optimizer state and without rng words */
    ck_assert_int_eq(ttt_checkpoint_save_file(file, &ps, NULL, 7, NULL, 0, NULL, NULL, 0, &e),
                     TTT_OK);
    ttt_params rs;
    make_params(&rs, 55);
    ck_assert_int_eq(ttt_checkpoint_load_file(file, &rs, NULL, &step, NULL, 0, NULL, &e), TTT_OK);
    assert_same_state(&ps, NULL, &rs, NULL);
    ck_assert_int_eq(step, 7);
    /* asking for optimizer state that is not there */
    ck_assert_int_eq(ttt_checkpoint_load_file(file, &qs, &q_opt, &step, NULL, 0, NULL, &e),
                     TTT_ERR_SHAPE);
    ck_assert_ptr_nonnull(strstr(e.msg, "optimizer"));

    ttt_params_free(&rs);
    ttt_adamw_free(&q_opt);
    ttt_params_free(&qs);
    ttt_adamw_free(&opt);
    ttt_params_free(&ps);
    free(file);
    tu_rmtree(dir);
    free(dir);
}
END_TEST

/* Every single-byte change anywhere in the file is refused as corruption (TTT_ERR_FORMAT, the
 * message naming the file), and the model is left untouched. */
START_TEST(checkpoint_any_corrupted_byte_is_detected) {
    char *dir = tu_mkdtemp();
    char *file = path_in(dir, "c.safetensors");
    ttt_params ps;
    ttt_adamw opt;
    trained(&ps, &opt, 11);
    uint64_t rng[4] = {1, 2, 3, 4};
    ttt_error e;
    ck_assert_int_eq(ttt_checkpoint_save_file(file, &ps, &opt, 5, rng, 4, HASH, NULL, 0, &e),
                     TTT_OK);
    long n;
    unsigned char *orig = slurp(file, &n);
    ck_assert_int_gt(n, 500);
    ttt_params qs;
    ttt_adamw q_opt;
    trained(&qs, &q_opt, 12);
    ttt_params snap;
    ttt_adamw s_opt;
    trained(&snap, &s_opt, 12);
    int checksum_catches = 0;
    unsigned char *b = malloc((size_t)n);
    for (long at = 0; at < n; at++) {
        int bit = (int)(at % 8); /* consecutive bytes cycle through every bit position */
        memcpy(b, orig, (size_t)n);
        b[at] ^= (unsigned char)(1u << bit);
        spit(file, b, n);
        int64_t step = -1;
        uint64_t r2[4];
        ttt_status st = ttt_checkpoint_load_file(file, &qs, &q_opt, &step, r2, 4, HASH, &e);
        ck_assert_msg(st == TTT_ERR_FORMAT, "byte %ld bit %d: status %d (%s)", at, bit, st, e.msg);
        ck_assert_msg(strstr(e.msg, file), "message does not name the file: %s", e.msg);
        checksum_catches += strstr(e.msg, "checksum") != NULL;
    }
    free(b);
    /* the 3·21 floats (252 bytes) of data and the metadata values are only caught by the
     * checksum: any float bit pattern and any string value is well-formed */
    ck_assert_int_gt(checksum_catches, 3 * 21 * 4);
    assert_same_state(&snap, &s_opt, &qs, &q_opt);
    free(orig);
    ttt_adamw_free(&s_opt);
    ttt_params_free(&snap);
    ttt_adamw_free(&q_opt);
    ttt_params_free(&qs);
    ttt_adamw_free(&opt);
    ttt_params_free(&ps);
    free(file);
    tu_rmtree(dir);
    free(dir);
}
END_TEST

START_TEST(checkpoint_truncated_file_is_detected) {
    char *dir = tu_mkdtemp();
    char *file = path_in(dir, "t.safetensors");
    ttt_params ps;
    ttt_adamw opt;
    trained(&ps, &opt, 13);
    ttt_error e;
    ck_assert_int_eq(ttt_checkpoint_save_file(file, &ps, &opt, 5, NULL, 0, HASH, NULL, 0, &e),
                     TTT_OK);
    long n;
    unsigned char *orig = slurp(file, &n);
    long cuts[] = {0, 1, 7, 8, 9, n / 2, n - 4, n - 1};
    for (size_t i = 0; i < sizeof cuts / sizeof *cuts; i++) {
        spit(file, orig, cuts[i]);
        int64_t step;
        ttt_status st = ttt_checkpoint_load_file(file, &ps, &opt, &step, NULL, 0, HASH, &e);
        ck_assert_msg(st == TTT_ERR_FORMAT, "cut at %ld: status %d (%s)", cuts[i], st, e.msg);
        ck_assert_ptr_nonnull(strstr(e.msg, file));
    }
    /* a file that does not exist is not corruption */
    unlink(file);
    int64_t step;
    ck_assert_int_eq(ttt_checkpoint_load_file(file, &ps, &opt, &step, NULL, 0, HASH, &e),
                     TTT_ERR_IO);
    free(orig);
    ttt_adamw_free(&opt);
    ttt_params_free(&ps);
    free(file);
    tu_rmtree(dir);
    free(dir);
}
END_TEST

START_TEST(checkpoint_other_config_or_model_is_refused) {
    char *dir = tu_mkdtemp();
    char *file = path_in(dir, "m.safetensors");
    ttt_params ps;
    ttt_adamw opt;
    trained(&ps, &opt, 14);
    uint64_t rng[2] = {5, 6};
    ttt_error e;
    ck_assert_int_eq(ttt_checkpoint_save_file(file, &ps, &opt, 5, rng, 2, HASH, NULL, 0, &e),
                     TTT_OK);
    int64_t step;
    uint64_t r2[3];
    ck_assert_int_eq(
        ttt_checkpoint_load_file(file, &ps, &opt, &step, r2, 2, "fedcba9876543210", &e),
        TTT_ERR_CONFIG);
    ck_assert_msg(strstr(e.msg, HASH) && strstr(e.msg, "fedcba9876543210") && strstr(e.msg, file),
                  "%s", e.msg);
    /* another number of rng words */
    ck_assert_int_eq(ttt_checkpoint_load_file(file, &ps, &opt, &step, r2, 3, HASH, &e),
                     TTT_ERR_SHAPE);

    /* another shape */
    ttt_params qs;
    ttt_params_init(&qs);
    ck_assert_int_eq(ttt_params_add(&qs, "layer0.w", 2, (int[]){4, 3}, 1, NULL, &e), TTT_OK);
    ck_assert_int_eq(ttt_params_add(&qs, "layer0.b", 1, (int[]){4}, 0, NULL, &e), TTT_OK);
    ck_assert_int_eq(ttt_params_add(&qs, "norm.gain", 1, (int[]){5}, 0, NULL, &e), TTT_OK);
    ck_assert_int_eq(ttt_checkpoint_load_file(file, &qs, NULL, &step, r2, 2, HASH, &e),
                     TTT_ERR_SHAPE);
    ck_assert_msg(strstr(e.msg, "(3, 4)") && strstr(e.msg, "(4, 3)"), "%s", e.msg);
    ttt_params_free(&qs);
    /* a parameter the checkpoint lacks */
    make_params(&qs, 1);
    ck_assert_int_eq(ttt_params_add(&qs, "new", 1, (int[]){2}, 0, NULL, &e), TTT_OK);
    ck_assert_int_eq(ttt_checkpoint_load_file(file, &qs, NULL, &step, r2, 2, HASH, &e),
                     TTT_ERR_SHAPE);
    ck_assert_ptr_nonnull(strstr(e.msg, "param/new"));
    ttt_params_free(&qs);
    /* a checkpoint parameter the model lacks */
    ttt_params_init(&qs);
    ck_assert_int_eq(ttt_params_add(&qs, "layer0.w", 2, (int[]){3, 4}, 1, NULL, &e), TTT_OK);
    ck_assert_int_eq(ttt_checkpoint_load_file(file, &qs, NULL, &step, r2, 2, HASH, &e),
                     TTT_ERR_SHAPE);
    ck_assert_ptr_nonnull(strstr(e.msg, "layer0.b"));
    ttt_params_free(&qs);
    ttt_adamw_free(&opt);
    ttt_params_free(&ps);
    free(file);
    tu_rmtree(dir);
    free(dir);
}
END_TEST

START_TEST(checkpoint_folder_keeps_previous_and_falls_back) {
    char *root = tu_mkdtemp();
    char *dir = path_in(root, "ckpt"); /* created by the first save */
    char *last = path_in(dir, TTT_CHECKPOINT_LAST), *prev = path_in(dir, TTT_CHECKPOINT_PREV);
    ttt_params ps;
    ttt_adamw opt;
    trained(&ps, &opt, 15);
    ttt_error e;
    int64_t step;
    uint64_t rng[1];
    ttt_checkpoint_info info;

    /* nothing there yet: start fresh */
    ck_assert_int_eq(ttt_checkpoint_load(dir, &ps, &opt, &step, rng, 1, HASH, &info, &e),
                     TTT_ERR_IO);

    ttt_params s1;
    ttt_adamw o1;
    trained(&s1, &o1, 16); /* the state saved at step 1 */
    ck_assert_int_eq(ttt_checkpoint_save(dir, &s1, &o1, 1, (uint64_t[]){111}, 1, HASH, NULL, 0, &e),
                     TTT_OK);
    ck_assert_int_eq(file_size(prev), -1);
    ck_assert_int_eq(
        ttt_checkpoint_save(dir, &ps, &opt, 2, (uint64_t[]){222}, 1, HASH, NULL, 0, &e), TTT_OK);
    ck_assert_int_gt(file_size(prev), 0);

    ck_assert_int_eq(ttt_checkpoint_load(dir, &ps, &opt, &step, rng, 1, HASH, &info, &e), TTT_OK);
    ck_assert_int_eq(step, 2);
    ck_assert_uint_eq(rng[0], 222);
    ck_assert_int_eq(info.fell_back, 0);
    ck_assert_str_eq(info.path, last);

    /* corrupt the last one: one flipped bit in the middle of the data */
    long n;
    unsigned char *b = slurp(last, &n);
    b[n - 10] ^= 0x10;
    spit(last, b, n);
    free(b);
    ttt_params qs;
    ttt_adamw q_opt;
    trained(&qs, &q_opt, 17);
    ck_assert_int_eq(ttt_checkpoint_load(dir, &qs, &q_opt, &step, rng, 1, HASH, &info, &e), TTT_OK);
    ck_assert_int_eq(step, 1);
    ck_assert_uint_eq(rng[0], 111);
    ck_assert_int_eq(info.fell_back, 1);
    ck_assert_str_eq(info.path, prev);
    ck_assert_msg(strstr(info.warning, last) && strstr(info.warning, "checksum"), "%s",
                  info.warning);
    assert_same_state(&s1, &o1, &qs, &q_opt);

    /* last corrupt, prev intact but from another configuration: the refusal of prev is what
     * the caller must see (not a generic "corrupt") */
    ck_assert_int_eq(ttt_checkpoint_load(dir, &qs, &q_opt, &step, rng, 1, "other", &info, &e),
                     TTT_ERR_CONFIG);
    ck_assert_ptr_nonnull(strstr(e.msg, prev));

    /* last missing (a crash between the rename and the write) */
    unlink(last);
    ck_assert_int_eq(ttt_checkpoint_load(dir, &qs, &q_opt, &step, rng, 1, HASH, &info, &e), TTT_OK);
    ck_assert_int_eq(step, 1);
    ck_assert_int_eq(info.fell_back, 1);

    /* both corrupt: refused, naming both */
    b = slurp(prev, &n);
    spit(last, b, n / 2);
    spit(prev, b, n - 1);
    free(b);
    ck_assert_int_eq(ttt_checkpoint_load(dir, &qs, &q_opt, &step, rng, 1, HASH, &info, &e),
                     TTT_ERR_FORMAT);
    ck_assert_msg(strstr(e.msg, last) && strstr(e.msg, prev), "%s", e.msg);

    ttt_adamw_free(&q_opt);
    ttt_params_free(&qs);
    ttt_adamw_free(&o1);
    ttt_params_free(&s1);
    ttt_adamw_free(&opt);
    ttt_params_free(&ps);
    free(last);
    free(prev);
    free(dir);
    tu_rmtree(root);
    free(root);
}
END_TEST

START_TEST(checkpoint_config_mismatch_does_not_fall_back) {
    char *dir = tu_mkdtemp();
    ttt_params ps;
    ttt_adamw opt;
    trained(&ps, &opt, 18);
    ttt_error e;
    ck_assert_int_eq(ttt_checkpoint_save(dir, &ps, &opt, 1, NULL, 0, HASH, NULL, 0, &e), TTT_OK);
    ck_assert_int_eq(ttt_checkpoint_save(dir, &ps, &opt, 2, NULL, 0, HASH, NULL, 0, &e), TTT_OK);
    int64_t step;
    ttt_checkpoint_info info;
    ck_assert_int_eq(ttt_checkpoint_load(dir, &ps, &opt, &step, NULL, 0, "another", &info, &e),
                     TTT_ERR_CONFIG);
    ck_assert_ptr_nonnull(strstr(e.msg, TTT_CHECKPOINT_LAST));
    ttt_adamw_free(&opt);
    ttt_params_free(&ps);
    tu_rmtree(dir);
    free(dir);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* An interrupted run resumes bit-identically: least-squares training of a linear model on the
 * regression task, batches drawn from a sampler over a fixed set plus a fresh-noise stream;
 * 20 steps straight vs 8 steps, checkpoint, fresh objects, load, 12 steps. */

typedef struct toy_run {
    ttt_params ps;
    ttt_adamw opt;
    ttt_sampler sampler;
    ttt_rng noise; /* an extra random stream (e.g. dropout) that must also resume */
    int64_t step;
} toy_run;

static const ttt_regression_config *toy_cfg(void) {
    static ttt_regression_config c = {
        .dim = 6, .n_points = 4, .noise_std = 0.1, .layout = TTT_REG_PAIRED, .n_query = 4};
    return &c;
}

static void toy_init(toy_run *T, const ttt_regression_batch *set) {
    ttt_error e;
    ttt_params_init(&T->ps);
    ttt_param *w;
    ck_assert_int_eq(ttt_params_add(&T->ps, "w", 1, (int[]){6}, 1, &w, &e), TTT_OK);
    ck_assert_int_eq(ttt_params_add(&T->ps, "b", 1, (int[]){1}, 0, NULL, &e), TTT_OK);
    ttt_rng r;
    ttt_rng_seed(&r, 77);
    ttt_param_init_normal(w, &r, 0.1f);
    ttt_adamw_config c;
    ttt_adamw_config_default(&c);
    c.lr = 0.05;
    c.warmup = 3;
    c.total_steps = 20;
    c.clip_norm = 0.5;
    ck_assert_int_eq(ttt_adamw_init(&T->opt, &T->ps, &c, &e), TTT_OK);
    ttt_rng base;
    ttt_rng_seed(&base, 78);
    ck_assert_int_eq(ttt_sampler_init(&T->sampler, set->B, &base, &e), TTT_OK);
    ttt_rng_seed(&T->noise, 79);
    T->step = 0;
}

static void toy_free(toy_run *T) {
    ttt_sampler_free(&T->sampler);
    ttt_adamw_free(&T->opt);
    ttt_params_free(&T->ps);
}

/* The first set->B sequences of all `set` rows; fitting every sequence's own w is impossible, so
 * the model learns a compromise and gradients stay non-zero. */
static void toy_step(toy_run *T, const ttt_regression_batch *set) {
    int idx[3];
    ttt_sampler_next(&T->sampler, idx, 3);
    ttt_params_zero_grad(&T->ps);
    float *w = T->ps.p[0]->data, *gw = T->ps.p[0]->grad;
    float *b = T->ps.p[1]->data, *gb = T->ps.p[1]->grad;
    int n = set->n, d = set->d;
    for (int r = 0; r < 3; r++)
        for (int i = 0; i < n; i++) {
            const float *x = set->x + ((size_t)idx[r] * n + i) * d;
            float y = set->y[(size_t)idx[r] * n + i] + 0.01f * (float)ttt_rng_normal(&T->noise);
            float pred = b[0];
            for (int j = 0; j < d; j++) pred += w[j] * x[j];
            float g = 2.0f * (pred - y) / (float)(3 * n);
            for (int j = 0; j < d; j++) gw[j] += g * x[j];
            gb[0] += g;
        }
    ttt_error e;
    ck_assert_int_eq(ttt_adamw_step(&T->opt, &T->ps, NULL, &e), TTT_OK);
    T->step++;
}

/* the run's random state: sampler (6 words) + noise rng (4 words) */
static void toy_rng_get(const toy_run *T, uint64_t *w) {
    ttt_sampler_get_state(&T->sampler, w);
    memcpy(w + TTT_SAMPLER_WORDS, T->noise.s, sizeof T->noise.s);
}
static void toy_rng_set(toy_run *T, const uint64_t *w) {
    ttt_error e;
    ck_assert_int_eq(ttt_sampler_set_state(&T->sampler, w, &e), TTT_OK);
    memcpy(T->noise.s, w + TTT_SAMPLER_WORDS, sizeof T->noise.s);
}

START_TEST(interrupted_run_resumes_bit_identically) {
    ttt_error e;
    ttt_regression_batch set;
    ck_assert_int_eq(ttt_regression_batch_init(&set, toy_cfg(), 5, &e), TTT_OK);
    ttt_rng dr;
    ttt_rng_seed(&dr, 80);
    ttt_regression_fill(&set, toy_cfg(), &dr);

    toy_run A;
    toy_init(&A, &set);
    for (int s = 0; s < 20; s++) toy_step(&A, &set); /* 20 steps = 60 indices: 12 epochs of 5 */

    char *dir = tu_mkdtemp();
    toy_run B;
    toy_init(&B, &set);
    for (int s = 0; s < 8; s++) toy_step(&B, &set); /* stops mid-epoch (24 = 4·5 + 4) */
    uint64_t words[TTT_SAMPLER_WORDS + 4];
    toy_rng_get(&B, words);
    ck_assert_int_eq(ttt_checkpoint_save(dir, &B.ps, &B.opt, B.step, words, 10, HASH, NULL, 0, &e),
                     TTT_OK);
    toy_free(&B);

    toy_run C;
    toy_init(&C, &set); /* a fresh process: initial values, then the checkpoint */
    uint64_t loaded[TTT_SAMPLER_WORDS + 4];
    ck_assert_int_eq(ttt_checkpoint_load(dir, &C.ps, &C.opt, &C.step, loaded, 10, HASH, NULL, &e),
                     TTT_OK);
    toy_rng_set(&C, loaded);
    ck_assert_int_eq(C.step, 8);
    for (int s = 8; s < 20; s++) toy_step(&C, &set);
    assert_same_state(&A.ps, &A.opt, &C.ps, &C.opt);
    /* and the run actually moved (the comparison is not between two untouched states) */
    ck_assert(A.ps.p[0]->data[0] != 0.0f);
    toy_run Z;
    toy_init(&Z, &set);
    ck_assert(memcmp(Z.ps.p[0]->data, A.ps.p[0]->data, 6 * sizeof(float)) != 0);
    toy_free(&Z);

    toy_free(&C);
    toy_free(&A);
    ttt_regression_batch_free(&set);
    tu_rmtree(dir);
    free(dir);
}
END_TEST

static Suite *infra_suite(void) {
    Suite *s = suite_create("train_infra");
    TCase *tc = tcase_create("train_infra");
    tcase_set_timeout(tc, 120); /* the byte-flip test writes and reads the file ~2000 times */
    tcase_add_test(tc, params_add_find_and_errors);
    tcase_add_test(tc, grad_norm_and_clipping);
    tcase_add_test(tc, nonfinite_values_are_located);
    tcase_add_test(tc, schedule_values);
    tcase_add_test(tc, config_is_validated);
    tcase_add_test(tc, adamw_matches_float64_reference);
    tcase_add_test(tc, adamw_with_clipping_matches_reference);
    tcase_add_test(tc, adamw_small_gradients_epsilon_matters);
    tcase_add_test(tc, adamw_decay_only_where_flagged);
    tcase_add_test(tc, adamw_nan_gradient_stops_with_a_clear_message);
    tcase_add_test(tc, checkpoint_round_trip_is_exact);
    tcase_add_test(tc, checkpoint_any_corrupted_byte_is_detected);
    tcase_add_test(tc, checkpoint_truncated_file_is_detected);
    tcase_add_test(tc, checkpoint_other_config_or_model_is_refused);
    tcase_add_test(tc, checkpoint_folder_keeps_previous_and_falls_back);
    tcase_add_test(tc, checkpoint_config_mismatch_does_not_fall_back);
    tcase_add_test(tc, interrupted_run_resumes_bit_identically);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(infra_suite()); }

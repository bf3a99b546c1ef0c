/* Threads over (batch, head) in ttt_apply_threads (src/app/apply.c): same seed + same thread count
 * = bit-identical results (docs/design.md "Errors, memory, determinism"). The sequences are
 * independent (docs/math.md §0) and each is computed by one thread with single-threaded BLAS, so
 * the outputs must be bit-identical for 1, 2 and 3 threads and across repeated runs with 2
 * threads. Comparisons are memcmp, not tolerances: any difference in arithmetic (a shared arena,
 * a race on a slice buffer, a reduction across threads, BLAS threads inside) shows up as a
 * mismatch. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "apply.h"
#include "rng.h"
#include "testutil.h"
#include "internal.h"

enum { B = 2, T = 150, H = 3, DK = 16, DV = 16 }; /* d_k = d_v: ttt_mlp needs it */

typedef struct inputs {
    float *q, *k, *v, *beta, *la, *S0; /* (B,T,H,DK) ×2, (B,T,H,DV), (B,T,H), (B,T,H[,DK]), (B,H,DK,DV) */
    ttt_st_tensor t[6];
    int n;
} inputs;

/* Random inputs: unit-norm keys (the delta rule's step is stable for β‖k‖² ≤ 2), β in (0.1, 1),
 * retentions in (0.9, 1), a random initial state; vec: one log retention per key dimension. */
static void make_inputs(inputs *in, uint64_t seed, int vec) {
    ttt_rng r;
    ttt_rng_seed(&r, seed);
    const size_t nk = (size_t)B * T * H * DK, nv = (size_t)B * T * H * DV, nt = (size_t)B * T * H;
    const size_t nla = vec ? nk : nt, ns = (size_t)B * H * DK * DV;
    in->q = malloc(nk * sizeof(float));
    in->k = malloc(nk * sizeof(float));
    in->v = malloc(nv * sizeof(float));
    in->beta = malloc(nt * sizeof(float));
    in->la = malloc(nla * sizeof(float));
    in->S0 = malloc(ns * sizeof(float));
    ttt_rng_fill_normal(&r, in->q, nk, 0.0f, 0.25f);
    ttt_rng_fill_normal(&r, in->k, nk, 0.0f, 1.0f);
    for (size_t i = 0; i < nk; i += DK) {
        double n2 = 0;
        for (int c = 0; c < DK; c++) n2 += (double)in->k[i + c] * in->k[i + c];
        for (int c = 0; c < DK; c++) in->k[i + c] /= (float)sqrt(n2);
    }
    ttt_rng_fill_normal(&r, in->v, nv, 0.0f, 1.0f);
    ttt_rng_fill_uniform(&r, in->beta, nt, 0.1f, 1.0f);
    ttt_rng_fill_uniform(&r, in->la, nla, logf(0.9f), -1e-3f);
    ttt_rng_fill_normal(&r, in->S0, ns, 0.0f, 0.1f);
    in->t[0] = (ttt_st_tensor){.name = "q", .ndim = 4, .shape = {B, T, H, DK}, .data = in->q};
    in->t[1] = (ttt_st_tensor){.name = "k", .ndim = 4, .shape = {B, T, H, DK}, .data = in->k};
    in->t[2] = (ttt_st_tensor){.name = "v", .ndim = 4, .shape = {B, T, H, DV}, .data = in->v};
    in->t[3] = (ttt_st_tensor){.name = "beta", .ndim = 3, .shape = {B, T, H}, .data = in->beta};
    in->t[4] = vec ? (ttt_st_tensor){.name = "log_alpha", .ndim = 4, .shape = {B, T, H, DK},
                                     .data = in->la}
                   : (ttt_st_tensor){.name = "log_alpha", .ndim = 3, .shape = {B, T, H},
                                     .data = in->la};
    in->t[5] = (ttt_st_tensor){
        .name = "initial_state", .ndim = 4, .shape = {B, H, DK, DV}, .data = in->S0};
    in->n = 6;
}

static void free_inputs(inputs *in) {
    free(in->q);
    free(in->k);
    free(in->v);
    free(in->beta);
    free(in->la);
    free(in->S0);
}

static ttt_status run(const char *yaml, inputs *in, int n_tensors, int threads,
                      ttt_apply_out *out, ttt_error *err) {
    ttt_cfg_node *root = NULL;
    ck_assert_msg(ttt_cfg_load_string(yaml, "test.yaml", &root, err) == TTT_OK, "%s", err->msg);
    ttt_cfg_node *layer = (ttt_cfg_node *)ttt_cfg_get(root, "layer");
    ttt_st_file f = {.path = "in.safetensors", .n = n_tensors, .t = in->t};
    ttt_status s = ttt_apply_threads(layer, &f, out, threads, err);
    ttt_cfg_free(root);
    return s;
}

static const char *meta(const ttt_apply_out *o, const char *key) {
    for (int i = 0; i < o->n_meta; i++)
        if (strcmp(o->meta[2 * i], key) == 0) return o->meta[2 * i + 1];
    return NULL;
}

/* Outputs (o and every final_state) byte for byte. */
static void assert_identical(const ttt_apply_out *a, const ttt_apply_out *b, const char *what) {
    ck_assert_int_eq(a->n, b->n);
    for (int i = 0; i < a->n; i++) {
        size_t n = 1;
        for (int d = 0; d < a->t[i].ndim; d++) n *= (size_t)a->t[i].shape[d];
        ck_assert_msg(memcmp(a->t[i].data, b->t[i].data, n * sizeof(float)) == 0,
                      "%s: output '%s' differs", what, a->t[i].name);
    }
}

/* Layers covering the closed forms (chunkwise linear attention with scalar and vector gates,
 * chunkwise and recurrent delta rule), the generic driver and a multi-weight model. The chunk
 * (32) does not divide T (150). */
static const struct {
    const char *yaml;
    int vec;       /* vector gates */
    int n_tensors; /* how many of the inputs the layer takes */
} layers[] = {
    {"layer: {preset: mamba2, form: chunkwise, chunk: 32}\n", 0, 6},
    {"layer: {preset: gla, form: chunkwise, chunk: 32}\n", 1, 6},
    {"layer: {preset: gated_deltanet, form: chunkwise, chunk: 32}\n", 0, 6},
    {"layer: {preset: gated_deltanet, form: recurrent}\n", 0, 6},
    {"layer: {preset: deltanet, form: generic}\n", 0, 4},
    {"layer: {preset: ttt_mlp, form: generic, mini_batch: 16}\n", 0, 4},
};

START_TEST(one_two_three_threads_bit_identical) {
    inputs in;
    make_inputs(&in, 100 + (uint64_t)_i, layers[_i].vec);
    ttt_error err = {0};
    ttt_apply_out one, two, three;
    const char *yaml = layers[_i].yaml;
    const int n = layers[_i].n_tensors;
    ck_assert_msg(run(yaml, &in, n, 1, &one, &err) == TTT_OK, "%s", err.msg);
    ck_assert_msg(run(yaml, &in, n, 2, &two, &err) == TTT_OK, "%s", err.msg);
    ck_assert_msg(run(yaml, &in, n, 3, &three, &err) == TTT_OK, "%s", err.msg);
    ck_assert_str_eq(meta(&one, "threads"), "1");
#ifdef _OPENMP
    /* the threads really ran: otherwise the comparison below would prove nothing */
    ck_assert_str_eq(meta(&two, "threads"), "2");
    ck_assert_str_eq(meta(&three, "threads"), "3");
#endif
    assert_identical(&one, &two, yaml);
    assert_identical(&one, &three, yaml);
    /* a sanity check that the outputs are not trivially equal (e.g. all zero) */
    double s = 0;
    for (size_t i = 0; i < (size_t)B * T * H * DV; i++) s += fabs(one.t[0].data[i]);
    ck_assert_msg(s > 1.0 && isfinite(s), "%s: output sum %g", yaml, s);
    ttt_apply_out_free(&one);
    ttt_apply_out_free(&two);
    ttt_apply_out_free(&three);
    free_inputs(&in);
}
END_TEST

START_TEST(repeated_two_thread_runs_bit_identical) {
    inputs in;
    make_inputs(&in, 7, 0);
    ttt_error err = {0};
    const char *yaml = "layer: {preset: gated_deltanet, form: chunkwise, chunk: 64}\n";
    ttt_apply_out first;
    ck_assert_msg(run(yaml, &in, 6, 2, &first, &err) == TTT_OK, "%s", err.msg);
    for (int r = 0; r < 5; r++) {
        ttt_apply_out again;
        ck_assert_msg(run(yaml, &in, 6, 2, &again, &err) == TTT_OK, "%s", err.msg);
        assert_identical(&first, &again, "repeated 2-thread run");
        ttt_apply_out_free(&again);
    }
    ttt_apply_out_free(&first);
    free_inputs(&in);
}
END_TEST

/* More threads than sequences is clamped (B·H = 6), and 0 is the default. */
START_TEST(thread_count_clamped_and_default) {
    inputs in;
    make_inputs(&in, 9, 0);
    ttt_error err = {0};
    const char *yaml = "layer: {preset: mamba2, chunk: 32}\n";
    ttt_apply_out many, dflt, one;
    ck_assert_msg(run(yaml, &in, 6, 1, &one, &err) == TTT_OK, "%s", err.msg);
    ck_assert_msg(run(yaml, &in, 6, 50, &many, &err) == TTT_OK, "%s", err.msg);
    ck_assert_msg(run(yaml, &in, 6, 0, &dflt, &err) == TTT_OK, "%s", err.msg);
    ck_assert_int_le(atoi(meta(&many, "threads")), B * H);
    ck_assert_int_ge(atoi(meta(&dflt, "threads")), 1);
    assert_identical(&one, &many, "50 threads");
    assert_identical(&one, &dflt, "default threads");
    ttt_apply_out_free(&many);
    ttt_apply_out_free(&dflt);
    ttt_apply_out_free(&one);
    free_inputs(&in);
}
END_TEST

/* An error met by every sequence is reported for the first one in (batch, head) order, whichever
 * thread met it first: the message does not depend on the thread count. */
START_TEST(error_reported_for_first_sequence) {
    inputs in;
    make_inputs(&in, 11, 0);
    /* closed delta-rule forms refuse per-token gates with decoupled placement */
    const char *yaml = "layer: {preset: deltanet, form: chunkwise, optimizer: {decay_placement: "
                       "decoupled}}\n";
    for (int th = 1; th <= 3; th++) {
        ttt_error err = {0};
        ttt_apply_out out;
        ck_assert_int_ne(run(yaml, &in, 6, th, &out, &err), TTT_OK);
        ck_assert_msg(strstr(err.msg, "batch 0, head 0") != NULL, "%d threads: %s", th, err.msg);
    }
    free_inputs(&in);
}
END_TEST


/* One head (B, T, 1, D) takes a direct path (the layer reads the file's rows in place); the same
 * sequences laid out as heads of one batch element, (1, T, B, D), go through the gathered slices.
 * Every sequence is computed by the same code either way, so the outputs are bit-identical. */
START_TEST(one_head_direct_path_equals_gathered) {
    inputs in;
    make_inputs(&in, 13, 0); /* (B, T, H, ·) = (2, 150, 3, ·): use its data as 6 sequences */
    const int S = B * H;     /* sequences */
    const size_t nk = (size_t)S * T * DK, nv = (size_t)S * T * DV, nt = (size_t)S * T;
    /* layout 1: (S, T, 1, D) — sequence s's rows contiguous; layout 2: (1, T, S, D) */
    float *q1 = malloc(nk * 4), *k1 = malloc(nk * 4), *v1 = malloc(nv * 4), *b1 = malloc(nt * 4),
          *l1 = malloc(nt * 4), *s1 = malloc((size_t)S * DK * DV * 4);
    float *q2 = malloc(nk * 4), *k2 = malloc(nk * 4), *v2 = malloc(nv * 4), *b2 = malloc(nt * 4),
          *l2 = malloc(nt * 4);
    for (int s = 0; s < S; s++)
        for (int t = 0; t < T; t++) {
            const size_t r1 = (size_t)s * T + t, r2 = (size_t)t * S + s;
            memcpy(q1 + r1 * DK, in.q + r1 * DK, DK * 4); /* any data, same in both layouts */
            memcpy(q2 + r2 * DK, in.q + r1 * DK, DK * 4);
            memcpy(k1 + r1 * DK, in.k + r1 * DK, DK * 4);
            memcpy(k2 + r2 * DK, in.k + r1 * DK, DK * 4);
            memcpy(v1 + r1 * DV, in.v + r1 * DV, DV * 4);
            memcpy(v2 + r2 * DV, in.v + r1 * DV, DV * 4);
            b1[r1] = b2[r2] = in.beta[r1];
            l1[r1] = l2[r2] = in.la[r1];
        }
    memcpy(s1, in.S0, (size_t)S * DK * DV * 4); /* (S, 1, DK, DV) = (1, S, DK, DV) */
    inputs one = in, many = in;
    one.t[0] = (ttt_st_tensor){.name = "q", .ndim = 4, .shape = {S, T, 1, DK}, .data = q1};
    one.t[1] = (ttt_st_tensor){.name = "k", .ndim = 4, .shape = {S, T, 1, DK}, .data = k1};
    one.t[2] = (ttt_st_tensor){.name = "v", .ndim = 4, .shape = {S, T, 1, DV}, .data = v1};
    one.t[3] = (ttt_st_tensor){.name = "beta", .ndim = 3, .shape = {S, T, 1}, .data = b1};
    one.t[4] = (ttt_st_tensor){.name = "log_alpha", .ndim = 3, .shape = {S, T, 1}, .data = l1};
    one.t[5] = (ttt_st_tensor){
        .name = "initial_state", .ndim = 4, .shape = {S, 1, DK, DV}, .data = s1};
    many.t[0] = (ttt_st_tensor){.name = "q", .ndim = 4, .shape = {1, T, S, DK}, .data = q2};
    many.t[1] = (ttt_st_tensor){.name = "k", .ndim = 4, .shape = {1, T, S, DK}, .data = k2};
    many.t[2] = (ttt_st_tensor){.name = "v", .ndim = 4, .shape = {1, T, S, DV}, .data = v2};
    many.t[3] = (ttt_st_tensor){.name = "beta", .ndim = 3, .shape = {1, T, S}, .data = b2};
    many.t[4] = (ttt_st_tensor){.name = "log_alpha", .ndim = 3, .shape = {1, T, S}, .data = l2};
    many.t[5] = (ttt_st_tensor){
        .name = "initial_state", .ndim = 4, .shape = {1, S, DK, DV}, .data = s1};
    const char *yaml = "layer: {preset: gated_deltanet, form: chunkwise, chunk: 32}\n";
    for (int th = 1; th <= 2; th++) {
        ttt_error err = {0};
        ttt_apply_out o1, o2;
        ck_assert_msg(run(yaml, &one, 6, th, &o1, &err) == TTT_OK, "%s", err.msg);
        ck_assert_msg(run(yaml, &many, 6, th, &o2, &err) == TTT_OK, "%s", err.msg);
        for (int s = 0; s < S; s++)
            for (int t = 0; t < T; t++)
                ck_assert_msg(memcmp(o1.t[0].data + ((size_t)s * T + t) * DV,
                                     o2.t[0].data + ((size_t)t * S + s) * DV, DV * 4) == 0,
                              "%d threads: sequence %d, token %d differs", th, s, t);
        ck_assert_int_eq(memcmp(o1.t[1].data, o2.t[1].data, (size_t)S * DK * DV * 4), 0);
        ttt_apply_out_free(&o1);
        ttt_apply_out_free(&o2);
    }
    free(q1), free(k1), free(v1), free(b1), free(l1), free(s1);
    free(q2), free(k2), free(v2), free(b2), free(l2);
    free_inputs(&in);
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("threads");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 600);
    tcase_add_loop_test(tc, one_two_three_threads_bit_identical, 0,
                        (int)(sizeof layers / sizeof layers[0]));
    tcase_add_test(tc, repeated_two_thread_runs_bit_identical);
    tcase_add_test(tc, thread_count_clamped_and_default);
    tcase_add_test(tc, error_reported_for_first_sequence);
    tcase_add_test(tc, one_head_direct_path_equals_gathered);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(suite()); }

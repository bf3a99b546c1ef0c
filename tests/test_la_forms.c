/* Parallel (docs/math.md §5.1) and chunkwise (§5.2) gated linear attention against the recurrence:
 * float64 evaluations written here independently, the recurrent kernel, and the generic TTT
 * driver with (linear, dot, sgd θ = 1, b = 1) (docs/math.md §6 items 1–2). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "internal.h"

/* Tolerances. Every form evaluates the same sums in float32 in a different order (per-token
 * rank-1 updates, one T × T product, or C × C products plus a carried state), so they differ from
 * the float64 recurrence by accumulated rounding: measured ≤ ~2e-6 of max|ref| here (T ≤ 2048,
 * d ≤ 16). 2e-5 relative to the largest reference entry is ~100 float32 ulps — the docs/math.md §6
 * "~1e-5 relative" level — and far below any real discrepancy: a dropped token, an off-by-one
 * gate or a wrong chunk boundary changes outputs at O(1e-3 … 1) relative scale (the perturbation
 * tests below show a 0.1 % change of one token's write is caught). */
#define RTOL 2e-5
#define ATOL 1e-6

enum { GATE_NONE, GATE_CONST, GATE_SCALAR, GATE_VECTOR, GATE_COUNT };

static float *uniform(tu_fixture *f, size_t n, float lo, float hi) {
    float *x = ttt_arena_alloc(f->ctx.arena, n * sizeof(float));
    ttt_rng_fill_uniform(&f->rng, x, n, lo, hi);
    return x;
}
static float *fcopy(tu_fixture *f, const float *x, size_t n) {
    float *y = ttt_arena_alloc(f->ctx.arena, n * sizeof(float));
    memcpy(y, x, n * sizeof(float));
    return y;
}

/* One problem: inputs, gates and an initial state. */
typedef struct problem {
    int T, dk, dv, gate, avec;
    float *q, *k, *v, *beta, *la, *S0;
} problem;

/* Gates as retentions α ∈ (0, 1]: log α uniform in [lo, hi] (≤ 0). */
static problem make_problem(tu_fixture *f, int T, int dk, int dv, int gate, int with_beta, float lo,
                            float hi) {
    problem p = {.T = T, .dk = dk, .dv = dv, .gate = gate, .avec = gate == GATE_VECTOR};
    p.q = tu_randn_buf(f, (size_t)T * dk, 0.5f);
    p.k = tu_randn_buf(f, (size_t)T * dk, 0.5f);
    p.v = tu_randn_buf(f, (size_t)T * dv, 1.0f);
    p.beta = with_beta ? uniform(f, T, 0.1f, 1.0f) : NULL;
    p.S0 = tu_randn_buf(f, (size_t)dk * dv, 1.0f);
    if (gate == GATE_CONST) {
        p.la = uniform(f, T, 0, 0);
        for (int t = 0; t < T; t++) p.la[t] = 0.5f * (lo + hi);
    } else if (gate == GATE_SCALAR) {
        p.la = uniform(f, T, lo, hi);
    } else if (gate == GATE_VECTOR) {
        p.la = uniform(f, (size_t)T * dk, lo, hi);
    }
    return p;
}

/* float64 recurrence, docs/math.md §4 (rows linear_attention … gla), written from the definition:
 *   S_t = Diag(α_t) S_{t−1} + β_t k_tᵀ v_t,   o_t = q_t S_t.
 * S (dk, dv) in/out. */
static void ref_la(double *o, double *S, const float *q, const float *k, const float *v,
                   const float *beta, const float *la, int avec, int T, int dk, int dv) {
    for (int t = 0; t < T; t++) {
        double b = beta ? beta[t] : 1.0;
        for (int i = 0; i < dk; i++) {
            double a = !la ? 1.0 : exp(avec ? la[(size_t)t * dk + i] : la[t]);
            for (int j = 0; j < dv; j++)
                S[i * dv + j] =
                    a * S[i * dv + j] + b * k[(size_t)t * dk + i] * v[(size_t)t * dv + j];
        }
        for (int j = 0; j < dv; j++) {
            double s = 0;
            for (int i = 0; i < dk; i++) s += q[(size_t)t * dk + i] * S[i * dv + j];
            o[(size_t)t * dv + j] = s;
        }
    }
}

/* Reference output and final state of a problem from its initial state. */
static void ref_problem(const problem *p, double **o, double **S) {
    *o = calloc((size_t)p->T * p->dv, sizeof(double));
    *S = malloc(sizeof(double) * p->dk * p->dv);
    for (int i = 0; i < p->dk * p->dv; i++) (*S)[i] = p->S0[i];
    ref_la(*o, *S, p->q, p->k, p->v, p->beta, p->la, p->avec, p->T, p->dk, p->dv);
}

enum { FORM_RECURRENT = -1, FORM_PARALLEL = 0 }; /* > 0: chunkwise with that chunk size */

/* Run one form from the problem's initial state; returns o, final state in S (both arena). */
static float *run_form(tu_fixture *f, const problem *p, int form, float **S_out) {
    float *o = uniform(f, (size_t)p->T * p->dv, 7, 7); /* garbage: every entry must be written */
    float *S = fcopy(f, p->S0, (size_t)p->dk * p->dv);
    if (form == FORM_RECURRENT)
        ttt_linear_attention_recurrent(o, S, p->q, p->k, p->v, p->beta, p->la, p->avec, p->T,
                                       p->dk, p->dv);
    else if (form == FORM_PARALLEL)
        ttt_linear_attention_parallel(&f->ctx, o, S, p->q, p->k, p->v, p->beta, p->la, p->avec,
                                      p->T, p->dk, p->dv);
    else
        ttt_linear_attention_chunkwise(&f->ctx, o, S, p->q, p->k, p->v, p->beta, p->la, p->avec,
                                       p->T, p->dk, p->dv, form);
    *S_out = S;
    return o;
}

static const int forms[] = {FORM_RECURRENT, FORM_PARALLEL, 1, 7, 16, 64, 128};
#define N_FORMS ((int)(sizeof forms / sizeof forms[0]))

/* 1–2. recurrent = parallel = chunkwise (C ∈ {1, 7, 16, 64, 128}, T = 100) = float64 recurrence,
 * for every gate kind, with and without β, from a random initial state. */
static void check_all_forms(int gate, int with_beta, uint64_t seed) {
    tu_fixture f;
    tu_fx_init(&f, seed);
    problem p = make_problem(&f, 100, 16, 12, gate, with_beta, -0.3f, -0.01f);
    double *o_ref, *S_ref;
    ref_problem(&p, &o_ref, &S_ref);
    for (int i = 0; i < N_FORMS; i++) {
        ttt_arena_mark m0 = ttt_arena_mark_get(f.ctx.arena);
        float *S;
        float *o = run_form(&f, &p, forms[i], &S);
        TU_ASSERT_CLOSE(o, o_ref, (size_t)p.T * p.dv, ATOL, RTOL);
        TU_ASSERT_CLOSE(S, S_ref, (size_t)p.dk * p.dv, ATOL, RTOL);
        ttt_arena_release(f.ctx.arena, m0);
    }
    free(o_ref), free(S_ref);
    tu_fx_free(&f);
}

START_TEST(forms_no_decay) { check_all_forms(GATE_NONE, _i, 100 + _i); }
END_TEST
START_TEST(forms_const_decay) { check_all_forms(GATE_CONST, _i, 110 + _i); }
END_TEST
START_TEST(forms_scalar_decay) { check_all_forms(GATE_SCALAR, _i, 120 + _i); }
END_TEST
START_TEST(forms_vector_decay) { check_all_forms(GATE_VECTOR, _i, 130 + _i); }
END_TEST

/* 2. The generic TTT driver (linear, dot, sgd θ = 1, b = 1) from the same initial state, η = β:
 * equal to the parallel and chunkwise forms (and both to the float64 recurrence). The constant
 * gate goes through the optimizer's `decay` option (the driver fills log γ itself). */
START_TEST(forms_equal_generic_driver) {
    const int gate = _i;
    tu_fixture f;
    tu_fx_init(&f, 140 + gate);
    problem p = make_problem(&f, 45, 8, 6, gate, 1, -0.3f, -0.01f);
    double *o_ref, *S_ref;
    ref_problem(&p, &o_ref, &S_ref);

    ttt_layer L;
    ttt_error err = {0};
    ck_assert_msg(ttt_layer_init(&L, "linear", "dot", "sgd", 1, TTT_ORDER_UPDATE_THEN_APPLY,
                                 "generic", p.dk, p.dv, &err) == TTT_OK,
                  "%s", err.msg);
    ttt_layer_state st;
    ttt_layer_state_init(&f.ctx, &L, &st, &f.rng);
    memcpy(st.W[0]->data, p.S0, sizeof(float) * p.dk * p.dv);
    ttt_tensor q = ttt_tensor_view2(p.q, p.T, p.dk), k = ttt_tensor_view2(p.k, p.T, p.dk);
    ttt_tensor v = ttt_tensor_view2(p.v, p.T, p.dv);
    ttt_tensor eta = ttt_tensor_view(p.beta, 1, (int[]){p.T});
    ttt_tensor la_t = gate == GATE_VECTOR ? ttt_tensor_view2(p.la, p.T, p.dk)
                      : gate == GATE_SCALAR ? ttt_tensor_view(p.la, 1, (int[]){p.T})
                                            : (ttt_tensor){0};
    if (gate == GATE_CONST) L.decay = expf(p.la[0]);
    ttt_tensor *o_drv = ttt_tensor_2d(&f.ctx, p.T, p.dv);
    ck_assert_msg(ttt_layer_forward(&f.ctx, &L, o_drv, &st, &q, &k, &v, &eta,
                                    gate >= GATE_SCALAR ? &la_t : NULL, &err) == TTT_OK,
                  "%s", err.msg);
    TU_ASSERT_CLOSE(o_drv->data, o_ref, o_drv->n, ATOL, RTOL);
    TU_ASSERT_CLOSE(st.W[0]->data, S_ref, st.W[0]->n, ATOL, RTOL);
    const int fs[] = {FORM_PARALLEL, 7, 16};
    for (int i = 0; i < 3; i++) {
        float *S;
        float *o = run_form(&f, &p, fs[i], &S);
        /* each float32 path against the float64 reference, not against the driver's result */
        TU_ASSERT_CLOSE(o, o_ref, o_drv->n, ATOL, RTOL);
        TU_ASSERT_CLOSE(S, S_ref, st.W[0]->n, ATOL, RTOL);
    }
    free(o_ref), free(S_ref);
    tu_fx_free(&f);
}
END_TEST

/* Split-sequence resume (docs/math.md §6.1): T1 tokens, then T2 more with the carried state, equals
 * one pass, for the parallel and chunkwise forms (T1 = 37 is not a multiple of the chunk, so the
 * chunk boundaries of the two runs differ: equal within rounding, not bitwise). */
START_TEST(split_sequence_resume) {
    const int gate = _i, T1 = 37;
    tu_fixture f;
    tu_fx_init(&f, 150 + gate);
    problem p = make_problem(&f, 100, 16, 12, gate, 1, -0.3f, -0.01f);
    double *o_ref, *S_ref;
    ref_problem(&p, &o_ref, &S_ref);
    const int fs[] = {FORM_PARALLEL, 1, 16, 64};
    const int gd = p.la ? (p.avec ? p.dk : 1) : 0;
    for (int i = 0; i < 4; i++) {
        float *o = uniform(&f, (size_t)p.T * p.dv, 7, 7);
        float *S = fcopy(&f, p.S0, (size_t)p.dk * p.dv);
        for (int part = 0; part < 2; part++) {
            int a = part ? T1 : 0, n = part ? p.T - T1 : T1;
            const float *la = p.la ? p.la + (size_t)a * gd : NULL;
            if (fs[i] == FORM_PARALLEL)
                ttt_linear_attention_parallel(&f.ctx, o + (size_t)a * p.dv, S,
                                              p.q + (size_t)a * p.dk, p.k + (size_t)a * p.dk,
                                              p.v + (size_t)a * p.dv, p.beta + a, la, p.avec, n,
                                              p.dk, p.dv);
            else
                ttt_linear_attention_chunkwise(&f.ctx, o + (size_t)a * p.dv, S,
                                               p.q + (size_t)a * p.dk, p.k + (size_t)a * p.dk,
                                               p.v + (size_t)a * p.dv, p.beta + a, la, p.avec, n,
                                               p.dk, p.dv, fs[i]);
        }
        TU_ASSERT_CLOSE(o, o_ref, (size_t)p.T * p.dv, ATOL, RTOL);
        TU_ASSERT_CLOSE(S, S_ref, (size_t)p.dk * p.dv, ATOL, RTOL);
        float *S1;
        float *o1 = run_form(&f, &p, fs[i], &S1); /* one pass, against the same reference */
        TU_ASSERT_CLOSE(o1, o_ref, (size_t)p.T * p.dv, ATOL, RTOL);
        TU_ASSERT_CLOSE(S1, S_ref, (size_t)p.dk * p.dv, ATOL, RTOL);
    }
    free(o_ref), free(S_ref);
    tu_fx_free(&f);
}
END_TEST

/* 3. Long sequences with strong decay: G reaches ≈ −2000 over the sequence and ≈ −C inside a
 * chunk (C = 128 exceeds the 60-nat single-reference span, exercising the split), with no
 * NaN/Inf and still equal to the recurrence. The mixed vector gate has key dimensions that
 * barely decay next to dimensions that decay by e^−2 per token (spans differ per dimension). */
static void check_long(int gate, int T, float lo, float hi, int mixed, uint64_t seed) {
    tu_fixture f;
    tu_fx_init(&f, seed);
    problem p = make_problem(&f, T, 16, 8, gate, 1, lo, hi);
    if (mixed)
        for (int t = 0; t < T; t++)
            for (int c = 0; c < p.dk; c++)
                if (c % 2) p.la[(size_t)t * p.dk + c] *= 0.005f;
    double *o_ref, *S_ref;
    ref_problem(&p, &o_ref, &S_ref);
    const int fs[] = {FORM_RECURRENT, FORM_PARALLEL, 16, 64, 128, 333};
    for (int i = 0; i < 6; i++) {
        ttt_arena_mark m0 = ttt_arena_mark_get(f.ctx.arena);
        float *S;
        float *o = run_form(&f, &p, fs[i], &S);
        ck_assert_int_eq(ttt_find_nonfinite(o, (size_t)p.T * p.dv), -1);
        ck_assert_int_eq(ttt_find_nonfinite(S, (size_t)p.dk * p.dv), -1);
        TU_ASSERT_CLOSE(o, o_ref, (size_t)p.T * p.dv, ATOL, RTOL);
        TU_ASSERT_CLOSE(S, S_ref, (size_t)p.dk * p.dv, ATOL, RTOL);
        ttt_arena_release(f.ctx.arena, m0);
    }
    free(o_ref), free(S_ref);
    tu_fx_free(&f);
}

START_TEST(long_sequence_strong_scalar_decay) {
    check_long(GATE_SCALAR, 2048, -1.2f, -0.8f, 0, 160);
}
END_TEST
START_TEST(long_sequence_strong_vector_decay) {
    check_long(GATE_VECTOR, 2048, -1.2f, -0.8f, 0, 161);
}
END_TEST
START_TEST(long_sequence_mixed_vector_decay) {
    check_long(GATE_VECTOR, 2048, -2.0f, -1.0f, 1, 162);
}
END_TEST
/* the brief's parallel-form case: T = 1000, log α ≈ −0.5 per key dimension */
START_TEST(parallel_vector_decay_t1000) { check_long(GATE_VECTOR, 1000, -0.6f, -0.4f, 0, 163); }
END_TEST

/* Edge sizes: T = 1, T smaller than the chunk, d_v = 1, β and gates absent, T = 0 (no-op). */
START_TEST(edge_sizes) {
    tu_fixture f;
    tu_fx_init(&f, 170);
    const int Ts[] = {1, 2, 5}, dvs[] = {1, 3};
    for (int a = 0; a < 3; a++)
        for (int b = 0; b < 2; b++)
            for (int gate = 0; gate < GATE_COUNT; gate++) {
                problem p = make_problem(&f, Ts[a], 4, dvs[b], gate, gate % 2, -0.5f, -0.1f);
                double *o_ref, *S_ref;
                ref_problem(&p, &o_ref, &S_ref);
                const int fs[] = {FORM_PARALLEL, 1, 2, 64};
                for (int i = 0; i < 4; i++) {
                    float *S;
                    float *o = run_form(&f, &p, fs[i], &S);
                    TU_ASSERT_CLOSE(o, o_ref, (size_t)p.T * p.dv, ATOL, RTOL);
                    TU_ASSERT_CLOSE(S, S_ref, (size_t)p.dk * p.dv, ATOL, RTOL);
                }
                free(o_ref), free(S_ref);
            }
    /* T = 0 leaves the state alone */
    float S[4] = {1, 2, 3, 4}, dummy = 0;
    ttt_linear_attention_chunkwise(&f.ctx, &dummy, S, &dummy, &dummy, &dummy, NULL, NULL, 0, 0, 2,
                                   2, 16);
    ttt_linear_attention_parallel(&f.ctx, &dummy, S, &dummy, &dummy, &dummy, NULL, NULL, 0, 0, 2,
                                  2);
    ck_assert(S[0] == 1 && S[1] == 2 && S[2] == 3 && S[3] == 4);
    tu_fx_free(&f);
}
END_TEST

/* Scratch comes from the arena and is released: the arena is back at its mark afterwards. */
START_TEST(scratch_is_released) {
    tu_fixture f;
    tu_fx_init(&f, 171);
    problem p = make_problem(&f, 300, 16, 8, GATE_VECTOR, 1, -1.5f, -0.5f);
    float *o = uniform(&f, (size_t)p.T * p.dv, 0, 0), *S = fcopy(&f, p.S0, (size_t)p.dk * p.dv);
    ttt_arena_mark m0 = ttt_arena_mark_get(f.ctx.arena);
    ttt_linear_attention_chunkwise(&f.ctx, o, S, p.q, p.k, p.v, p.beta, p.la, 1, p.T, p.dk, p.dv,
                                   64);
    ttt_linear_attention_parallel(&f.ctx, o, S, p.q, p.k, p.v, p.beta, p.la, 1, p.T, p.dk, p.dv);
    ttt_arena_mark m1 = ttt_arena_mark_get(f.ctx.arena);
    ck_assert(m0.block == m1.block && m0.offset == m1.offset);
    tu_fx_free(&f);
}
END_TEST

/* The comparisons can fail: a 0.1 % weaker write of one token, or gates shifted by one token,
 * are detected by the same tolerance (against the reference of the unperturbed problem). */
START_TEST(perturbations_are_detected) {
    tu_fixture f;
    tu_fx_init(&f, 172);
    problem p = make_problem(&f, 100, 16, 12, GATE_VECTOR, 1, -0.3f, -0.01f);
    double *o_ref, *S_ref;
    ref_problem(&p, &o_ref, &S_ref);
    const int fs[] = {FORM_PARALLEL, 16};
    for (int i = 0; i < 2; i++) {
        problem pp = p;
        pp.beta = fcopy(&f, p.beta, p.T);
        pp.beta[60] *= 0.999f;
        float *S;
        float *o = run_form(&f, &pp, fs[i], &S);
        ck_assert(!tu_close(o, o_ref, (size_t)p.T * p.dv, ATOL, RTOL, NULL, 0));
        pp = p;
        pp.la = p.la + p.dk; /* token t gets token t+1's gates (T − 1 tokens) */
        pp.T = p.T - 1;
        o = run_form(&f, &pp, fs[i], &S);
        ck_assert(!tu_close(o, o_ref, (size_t)pp.T * p.dv, ATOL, RTOL, NULL, 0));
    }
    free(o_ref), free(S_ref);
    tu_fx_free(&f);
}
END_TEST

/* A copy of the (rows, cols) array x with rows ld floats apart, starting `off` floats into a
 * fresh arena buffer; every other float of the buffer is `fill`. Returns the first row. */
static float *spread(tu_fixture *f, const float *x, int rows, int cols, int ld, int off,
                     float fill) {
    const size_t n = (size_t)rows * ld + off;
    float *buf = ttt_arena_alloc(f->ctx.arena, n * sizeof(float));
    for (size_t i = 0; i < n; i++) buf[i] = fill;
    for (int r = 0; r < rows; r++)
        if (x) memcpy(buf + off + (size_t)r * ld, x + (size_t)r * cols, sizeof(float) * cols);
    return buf + off;
}

/* The strided entry points (kernels.h, ttt_form_ld; what ttt apply runs in place on a head of a
 * (B, T, H, D) tensor) return the same bits as the contiguous ones: the problem is laid out as
 * head 1 of 3 with an extra odd padding (no stride a multiple of a row), the gaps NaN on input (a
 * stray read would poison the output) and 7 on output (a stray write would show). Exact equality,
 * not a tolerance: strides only move where numbers are read and written, never the arithmetic.
 * Loop: gate kind × β. Each covers recurrent, parallel (= chunkwise with C = T) and chunkwise
 * C ∈ {1, 7, 16, 64, 128}; the gates (log α ∈ [−1.2, −0.2]) make C = 128 and the parallel form
 * take the long-span paths (per-pair exponentials, vec_scores' split), the shorter chunks the
 * reference-row trick. The comparison can fail: one query changed by 1.5e-5 relative is
 * detected. */
START_TEST(strided_equals_contiguous) {
    const int gate = _i / 2, with_beta = _i % 2;
    tu_fixture f;
    tu_fx_init(&f, 180 + (uint64_t)_i);
    problem p = make_problem(&f, 150, 16, 12, gate, with_beta, -1.2f, -0.2f);
    const int T = p.T, dk = p.dk, dv = p.dv, H = 3, h = 1, gk = p.avec ? dk : 1;
    const ttt_form_ld ld = {.o = H * dv + 3, .q = H * dk + 5, .k = H * dk + 1, .v = H * dv + 7,
                            .beta = H, .la = H * gk + 2};
    const float *q = spread(&f, p.q, T, dk, ld.q, h * dk, NAN);
    const float *k = spread(&f, p.k, T, dk, ld.k, h * dk, NAN);
    const float *v = spread(&f, p.v, T, dv, ld.v, h * dv, NAN);
    const float *beta = p.beta ? spread(&f, p.beta, T, 1, ld.beta, h, NAN) : NULL;
    const float *la = p.la ? spread(&f, p.la, T, gk, ld.la, h * gk, NAN) : NULL;
    for (int i = 0; i < N_FORMS; i++) {
        float *S_ref;
        const float *o_ref = run_form(&f, &p, forms[i], &S_ref);
        float *o = spread(&f, NULL, T, dv, ld.o, h * dv, 7.0f);
        float *S = fcopy(&f, p.S0, (size_t)dk * dv);
        if (forms[i] == FORM_RECURRENT)
            ttt_linear_attention_recurrent_ld(o, S, q, k, v, beta, la, p.avec, T, dk, dv, &ld);
        else
            ttt_linear_attention_chunkwise_ld(&f.ctx, o, S, q, k, v, beta, la, p.avec, T, dk, dv,
                                              forms[i] == FORM_PARALLEL ? T : forms[i], &ld);
        for (int t = 0; t < T; t++)
            ck_assert_msg(memcmp(o + (size_t)t * ld.o, o_ref + (size_t)t * dv,
                                 sizeof(float) * dv) == 0,
                          "form %d, gate %d, beta %d: o row %d differs", forms[i], gate,
                          with_beta, t);
        ck_assert_msg(memcmp(S, S_ref, sizeof(float) * dk * dv) == 0, "form %d: S differs",
                      forms[i]);
        const float *buf = o - h * dv; /* everything outside the rows is still 7 */
        for (size_t j = 0; j < (size_t)T * ld.o + h * dv; j++) {
            const int in_rows = j >= (size_t)h * dv && (j - h * dv) % ld.o < (size_t)dv;
            ck_assert_msg(in_rows || buf[j] == 7.0f, "form %d wrote outside its rows", forms[i]);
        }
        if (i == 0 || forms[i] == 16) { /* the comparison resolves a tiny change of one input */
            float *qp = (float *)q + (size_t)(T / 2) * ld.q + 3;
            const float keep = *qp;
            *qp = keep * (1.0f + 0x1p-16f); /* 128 ulps, 1.5e-5 relative */
            S = fcopy(&f, p.S0, (size_t)dk * dv);
            if (forms[i] == FORM_RECURRENT)
                ttt_linear_attention_recurrent_ld(o, S, q, k, v, beta, la, p.avec, T, dk, dv,
                                                  &ld);
            else
                ttt_linear_attention_chunkwise_ld(&f.ctx, o, S, q, k, v, beta, la, p.avec, T, dk,
                                                  dv, forms[i], &ld);
            ck_assert(memcmp(o + (size_t)(T / 2) * ld.o, o_ref + (size_t)(T / 2) * dv,
                             sizeof(float) * dv) != 0);
            *qp = keep;
        }
    }
    tu_fx_free(&f);
}
END_TEST

static Suite *la_forms_suite(void) {
    Suite *s = suite_create("la_forms");
    TCase *tc = tcase_create("forms");
    tcase_add_loop_test(tc, forms_no_decay, 0, 2);
    tcase_add_loop_test(tc, forms_const_decay, 0, 2);
    tcase_add_loop_test(tc, forms_scalar_decay, 0, 2);
    tcase_add_loop_test(tc, forms_vector_decay, 0, 2);
    tcase_add_loop_test(tc, forms_equal_generic_driver, 0, GATE_COUNT);
    tcase_add_loop_test(tc, split_sequence_resume, 0, GATE_COUNT);
    tcase_add_test(tc, long_sequence_strong_scalar_decay);
    tcase_add_test(tc, long_sequence_strong_vector_decay);
    tcase_add_test(tc, long_sequence_mixed_vector_decay);
    tcase_add_test(tc, parallel_vector_decay_t1000);
    tcase_add_test(tc, edge_sizes);
    tcase_add_test(tc, scratch_is_released);
    tcase_add_test(tc, perturbations_are_detected);
    tcase_add_loop_test(tc, strided_equals_contiguous, 0, 2 * GATE_COUNT);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(la_forms_suite()); }

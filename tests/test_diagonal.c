/* Diagonal recurrences (layers/diagonal/diagonal.h, docs/math.md §8): the LRU and Mamba(1)'s
 * selective scan.
 *   (i)   the recurrent kernels = float64 recurrences written here from the papers' definitions;
 *   (ii)  the scan form (several block counts) = the recurrent kernel, at long T with hard decays
 *         (|λ| up to 0.9999 next to Δ·A down to −40);
 *   (iii) the recorded ops' gradients (every input) = central finite differences of the float64
 *         definitions, through a loss L = Σ R ⊙ output with fixed random R, for the recurrent and
 *         the scan path;
 *   (iv)  the ring initialization puts |λ| in [r_min, r_max] and the phase in [0, θ_max];
 *   (v)   RetNet with RoPE = the complex diagonal recurrence with eigenvalues γe^{iω_j} (docs/math.md §8.3);
 *   (vi)  the LRU layer and Mamba's block (blocks.c): their forward against float64 compositions
 *         written from the papers, directional derivatives of every weight against finite
 *         differences, and the S4D-real and dt initializations.
 *
 * Tolerances (|got − want| ≤ atol + rtol·max|want|):
 *   FWD_RTOL 2e-5 for (i), (ii): float32 against float64 / against another float32 order; the
 *     decays are ≤ 1 in modulus so rounding does not grow along the sequence (measured ≤ 6e-6, the LRU at |λ| = 0.9999).
 *   FD_RTOL 1e-4 for (iii): the central difference of the float64 definition with
 *     h = 1e-6·max(1, |x|) is exact to ~1e-9 relative; the op's gradient is float32 data through
 *     T = 12 steps of a double-precision adjoint, its error ~1e-6 relative (measured ≤ 1e-7).
 *     A dropped term of any gradient (e.g. the e^{ΔA}·A·h_{t−1} part of ∂Δ, or γ's dependence
 *     on ν) is O(1) relative, far above it. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "diagonal.h"
#include "scan.h"
#include "testutil.h"
#include "internal.h"

#define FWD_RTOL 2e-5
#define FWD_ATOL 1e-6
#define FD_RTOL 1e-4
#define FD_ATOL 1e-6

static double *dcopy(const float *x, size_t n) {
    double *y = malloc(sizeof(double) * (n ? n : 1));
    for (size_t i = 0; i < n; i++) y[i] = x[i];
    return y;
}

/* ---- LRU, float64 definition ---- */

/* H (T, 2n) halves layout, from double inputs; returns Σ R ⊙ H when R is not NULL. */
static double lru_ref(double *H, const double *nu, const double *th, const double *U,
                      const double *h0, const float *R, int T, int n) {
    double L = 0;
    for (int i = 0; i < n; i++) {
        const double r = exp(-exp(nu[i])), phi = exp(th[i]);
        const double lr = r * cos(phi), li = r * sin(phi), g = sqrt(1 - r * r);
        double xr = h0 ? h0[i] : 0, xi = h0 ? h0[n + i] : 0;
        for (int t = 0; t < T; t++) {
            const double *u = U + (size_t)t * 2 * n;
            const double a = lr * xr - li * xi + g * u[i], b = lr * xi + li * xr + g * u[n + i];
            xr = a, xi = b;
            if (H) H[(size_t)t * 2 * n + i] = xr, H[(size_t)t * 2 * n + n + i] = xi;
            if (R) L += R[(size_t)t * 2 * n + i] * xr + R[(size_t)t * 2 * n + n + i] * xi;
        }
    }
    return L;
}

START_TEST(test_lru_forward_and_scan) {
    tu_fixture f;
    tu_fx_init(&f, 21);
    const int T = 3000, n = 6;
    float nu[6], th[6];
    ttt_lru_init_ring(nu, th, n, 0.9f, 0.9999f, 6.28f, &f.rng);
    float *U = tu_randn_buf(&f, (size_t)T * 2 * n, 1.0f), *h0 = tu_randn_buf(&f, 2 * n, 1.0f);
    double *dnu = dcopy(nu, n), *dth = dcopy(th, n), *dU = dcopy(U, (size_t)T * 2 * n);
    double *dh0 = dcopy(h0, 2 * n), *want = malloc(sizeof(double) * T * 2 * n);
    lru_ref(want, dnu, dth, dU, dh0, NULL, T, n);
    float *H = malloc(sizeof(float) * T * 2 * n), s[12];
    const int blocks[] = {1, 3, 64};
    for (int b = 0; b < 3; b++) {
        memcpy(s, h0, sizeof s);
        ttt_lru_forward(&f.ctx, H, s, nu, th, U, T, n, blocks[b]);
        char msg[512];
        ck_assert_msg(tu_close(H, want, (size_t)T * 2 * n, FWD_ATOL, FWD_RTOL, msg, sizeof msg),
                      "blocks %d: %s", blocks[b], msg);
        ck_assert_msg(tu_close(s, want + (size_t)(T - 1) * 2 * n, 2 * n, FWD_ATOL, FWD_RTOL, msg,
                               sizeof msg),
                      "blocks %d: final state: %s", blocks[b], msg);
    }
    free(dnu), free(dth), free(dU), free(dh0), free(want), free(H);
    tu_fx_free(&f);
}
END_TEST

START_TEST(test_lru_ring_init) {
    tu_fixture f;
    tu_fx_init(&f, 22);
    enum { n = 2000 };
    static float nu[n], th[n];
    ttt_lru_init_ring(nu, th, n, 0.4f, 0.99f, 0.314f, &f.rng);
    double rmin = 1, rmax = 0, pmax = 0, r2 = 0;
    for (int i = 0; i < n; i++) {
        const double r = exp(-exp(nu[i])), p = exp(th[i]);
        rmin = fmin(rmin, r), rmax = fmax(rmax, r), pmax = fmax(pmax, p);
        r2 += r * r / n;
        ck_assert(p >= 0 && p <= 0.314 * (1 + 1e-6));
    }
    ck_assert(rmin >= 0.4 * (1 - 1e-6) && rmax <= 0.99 * (1 + 1e-6));
    /* uniform on the ring: E r² = (r_min² + r_max²)/2 = 0.57005; 2000 draws: sd ≈ 0.006 */
    ck_assert_msg(fabs(r2 - 0.57005) < 0.03, "mean r^2 %g", r2);
    ck_assert(pmax > 0.3); /* the phases fill [0, θ_max] */
    tu_fx_free(&f);
}
END_TEST

/* Gradient of Σ R ⊙ op(...) w.r.t. every input (ν, θ, U, h0) = the float64 central difference. */
START_TEST(test_lru_op_gradients) {
    for (int blocks = 1; blocks <= 4; blocks += 3) {
        tu_tape_fixture fx;
        tu_tape_fx_init(&fx);
        ttt_ctx *c = &fx.ctx;
        ttt_rng rng;
        ttt_rng_seed(&rng, 23);
        const int T = 12, n = 3;
        ttt_tensor *nu = ttt_tensor_1d(c, n), *th = ttt_tensor_1d(c, n);
        ttt_lru_init_ring(nu->data, th->data, n, 0.5f, 0.95f, 3.0f, &rng);
        ttt_tensor *U = ttt_tensor_2d(c, T, 2 * n), *h0 = ttt_tensor_1d(c, 2 * n);
        ttt_rng_fill_normal(&rng, U->data, U->n, 0, 1);
        ttt_rng_fill_normal(&rng, h0->data, h0->n, 0, 1);
        ttt_tensor *P[4] = {nu, th, U, h0};
        float *G[4];
        for (int i = 0; i < 4; i++) {
            G[i] = tu_zalloc(c, P[i]->n * sizeof(float));
            ttt_tensor_set_param(P[i], G[i]);
        }
        ttt_tensor *H = ttt_lru_op(c, nu, th, U, h0, blocks);
        ttt_tensor *R = ttt_tensor_2d(c, T, 2 * n);
        ttt_rng_fill_normal(&rng, R->data, R->n, 0, 1);
        ttt_backward(c, ttt_sum(c, ttt_mul(c, H, R)));
        double *D[4];
        for (int i = 0; i < 4; i++) D[i] = dcopy(P[i]->data, P[i]->n);
        for (int i = 0; i < 4; i++) {
            double *fd = malloc(sizeof(double) * P[i]->n);
            for (size_t j = 0; j < P[i]->n; j++) {
                const double x = D[i][j], h = 1e-6 * fmax(1.0, fabs(x));
                D[i][j] = x + h;
                const double lp = lru_ref(NULL, D[0], D[1], D[2], D[3], R->data, T, n);
                D[i][j] = x - h;
                const double lm = lru_ref(NULL, D[0], D[1], D[2], D[3], R->data, T, n);
                D[i][j] = x;
                fd[j] = (lp - lm) / (2 * h);
            }
            char msg[512];
            ck_assert_msg(tu_close(G[i], fd, P[i]->n, FD_ATOL, FD_RTOL, msg, sizeof msg),
                          "blocks %d, input %d: %s", blocks, i, msg);
            free(fd);
        }
        for (int i = 0; i < 4; i++) free(D[i]);
        tu_tape_fx_free(&fx);
    }
}
END_TEST

/* ---- Mamba(1) selective scan, float64 definition ---- */

typedef struct ss_in {
    const double *x, *delta, *A_log, *B, *C, *D, *h0;
} ss_in;

static double ss_ref(double *y, const ss_in *a, const float *R, int T, int d, int N) {
    double L = 0;
    for (int i = 0; i < d; i++) {
        double h[64];
        for (int k = 0; k < N; k++) h[k] = a->h0 ? a->h0[i * N + k] : 0;
        for (int t = 0; t < T; t++) {
            const double dt = a->delta[t * d + i], xt = a->x[t * d + i];
            double yt = a->D ? a->D[i] * xt : 0;
            for (int k = 0; k < N; k++) {
                const double A = -exp(a->A_log[i * N + k]);
                h[k] = exp(dt * A) * h[k] + dt * a->B[t * N + k] * xt;
                yt += a->C[t * N + k] * h[k];
            }
            if (y) y[t * d + i] = yt;
            if (R) L += R[t * d + i] * yt;
        }
    }
    return L;
}

/* S4D-real initialization A_n = n + 1 (A_log = log(n + 1)), Δ in a wide range */
static void ss_inputs(ttt_rng *r, float *x, float *delta, float *A_log, float *B, float *C,
                      float *D, float *h0, int T, int d, int N, float dmax) {
    ttt_rng_fill_normal(r, x, (size_t)T * d, 0, 1);
    for (int i = 0; i < T * d; i++) { /* log-uniform Δ in [1e-3, dmax] */
        float u;
        ttt_rng_fill_uniform(r, &u, 1, 0, 1);
        delta[i] = expf(logf(1e-3f) + u * (logf(dmax) - logf(1e-3f)));
    }
    for (int i = 0; i < d; i++)
        for (int k = 0; k < N; k++) A_log[i * N + k] = logf((float)(k + 1));
    ttt_rng_fill_normal(r, B, (size_t)T * N, 0, 1);
    ttt_rng_fill_normal(r, C, (size_t)T * N, 0, 1);
    ttt_rng_fill_normal(r, D, d, 0, 1);
    ttt_rng_fill_normal(r, h0, (size_t)d * N, 0, 1);
}

START_TEST(test_selective_scan_forward_and_scan) {
    tu_fixture f;
    tu_fx_init(&f, 31);
    const int T = 2000, d = 4, N = 6;
    float *x = tu_randn_buf(&f, T * d, 1), *dl = tu_randn_buf(&f, T * d, 1);
    float *Al = tu_randn_buf(&f, d * N, 1), *B = tu_randn_buf(&f, T * N, 1);
    float *C = tu_randn_buf(&f, T * N, 1), *D = tu_randn_buf(&f, d, 1);
    float *h0 = tu_randn_buf(&f, d * N, 1);
    /* Δ up to 7: Δ·A down to −42, the state forgotten within a token */
    ss_inputs(&f.rng, x, dl, Al, B, C, D, h0, T, d, N, 7.0f);
    double *dx = dcopy(x, T * d), *ddl = dcopy(dl, T * d), *dAl = dcopy(Al, d * N);
    double *dB = dcopy(B, T * N), *dC = dcopy(C, T * N), *dD = dcopy(D, d), *dh = dcopy(h0, d * N);
    const ss_in in = {dx, ddl, dAl, dB, dC, dD, dh};
    double *want = malloc(sizeof(double) * T * d);
    ss_ref(want, &in, NULL, T, d, N);
    float A[24], h[24], *y = malloc(sizeof(float) * T * d);
    for (int j = 0; j < d * N; j++) A[j] = -expf(Al[j]);
    const int blocks[] = {1, 5, 64};
    for (int b = 0; b < 3; b++) {
        memcpy(h, h0, sizeof h);
        ttt_selective_scan(&f.ctx, y, h, x, dl, A, B, C, D, T, d, N, blocks[b]);
        char msg[512];
        ck_assert_msg(tu_close(y, want, (size_t)T * d, FWD_ATOL, FWD_RTOL, msg, sizeof msg),
                      "blocks %d: %s", blocks[b], msg);
    }
    free(dx), free(ddl), free(dAl), free(dB), free(dC), free(dD), free(dh), free(want), free(y);
    tu_fx_free(&f);
}
END_TEST

START_TEST(test_selective_scan_op_gradients) {
    for (int blocks = 1; blocks <= 3; blocks += 2) {
        tu_tape_fixture fx;
        tu_tape_fx_init(&fx);
        ttt_ctx *c = &fx.ctx;
        ttt_rng rng;
        ttt_rng_seed(&rng, 32);
        const int T = 12, d = 3, N = 4;
        ttt_tensor *x = ttt_tensor_2d(c, T, d), *dl = ttt_tensor_2d(c, T, d);
        ttt_tensor *Al = ttt_tensor_2d(c, d, N), *B = ttt_tensor_2d(c, T, N);
        ttt_tensor *C = ttt_tensor_2d(c, T, N), *D = ttt_tensor_1d(c, d);
        ttt_tensor *h0 = ttt_tensor_2d(c, d, N);
        ss_inputs(&rng, x->data, dl->data, Al->data, B->data, C->data, D->data, h0->data, T, d,
                  N, 1.0f);
        ttt_tensor *P[7] = {x, dl, Al, B, C, D, h0};
        float *G[7];
        for (int i = 0; i < 7; i++) {
            G[i] = tu_zalloc(c, P[i]->n * sizeof(float));
            ttt_tensor_set_param(P[i], G[i]);
        }
        ttt_tensor *y = ttt_selective_scan_op(c, x, dl, Al, B, C, D, h0, blocks);
        ttt_tensor *R = ttt_tensor_2d(c, T, d);
        ttt_rng_fill_normal(&rng, R->data, R->n, 0, 1);
        ttt_backward(c, ttt_sum(c, ttt_mul(c, y, R)));
        double *Dv[7];
        for (int i = 0; i < 7; i++) Dv[i] = dcopy(P[i]->data, P[i]->n);
        for (int i = 0; i < 7; i++) {
            double *fd = malloc(sizeof(double) * P[i]->n);
            for (size_t j = 0; j < P[i]->n; j++) {
                const double v = Dv[i][j], h = 1e-6 * fmax(1.0, fabs(v));
                const ss_in in = {Dv[0], Dv[1], Dv[2], Dv[3], Dv[4], Dv[5], Dv[6]};
                Dv[i][j] = v + h;
                const double lp = ss_ref(NULL, &in, R->data, T, d, N);
                Dv[i][j] = v - h;
                const double lm = ss_ref(NULL, &in, R->data, T, d, N);
                Dv[i][j] = v;
                fd[j] = (lp - lm) / (2 * h);
            }
            char msg[512];
            ck_assert_msg(tu_close(G[i], fd, P[i]->n, FD_ATOL, FD_RTOL, msg, sizeof msg),
                          "blocks %d, input %d: %s", blocks, i, msg);
            free(fd);
        }
        for (int i = 0; i < 7; i++) free(Dv[i]);
        tu_tape_fx_free(&fx);
    }
}
END_TEST


/* ---- decay as a complex eigenvalue (docs/math.md §8.3) ----
 * RetNet with RoPE, S_t = γ S_{t−1} + (k_t R_t)ᵀ v_t, o_t = (q_t R_t) S_t, equals the complex
 * diagonal recurrence written the LRU way on the pairs z = x_{2j} + i x_{2j+1}:
 *     h_t^{(j)} = λ_j h_{t−1}^{(j)} + conj(k_t^{(j)}) v_t,  λ_j = γ e^{iω_j},
 *     o_t = Σ_j Re(q_t^{(j)} h_t^{(j)}),
 * one complex channel per (pair j, value column c), computed by the complex scan (and by the
 * recurrence, blocks = 1). The layer runs its own form (`auto`), q and k rotated by rope.c. */
START_TEST(test_retnet_rope_is_complex_diagonal) {
    tu_fixture f;
    tu_fx_init(&f, 41);
    const int T = 500, d = 8, np = d / 2, n = np * d; /* channels: (pair, value column) */
    const char *text = "layer: {preset: retnet, rope: true, rope_base: 10}\n";
    ttt_cfg_node *root = NULL;
    ttt_error err = {0};
    ck_assert_msg(ttt_cfg_load_string(text, "<t>", &root, &err) == TTT_OK, "%s", err.msg);
    ttt_layer L;
    ck_assert_msg(ttt_layer_parse((ttt_cfg_node *)ttt_cfg_get(root, "layer"), d, d, &L, &err) ==
                      TTT_OK, "%s", err.msg);
    ttt_cfg_free(root);
    ck_assert(L.rope);
    ttt_tensor *q = ttt_tensor_2d(&f.ctx, T, d), *k = ttt_tensor_2d(&f.ctx, T, d);
    ttt_tensor *v = ttt_tensor_2d(&f.ctx, T, d), *o = ttt_tensor_2d(&f.ctx, T, d);
    ttt_rng_fill_normal(&f.rng, q->data, q->n, 0, 0.5f);
    ttt_rng_fill_normal(&f.rng, k->data, k->n, 0, 0.5f);
    ttt_rng_fill_normal(&f.rng, v->data, v->n, 0, 1.0f);
    ttt_rng r;
    ttt_rng_seed(&r, 1);
    ttt_layer_state st;
    ttt_layer_state_init(&f.ctx, &L, &st, &r);
    memset(st.W[0]->data, 0, st.W[0]->n * sizeof(float)); /* S_0 = 0: the sums start at s = 1 */
    ck_assert_msg(ttt_layer_forward(&f.ctx, &L, o, &st, q, k, v, NULL, NULL, &err) == TTT_OK,
                  "%s", err.msg);
    /* the LRU way: λ_j = γ e^{iω_j}, ω_j = base^{−2j/d}; inputs conj(k^{(j)}) v_c (scaled q as
     * the layer scales it) */
    float *lam = malloc(sizeof(float) * 2 * n), *b = malloc(sizeof(float) * (size_t)T * 2 * n);
    float *h = malloc(sizeof(float) * (size_t)T * 2 * n), *h0 = calloc(2 * n, sizeof(float));
    for (int j = 0; j < np; j++) {
        const double w = pow(10.0, -2.0 * j / d);
        for (int c = 0; c < d; c++) {
            lam[2 * (j * d + c)] = (float)(L.decay * cos(w));
            lam[2 * (j * d + c) + 1] = (float)(L.decay * sin(w));
        }
    }
    for (int t = 0; t < T; t++)
        for (int j = 0; j < np; j++)
            for (int c = 0; c < d; c++) {
                const float kr = k->data[t * d + 2 * j], ki = k->data[t * d + 2 * j + 1];
                const float vc = L.lr * v->data[t * d + c];
                b[(size_t)t * 2 * n + 2 * (j * d + c)] = kr * vc;      /* conj(k) v */
                b[(size_t)t * 2 * n + 2 * (j * d + c) + 1] = -ki * vc;
            }
    double *want = malloc(sizeof(double) * T * d);
    for (int blocks = 1; blocks <= 8; blocks += 7) {
        memset(h0, 0, sizeof(float) * 2 * n);
        ttt_scan_cdiag(&f.ctx, h, h0, lam, b, 0, T, n, blocks);
        float *got = malloc(sizeof(float) * T * d);
        for (int t = 0; t < T; t++)
            for (int c = 0; c < d; c++) {
                double acc = 0;
                for (int j = 0; j < np; j++) {
                    const double qr = L.scale * q->data[t * d + 2 * j];
                    const double qi = L.scale * q->data[t * d + 2 * j + 1];
                    const float *hz = h + (size_t)t * 2 * n + 2 * (j * d + c);
                    acc += qr * hz[0] - qi * hz[1]; /* Re(q h) */
                }
                got[t * d + c] = (float)acc;
                want[t * d + c] = o->data[t * d + c];
            }
        char msg[512];
        ck_assert_msg(tu_close(got, want, (size_t)T * d, FWD_ATOL, FWD_RTOL, msg, sizeof msg),
                      "blocks %d: %s", blocks, msg);
        free(got);
    }
    free(lam), free(b), free(h), free(h0), free(want);
    tu_fx_free(&f);
}
END_TEST


/* ---- the blocks (blocks.c): directional derivatives ----
 * For each weight tensor W and a random direction U on it: the tape's gradient · U against
 * D(h) = (L(W + hU) − L(W − hU)) / 2h with L = Σ R ⊙ block(x), evaluated in float32 with the
 * sum in double, Richardson-extrapolated from h = 1e-2 and 5e-3: (4 D(h/2) − D(h)) / 3 cancels
 * the h² term. (A single D(1e-2) was measured 1.6e-3 relative from the tape for one block, its
 * truncation, 0.54 of the bound.) What remains is O(h⁴) truncation and the float32
 * cancellation ~1e-7·|L|/h ≈ 1e-5, so DIR_RTOL 3e-3 of the larger of the two sides; a block
 * that drops a path (the conv, the gate, Δ's bias) changes the derivative by O(1). */
#define DIR_RTOL 3e-3

typedef ttt_tensor *(*block_fn)(ttt_ctx *ctx, ttt_tensor *const *w, const ttt_tensor *x, int B,
                                int T);

static ttt_tensor *lru_fn(ttt_ctx *ctx, ttt_tensor *const *w, const ttt_tensor *x, int B, int T) {
    const ttt_lru_weights lw = {w[0], w[1], w[2], w[3], w[4]};
    return ttt_lru_block(ctx, &lw, x, B, T, 2);
}
static ttt_tensor *mamba_fn(ttt_ctx *ctx, ttt_tensor *const *w, const ttt_tensor *x, int B,
                            int T) {
    const ttt_mamba_weights mw = {w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7]};
    return ttt_mamba_block(ctx, &mw, x, B, T, 2);
}

static double block_loss(ttt_ctx *c, block_fn f, ttt_tensor *const *w, const ttt_tensor *x,
                         const ttt_tensor *R, int B, int T) {
    ttt_arena_mark m = ttt_arena_mark_get(c->arena);
    const int g = c->grad;
    c->grad = 0;
    ttt_tensor *y = f(c, w, x, B, T);
    double L = 0;
    for (size_t i = 0; i < y->n; i++) L += (double)R->data[i] * y->data[i];
    c->grad = g;
    ttt_arena_release(c->arena, m);
    return L;
}

static void check_block(block_fn f, ttt_tensor *const *w, int nw, ttt_tensor *x, int B, int T,
                        int d_out, tu_tape_fixture *fx, ttt_rng *rng, const char *name) {
    ttt_ctx *c = &fx->ctx;
    float *G[16];
    for (int i = 0; i < nw; i++) {
        G[i] = tu_zalloc(c, w[i]->n * sizeof(float));
        ttt_tensor_set_param(w[i], G[i]);
    }
    ttt_tensor *R = ttt_tensor_2d(c, B * T, d_out);
    ttt_rng_fill_normal(rng, R->data, R->n, 0, 1);
    ttt_backward(c, ttt_sum(c, ttt_mul(c, f(c, w, x, B, T), R)));
    for (int i = 0; i < nw; i++) {
        float *u = malloc(sizeof(float) * w[i]->n), *w0 = malloc(sizeof(float) * w[i]->n);
        ttt_rng_fill_normal(rng, u, w[i]->n, 0, 1);
        memcpy(w0, w[i]->data, sizeof(float) * w[i]->n);
        double gu = 0;
        for (size_t j = 0; j < w[i]->n; j++) gu += (double)G[i][j] * u[j];
        double D[2];
        for (int e = 0; e < 2; e++) {
            const double h = e ? 5e-3 : 1e-2;
            for (size_t j = 0; j < w[i]->n; j++) w[i]->data[j] = w0[j] + (float)h * u[j];
            const double lp = block_loss(c, f, w, x, R, B, T);
            for (size_t j = 0; j < w[i]->n; j++) w[i]->data[j] = w0[j] - (float)h * u[j];
            const double lm = block_loss(c, f, w, x, R, B, T);
            D[e] = (lp - lm) / (2 * h);
        }
        memcpy(w[i]->data, w0, sizeof(float) * w[i]->n);
        const double fd = (4 * D[1] - D[0]) / 3; /* Richardson: the h² term cancels */
        TU_ASSERT_LE(fabs(gu - fd), DIR_RTOL * fmax(fabs(gu), fabs(fd)) + 1e-6,
                     "%s weight %d: gradient.u %.8g, finite difference %.8g", name, i, gu, fd);
        free(u), free(w0);
    }
}

START_TEST(test_lru_block_gradients) {
    tu_tape_fixture fx;
    tu_tape_fx_init(&fx);
    ttt_ctx *c = &fx.ctx;
    ttt_rng rng;
    ttt_rng_seed(&rng, 51);
    const int B = 2, T = 7, d = 4, n = 3;
    ttt_tensor *w[5] = {ttt_tensor_2d(c, d, 2 * n), ttt_tensor_1d(c, n), ttt_tensor_1d(c, n),
                        ttt_tensor_2d(c, 2 * n, d), ttt_tensor_1d(c, d)};
    ttt_rng_fill_normal(&rng, w[0]->data, w[0]->n, 0, 0.5f);
    ttt_lru_init_ring(w[1]->data, w[2]->data, n, 0.5f, 0.95f, 3.0f, &rng);
    ttt_rng_fill_normal(&rng, w[3]->data, w[3]->n, 0, 0.5f);
    ttt_rng_fill_normal(&rng, w[4]->data, w[4]->n, 0, 1);
    ttt_tensor *x = ttt_tensor_2d(c, B * T, d);
    ttt_rng_fill_normal(&rng, x->data, x->n, 0, 1);
    check_block(lru_fn, w, 5, x, B, T, d, &fx, &rng, "lru");
    tu_tape_fx_free(&fx);
}
END_TEST

START_TEST(test_mamba_block_gradients) {
    tu_tape_fixture fx;
    tu_tape_fx_init(&fx);
    ttt_ctx *c = &fx.ctx;
    ttt_rng rng;
    ttt_rng_seed(&rng, 52);
    const int B = 2, T = 7, d = 3, di = 6, N = 4, r = 2, K = 4;
    ttt_tensor *w[8] = {ttt_tensor_2d(c, d, 2 * di), ttt_tensor_2d(c, K, di), ttt_tensor_1d(c, di),
                        ttt_tensor_2d(c, di, r + 2 * N), ttt_tensor_2d(c, r, di),
                        ttt_tensor_1d(c, di), ttt_tensor_2d(c, di, N), ttt_tensor_1d(c, di)};
    ttt_rng_fill_normal(&rng, w[0]->data, w[0]->n, 0, 0.5f);
    ttt_rng_fill_normal(&rng, w[1]->data, w[1]->n, 0, 0.5f);
    ttt_rng_fill_normal(&rng, w[2]->data, w[2]->n, 0, 0.1f);
    ttt_rng_fill_normal(&rng, w[3]->data, w[3]->n, 0, 0.5f);
    ttt_rng_fill_normal(&rng, w[4]->data, w[4]->n, 0, 0.5f);
    ttt_mamba_init_dt_bias(w[5]->data, di, 1e-2, 0.5, &rng);
    ttt_mamba_init_a_log(w[6]->data, di, N);
    ttt_rng_fill_normal(&rng, w[7]->data, w[7]->n, 0, 1);
    ttt_tensor *x = ttt_tensor_2d(c, B * T, d);
    ttt_rng_fill_normal(&rng, x->data, x->n, 0, 1);
    check_block(mamba_fn, w, 8, x, B, T, di, &fx, &rng, "mamba");
    tu_tape_fx_free(&fx);
}
END_TEST

/* The initializations: S4D-real A and Mamba's dt range through softplus. */
START_TEST(test_mamba_init) {
    ttt_rng rng;
    ttt_rng_seed(&rng, 53);
    float a[12], b[500];
    ttt_mamba_init_a_log(a, 3, 4);
    for (int n = 0; n < 4; n++) ck_assert(fabs(-exp(a[4 + n]) + (n + 1)) < 1e-5);
    ttt_mamba_init_dt_bias(b, 500, 1e-3, 0.1, &rng);
    double lo = 1, hi = 0;
    for (int i = 0; i < 500; i++) {
        const double dt = log1p(exp((double)b[i])); /* softplus */
        lo = fmin(lo, dt), hi = fmax(hi, dt);
    }
    ck_assert_msg(lo >= 1e-3 * (1 - 1e-4) && hi <= 0.1 * (1 + 1e-4), "dt in [%g, %g]", lo, hi);
    ck_assert(lo < 2e-3 && hi > 0.05); /* the range is filled */
}
END_TEST

/* The blocks' forward against float64 compositions written here from docs/math.md §8.1–§8.2
 * (tolerance FWD_RTOL as above: a few float32 products and the scan). */
static double silu_d(double x) { return x / (1 + exp(-x)); }

START_TEST(test_blocks_forward_reference) {
    tu_fixture f;
    tu_fx_init(&f, 54);
    ttt_ctx *c = &f.ctx;
    const int B = 2, T = 9, d = 3, di = 5, N = 4, r = 2, K = 4, n = 3;
    /* Mamba: weights as in test_mamba_block_gradients */
    ttt_tensor *w[8] = {ttt_tensor_2d(c, d, 2 * di), ttt_tensor_2d(c, K, di), ttt_tensor_1d(c, di),
                        ttt_tensor_2d(c, di, r + 2 * N), ttt_tensor_2d(c, r, di),
                        ttt_tensor_1d(c, di), ttt_tensor_2d(c, di, N), ttt_tensor_1d(c, di)};
    for (int i = 0; i < 8; i++) ttt_rng_fill_normal(&f.rng, w[i]->data, w[i]->n, 0, 0.5f);
    ttt_mamba_init_a_log(w[6]->data, di, N);
    ttt_tensor *x = ttt_tensor_2d(c, B * T, d);
    ttt_rng_fill_normal(&f.rng, x->data, x->n, 0, 1);
    ttt_tensor *y = mamba_fn(c, w, x, B, T);
    double *want = calloc((size_t)B * T * di, sizeof(double));
    for (int b = 0; b < B; b++) {
        double xz[9][10], xc[9][5], h[5][4] = {{0}};
        for (int t = 0; t < T; t++)
            for (int j = 0; j < 2 * di; j++) {
                xz[t][j] = 0;
                for (int i = 0; i < d; i++)
                    xz[t][j] += (double)x->data[(b * T + t) * d + i] * w[0]->data[i * 2 * di + j];
            }
        for (int t = 0; t < T; t++) /* causal depthwise conv (j = 0: this token), SiLU */
            for (int ch = 0; ch < di; ch++) {
                double s = w[2]->data[ch];
                for (int j = 0; j < K && j <= t; j++) s += w[1]->data[j * di + ch] * xz[t - j][ch];
                xc[t][ch] = silu_d(s);
            }
        for (int t = 0; t < T; t++) {
            double xd[10];
            for (int j = 0; j < r + 2 * N; j++) {
                xd[j] = 0;
                for (int ch = 0; ch < di; ch++) xd[j] += xc[t][ch] * w[3]->data[ch * (r + 2 * N) + j];
            }
            for (int ch = 0; ch < di; ch++) {
                double a = w[5]->data[ch];
                for (int j = 0; j < r; j++) a += xd[j] * w[4]->data[j * di + ch];
                const double dt = log1p(exp(a)); /* softplus */
                double yt = w[7]->data[ch] * xc[t][ch];
                for (int k = 0; k < N; k++) {
                    const double A = -exp(w[6]->data[ch * N + k]);
                    h[ch][k] = exp(dt * A) * h[ch][k] + dt * xd[r + k] * xc[t][ch];
                    yt += xd[r + N + k] * h[ch][k];
                }
                want[(b * T + t) * di + ch] = yt * silu_d(xz[t][di + ch]);
            }
        }
    }
    TU_ASSERT_CLOSE(y->data, want, y->n, FWD_ATOL, FWD_RTOL);
    free(want);
    /* LRU: y = Re(C h) + D ⊙ x with u = x W_B in halves [Re | Im] */
    ttt_tensor *lw[5] = {ttt_tensor_2d(c, d, 2 * n), ttt_tensor_1d(c, n), ttt_tensor_1d(c, n),
                         ttt_tensor_2d(c, 2 * n, d), ttt_tensor_1d(c, d)};
    ttt_rng_fill_normal(&f.rng, lw[0]->data, lw[0]->n, 0, 0.5f);
    ttt_lru_init_ring(lw[1]->data, lw[2]->data, n, 0.5f, 0.95f, 3.0f, &f.rng);
    ttt_rng_fill_normal(&f.rng, lw[3]->data, lw[3]->n, 0, 0.5f);
    ttt_rng_fill_normal(&f.rng, lw[4]->data, lw[4]->n, 0, 1);
    ttt_tensor *yl = lru_fn(c, lw, x, B, T);
    want = calloc((size_t)B * T * d, sizeof(double));
    for (int b = 0; b < B; b++) {
        double hr[3] = {0}, hi[3] = {0};
        for (int t = 0; t < T; t++) {
            const float *xt = x->data + (b * T + t) * d;
            for (int j = 0; j < n; j++) {
                const double rr = exp(-exp(lw[1]->data[j])), ph = exp(lw[2]->data[j]);
                const double g = sqrt(1 - rr * rr);
                double ur = 0, ui = 0;
                for (int i = 0; i < d; i++) {
                    ur += xt[i] * lw[0]->data[i * 2 * n + j];
                    ui += xt[i] * lw[0]->data[i * 2 * n + n + j];
                }
                const double a = rr * cos(ph) * hr[j] - rr * sin(ph) * hi[j] + g * ur;
                const double bb = rr * cos(ph) * hi[j] + rr * sin(ph) * hr[j] + g * ui;
                hr[j] = a, hi[j] = bb;
            }
            for (int o = 0; o < d; o++) {
                double s = lw[4]->data[o] * xt[o];
                for (int j = 0; j < n; j++)
                    s += hr[j] * lw[3]->data[j * d + o] + hi[j] * lw[3]->data[(n + j) * d + o];
                want[(b * T + t) * d + o] = s;
            }
        }
    }
    TU_ASSERT_CLOSE(yl->data, want, yl->n, FWD_ATOL, FWD_RTOL);
    free(want);
    tu_fx_free(&f);
}
END_TEST

static Suite *diagonal_suite(void) {
    Suite *s = suite_create("diagonal");
    TCase *tc = tcase_create("diagonal");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_lru_forward_and_scan);
    tcase_add_test(tc, test_lru_ring_init);
    tcase_add_test(tc, test_lru_op_gradients);
    tcase_add_test(tc, test_selective_scan_forward_and_scan);
    tcase_add_test(tc, test_selective_scan_op_gradients);
    tcase_add_test(tc, test_retnet_rope_is_complex_diagonal);
    tcase_add_test(tc, test_lru_block_gradients);
    tcase_add_test(tc, test_mamba_block_gradients);
    tcase_add_test(tc, test_mamba_init);
    tcase_add_test(tc, test_blocks_forward_reference);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(diagonal_suite()); }

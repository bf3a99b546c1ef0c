/* LRU and Mamba(1) selective-scan kernels and their recorded ops (diagonal.h, docs/math.md §8).
 * Backward passes are the adjoint recurrences: for h_t = a_t ⊙ h_{t−1} + b_t and a loss L, the
 * adjoint δ_t = ∂L/∂h_t satisfies δ_t = ∂L/∂h_t|direct + a_{t+1} ⊙ δ_{t+1} (conj(λ) for the complex
 * diagonal: the transpose of the 2×2 rotation-scaling), run from t = T−1 down to 0; every input
 * gradient is then a local product of δ_t with the forward quantities at t. Accumulations over
 * time are in double. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "autograd.h"
#include "diagonal.h"
#include "fastexp.h"
#include "ops_device.h"
#include "scan.h"

/* ---- LRU ---- */

/* λ (re, im) and γ of channel i from ν, θ. */
static void lru_params(double *lr, double *li, double *g, double *r, double *phi, float nu,
                       float theta) {
    *r = exp(-exp((double)nu));
    *phi = exp((double)theta);
    *lr = *r * cos(*phi);
    *li = *r * sin(*phi);
    *g = sqrt(fmax(1.0 - *r * *r, 0.0));
}

void ttt_lru_forward(ttt_ctx *ctx, float *h, float *h0, const float *nu, const float *theta,
                     const float *u, int T, int n, int blocks) {
    if (T <= 0 || n <= 0) return;
    if (blocks <= 1) { /* the recurrence, channel by channel */
        for (int i = 0; i < n; i++) {
            double lr, li, g, r, phi;
            lru_params(&lr, &li, &g, &r, &phi, nu[i], theta[i]);
            const float ar = (float)lr, ai = (float)li, gf = (float)g;
            float xr = h0[i], xi = h0[n + i];
            for (int t = 0; t < T; t++) {
                const float *ut = u + (size_t)t * 2 * n;
                const float nr = ar * xr - ai * xi + gf * ut[i];
                const float ni = ar * xi + ai * xr + gf * ut[n + i];
                xr = nr, xi = ni;
                h[(size_t)t * 2 * n + i] = xr;
                h[(size_t)t * 2 * n + n + i] = xi;
            }
            h0[i] = xr, h0[n + i] = xi;
        }
        return;
    }
    /* the scan: λ constant (lda 0), b_t = γ u_t, interleaved (re, im) for ttt_scan_cdiag */
    ttt_arena_mark m = ttt_arena_mark_get(ctx->arena);
    float *lam = ttt_arena_alloc(ctx->arena, sizeof(float) * 2 * n);
    float *b = ttt_arena_alloc(ctx->arena, sizeof(float) * (size_t)T * 2 * n);
    float *hi = ttt_arena_alloc(ctx->arena, sizeof(float) * (size_t)T * 2 * n);
    float *s = ttt_arena_alloc(ctx->arena, sizeof(float) * 2 * n);
    float *gam = ttt_arena_alloc(ctx->arena, sizeof(float) * n);
    for (int i = 0; i < n; i++) {
        double lr, li, g, r, phi;
        lru_params(&lr, &li, &g, &r, &phi, nu[i], theta[i]);
        lam[2 * i] = (float)lr, lam[2 * i + 1] = (float)li, gam[i] = (float)g;
        s[2 * i] = h0[i], s[2 * i + 1] = h0[n + i];
    }
    for (int t = 0; t < T; t++)
        for (int i = 0; i < n; i++) {
            b[(size_t)t * 2 * n + 2 * i] = gam[i] * u[(size_t)t * 2 * n + i];
            b[(size_t)t * 2 * n + 2 * i + 1] = gam[i] * u[(size_t)t * 2 * n + n + i];
        }
    ttt_scan_cdiag(ctx, hi, s, lam, b, 0, T, n, blocks);
    for (int t = 0; t < T; t++)
        for (int i = 0; i < n; i++) {
            h[(size_t)t * 2 * n + i] = hi[(size_t)t * 2 * n + 2 * i];
            h[(size_t)t * 2 * n + n + i] = hi[(size_t)t * 2 * n + 2 * i + 1];
        }
    for (int i = 0; i < n; i++) h0[i] = s[2 * i], h0[n + i] = s[2 * i + 1];
    ttt_arena_release(ctx->arena, m);
}

/* in: ν, θ, U, h0; out H. */
static void lru_backward(ttt_ctx *ctx, const ttt_tape_entry *e, const float *dH) {
    const ttt_tensor *nu = e->in[0], *theta = e->in[1], *U = e->in[2], *h0 = e->in[3];
    const ttt_tensor *H = e->out;
    const int T = TTT_ROWS(U), n = TTT_COLS(U) / 2;
    float *gnu = ttt_grad(ctx, nu), *gth = ttt_grad(ctx, theta), *gU = ttt_grad(ctx, U);
    float *gh0 = ttt_grad(ctx, h0);
    for (int i = 0; i < n; i++) {
        double lr, li, g, r, phi;
        lru_params(&lr, &li, &g, &r, &phi, nu->data[i], theta->data[i]);
        double dr_ = 0, di_ = 0; /* δ_{t+1} */
        double da = 0, db = 0, dg = 0;
        for (int t = T - 1; t >= 0; t--) {
            const size_t row = (size_t)t * 2 * n;
            /* δ_t = dH_t + conj(λ) δ_{t+1} */
            const double cr = lr * dr_ + li * di_, ci = lr * di_ - li * dr_;
            const double xr = dH[row + i] + cr, xi = dH[row + n + i] + ci;
            dr_ = xr, di_ = xi;
            const double ur = U->data[row + i], ui = U->data[row + n + i];
            if (gU) {
                gU[row + i] += (float)(g * xr);
                gU[row + n + i] += (float)(g * xi);
            }
            dg += xr * ur + xi * ui;
            const double pr = t > 0 ? H->data[row - 2 * n + i] : h0 ? h0->data[i] : 0.0;
            const double pi = t > 0 ? H->data[row - 2 * n + n + i] : h0 ? h0->data[n + i] : 0.0;
            /* h_t = (lr + i li)(pr + i pi) + γ u: ∂/∂lr = (pr, pi), ∂/∂li = (−pi, pr) */
            da += xr * pr + xi * pi;
            db += -xr * pi + xi * pr;
        }
        if (gh0) { /* ∂h_0 = conj(λ) δ_0 */
            gh0[i] += (float)(lr * dr_ + li * di_);
            gh0[n + i] += (float)(lr * di_ - li * dr_);
        }
        /* lr = r cos φ, li = r sin φ, γ = sqrt(1 − r²), r = exp(−e^ν), φ = e^θ */
        const double dr = da * cos(phi) + db * sin(phi) - (g > 0 ? dg * r / g : 0.0);
        const double dphi = -da * r * sin(phi) + db * r * cos(phi);
        if (gnu) gnu[i] += (float)(dr * r * -exp((double)nu->data[i]));
        if (gth) gth[i] += (float)(dphi * phi);
    }
}

ttt_tensor *ttt_lru_op(ttt_ctx *ctx, const ttt_tensor *nu, const ttt_tensor *theta,
                       const ttt_tensor *U, const ttt_tensor *h0, int blocks) {
    /* on a device: the recurrence's kernels (docs/device_ops.md "Recurrences"); `blocks` only
     * splits the host's work */
    if (TTT_OPS_ON_DEVICE3(ctx, U, nu, theta) || TTT_DEV_KIND_(h0))
        return ttt_dev_lru(ctx, nu, theta, U, h0);
    const int T = TTT_ROWS(U), n = TTT_COLS(U) / 2;
    TTT_ASSERT(TTT_COLS(U) == 2 * n && (int)nu->n == n && (int)theta->n == n);
    TTT_ASSERT(!h0 || (int)h0->n == 2 * n);
    ttt_tensor *H = ttt_tensor_2d(ctx, T, 2 * n);
    {
        ttt_arena_mark m = ttt_arena_mark_get(ctx->arena);
        float *s = ttt_arena_alloc(ctx->arena, sizeof(float) * 2 * n);
        for (int i = 0; i < 2 * n; i++) s[i] = h0 ? h0->data[i] : 0.0f;
        ttt_lru_forward(ctx, H->data, s, nu->data, theta->data, U->data, T, n, blocks);
        ttt_arena_release(ctx->arena, m);
    }
    ttt_tape_entry *e =
        ttt_tape_record(ctx, lru_backward, H, (const ttt_tensor *const[]){nu, theta, U, h0}, 4);
    if (e) e->name = "lru";
    return H;
}

void ttt_lru_init_ring(float *nu, float *theta, int n, float r_min, float r_max, float theta_max,
                       ttt_rng *rng) {
    for (int i = 0; i < n; i++) {
        const double u1 = ttt_rng_uniform(rng), u2 = ttt_rng_uniform(rng);
        /* uniform on the ring: r² uniform in [r_min², r_max²] */
        const double r = sqrt(u1 * (r_max * r_max - r_min * r_min) + r_min * r_min);
        nu[i] = (float)log(-log(r));
        theta[i] = (float)log(fmax(u2 * theta_max, 1e-30));
    }
}

/* ---- Mamba(1) selective scan ---- */

/* The recurrence over tokens [t0, t1) from state h (d, N), updated in place; y_t written (without
 * D ⊙ x) unless y is NULL. exp(Δ A) by fastexp.h (≤ 2 ulp, vectorized over the N states): with
 * libm's scalar expf the exponentials were most of the kernel's time. */
#define SS_NMAX 64 /* states per group of exponentials (stack buffer) */

static void ss_run(float *y, float *h, const float *x, const float *delta, const float *A,
                   const float *B, const float *C, int t0, int t1, int d, int N) {
    for (int t = t0; t < t1; t++) {
        const float *xt = x + (size_t)t * d, *dt = delta + (size_t)t * d;
        const float *Bt = B + (size_t)t * N, *Ct = C + (size_t)t * N;
        for (int i = 0; i < d; i++) {
            float *hi = h + (size_t)i * N;
            const float *Ai = A + (size_t)i * N;
            const float dx = dt[i] * xt[i], di = dt[i];
            /* three loops rather than one: the first two vectorize (the read-out's float sum
             * would not, and would keep the exponentials scalar with it) */
            float e[SS_NMAX];
            for (int k0 = 0; k0 < N; k0 += SS_NMAX) {
                const int nk = N - k0 < SS_NMAX ? N - k0 : SS_NMAX;
                for (int k = 0; k < nk; k++) e[k] = ttt_fast_expf(di * Ai[k0 + k]);
                for (int k = 0; k < nk; k++) hi[k0 + k] = e[k] * hi[k0 + k] + dx * Bt[k0 + k];
            }
            float acc = 0;
            for (int k = 0; k < N; k++) acc += Ct[k] * hi[k];
            if (y) y[(size_t)t * d + i] = acc;
        }
    }
}

static int block_len(int T, int P) { return (T + P - 1) / P; }

void ttt_selective_scan(ttt_ctx *ctx, float *y, float *h, const float *x, const float *delta,
                        const float *A, const float *B, const float *C, const float *D, int T,
                        int d, int N, int blocks) {
    if (T <= 0) return;
    const size_t dn = (size_t)d * N;
    int P = blocks < 1 ? 1 : blocks > TTT_SCAN_MAX_BLOCKS ? TTT_SCAN_MAX_BLOCKS : blocks;
    if (P > T) P = T;
    if (P == 1) {
        ss_run(y, h, x, delta, A, B, C, 0, T, d, N);
    } else {
        const int len = block_len(T, P);
        ttt_arena_mark m = ttt_arena_mark_get(ctx->arena);
        float *M = ttt_arena_alloc(ctx->arena, sizeof(float) * (size_t)P * dn); /* (P, d, N) */
        float *sd = ttt_arena_alloc(ctx->arena, sizeof(float) * (size_t)P * d); /* ΣΔ per block */
        memset(M, 0, sizeof(float) * (size_t)P * dn);
#ifdef _OPENMP
#pragma omp parallel for schedule(dynamic, 1)
#endif
        for (int p = 0; p < P; p++) { /* 1. blocks from zero */
            const int t0 = p * len < T ? p * len : T, t1 = t0 + len < T ? t0 + len : T;
            ss_run(y, M + (size_t)p * dn, x, delta, A, B, C, t0, t1, d, N);
            for (int i = 0; i < d; i++) {
                double s = 0;
                for (int t = t0; t < t1; t++) s += delta[(size_t)t * d + i];
                sd[(size_t)p * d + i] = (float)s;
            }
        }
        /* 2. carries: M[p] becomes block p's starting state */
#ifdef _OPENMP
#pragma omp parallel for schedule(static)
#endif
        for (int i = 0; i < d; i++)
            for (int k = 0; k < N; k++) {
                float c = h[(size_t)i * N + k];
                for (int p = 0; p < P; p++) {
                    float *mp = M + (size_t)p * dn + (size_t)i * N + k;
                    const float next = expf(sd[(size_t)p * d + i] * A[(size_t)i * N + k]) * c + *mp;
                    *mp = c;
                    c = next;
                }
                h[(size_t)i * N + k] = c;
            }
#ifdef _OPENMP
#pragma omp parallel for schedule(dynamic, 1)
#endif
        for (int p = 0; p < P; p++) { /* 3. fix-up: y_t += Σ_n C_t exp(A Σ_{t0..t} Δ) h_start */
            const int t0 = p * len < T ? p * len : T, t1 = t0 + len < T ? t0 + len : T;
            const float *S = M + (size_t)p * dn;
            for (int i = 0; i < d; i++) {
                float cum = 0;
                const float *Si = S + (size_t)i * N, *Ai = A + (size_t)i * N;
                for (int t = t0; t < t1; t++) {
                    cum += delta[(size_t)t * d + i];
                    const float *Ct = C + (size_t)t * N;
                    float acc = 0, e[SS_NMAX]; /* exponentials vectorized, as in ss_run */
                    for (int k0 = 0; k0 < N; k0 += SS_NMAX) {
                        const int nk = N - k0 < SS_NMAX ? N - k0 : SS_NMAX;
                        for (int k = 0; k < nk; k++)
                            e[k] = Ct[k0 + k] * ttt_fast_expf(cum * Ai[k0 + k]) * Si[k0 + k];
                        for (int k = 0; k < nk; k++) acc += e[k];
                    }
                    y[(size_t)t * d + i] += acc;
                }
            }
        }
        ttt_arena_release(ctx->arena, m);
    }
    if (D)
        for (int t = 0; t < T; t++)
            for (int i = 0; i < d; i++) y[(size_t)t * d + i] += D[i] * x[(size_t)t * d + i];
}

double ttt_selective_scan_flops(long T, int d, int N, int blocks) {
    const double per = 8.0 * (double)T * d * N + 2.0 * (double)T * d; /* + D ⊙ x */
    return blocks > 1 ? per + 5.0 * (double)T * d * N : per;
}

/* in: x, Δ, A_log, B, C, D, h0; out y. The states are recomputed (float, as the forward), and
 * exp(Δ A) with the forward's fastexp.h, so the adjoint differentiates exactly what ran; the
 * per-(t, i) sums over the N states in float, the sums over time of ∂A in double. */
static void ss_backward(ttt_ctx *ctx, const ttt_tape_entry *e, const float *dy) {
    const ttt_tensor *x = e->in[0], *delta = e->in[1], *A_log = e->in[2], *Bt = e->in[3];
    const ttt_tensor *Ct = e->in[4], *Dt = e->in[5], *h0 = e->in[6];
    const int T = TTT_ROWS(x), d = TTT_COLS(x), N = TTT_COLS(Bt);
    const size_t dn = (size_t)d * N;
    float *gx = ttt_grad(ctx, x), *gdel = ttt_grad(ctx, delta), *gAl = ttt_grad(ctx, A_log);
    float *gB = ttt_grad(ctx, Bt), *gC = ttt_grad(ctx, Ct), *gD = ttt_grad(ctx, Dt);
    float *gh0 = ttt_grad(ctx, h0);
    ttt_arena_mark m = ttt_arena_mark_get(ctx->arena);
    float *A = ttt_arena_alloc(ctx->arena, sizeof(float) * dn);
    float *Hs = ttt_arena_alloc(ctx->arena, sizeof(float) * (size_t)(T + 1) * dn); /* h_{−1..T−1} */
    double *dA = ttt_arena_alloc(ctx->arena, sizeof(double) * dn);
    float *g = ttt_arena_alloc(ctx->arena, sizeof(float) * dn); /* exp(Δ_{t+1}A) δ_{t+1} */
    for (size_t j = 0; j < dn; j++) {
        A[j] = -expf(A_log->data[j]);
        Hs[j] = h0 ? h0->data[j] : 0.0f;
        dA[j] = 0, g[j] = 0;
    }
    for (int t = 0; t < T; t++) { /* the states, as the forward computes them */
        memcpy(Hs + (size_t)(t + 1) * dn, Hs + (size_t)t * dn, sizeof(float) * dn);
        ss_run(NULL, Hs + (size_t)(t + 1) * dn, x->data, delta->data, A, Bt->data, Ct->data, t,
               t + 1, d, N);
    }
    for (int t = T - 1; t >= 0; t--) {
        const float *ht = Hs + (size_t)(t + 1) * dn, *hp = Hs + (size_t)t * dn;
        const float *xt = x->data + (size_t)t * d, *dt = delta->data + (size_t)t * d;
        const float *Bv = Bt->data + (size_t)t * N, *Cv = Ct->data + (size_t)t * N;
        const float *dyt = dy + (size_t)t * d;
        float *gBt = gB ? gB + (size_t)t * N : NULL, *gCt = gC ? gC + (size_t)t * N : NULL;
        for (int i = 0; i < d; i++) {
            const float dyi = dyt[i], dti = dt[i], xi = xt[i];
            const float *Ai = A + (size_t)i * N, *hpi = hp + (size_t)i * N;
            const float *hti = ht + (size_t)i * N;
            float *gi = g + (size_t)i * N;
            double *dAi = dA + (size_t)i * N;
            float gxi = 0, gdi = 0, ex[SS_NMAX], dl[SS_NMAX];
            for (int k0 = 0; k0 < N; k0 += SS_NMAX) {
                const int nk = N - k0 < SS_NMAX ? N - k0 : SS_NMAX;
                for (int k = 0; k < nk; k++) ex[k] = ttt_fast_expf(dti * Ai[k0 + k]);
                for (int k = 0; k < nk; k++) dl[k] = dyi * Cv[k0 + k] + gi[k0 + k]; /* δ_t */
                for (int k = 0; k < nk; k++) {
                    const float eh = ex[k] * hpi[k0 + k];
                    gxi += dl[k] * Bv[k0 + k];
                    gdi += dl[k] * (Ai[k0 + k] * eh + Bv[k0 + k] * xi);
                    dAi[k0 + k] += (double)(dl[k] * dti * eh);
                    gi[k0 + k] = ex[k] * dl[k];
                }
                if (gCt)
                    for (int k = 0; k < nk; k++) gCt[k0 + k] += dyi * hti[k0 + k];
                if (gBt)
                    for (int k = 0; k < nk; k++) gBt[k0 + k] += dl[k] * dti * xi;
            }
            if (gx) gx[(size_t)t * d + i] += gxi * dti + (Dt ? dyi * Dt->data[i] : 0.0f);
            if (gdel) gdel[(size_t)t * d + i] += gdi;
            if (gD) gD[i] += dyi * xi;
        }
    }
    for (size_t j = 0; j < dn; j++) {
        if (gAl) gAl[j] += (float)(dA[j] * A[j]); /* ∂A/∂A_log = A */
        if (gh0) gh0[j] += g[j];
    }
    ttt_arena_release(ctx->arena, m);
}

ttt_tensor *ttt_selective_scan_op(ttt_ctx *ctx, const ttt_tensor *x, const ttt_tensor *delta,
                                  const ttt_tensor *A_log, const ttt_tensor *B,
                                  const ttt_tensor *C, const ttt_tensor *D, const ttt_tensor *h0,
                                  int blocks) {
    if (TTT_OPS_ON_DEVICE3(ctx, x, delta, A_log) ||
        (TTT_DEV_KIND_(B) | TTT_DEV_KIND_(C) | TTT_DEV_KIND_(D) | TTT_DEV_KIND_(h0)))
        return ttt_dev_selective_scan(ctx, x, delta, A_log, B, C, D, h0);
    const int T = TTT_ROWS(x), d = TTT_COLS(x), N = TTT_COLS(B);
    TTT_ASSERT(ttt_tensor_same_shape(x, delta) && TTT_ROWS(A_log) == d && TTT_COLS(A_log) == N);
    TTT_ASSERT(TTT_ROWS(B) == T && ttt_tensor_same_shape(B, C));
    TTT_ASSERT(!D || (int)D->n == d);
    TTT_ASSERT(!h0 || h0->n == (size_t)d * N);
    ttt_tensor *y = ttt_tensor_2d(ctx, T, d);
    {
        ttt_arena_mark m = ttt_arena_mark_get(ctx->arena);
        float *A = ttt_arena_alloc(ctx->arena, sizeof(float) * (size_t)d * N);
        float *h = ttt_arena_alloc(ctx->arena, sizeof(float) * (size_t)d * N);
        for (size_t j = 0; j < (size_t)d * N; j++) {
            A[j] = -expf(A_log->data[j]);
            h[j] = h0 ? h0->data[j] : 0.0f;
        }
        ttt_selective_scan(ctx, y->data, h, x->data, delta->data, A, B->data, C->data,
                           D ? D->data : NULL, T, d, N, blocks);
        ttt_arena_release(ctx->arena, m);
    }
    ttt_tape_entry *e = ttt_tape_record(ctx, ss_backward, y,
                                        (const ttt_tensor *const[]){x, delta, A_log, B, C, D, h0},
                                        7);
    if (e) e->name = "selective_scan";
    return y;
}

/* The CUDA linear-attention kernels (layers/forms/linear_attention/chunkwise.cu, docs/gpu.md
 * "Linear attention kernels") against a float64 recurrence on the host.
 *
 * Reference: per sequence, S_t = diag(e^{g_t}) S_{t−1} + β_t k_t v_tᵀ, o_t = scale·S_tᵀ q_t in
 * float64 (e^{g} = 0 for a hard reset, g < −103.972077, where the fp32 exponential is 0), and its
 * float64 reverse pass for dq, dk, dv, dβ, dg, dh0 (states recomputed from checkpoints every 64
 * tokens). The reverse pass itself is checked against float64 central differences on tiny
 * sequences (test_reference_fd), with and without resets, scalar and per-key gates.
 *
 * Inputs are the hard ones of tests/test_hard_inputs.c: log gates of magnitude 1e-6 … 10
 * (log-uniform), scalar per token or per key, β ∈ [0, 2], key norms 1e-2 … 100, d_k ≠ d_v,
 * T ∈ {1, 63, 64, 65, 130, 200, 1000, 4096, 16384}, B·H from 1 to 256, d up to 256, and −inf,
 * −1e4 and −1e30 resets at the first token, mid-chunk, at chunk boundaries and at the last token.
 *
 * Measure: relative RMS error ‖got − ref‖₂/‖ref‖₂ over each whole tensor. For dβ and dg the
 * denominator is the norm of the sum of the absolute terms instead (see BOUNDS below), since
 * both are sums with cancellation (without gates Σ_t dg_t telescopes to the h0 and d_ht terms).
 *
 * BOUNDS.
 * fp32: 2e-6·c. A float32 evaluation rounds each term a few times (u = 2^-24 ≈ 6e-8) and sums
 * chains of L terms with RMS error growing as u√L; the longest chain here is
 * L = d_k + d_v + 2C + ⌈T/C⌉ (state read, intra-chunk sum, the chunk updates of the state, and
 * for gradients d_v and C again), and 2e-6 holds u√L with 2× room up to L = 256. So
 *     c = max(1, √(L/256)) for o and ht, and twice that for gradients, which chain two such
 *     evaluations (the state-gradient scan and the chunk terms).
 * A real defect moves errors far more: a chunk decay rounded to fp32 with the same sign every
 * chunk (no drift carrying) can reach 256 · 3e-8 ≈ 8e-6 at T = 16384; a dropped token or a wrong
 * gate moves them by 1e-3 … 1 (test_perturbed measures 3e-3 … 0.25).
 * bf16: q, k, v, d_o are bf16-rounded inputs (the reference uses the same rounded values);
 * o, dq, dk, dv are stored in bf16, which alone costs up to half a bf16 ulp per element
 * (ρ = ‖ulp(ref)/2‖/‖ref‖, computed from the reference); bound ρ + 1e-3 for o and ρ + 2e-3 for
 * the gradients; ht, dβ, dg, dh0 (fp32) 1e-3 and 2e-3.
 * Every bf16 case runs twice, through the fastest kernels (the tensor-core kernels where the
 * shape allows: d_k ≤ 128, d_k and d_v multiples of 8) and through the fp32 reference kernels
 * (ttt_chunk_args.reference), each held to the same bounds.
 * Every comparison is also run on a perturbed input (one token's gate moved by −0.5) and must
 * then fail (test_perturbed). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#ifdef TTT_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "chunk_cuda.h"
#endif

#define RESET_G (-103.972077f)
#define CK 64 /* the kernels' chunk, for the bound's L */

static int is_reset(double g) { return g < (double)RESET_G; }

/* ---- float64 reference, one sequence, rows contiguous ---- */

typedef struct ref_seq {
    int T, dk, dv, gate; /* gate: 0 none, 1 per token, 2 per key */
    double scale;
    const double *q, *k, *v, *beta, *g, *h0, *d_o, *d_ht; /* beta, g, h0, d_ht may be NULL */
} ref_seq;

static double gate_at(const ref_seq *r, int t, int m) {
    if (r->gate == 0) return 0.0;
    return r->gate == 1 ? r->g[t] : r->g[(size_t)t * r->dk + m];
}
static double decay_at(const ref_seq *r, int t, int m) {
    const double g = gate_at(r, t, m);
    return is_reset(g) ? 0.0 : exp(g);
}
static double beta_at(const ref_seq *r, int t) { return r->beta ? r->beta[t] : 1.0; }

/* One step S ← diag(e) S + β k vᵀ. */
static void ref_step(const ref_seq *r, int t, double *S) {
    const int dk = r->dk, dv = r->dv;
    const double b = beta_at(r, t);
    for (int m = 0; m < dk; m++) {
        const double e = decay_at(r, t, m), bk = b * r->k[(size_t)t * dk + m];
        for (int n = 0; n < dv; n++)
            S[(size_t)m * dv + n] = e * S[(size_t)m * dv + n] + bk * r->v[(size_t)t * dv + n];
    }
}

static void ref_forward(const ref_seq *r, double *o, double *ht) {
    const int dk = r->dk, dv = r->dv;
    double *S = calloc((size_t)dk * dv, sizeof *S);
    if (r->h0) memcpy(S, r->h0, sizeof *S * dk * dv);
    for (int t = 0; t < r->T; t++) {
        ref_step(r, t, S);
        for (int n = 0; n < dv; n++) {
            double s = 0.0;
            for (int m = 0; m < dk; m++) s += r->q[(size_t)t * dk + m] * S[(size_t)m * dv + n];
            o[(size_t)t * dv + n] = r->scale * s;
        }
    }
    if (ht) memcpy(ht, S, sizeof *S * dk * dv);
    free(S);
}

/* Gradients of L = Σ d_o ⊙ o + Σ d_ht ⊙ ht by the reverse pass; dg has g's shape (T, or (T, d_k))
 * and is written only with a gate. cond_dbeta_t = Σ |k_m||dS_mn||v_n|; cond_dg is the sum of
 * |q ⊙ dq| + |k ⊙ dk| (summed over keys for a scalar gate) from t to the next reset, plus
 * Σ |ht ⊙ d_ht| after the last reset: the terms the kernels' dg sums (docs/gpu.md). */
static void ref_backward(const ref_seq *r, double *dq, double *dk_, double *dv_, double *dbeta,
                         double *dg, double *dh0, double *cond_dbeta, double *cond_dg) {
    const int T = r->T, dk = r->dk, dv = r->dv, P = 64;
    const size_t kv = (size_t)dk * dv;
    const int nseg = (T + P - 1) / P;
    double *ck = calloc((size_t)nseg * kv, sizeof *ck);   /* state before each segment */
    double *seg = calloc((size_t)P * kv, sizeof *seg);    /* states after each token of one */
    double *dS = calloc(kv, sizeof *dS);
    double *ht = calloc(kv, sizeof *ht);
    if (r->h0) memcpy(ht, r->h0, sizeof *ht * kv);
    for (int t = 0; t < T; t++) {
        if (t % P == 0) memcpy(ck + (size_t)(t / P) * kv, ht, sizeof *ht * kv);
        ref_step(r, t, ht);
    }
    if (r->d_ht) memcpy(dS, r->d_ht, sizeof *dS * kv);
    const int gdim = r->gate == 2 ? dk : 1;
    for (int s = nseg - 1; s >= 0; s--) {
        const int t0 = s * P, len = T - t0 < P ? T - t0 : P;
        memcpy(seg, ck + (size_t)s * kv, sizeof *seg * kv);
        ref_step(r, t0, seg);
        for (int i = 1; i < len; i++) {
            memcpy(seg + (size_t)i * kv, seg + (size_t)(i - 1) * kv, sizeof *seg * kv);
            ref_step(r, t0 + i, seg + (size_t)i * kv);
        }
        for (int i = len - 1; i >= 0; i--) {
            const int t = t0 + i;
            const double *St = seg + (size_t)i * kv;
            const double *Sp = i > 0 ? seg + (size_t)(i - 1) * kv : ck + (size_t)s * kv;
            const double *q = r->q + (size_t)t * dk, *k = r->k + (size_t)t * dk;
            const double *v = r->v + (size_t)t * dv, *d_o = r->d_o + (size_t)t * dv;
            const double b = beta_at(r, t);
            for (int m = 0; m < dk; m++)
                for (int n = 0; n < dv; n++) dS[(size_t)m * dv + n] += r->scale * q[m] * d_o[n];
            double db = 0.0, cb = 0.0;
            for (int m = 0; m < dk; m++) {
                double a = 0.0, c = 0.0, e = 0.0;
                for (int n = 0; n < dv; n++) {
                    a += St[(size_t)m * dv + n] * d_o[n];
                    c += dS[(size_t)m * dv + n] * v[n];
                    e += fabs(dS[(size_t)m * dv + n] * v[n]);
                }
                dq[(size_t)t * dk + m] = r->scale * a;
                dk_[(size_t)t * dk + m] = b * c;
                db += k[m] * c;
                cb += fabs(k[m]) * e;
            }
            if (dbeta) dbeta[t] = db;
            if (cond_dbeta) cond_dbeta[t] = cb;
            for (int n = 0; n < dv; n++) {
                double a = 0.0;
                for (int m = 0; m < dk; m++) a += dS[(size_t)m * dv + n] * k[m];
                dv_[(size_t)t * dv + n] = b * a;
            }
            if (r->gate) {
                for (int z = 0; z < gdim; z++) dg[(size_t)t * gdim + z] = 0.0;
                for (int m = 0; m < dk; m++) {
                    const double e = decay_at(r, t, m);
                    double a = 0.0;
                    for (int n = 0; n < dv; n++) a += Sp[(size_t)m * dv + n] * dS[(size_t)m * dv + n];
                    dg[(size_t)t * gdim + (gdim == 1 ? 0 : m)] += e * a;
                }
            }
            for (int m = 0; m < dk; m++) {
                const double e = decay_at(r, t, m);
                for (int n = 0; n < dv; n++) dS[(size_t)m * dv + n] *= e;
            }
        }
    }
    memcpy(dh0, dS, sizeof *dS * kv);
    if (r->gate && cond_dg) {
        for (int z = 0; z < gdim; z++) {
            double acc = 0.0;
            if (r->d_ht) {
                const int mlo = gdim == 1 ? 0 : z, mhi = gdim == 1 ? dk : z + 1;
                for (int m = mlo; m < mhi; m++)
                    for (int n = 0; n < dv; n++)
                        acc += fabs(ht[(size_t)m * dv + n] * r->d_ht[(size_t)m * dv + n]);
            }
            for (int t = T - 1; t >= 0; t--) {
                if (is_reset(gate_at(r, t, gdim == 1 ? 0 : z))) {
                    acc = 0.0;
                    cond_dg[(size_t)t * gdim + z] = 0.0;
                    continue;
                }
                const int mlo = gdim == 1 ? 0 : z, mhi = gdim == 1 ? dk : z + 1;
                for (int m = mlo; m < mhi; m++)
                    acc += fabs(r->q[(size_t)t * dk + m] * dq[(size_t)t * dk + m]) +
                           fabs(r->k[(size_t)t * dk + m] * dk_[(size_t)t * dk + m]);
                cond_dg[(size_t)t * gdim + z] = acc;
            }
        }
    }
    free(ck);
    free(seg);
    free(dS);
    free(ht);
}

/* ---- the reverse pass against central differences ---- */

static double ref_loss(const ref_seq *r) {
    double *o = malloc(sizeof *o * (size_t)r->T * r->dv), *ht = malloc(sizeof *ht * (size_t)r->dk * r->dv);
    ref_forward(r, o, ht);
    double L = 0.0;
    for (size_t i = 0; i < (size_t)r->T * r->dv; i++) L += r->d_o[i] * o[i];
    if (r->d_ht)
        for (size_t i = 0; i < (size_t)r->dk * r->dv; i++) L += r->d_ht[i] * ht[i];
    free(o);
    free(ht);
    return L;
}

/* Central difference of the loss in x[i]; an infinite x (a reset) has derivative 0. */
static double fd(const ref_seq *r, double *x, size_t i) {
    if (!isfinite(x[i])) return 0.0;
    const double x0 = x[i], h = 1e-6 * (fabs(x0) > 1.0 ? fabs(x0) : 1.0);
    x[i] = x0 + h;
    const double lp = ref_loss(r);
    x[i] = x0 - h;
    const double lm = ref_loss(r);
    x[i] = x0;
    return (lp - lm) / (2 * h);
}

static double u01(uint64_t *s) {
    *s += 0x9e3779b97f4a7c15ull;
    uint64_t z = *s;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return ((double)(z >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}
static double normal(uint64_t *s) {
    const double a = u01(s), b = u01(s);
    return sqrt(-2.0 * log(a)) * cos(6.283185307179586 * b);
}

static void check_fd(int gate) {
    const int T = 7, dk = 3, dv = 2;
    uint64_t s = 7 + (uint64_t)gate;
    double q[T * dk], k[T * dk], v[T * dv], beta[T], g[T * dk], h0[dk * dv], d_o[T * dv],
        d_ht[dk * dv];
    for (int i = 0; i < T * dk; i++) q[i] = normal(&s), k[i] = normal(&s), g[i] = -0.5 * u01(&s);
    for (int i = 0; i < T * dv; i++) v[i] = normal(&s), d_o[i] = normal(&s);
    for (int i = 0; i < T; i++) beta[i] = 2.0 * u01(&s);
    for (int i = 0; i < dk * dv; i++) h0[i] = normal(&s), d_ht[i] = normal(&s);
    /* resets: token 3 (key 0 of a per-key gate, the token of a scalar one), and −1e30 at 5 */
    if (gate == 2) {
        g[3 * dk + 0] = -INFINITY;
        g[5 * dk + 2] = -1e30;
    } else {
        g[3] = -INFINITY;
        g[5] = -1e30;
    }
    ref_seq r = {T, dk, dv, gate, 0.7, q, k, v, beta, g, h0, d_o, d_ht};
    double dq[T * dk], dkk[T * dk], dvv[T * dv], db[T], dg[T * dk], dh0[dk * dv];
    ref_backward(&r, dq, dkk, dvv, db, dg, dh0, NULL, NULL);
    const int gn = gate == 2 ? T * dk : T;
    struct {
        const char *name;
        double *x, *grad;
        int n;
    } items[] = {{"q", q, dq, T * dk},     {"k", k, dkk, T * dk}, {"v", v, dvv, T * dv},
                 {"beta", beta, db, T},     {"g", g, dg, gate ? gn : 0},     {"h0", h0, dh0, dk * dv}};
    for (size_t it = 0; it < sizeof items / sizeof items[0]; it++) {
        double worst = 0.0, scale = 0.0;
        for (int i = 0; i < items[it].n; i++) scale = fmax(scale, fabs(items[it].grad[i]));
        for (int i = 0; i < items[it].n; i++)
            worst = fmax(worst, fabs(fd(&r, items[it].x, (size_t)i) - items[it].grad[i]));
        /* central differences with h = 1e-6: truncation O(h²) ~ 1e-12, cancellation
         * ~ ε|L|/h ~ 1e-10 */
        ck_assert_msg(worst <= 1e-7 * (scale + 1.0), "gate %d: d%s off by %g (scale %g)", gate,
                      items[it].name, worst, scale);
    }
}

START_TEST(test_reference_fd) {
    check_fd(0);
    check_fd(1);
    check_fd(2);
}
END_TEST

#ifdef TTT_HAVE_CUDA

/* ---- cases ---- */

typedef struct la_case {
    const char *name;
    int B, T, H, dk, dv;
    int gate;           /* 0 none, 1 per token, 2 per key */
    double glo, ghi;    /* |log gate|, log-uniform in [glo, ghi] */
    int beta, h0, dht;  /* present? */
    double knlo, knhi;  /* key norms, log-uniform */
    int resets;         /* insert −inf / −1e4 / −1e30 resets */
    int partial;        /* backward asks for dq and dv only */
} la_case;

static const la_case cases[] = {
    {"T=1, no gate", 1, 1, 1, 32, 16, 0, 0, 0, 1, 1, 1, 1e-2, 100, 0, 0},
    {"per token weak, T=1000, d_k>d_v", 2, 1000, 3, 96, 64, 1, 1e-6, 1e-3, 1, 1, 1, 1e-2, 100, 0, 0},
    {"per token strong, T=63", 1, 63, 2, 32, 48, 1, 0.1, 10, 1, 1, 1, 1e-2, 100, 0, 0},
    {"per key weak, T=4096, d_k<d_v", 1, 4096, 2, 64, 128, 2, 1e-6, 1e-2, 1, 1, 1, 1e-2, 100, 0, 0},
    {"per key strong, T=65, B·H=256", 16, 65, 16, 16, 24, 2, 0.1, 10, 1, 1, 1, 1e-2, 100, 0, 0},
    {"per key 1e-6..10, T=64, d=128", 2, 64, 2, 128, 128, 2, 1e-6, 10, 1, 1, 1, 1e-2, 100, 0, 0},
    {"per key resets, T=200", 1, 200, 2, 40, 24, 2, 1e-4, 1, 1, 1, 1, 1e-2, 100, 1, 0},
    {"per token resets, T=1000", 2, 1000, 1, 64, 32, 1, 1e-4, 1, 1, 1, 1, 1e-2, 100, 1, 0},
    {"per key, d_k=256, d_v=200, T=130", 1, 130, 1, 256, 200, 2, 1e-3, 1, 1, 1, 1, 1e-2, 100, 0, 0},
    {"per token, T=16384", 1, 16384, 1, 32, 32, 1, 1e-6, 1e-1, 1, 1, 1, 1e-2, 100, 0, 0},
    {"per key, no beta/h0/d_ht, T=4096", 2, 4096, 2, 64, 64, 2, 1e-5, 1e-1, 0, 0, 0, 1e-2, 100, 0, 0},
    {"no gate, T=1000", 1, 1000, 2, 64, 64, 0, 0, 0, 1, 1, 1, 1e-2, 100, 0, 0},
    {"per key resets, partial grads, T=1000", 1, 1000, 3, 48, 80, 2, 1e-3, 3, 1, 1, 1, 1e-2, 100, 1, 1},
    /* d_v = 128 on a GPU of 80 to 159 SMs (the H200 has 132): at B·H = 80 the tensor-core
     * forward takes its 128-column tiles (twice the waves with 64), at B·H = 40 the backward's
     * launch of both recurrences (2·B·H blocks per tile) does */
    {"per key resets, B·H=80, d=128, T=130", 8, 130, 10, 128, 128, 2, 1e-3, 1, 1, 1, 1, 1e-2, 100, 1, 0},
    {"per token resets, B·H=40, d=128, T=100", 4, 100, 10, 128, 128, 1, 1e-3, 1, 1, 1, 1, 1e-2, 100, 1, 0},
};
#define NCASES ((int)(sizeof cases / sizeof cases[0]))

/* Host data of one case, in (B, T, H, D) layout; q, k, v, d_o already bf16-rounded for bf16. */
typedef struct la_data {
    size_t nq, nv, ng, nr, ns; /* element counts: q/k, v/o, g, rows (B·T·H), states */
    float *q, *k, *v, *beta, *g, *h0, *d_o, *d_ht;
    double *o, *ht, *dq, *dk, *dv, *dbeta, *dg, *dh0, *cdb, *cdg; /* reference */
} la_data;

static uint16_t f2bf(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
static float bf2f(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float x;
    memcpy(&x, &u, 4);
    return x;
}
static float rbf(float x) { return bf2f(f2bf(x)); }

/* Gate of a case at (t, key m) before resets. */
static float draw_gate(const la_case *c, uint64_t *s) {
    const double l = log(c->glo) + (log(c->ghi) - log(c->glo)) * u01(s);
    return (float)-exp(l);
}

/* Resets: −inf at the first token, mid-chunk (37), at chunk boundaries (64, 128), −1e4 at 100,
 * −1e30 at 150, −inf at the last token; per key on a subset of the keys at each position. */
static void put_resets(const la_case *c, float *g, int b, int h) {
    const int T = c->T, pos[] = {0, 37, 64, 128, 100, 150, T - 1};
    const float val[] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY, -1e4f, -1e30f, -INFINITY};
    for (int p = 0; p < 7; p++) {
        const int t = pos[p];
        if (t >= T) continue;
        const size_t row = ((size_t)b * T + t) * c->H + h;
        if (c->gate == 1) {
            g[row] = val[p];
        } else {
            for (int m = 0; m < c->dk; m++)
                if ((m + p) % 3 != 0 || p == 2) g[row * c->dk + m] = val[p];
        }
    }
}

static void gen(const la_case *c, int bf16, la_data *d) {
    const int B = c->B, T = c->T, H = c->H, dk = c->dk, dv = c->dv;
    d->nr = (size_t)B * T * H;
    d->nq = d->nr * dk;
    d->nv = d->nr * dv;
    d->ng = c->gate == 2 ? d->nq : (c->gate == 1 ? d->nr : 0);
    d->ns = (size_t)B * H * dk * dv;
    uint64_t s = 1234 + (uint64_t)(c - cases) * 7919;
    d->q = malloc(sizeof(float) * d->nq);
    d->k = malloc(sizeof(float) * d->nq);
    d->v = malloc(sizeof(float) * d->nv);
    d->d_o = malloc(sizeof(float) * d->nv);
    d->beta = c->beta ? malloc(sizeof(float) * d->nr) : NULL;
    d->g = d->ng ? malloc(sizeof(float) * d->ng) : NULL;
    d->h0 = c->h0 ? malloc(sizeof(float) * d->ns) : NULL;
    d->d_ht = c->dht ? malloc(sizeof(float) * d->ns) : NULL;
    for (size_t r = 0; r < d->nr; r++) {
        const double kn = exp(log(c->knlo) + (log(c->knhi) - log(c->knlo)) * u01(&s));
        double nn = 0.0;
        for (int m = 0; m < dk; m++) {
            d->k[r * dk + m] = (float)normal(&s);
            nn += (double)d->k[r * dk + m] * d->k[r * dk + m];
        }
        for (int m = 0; m < dk; m++) {
            d->k[r * dk + m] = (float)(d->k[r * dk + m] * kn / sqrt(nn));
            d->q[r * dk + m] = (float)normal(&s);
        }
        for (int n = 0; n < dv; n++) {
            d->v[r * dv + n] = (float)normal(&s);
            d->d_o[r * dv + n] = (float)normal(&s);
        }
        if (d->beta) d->beta[r] = (float)(2.0 * u01(&s));
    }
    for (size_t i = 0; i < d->ng; i++) d->g[i] = draw_gate(c, &s);
    if (c->resets)
        for (int b = 0; b < B; b++)
            for (int h = 0; h < H; h++) put_resets(c, d->g, b, h);
    for (size_t i = 0; i < d->ns; i++) {
        if (d->h0) d->h0[i] = (float)normal(&s);
        if (d->d_ht) d->d_ht[i] = (float)normal(&s);
    }
    if (bf16) {
        for (size_t i = 0; i < d->nq; i++) d->q[i] = rbf(d->q[i]), d->k[i] = rbf(d->k[i]);
        for (size_t i = 0; i < d->nv; i++) d->v[i] = rbf(d->v[i]), d->d_o[i] = rbf(d->d_o[i]);
    }
}

/* The float64 reference of every sequence of the case. */
static void reference(const la_case *c, la_data *d) {
    const int B = c->B, T = c->T, H = c->H, dk = c->dk, dv = c->dv;
    const int gdim = c->gate == 2 ? dk : 1;
    d->o = calloc(d->nv, sizeof(double));
    d->ht = calloc(d->ns, sizeof(double));
    d->dq = calloc(d->nq, sizeof(double));
    d->dk = calloc(d->nq, sizeof(double));
    d->dv = calloc(d->nv, sizeof(double));
    d->dbeta = calloc(d->nr, sizeof(double));
    d->cdb = calloc(d->nr, sizeof(double));
    d->dg = calloc(d->ng + 1, sizeof(double));
    d->cdg = calloc(d->ng + 1, sizeof(double));
    d->dh0 = calloc(d->ns, sizeof(double));
    double *q = malloc(sizeof(double) * T * dk), *k = malloc(sizeof(double) * T * dk);
    double *v = malloc(sizeof(double) * T * dv), *d_o = malloc(sizeof(double) * T * dv);
    double *beta = malloc(sizeof(double) * T), *g = malloc(sizeof(double) * T * gdim);
    double *h0 = malloc(sizeof(double) * dk * dv), *d_ht = malloc(sizeof(double) * dk * dv);
    double *o = malloc(sizeof(double) * T * dv), *ht = malloc(sizeof(double) * dk * dv);
    double *dq = malloc(sizeof(double) * T * dk), *dkk = malloc(sizeof(double) * T * dk);
    double *dvv = malloc(sizeof(double) * T * dv), *db = malloc(sizeof(double) * T);
    double *dg = malloc(sizeof(double) * T * gdim), *dh0 = malloc(sizeof(double) * dk * dv);
    double *cdb = malloc(sizeof(double) * T), *cdg = malloc(sizeof(double) * T * gdim);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            const size_t sq = ((size_t)b * H + h) * dk * dv;
            for (int t = 0; t < T; t++) {
                const size_t row = ((size_t)b * T + t) * H + h;
                for (int m = 0; m < dk; m++) {
                    q[(size_t)t * dk + m] = d->q[row * dk + m];
                    k[(size_t)t * dk + m] = d->k[row * dk + m];
                }
                for (int n = 0; n < dv; n++) {
                    v[(size_t)t * dv + n] = d->v[row * dv + n];
                    d_o[(size_t)t * dv + n] = d->d_o[row * dv + n];
                }
                beta[t] = d->beta ? d->beta[row] : 1.0;
                for (int z = 0; z < gdim && c->gate; z++)
                    g[(size_t)t * gdim + z] = d->g[row * gdim + z];
            }
            for (int i = 0; i < dk * dv; i++) {
                h0[i] = d->h0 ? d->h0[sq + i] : 0.0;
                d_ht[i] = d->d_ht ? d->d_ht[sq + i] : 0.0;
            }
            ref_seq r = {T,    dk,  dv,     c->gate,          1.0 / sqrt((double)dk),
                         q,    k,   v,      d->beta ? beta : NULL, c->gate ? g : NULL,
                         d->h0 ? h0 : NULL, d_o, d->d_ht ? d_ht : NULL};
            ref_forward(&r, o, ht);
            ref_backward(&r, dq, dkk, dvv, db, dg, dh0, cdb, cdg);
            for (int t = 0; t < T; t++) {
                const size_t row = ((size_t)b * T + t) * H + h;
                for (int m = 0; m < dk; m++) {
                    d->dq[row * dk + m] = dq[(size_t)t * dk + m];
                    d->dk[row * dk + m] = dkk[(size_t)t * dk + m];
                }
                for (int n = 0; n < dv; n++) {
                    d->o[row * dv + n] = o[(size_t)t * dv + n];
                    d->dv[row * dv + n] = dvv[(size_t)t * dv + n];
                }
                d->dbeta[row] = db[t];
                d->cdb[row] = cdb[t];
                for (int z = 0; z < gdim && c->gate; z++) {
                    d->dg[row * gdim + z] = dg[(size_t)t * gdim + z];
                    d->cdg[row * gdim + z] = cdg[(size_t)t * gdim + z];
                }
            }
            for (int i = 0; i < dk * dv; i++) d->ht[sq + i] = ht[i], d->dh0[sq + i] = dh0[i];
        }
    free(q), free(k), free(v), free(d_o), free(beta), free(g), free(h0), free(d_ht), free(o);
    free(ht), free(dq), free(dkk), free(dvv), free(db), free(dg), free(dh0), free(cdb), free(cdg);
}

static void data_free(la_data *d) {
    free(d->q), free(d->k), free(d->v), free(d->beta), free(d->g), free(d->h0), free(d->d_o);
    free(d->d_ht), free(d->o), free(d->ht), free(d->dq), free(d->dk), free(d->dv);
    free(d->dbeta), free(d->dg), free(d->dh0), free(d->cdb), free(d->cdg);
}

/* ---- the GPU side ---- */

typedef struct la_got {
    float *o, *ht, *dq, *dk, *dv, *dbeta, *dg, *dh0;
} la_got;

static void *dev_put(const float *x, size_t n, int bf16) {
    if (!x) return NULL;
    void *p = NULL;
    ck_assert_int_eq(cudaMalloc(&p, n * (bf16 ? 2 : 4)), cudaSuccess);
    if (bf16) {
        uint16_t *h = malloc(n * 2);
        for (size_t i = 0; i < n; i++) h[i] = f2bf(x[i]);
        ck_assert_int_eq(cudaMemcpy(p, h, n * 2, cudaMemcpyHostToDevice), cudaSuccess);
        free(h);
    } else {
        ck_assert_int_eq(cudaMemcpy(p, x, n * 4, cudaMemcpyHostToDevice), cudaSuccess);
    }
    return p;
}
static void *dev_out(size_t n, int bf16) {
    void *p = NULL;
    ck_assert_int_eq(cudaMalloc(&p, n * (bf16 ? 2 : 4)), cudaSuccess);
    ck_assert_int_eq(cudaMemset(p, 0xff, n * (bf16 ? 2 : 4)), cudaSuccess); /* NaN: unwritten */
    return p;
}
static float *dev_get(void *p, size_t n, int bf16) {
    if (!p) return NULL;
    float *x = malloc(n * 4);
    if (bf16) {
        uint16_t *h = malloc(n * 2);
        ck_assert_int_eq(cudaMemcpy(h, p, n * 2, cudaMemcpyDeviceToHost), cudaSuccess);
        for (size_t i = 0; i < n; i++) x[i] = bf2f(h[i]);
        free(h);
    } else {
        ck_assert_int_eq(cudaMemcpy(x, p, n * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    }
    cudaFree(p);
    return x;
}

/* Forward and backward of a case on the GPU; g_perturb ≥ 0 moves that token's gate by −0.5;
 * ref: the fp32 reference kernels even for bf16 inputs (ttt_chunk_args.reference), else the
 * fastest (the tensor-core kernels where the shape allows). */
static void run_gpu(const la_case *c, const la_data *d, int bf16, int ref, int g_perturb,
                    la_got *got) {
    float *g = NULL;
    if (d->g) {
        g = malloc(sizeof(float) * d->ng);
        memcpy(g, d->g, sizeof(float) * d->ng);
        if (g_perturb >= 0) {
            const int gd = c->gate == 2 ? c->dk : 1;
            for (int z = 0; z < gd; z++) g[(size_t)g_perturb * c->H * gd + z] -= 0.5f;
        }
    }
    ttt_chunk_args a;
    memset(&a, 0, sizeof a);
    a.B = c->B, a.T = c->T, a.H = c->H, a.d_k = c->dk, a.d_v = c->dv;
    a.dtype = bf16 ? TTT_CHUNK_BF16 : TTT_CHUNK_F32;
    a.reference = ref;
    a.q = dev_put(d->q, d->nq, bf16);
    a.k = dev_put(d->k, d->nq, bf16);
    a.v = dev_put(d->v, d->nv, bf16);
    a.beta = dev_put(d->beta, d->nr, 0);
    a.g = dev_put(g, d->ng, 0);
    a.gate_per_key = c->gate == 2;
    a.scale = (float)(1.0 / sqrt((double)c->dk));
    a.h0 = dev_put(d->h0, d->ns, 0);
    a.o = dev_out(d->nv, bf16);
    a.ht = dev_out(d->ns, 0);
    ttt_chunk_grad gr;
    memset(&gr, 0, sizeof gr);
    gr.d_o = dev_put(d->d_o, d->nv, bf16);
    gr.d_ht = dev_put(d->d_ht, d->ns, 0);
    gr.d_q = dev_out(d->nq, bf16);
    gr.d_v = dev_out(d->nv, bf16);
    if (!c->partial) {
        gr.d_k = dev_out(d->nq, bf16);
        gr.d_beta = d->beta ? dev_out(d->nr, 0) : NULL;
        gr.d_g = d->g ? dev_out(d->ng, 0) : NULL;
        gr.d_h0 = dev_out(d->ns, 0);
    }
    const size_t wf = ttt_cuda_la_workspace(&a, 0), wb = ttt_cuda_la_workspace(&a, 1);
    ck_assert(wf > 0 && wb > 0);
    void *ws = NULL;
    ck_assert_int_eq(cudaMalloc(&ws, wf > wb ? wf : wb), cudaSuccess);
    ttt_error err;
    memset(&err, 0, sizeof err);
    ttt_status st = ttt_cuda_la_forward(&a, ws, wf, NULL, &err);
    ck_assert_msg(st == TTT_OK, "forward: %s", err.msg);
    st = ttt_cuda_la_backward(&a, &gr, ws, wb, NULL, &err);
    ck_assert_msg(st == TTT_OK, "backward: %s", err.msg);
    ck_assert_int_eq(cudaDeviceSynchronize(), cudaSuccess);
    cudaFree(ws);
    got->o = dev_get(a.o, d->nv, bf16);
    got->ht = dev_get(a.ht, d->ns, 0);
    got->dq = dev_get(gr.d_q, d->nq, bf16);
    got->dk = dev_get(gr.d_k, d->nq, bf16);
    got->dv = dev_get(gr.d_v, d->nv, bf16);
    got->dbeta = dev_get(gr.d_beta, d->nr, 0);
    got->dg = dev_get(gr.d_g, d->ng, 0);
    got->dh0 = dev_get(gr.d_h0, d->ns, 0);
    cudaFree((void *)a.q), cudaFree((void *)a.k), cudaFree((void *)a.v);
    cudaFree((void *)a.beta), cudaFree((void *)a.g), cudaFree((void *)a.h0);
    cudaFree((void *)gr.d_o), cudaFree((void *)gr.d_ht);
    free(g);
}

static void got_free(la_got *g) {
    free(g->o), free(g->ht), free(g->dq), free(g->dk), free(g->dv), free(g->dbeta), free(g->dg);
    free(g->dh0);
}

/* ‖got − ref‖ / ‖den‖ (den = ref when NULL); NaN anywhere gives +inf. */
static double rel_err(const float *got, const double *ref, const double *den, size_t n) {
    double e = 0.0, r = 0.0;
    for (size_t i = 0; i < n; i++) {
        const double x = (double)got[i] - ref[i], y = den ? den[i] : ref[i];
        if (!isfinite(x)) return INFINITY;
        e += x * x;
        r += y * y;
    }
    return r > 0 ? sqrt(e / r) : (e > 0 ? INFINITY : 0.0);
}

/* ρ: the relative RMS of half a bf16 ulp of the reference (the storage rounding's bound). */
static double bf16_rho(const double *ref, size_t n) {
    double e = 0.0, r = 0.0;
    for (size_t i = 0; i < n; i++) {
        const double a = fabs(ref[i]);
        if (a > 0) {
            const double ulp = ldexp(1.0, ilogb(a) - 7);
            e += 0.25 * ulp * ulp;
        }
        r += ref[i] * ref[i];
    }
    return r > 0 ? sqrt(e / r) : 0.0;
}

typedef struct cmp_row {
    const char *name;
    double err, bound;
} cmp_row;

/* Compare every quantity; returns the number that exceed their bound, rows filled for the log. */
static int compare(const la_case *c, const la_data *d, const la_got *g, int bf16, cmp_row *rows,
                   int *nrows) {
    const double L = c->dk + c->dv + 2.0 * CK + (c->T + CK - 1) / CK;
    const double cf = fmax(1.0, sqrt(L / 256.0)), fw = 2e-6 * cf, bw = 2 * fw;
    int k = 0, bad = 0;
#define ROW(nm, gp, rp, dp, cnt, b32, b16, stored)                                              \
    do {                                                                                   \
        if (gp) {                                                                          \
            const double bd = bf16 ? (b16) + ((stored) ? bf16_rho(rp, cnt) : 0.0) : (b32);   \
            rows[k].name = nm;                                                             \
            rows[k].err = rel_err(gp, rp, dp, cnt);                                        \
            rows[k].bound = bd;                                                            \
            if (!(rows[k].err <= bd)) bad++;                                               \
            k++;                                                                           \
        }                                                                                  \
    } while (0)
    ROW("o", g->o, d->o, NULL, d->nv, fw, 1e-3, 1);
    ROW("ht", g->ht, d->ht, NULL, d->ns, fw, 1e-3, 0);
    ROW("dq", g->dq, d->dq, NULL, d->nq, bw, 2e-3, 1);
    ROW("dk", g->dk, d->dk, NULL, d->nq, bw, 2e-3, 1);
    ROW("dv", g->dv, d->dv, NULL, d->nv, bw, 2e-3, 1);
    ROW("dbeta", g->dbeta, d->dbeta, d->cdb, d->nr, bw, 2e-3, 0);
    ROW("dg", g->dg, d->dg, d->cdg, d->ng, bw, 2e-3, 0);
    ROW("dh0", g->dh0, d->dh0, NULL, d->ns, bw, 2e-3, 0);
#undef ROW
    *nrows = k;
    return bad;
}

/* Variant v of a case: 0 fp32, 1 bf16 through the fastest kernels, 2 bf16 through the fp32
 * reference kernels. */
static const char *variant_name(int v) { return v == 0 ? "fp32" : v == 1 ? "bf16" : "bf16r"; }

static void case_line(const la_case *c, int v, const char *tag, const cmp_row *rows, int n) {
    char buf[1024];
    int p = snprintf(buf, sizeof buf, "%-5s %-40s %s", variant_name(v), c->name, tag);
    for (int i = 0; i < n && p < (int)sizeof buf; i++)
        p += snprintf(buf + p, sizeof buf - (size_t)p, " %s %.2e/%.1e", rows[i].name, rows[i].err,
                      rows[i].bound);
    printf("%s\n", buf);
    fflush(stdout);
}

/* The two bf16 variants of a case share their inputs and float64 reference: computed for the
 * first, kept for the second (the suite runs in one process, the variants in order). */
static la_data bf16_cache;
static int bf16_cache_case = -1;

START_TEST(test_case) {
    const int ci = _i / 3;
    const la_case *c = &cases[ci];
    const int v = _i % 3, bf16 = v > 0;
    la_data d;
    if (v == 2 && bf16_cache_case == ci) {
        d = bf16_cache;
        bf16_cache_case = -1;
    } else {
        memset(&d, 0, sizeof d);
        gen(c, bf16, &d);
        reference(c, &d);
    }
    if (v == 1) {
        if (bf16_cache_case >= 0) data_free(&bf16_cache);
        bf16_cache = d;
        bf16_cache_case = ci;
    }
    la_got g;
    run_gpu(c, &d, bf16, v == 2, -1, &g);
    cmp_row rows[8];
    int n = 0;
    const int bad = compare(c, &d, &g, bf16, rows, &n);
    case_line(c, v, "", rows, n);
    ck_assert_msg(bad == 0, "%s (%s): %d quantities over their bound", c->name, variant_name(v),
                  bad);
    got_free(&g);
    if (v != 1) data_free(&d); /* v = 1: kept for v = 2 */
}
END_TEST

/* One token's gate moved by −0.5: every comparison must now fail. */
static const la_case pcases[] = {
    {"perturbed: per key weak, T=65", 1, 65, 2, 32, 24, 2, 1e-4, 1e-2, 1, 1, 1, 1e-1, 10, 0, 0},
    {"perturbed: per token weak, T=65", 1, 65, 2, 32, 24, 1, 1e-4, 1e-2, 1, 1, 1, 1e-1, 10, 0, 0},
};

START_TEST(test_perturbed) {
    const la_case *c = &pcases[_i / 3];
    const int v = _i % 3, bf16 = v > 0;
    la_data d;
    memset(&d, 0, sizeof d);
    gen(c, bf16, &d);
    reference(c, &d);
    la_got g;
    run_gpu(c, &d, bf16, v == 2, 20, &g);
    cmp_row rows[8];
    int n = 0;
    const int bad = compare(c, &d, &g, bf16, rows, &n);
    case_line(c, v, "(each must fail)", rows, n);
    ck_assert_int_eq(n, 8);
    ck_assert_msg(bad == n, "%s (%s): only %d of %d comparisons rejected the perturbed input",
                  c->name, variant_name(v), bad, n);
    got_free(&g);
    data_free(&d);
}
END_TEST

START_TEST(test_bad_args) {
    void *buf = NULL;
    ck_assert_int_eq(cudaMalloc(&buf, 1 << 20), cudaSuccess);
    ttt_chunk_args a;
    memset(&a, 0, sizeof a);
    a.B = 1, a.T = 10, a.H = 1, a.d_k = 16, a.d_v = 16, a.scale = 1.0f;
    a.q = a.k = a.v = buf;
    a.o = buf;
    ttt_error err;
    const size_t wf = ttt_cuda_la_workspace(&a, 0);
    ck_assert(wf > 0 && wf < (1 << 19));
    char *ws = (char *)buf + (1 << 19);
    ck_assert_int_eq(ttt_cuda_la_forward(&a, ws, wf, NULL, &err), TTT_OK);
    ck_assert_int_eq(cudaDeviceSynchronize(), cudaSuccess);
    ttt_chunk_args b = a;
    b.d_k = 257;
    ck_assert_int_eq(ttt_cuda_la_forward(&b, ws, wf, NULL, &err), TTT_ERR_ARG);
    ck_assert_ptr_nonnull(strstr(err.msg, "d_k"));
    ck_assert_int_eq(ttt_cuda_la_workspace(&b, 0), 0);
    b = a, b.d_v = 0;
    ck_assert_int_eq(ttt_cuda_la_forward(&b, ws, wf, NULL, &err), TTT_ERR_ARG);
    b = a, b.T = 0;
    ck_assert_int_eq(ttt_cuda_la_forward(&b, ws, wf, NULL, &err), TTT_ERR_ARG);
    b = a, b.B = 65536, b.H = 65536;
    ck_assert_int_eq(ttt_cuda_la_forward(&b, ws, wf, NULL, &err), TTT_ERR_ARG);
    b = a, b.q = NULL;
    ck_assert_int_eq(ttt_cuda_la_forward(&b, ws, wf, NULL, &err), TTT_ERR_ARG);
    b = a, b.o = NULL;
    ck_assert_int_eq(ttt_cuda_la_forward(&b, ws, wf, NULL, &err), TTT_ERR_ARG);
    b = a, b.dtype = (ttt_chunk_dtype)7;
    ck_assert_int_eq(ttt_cuda_la_forward(&b, ws, wf, NULL, &err), TTT_ERR_ARG);
    ck_assert_int_eq(ttt_cuda_la_forward(&a, ws, wf - 1, NULL, &err), TTT_ERR_ARG);
    ck_assert_int_eq(ttt_cuda_la_forward(&a, NULL, wf, NULL, &err), TTT_ERR_ARG);
    ck_assert_int_eq(ttt_cuda_la_forward(&a, ws + 16, wf, NULL, &err), TTT_ERR_ARG);
    ck_assert_int_eq(ttt_cuda_la_forward(NULL, ws, wf, NULL, &err), TTT_ERR_ARG);
    ttt_chunk_grad g;
    memset(&g, 0, sizeof g);
    const size_t wb = ttt_cuda_la_workspace(&a, 1);
    ck_assert(wb > 0 && wb < (1 << 19));
    ck_assert_int_eq(ttt_cuda_la_backward(&a, &g, ws, wb, NULL, &err), TTT_ERR_ARG); /* no d_o */
    g.d_o = buf;
    g.d_beta = (float *)buf;
    ck_assert_int_eq(ttt_cuda_la_backward(&a, &g, ws, wb, NULL, &err), TTT_ERR_ARG);
    ck_assert_ptr_nonnull(strstr(err.msg, "beta"));
    g.d_beta = NULL;
    g.d_g = (float *)buf;
    ck_assert_int_eq(ttt_cuda_la_backward(&a, &g, ws, wb, NULL, &err), TTT_ERR_ARG);
    g.d_g = NULL;
    ck_assert_int_eq(ttt_cuda_la_backward(&a, NULL, ws, wb, NULL, &err), TTT_ERR_ARG);
    ck_assert_int_eq(ttt_cuda_la_backward(&a, &g, ws, wb - 1, NULL, &err), TTT_ERR_ARG);
    ck_assert_int_eq(cudaDeviceSynchronize(), cudaSuccess);
    cudaFree(buf);
}
END_TEST

#endif /* TTT_HAVE_CUDA */

int main(void) {
    /* the reference's reverse pass, checked first (host only) */
    Suite *s0 = suite_create("cuda_la_reference");
    TCase *t0 = tcase_create("fd");
    tcase_add_test(t0, test_reference_fd);
    suite_add_tcase(s0, t0);
    SRunner *r0 = srunner_create(s0);
    srunner_set_fork_status(r0, CK_NOFORK);
    srunner_run_all(r0, CK_NORMAL);
    const int f0 = srunner_ntests_failed(r0);
    srunner_free(r0);
    if (f0) return 1;
#ifndef TTT_HAVE_CUDA
    printf("skipped: built without CUDA\n");
    return 77;
#else
    int count = 0;
    const cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
        printf("skipped: no CUDA device: %s\n",
               e != cudaSuccess ? cudaGetErrorString(e) : "none found");
        return 77;
    }
    /* no fork: the CUDA context of this process is not usable in a child */
    Suite *s = suite_create("cuda_la");
    TCase *tc = tcase_create("cases");
    tcase_set_timeout(tc, 600);
    tcase_add_loop_test(tc, test_case, 0, 3 * NCASES);
    tcase_add_loop_test(tc, test_perturbed, 0, 6);
    tcase_add_test(tc, test_bad_args);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, CK_NORMAL);
    const int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? 0 : 1;
#endif
}

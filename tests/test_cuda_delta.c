/* The CUDA delta-rule kernels (layers/forms/delta_rule/chunkwise.cu, docs/gpu.md "Delta rule
 * kernels") against a float64 recurrence on the host: forward (o, ht) and backward (d_q, d_k,
 * d_v, d_β, d_g, d_h0 of L = Σ d_o ⊙ o + Σ d_ht ⊙ ht).
 *
 * The reference backward is an analytic reverse pass over the recurrence (states recomputed from
 * checkpoints every 64 tokens); a float64 central-difference check on a tiny case validates it.
 *
 * Measure: relative RMS ‖got − ref‖₂ / ‖ref‖₂ over each whole tensor. Bounds:
 *   fp32  o, ht: 2e-6 — a few float32 roundings (6e-8 each) per output with room for the sums over
 *         d_k and the chunk (the bound of tests/test_hard_inputs.c, which the CPU forms meet on
 *         the same kind of inputs); c = 1.
 *         d_q, d_k, d_v, d_h0: c = 2 — the backward evaluates the forward again (the chunk-start
 *         states) and then a reverse pass of the same shape, each with the forward's roundings.
 *         d_β, d_g: c = 2·max(1, κ), κ = RMS of the per-token sums of |terms| over RMS of the
 *         gradient (from the reference): d_g_t = a_t ⟨dS_t, (I − β_t k_t k_tᵀ) S_{t−1}⟩ and d_β_t
 *         are inner products of d_k·d_v terms whose sum may cancel; their rounding error scales
 *         with the sum of magnitudes, not with the result.
 *   bf16  q, k, v, d_o rounded to bf16 first; the reference uses the same rounded values.
 *         Tensors stored in bf16 (o, d_q, d_k, d_v) are compared with the reference rounded to
 *         bf16 (what a bf16 tensor can hold at best: the rounding of the output alone is
 *         ≈ 2^-8/√3·0.7 ≈ 1.6e-3 relative RMS, above the 1e-3 target): o ≤ 1e-3, gradients ≤ 2e-3;
 *         the unrounded error is printed. fp32 results (ht, d_β, d_g, d_h0): ≤ 1e-3 (ht) and 2e-3.
 * Each case also runs once with a perturbed input (k_t scaled by 0.95 at every 7th token and at
 * the last, which ht depends on even after a late reset) that every comparison with a nonzero
 * reference must reject. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#ifdef TTT_HAVE_CUDA
#include <cuda_runtime.h>

#include "chunk_cuda.h"

/* ---- inputs ---- */

static uint64_t rng_s;
static double urand(void) { /* splitmix64 → [0, 1) */
    uint64_t z = (rng_s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (double)(z >> 11) / 9007199254740992.0;
}
static double sym(void) { return 2 * urand() - 1; }
static double logu(double lo, double hi) { return exp(log(lo) + (log(hi) - log(lo)) * urand()); }

static float bf16_round(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7f800000u) == 0x7f800000u) return x;
    u += 0x7fffu + ((u >> 16) & 1u);
    u &= 0xffff0000u;
    memcpy(&x, &u, 4);
    return x;
}
static uint16_t bf16_bits(float x) { /* x already a bf16 value */
    uint32_t u;
    memcpy(&u, &x, 4);
    return (uint16_t)(u >> 16);
}

typedef enum { GATE_NONE, GATE_LOGU, GATE_RESET } gate_mode;

typedef struct dcase {
    const char *name;
    int B, T, H, dk, dv;
    gate_mode gate;
    double la_lo, la_hi; /* −log a, log-uniform in [lo, hi] (GATE_LOGU) */
    int beta_mode;       /* 0: NULL (β = 1); 1: β ∈ [0, 2] unit keys; 2: β = 2 unit keys;
                          * 3: key norms log-uniform in [1e-2, 100], β = b/‖k‖², b ∈ [0, 2] */
    int h0, dht;         /* initial state and d_ht given */
    int bf16;
    const int *resets;   /* token indices with g = reset value, −1 terminated */
    float reset_value;
} dcase;

static const int resets_a[] = {0, 30, 64, 127, 128, 199, -1};
static const int resets_b[] = {0, 1, 63, 64, 65, -1};
static const int resets_c[] = {5, 999, -1};

static const dcase cases[] = {
    {"T=1 64/128", 1, 1, 1, 64, 128, GATE_LOGU, 1e-3, 1, 1, 1, 1, 0, NULL, 0},
    {"T=63 128/64 B2H3", 2, 63, 3, 128, 64, GATE_LOGU, 1e-4, 3, 1, 1, 1, 0, NULL, 0},
    {"T=64 no gate no beta", 1, 64, 2, 128, 128, GATE_NONE, 0, 0, 0, 1, 1, 0, NULL, 0},
    {"T=65 64/128 resets", 1, 65, 1, 64, 128, GATE_RESET, 1e-3, 1, 1, 1, 1, 0, resets_b,
     -INFINITY},
    {"T=200 resets -inf", 1, 200, 2, 32, 48, GATE_RESET, 1e-2, 2, 1, 1, 1, 0, resets_a,
     -INFINITY},
    {"T=200 resets -1e4", 1, 200, 1, 32, 48, GATE_RESET, 1e-2, 2, 1, 1, 1, 0, resets_a, -1e4f},
    {"T=200 resets -1e30", 1, 200, 1, 32, 48, GATE_RESET, 1e-2, 2, 1, 1, 1, 0, resets_a,
     -1e30f},
    {"T=1000 weak gate 1e-6", 1, 1000, 1, 128, 128, GATE_LOGU, 1e-6, 1e-6, 1, 1, 1, 0,
     resets_c, -INFINITY},
    {"T=4096 gates [1e-6,10] 128/64", 1, 4096, 1, 128, 64, GATE_LOGU, 1e-6, 10, 1, 1, 1, 0,
     NULL, 0},
    {"T=512 b=2 reflection", 1, 512, 1, 64, 64, GATE_NONE, 0, 0, 2, 1, 1, 0, NULL, 0},
    {"T=300 key norms to 100", 1, 300, 2, 64, 32, GATE_LOGU, 1e-5, 1e-1, 3, 1, 1, 0, NULL, 0},
    {"T=16384 weak gate 64/64", 1, 16384, 1, 64, 64, GATE_LOGU, 1e-5, 1e-5, 1, 1, 1, 0, NULL,
     0},
    {"B*H=256 T=130 16/24", 4, 130, 64, 16, 24, GATE_LOGU, 1e-3, 1, 1, 1, 1, 0, NULL, 0},
    {"d=256 T=150", 1, 150, 1, 256, 256, GATE_LOGU, 1e-4, 1e-1, 1, 1, 1, 0, NULL, 0},
    {"256/8 T=70 no h0", 1, 70, 1, 256, 8, GATE_LOGU, 1e-4, 1e-1, 1, 0, 0, 0, NULL, 0},
    {"bf16 T=63 128/64", 2, 63, 3, 128, 64, GATE_LOGU, 1e-4, 3, 1, 1, 1, 1, NULL, 0},
    {"bf16 T=65 resets", 1, 65, 1, 64, 128, GATE_RESET, 1e-3, 1, 1, 1, 1, 1, resets_b,
     -INFINITY},
    {"bf16 T=4096 gates [1e-6,10]", 1, 4096, 2, 128, 128, GATE_LOGU, 1e-6, 10, 1, 1, 1, 1,
     NULL, 0},
    {"bf16 T=1000 no gate no beta", 2, 1000, 2, 64, 64, GATE_NONE, 0, 0, 0, 1, 1, 1, NULL, 0},
    {"bf16 T=300 key norms to 100", 1, 300, 2, 64, 32, GATE_LOGU, 1e-5, 1e-1, 3, 1, 1, 1, NULL,
     0},
    {"bf16 B*H=256 T=130 16/24", 4, 130, 64, 16, 24, GATE_LOGU, 1e-3, 1, 1, 1, 1, 1, NULL, 0},
    {"bf16 d=256 T=150", 1, 150, 1, 256, 256, GATE_LOGU, 1e-4, 1e-1, 1, 1, 1, 1, NULL, 0},
    {"bf16 T=512 b=2 reflection", 1, 512, 1, 64, 64, GATE_NONE, 0, 0, 2, 1, 1, 1, NULL, 0},
    /* B·H = 128 and 120 with d_v > 64: on a GPU with 132 SMs (H100, H200) the tensor-core forward
     * takes 128-column value tiles for these (one wave of blocks against two) */
    {"bf16 B*H=128 T=100 128/128", 2, 100, 64, 128, 128, GATE_LOGU, 1e-4, 1, 1, 1, 1, 1, NULL,
     0},
    {"bf16 B*H=120 T=70 64/96 resets", 4, 70, 30, 64, 96, GATE_RESET, 1e-3, 1, 1, 1, 1, 1,
     resets_b, -INFINITY},
};
#define N_CASES ((int)(sizeof cases / sizeof cases[0]))

typedef struct problem {
    int B, T, H, dk, dv;
    float scale;
    float *q, *k, *v, *beta, *g, *h0, *d_o, *d_ht; /* host, bf16-rounded where bf16 */
} problem;

static float *fnew(size_t n) {
    float *p = calloc(n ? n : 1, sizeof(float));
    ck_assert_ptr_nonnull(p);
    return p;
}
static double *dnew(size_t n) {
    double *p = calloc(n ? n : 1, sizeof(double));
    ck_assert_ptr_nonnull(p);
    return p;
}

static void make_problem(const dcase *c, problem *P) {
    rng_s = 0x1234567ull + (uint64_t)(c - cases) * 7919u;
    memset(P, 0, sizeof *P);
    P->B = c->B;
    P->T = c->T;
    P->H = c->H;
    P->dk = c->dk;
    P->dv = c->dv;
    P->scale = (float)(1.0 / sqrt((double)c->dk));
    size_t n = (size_t)c->B * c->T * c->H;
    P->q = fnew(n * c->dk);
    P->k = fnew(n * c->dk);
    P->v = fnew(n * c->dv);
    P->d_o = fnew(n * c->dv);
    if (c->beta_mode) P->beta = fnew(n);
    if (c->gate != GATE_NONE) P->g = fnew(n);
    for (size_t r = 0; r < n; r++) {
        float *k = P->k + r * c->dk;
        double nn = 0, target = c->beta_mode == 3 ? logu(1e-2, 100) : 1.0;
        for (int i = 0; i < c->dk; i++) {
            k[i] = (float)sym();
            nn += (double)k[i] * k[i];
        }
        double ks = target / sqrt(nn > 0 ? nn : 1);
        double kn2 = 0;
        for (int i = 0; i < c->dk; i++) {
            k[i] = (float)(k[i] * ks);
            if (c->bf16) k[i] = bf16_round(k[i]);
            kn2 += (double)k[i] * k[i];
        }
        for (int i = 0; i < c->dk; i++) {
            float x = (float)sym();
            P->q[r * c->dk + i] = c->bf16 ? bf16_round(x) : x;
        }
        for (int j = 0; j < c->dv; j++) {
            float x = (float)sym(), y = (float)sym();
            P->v[r * c->dv + j] = c->bf16 ? bf16_round(x) : x;
            P->d_o[r * c->dv + j] = c->bf16 ? bf16_round(y) : y;
        }
        if (c->beta_mode == 1) P->beta[r] = (float)(2 * urand());
        if (c->beta_mode == 2) P->beta[r] = 2.f;
        if (c->beta_mode == 3) P->beta[r] = (float)(2 * urand() / (kn2 > 0 ? kn2 : 1));
        if (P->g) P->g[r] = (float)-logu(c->la_lo, c->la_hi);
    }
    if (c->resets)
        for (int b = 0; b < c->B; b++)
            for (int h = 0; h < c->H; h++)
                for (const int *rs = c->resets; *rs >= 0; rs++)
                    if (*rs < c->T) P->g[((size_t)b * c->T + *rs) * c->H + h] = c->reset_value;
    size_t ns = (size_t)c->B * c->H * c->dk * c->dv;
    if (c->h0) {
        P->h0 = fnew(ns);
        for (size_t i = 0; i < ns; i++) P->h0[i] = (float)(0.5 * sym());
    }
    if (c->dht) {
        P->d_ht = fnew(ns);
        for (size_t i = 0; i < ns; i++) P->d_ht[i] = (float)sym();
    }
}

static void free_problem(problem *P) {
    free(P->q);
    free(P->k);
    free(P->v);
    free(P->beta);
    free(P->g);
    free(P->h0);
    free(P->d_o);
    free(P->d_ht);
}

/* ---- the float64 reference ---- */

typedef struct refout {
    double *o, *ht, *dq, *dk, *dv, *dbeta, *dg, *dh0;
    double *mag_beta, *mag_g; /* per-token Σ|terms| of d_β and d_g */
} refout;

/* the retention of a log gate as the fp32 recurrence sees it: 0 where expf(g) == 0 */
static double retention(float g) { return expf(g) == 0.f ? 0.0 : exp((double)g); }

/* One sequence (b, h): forward and reverse pass over S_t = a_t (I − β_t k_t k_tᵀ) S_{t−1} +
 * β_t k_t v_tᵀ, o_t = scale S_tᵀ q_t. */
static void ref_sequence(const problem *P, int b, int h, refout *R) {
    const int T = P->T, dk = P->dk, dv = P->dv, H = P->H;
    const size_t nsd = (size_t)dk * dv;
    const int CK = 64, nck = (T + CK - 1) / CK;
    double *ck = dnew((size_t)nck * nsd);      /* S_{c·64 − 1}: the state before token c·64 */
    double *seg = dnew((size_t)(CK + 1) * nsd); /* states of one segment, recomputed */
    double *S = dnew(nsd), *w = dnew(dv), *dS = dnew(nsd), *dP = dnew(nsd), *dw = dnew(dv);
    const size_t sbase = ((size_t)b * H + h) * nsd;
#define ROW(t) (((size_t)b * T + (t)) * H + h)
#define KK(t) (P->k + ROW(t) * dk)
#define QQ(t) (P->q + ROW(t) * dk)
#define VV(t) (P->v + ROW(t) * dv)
#define DO(t) (P->d_o + ROW(t) * dv)
#define BETA(t) (P->beta ? (double)P->beta[ROW(t)] : 1.0)
#define RET(t) (P->g ? retention(P->g[ROW(t)]) : 1.0)
    for (size_t i = 0; i < nsd; i++) S[i] = P->h0 ? P->h0[sbase + i] : 0.0;
    /* one step: S ← a (S − β k (Sᵀk)ᵀ) + β k vᵀ */
#define STEP(Sx, t)                                                                          \
    do {                                                                                     \
        const float *k_ = KK(t), *v_ = VV(t);                                                \
        double a_ = RET(t), b_ = BETA(t);                                                    \
        for (int j = 0; j < dv; j++) w[j] = 0;                                               \
        for (int i = 0; i < dk; i++)                                                         \
            for (int j = 0; j < dv; j++) w[j] += (double)k_[i] * (Sx)[(size_t)i * dv + j];   \
        for (int i = 0; i < dk; i++)                                                         \
            for (int j = 0; j < dv; j++) {                                                   \
                double *s_ = &(Sx)[(size_t)i * dv + j];                                      \
                *s_ = a_ * (*s_ - b_ * k_[i] * w[j]) + b_ * k_[i] * (double)v_[j];           \
            }                                                                                \
    } while (0)
    for (int t = 0; t < T; t++) {
        if (t % CK == 0) memcpy(ck + (size_t)(t / CK) * nsd, S, nsd * sizeof(double));
        STEP(S, t);
        const float *q = QQ(t);
        for (int j = 0; j < dv; j++) {
            double acc = 0;
            for (int i = 0; i < dk; i++) acc += (double)q[i] * S[(size_t)i * dv + j];
            R->o[ROW(t) * dv + j] = P->scale * acc;
        }
    }
    memcpy(R->ht + sbase, S, nsd * sizeof(double));
    for (size_t i = 0; i < nsd; i++) dS[i] = P->d_ht ? P->d_ht[sbase + i] : 0.0;
    for (int c = nck - 1; c >= 0; c--) {
        int t0 = c * CK, t1 = t0 + CK < T ? t0 + CK : T;
        memcpy(seg, ck + (size_t)c * nsd, nsd * sizeof(double));
        for (int t = t0; t < t1; t++) {
            memcpy(seg + (size_t)(t - t0 + 1) * nsd, seg + (size_t)(t - t0) * nsd,
                   nsd * sizeof(double));
            STEP(seg + (size_t)(t - t0 + 1) * nsd, t);
        }
        for (int t = t1 - 1; t >= t0; t--) {
            const double *Sp = seg + (size_t)(t - t0) * nsd, *St = Sp + nsd;
            const float *k = KK(t), *v = VV(t), *q = QQ(t), *dout = DO(t);
            double a = RET(t), be = BETA(t);
            /* o_t = scale S_tᵀ q_t: d_q_t = scale S_t d_o_t, dS_t += scale q_t d_o_tᵀ */
            for (int i = 0; i < dk; i++) {
                double acc = 0;
                for (int j = 0; j < dv; j++) acc += St[(size_t)i * dv + j] * dout[j];
                R->dq[ROW(t) * dk + i] = P->scale * acc;
                for (int j = 0; j < dv; j++)
                    dS[(size_t)i * dv + j] += P->scale * (double)q[i] * dout[j];
            }
            /* w = S_{t−1}ᵀ k, P = S_{t−1} − β k wᵀ, S_t = a P + β k vᵀ */
            for (int j = 0; j < dv; j++) {
                double acc = 0;
                for (int i = 0; i < dk; i++) acc += (double)k[i] * Sp[(size_t)i * dv + j];
                w[j] = acc;
            }
            double da = 0, mag_a = 0, db = 0, mag_b = 0;
            for (int i = 0; i < dk; i++)
                for (int j = 0; j < dv; j++) {
                    size_t ij = (size_t)i * dv + j;
                    double Pij = Sp[ij] - be * k[i] * w[j];
                    da += dS[ij] * Pij;
                    mag_a += fabs(dS[ij] * Pij);
                    dP[ij] = a * dS[ij];
                    double t1v = dS[ij] * k[i] * (double)v[j], t2v = dP[ij] * k[i] * w[j];
                    db += t1v - t2v;
                    mag_b += fabs(t1v) + fabs(t2v);
                }
            R->dg[ROW(t)] = a == 0 ? 0 : a * da;
            R->mag_g[ROW(t)] = a * mag_a;
            R->dbeta[ROW(t)] = db;
            R->mag_beta[ROW(t)] = mag_b;
            for (int j = 0; j < dv; j++) {
                double acc = 0, acc2 = 0;
                for (int i = 0; i < dk; i++) {
                    acc += (double)k[i] * dS[(size_t)i * dv + j];
                    acc2 += (double)k[i] * dP[(size_t)i * dv + j];
                }
                R->dv[ROW(t) * dv + j] = be * acc;
                dw[j] = -be * acc2;
            }
            /* d_k = β dS v − β dP w + S_{t−1} dw */
            for (int i = 0; i < dk; i++) {
                double acc = 0;
                for (int j = 0; j < dv; j++) {
                    size_t ij = (size_t)i * dv + j;
                    acc += be * dS[ij] * v[j] - be * dP[ij] * w[j] + Sp[ij] * dw[j];
                }
                R->dk[ROW(t) * dk + i] = acc;
            }
            /* dS_{t−1} = dP + k dwᵀ */
            for (int i = 0; i < dk; i++)
                for (int j = 0; j < dv; j++)
                    dS[(size_t)i * dv + j] = dP[(size_t)i * dv + j] + (double)k[i] * dw[j];
        }
    }
    memcpy(R->dh0 + sbase, dS, nsd * sizeof(double));
#undef ROW
#undef KK
#undef QQ
#undef VV
#undef DO
#undef BETA
#undef RET
#undef STEP
    free(ck);
    free(seg);
    free(S);
    free(w);
    free(dS);
    free(dP);
    free(dw);
}

static void ref_alloc(const problem *P, refout *R) {
    size_t n = (size_t)P->B * P->T * P->H, ns = (size_t)P->B * P->H * P->dk * P->dv;
    R->o = dnew(n * P->dv);
    R->dv = dnew(n * P->dv);
    R->dq = dnew(n * P->dk);
    R->dk = dnew(n * P->dk);
    R->dbeta = dnew(n);
    R->dg = dnew(n);
    R->mag_beta = dnew(n);
    R->mag_g = dnew(n);
    R->ht = dnew(ns);
    R->dh0 = dnew(ns);
}
static void ref_free(refout *R) {
    free(R->o);
    free(R->dv);
    free(R->dq);
    free(R->dk);
    free(R->dbeta);
    free(R->dg);
    free(R->mag_beta);
    free(R->mag_g);
    free(R->ht);
    free(R->dh0);
}
static void ref_run(const problem *P, refout *R) {
    ref_alloc(P, R);
    for (int b = 0; b < P->B; b++)
        for (int h = 0; h < P->H; h++) ref_sequence(P, b, h, R);
}

/* ---- comparisons ---- */

static double rel_rms(const float *got, const double *ref, size_t n, int round_ref) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double r = round_ref ? (double)bf16_round((float)ref[i]) : ref[i];
        double d = (double)got[i] - r;
        if (!isfinite(d)) return INFINITY;
        num += d * d;
        den += r * r;
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}
static double rms(const double *x, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += x[i] * x[i];
    return sqrt(s / (double)(n ? n : 1));
}
static int all_zero(const double *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (x[i] != 0) return 0;
    return 1;
}

/* ---- the device run ---- */

typedef struct devout {
    float *o, *ht, *dq, *dk, *dv, *dbeta, *dg, *dh0; /* host copies, widened to fp32 */
} devout;

static void *dup_dev(const float *h, size_t n, int bf16) {
    if (!h) return NULL;
    void *d = NULL;
    size_t bytes = n * (bf16 ? 2 : 4);
    ck_assert_int_eq(cudaMalloc(&d, bytes ? bytes : 4), cudaSuccess);
    if (bf16) {
        uint16_t *tmp = malloc(bytes ? bytes : 2);
        ck_assert_ptr_nonnull(tmp);
        for (size_t i = 0; i < n; i++) tmp[i] = bf16_bits(h[i]);
        ck_assert_int_eq(cudaMemcpy(d, tmp, bytes, cudaMemcpyHostToDevice), cudaSuccess);
        free(tmp);
    } else {
        ck_assert_int_eq(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice), cudaSuccess);
    }
    return d;
}
static void *dev_alloc(size_t bytes) {
    void *d = NULL;
    ck_assert_int_eq(cudaMalloc(&d, bytes ? bytes : 4), cudaSuccess);
    ck_assert_int_eq(cudaMemset(d, 0xff, bytes ? bytes : 4), cudaSuccess); /* NaN fill */
    return d;
}
static float *to_host(const void *d, size_t n, int bf16) {
    float *h = fnew(n);
    if (bf16) {
        uint16_t *tmp = malloc(n * 2 + 2);
        ck_assert_ptr_nonnull(tmp);
        ck_assert_int_eq(cudaMemcpy(tmp, d, n * 2, cudaMemcpyDeviceToHost), cudaSuccess);
        for (size_t i = 0; i < n; i++) {
            uint32_t u = (uint32_t)tmp[i] << 16;
            memcpy(&h[i], &u, 4);
        }
        free(tmp);
    } else {
        ck_assert_int_eq(cudaMemcpy(h, d, n * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    }
    return h;
}

/* 1: ask for the reference kernels (ttt_chunk_args.reference), the fast kernels' plain fp32
 * twin; the bf16 cases run both ways */
static int use_reference;

static void dev_run(const problem *P, int bf16, devout *D) {
    size_t n = (size_t)P->B * P->T * P->H, ns = (size_t)P->B * P->H * P->dk * P->dv;
    int es = bf16 ? 2 : 4;
    ttt_chunk_args a;
    memset(&a, 0, sizeof a);
    a.reference = use_reference;
    a.B = P->B;
    a.T = P->T;
    a.H = P->H;
    a.d_k = P->dk;
    a.d_v = P->dv;
    a.dtype = bf16 ? TTT_CHUNK_BF16 : TTT_CHUNK_F32;
    a.scale = P->scale;
    a.q = dup_dev(P->q, n * P->dk, bf16);
    a.k = dup_dev(P->k, n * P->dk, bf16);
    a.v = dup_dev(P->v, n * P->dv, bf16);
    a.beta = dup_dev(P->beta, n, 0);
    a.g = dup_dev(P->g, n, 0);
    a.h0 = dup_dev(P->h0, ns, 0);
    a.o = dev_alloc(n * P->dv * es);
    a.ht = dev_alloc(ns * 4);
    ttt_chunk_grad g;
    memset(&g, 0, sizeof g);
    g.d_o = dup_dev(P->d_o, n * P->dv, bf16);
    g.d_ht = dup_dev(P->d_ht, ns, 0);
    g.d_q = dev_alloc(n * P->dk * es);
    g.d_k = dev_alloc(n * P->dk * es);
    g.d_v = dev_alloc(n * P->dv * es);
    g.d_beta = P->beta ? dev_alloc(n * 4) : NULL;
    g.d_g = P->g ? dev_alloc(n * 4) : NULL;
    g.d_h0 = dev_alloc(ns * 4);
    size_t wf = ttt_cuda_delta_workspace(&a, 0), wb = ttt_cuda_delta_workspace(&a, 1);
    ck_assert(wf > 0 && wb >= wf);
    void *ws = dev_alloc(wb);
    ttt_error err = {0};
    ttt_status s = ttt_cuda_delta_forward(&a, ws, wf, NULL, &err);
    ck_assert_msg(s == TTT_OK, "forward: %s", err.msg);
    D->o = to_host(a.o, n * P->dv, bf16);
    D->ht = to_host(a.ht, ns, 0);
    /* the backward recomputes the forward and writes o and ht again (chunk_cuda.h): over NaN
     * bytes, it must give the forward's bits */
    ck_assert(cudaMemset(a.o, 0xff, n * P->dv * es) == cudaSuccess);
    ck_assert(cudaMemset(a.ht, 0xff, ns * 4) == cudaSuccess);
    s = ttt_cuda_delta_backward(&a, &g, ws, wb, NULL, &err);
    ck_assert_msg(s == TTT_OK, "backward: %s", err.msg);
    cudaError_t ce = cudaDeviceSynchronize();
    ck_assert_msg(ce == cudaSuccess, "kernels: %s", cudaGetErrorString(ce));
    float *o2 = to_host(a.o, n * P->dv, bf16), *ht2 = to_host(a.ht, ns, 0);
    ck_assert_msg(memcmp(o2, D->o, n * P->dv * sizeof(float)) == 0 &&
                      memcmp(ht2, D->ht, ns * sizeof(float)) == 0,
                  "the backward's o and ht differ from the forward's");
    free(o2);
    free(ht2);
    D->dq = to_host(g.d_q, n * P->dk, bf16);
    D->dk = to_host(g.d_k, n * P->dk, bf16);
    D->dv = to_host(g.d_v, n * P->dv, bf16);
    D->dbeta = g.d_beta ? to_host(g.d_beta, n, 0) : NULL;
    D->dg = g.d_g ? to_host(g.d_g, n, 0) : NULL;
    D->dh0 = to_host(g.d_h0, ns, 0);
    void *ptrs[] = {(void *)a.q, (void *)a.k, (void *)a.v, (void *)a.beta, (void *)a.g,
                    (void *)a.h0, a.o, a.ht, (void *)g.d_o, (void *)g.d_ht, g.d_q, g.d_k,
                    g.d_v, g.d_beta, g.d_g, g.d_h0, ws};
    for (size_t i = 0; i < sizeof ptrs / sizeof ptrs[0]; i++)
        if (ptrs[i]) cudaFree(ptrs[i]);
}
static void dev_free(devout *D) {
    free(D->o);
    free(D->ht);
    free(D->dq);
    free(D->dk);
    free(D->dv);
    free(D->dbeta);
    free(D->dg);
    free(D->dh0);
}

/* the worst relative RMS seen per quantity, fp32 and bf16 (printed at the end) */
static const char *qnames[8] = {"o", "ht", "d_q", "d_k", "d_v", "d_beta", "d_g", "d_h0"};
static double worst[2][8];

/* Compare D with R; returns a bit per quantity that failed (bit set) and fills errs. With
 * report = 1, each failure is asserted. Quantities not computed (no β, no g) are left out. */
static unsigned compare(const dcase *c, const problem *P, const refout *R, const devout *D,
                        int report) {
    size_t n = (size_t)P->B * P->T * P->H, ns = (size_t)P->B * P->H * P->dk * P->dv;
    const float *got[8] = {D->o, D->ht, D->dq, D->dk, D->dv, D->dbeta, D->dg, D->dh0};
    const double *ref[8] = {R->o, R->ht, R->dq, R->dk, R->dv, R->dbeta, R->dg, R->dh0};
    size_t cnt[8] = {n * P->dv, ns, n * P->dk, n * P->dk, n * P->dv, n, n, ns};
    int stored_bf16[8] = {1, 0, 1, 1, 1, 0, 0, 0};
    double kb = 1, kg = 1;
    if (P->beta && !all_zero(R->dbeta, n)) kb = fmax(1, rms(R->mag_beta, n) / rms(R->dbeta, n));
    if (P->g && !all_zero(R->dg, n)) kg = fmax(1, rms(R->mag_g, n) / rms(R->dg, n));
    double bound[8];
    if (!c->bf16) {
        double f32[8] = {1, 1, 2, 2, 2, 2 * kb, 2 * kg, 2};
        for (int i = 0; i < 8; i++) bound[i] = 2e-6 * f32[i];
    } else {
        for (int i = 0; i < 8; i++) bound[i] = i < 2 ? 1e-3 : 2e-3;
    }
    unsigned failed = 0;
    if (report) printf("%-32s", c->name);
    for (int i = 0; i < 8; i++) {
        if (!got[i]) continue;
        int rr = c->bf16 && stored_bf16[i];
        double e = rel_rms(got[i], ref[i], cnt[i], rr);
        int zero_ref = all_zero(ref[i], cnt[i]);
        int bad = zero_ref ? !(e == 0) : !(e <= bound[i]);
        if (bad) failed |= 1u << i;
        if (report) {
            if (e > worst[c->bf16][i] && !zero_ref) worst[c->bf16][i] = e;
            if (rr)
                printf(" %s %.2e (unrounded %.2e)", qnames[i], e,
                       rel_rms(got[i], ref[i], cnt[i], 0));
            else
                printf(" %s %.2e", qnames[i], e);
            if (i == 5 || i == 6) printf(" [bound %.1e]", bound[i]);
        }
        if (report)
            ck_assert_msg(!bad, "%s: %s relative RMS error %.3e > bound %.3e%s", c->name,
                          qnames[i], e, bound[i], zero_ref ? " (reference exactly 0)" : "");
    }
    if (report) printf("\n");
    fflush(stdout);
    return failed;
}

/* which quantities have a nonzero reference (a perturbation can only move those) */
static unsigned nonzero_mask(const problem *P, const refout *R, const devout *D) {
    size_t n = (size_t)P->B * P->T * P->H, ns = (size_t)P->B * P->H * P->dk * P->dv;
    const double *ref[8] = {R->o, R->ht, R->dq, R->dk, R->dv, R->dbeta, R->dg, R->dh0};
    const float *got[8] = {D->o, D->ht, D->dq, D->dk, D->dv, D->dbeta, D->dg, D->dh0};
    size_t cnt[8] = {n * P->dv, ns, n * P->dk, n * P->dk, n * P->dv, n, n, ns};
    unsigned m = 0;
    for (int i = 0; i < 8; i++)
        if (got[i] && !all_zero(ref[i], cnt[i])) m |= 1u << i;
    return m;
}

static void run_case(const dcase *c) {
    problem P;
    make_problem(c, &P);
    refout R;
    ref_run(&P, &R);
    devout D;
    dev_run(&P, c->bf16, &D);
    compare(c, &P, &R, &D, 1);
    /* the perturbed input: every comparison with a nonzero reference must reject it */
    unsigned need = nonzero_mask(&P, &R, &D);
    size_t n = (size_t)P.B * P.T * P.H;
    for (size_t r = 0; r < n; r++) {
        size_t t = (r / P.H) % P.T;
        if (t % 7 == 0 || t == (size_t)P.T - 1) /* the last token: ht after a late reset */
            for (int i = 0; i < P.dk; i++) {
                float x = P.k[r * P.dk + i] * 0.95f;
                P.k[r * P.dk + i] = c->bf16 ? bf16_round(x) : x;
            }
    }
    devout D2;
    dev_run(&P, c->bf16, &D2);
    unsigned rej = compare(c, &P, &R, &D2, 0);
    for (int i = 0; i < 8; i++)
        ck_assert_msg(!(need & (1u << i)) || (rej & (1u << i)),
                      "%s: the comparison of %s accepted the perturbed input", c->name,
                      qnames[i]);
    dev_free(&D);
    dev_free(&D2);
    ref_free(&R);
    free_problem(&P);
}

START_TEST(cuda_delta_matches_recurrence) {
    use_reference = 0;
    run_case(&cases[_i]);
}
END_TEST

/* The bf16 cases again through the reference kernels (fp32 inputs always take them), held to
 * the same bounds: the twin the tensor-core kernels are checked beside stays exact too. */
START_TEST(cuda_delta_reference_twin) {
    if (!cases[_i].bf16) return;
    use_reference = 1;
    printf("[reference] ");
    run_case(&cases[_i]);
    use_reference = 0;
}
END_TEST

/* The reference's reverse pass against float64 central differences of L on a tiny case with a
 * hard reset (h = 1e-6: truncation error O(h²) ~ 1e-12, rounding O(ε/h) ~ 1e-10 relative; bound
 * 1e-7). The same differences must disagree with the reverse pass at a perturbed input. */
static double loss_of(const problem *P) {
    refout R;
    ref_run(P, &R);
    size_t n = (size_t)P->B * P->T * P->H, ns = (size_t)P->B * P->H * P->dk * P->dv;
    double L = 0;
    for (size_t i = 0; i < n * P->dv; i++) L += R.o[i] * P->d_o[i];
    for (size_t i = 0; i < ns; i++) L += R.ht[i] * P->d_ht[i];
    ref_free(&R);
    return L;
}

START_TEST(reference_gradient_matches_finite_differences) {
    static const int rs[] = {3, -1};
    dcase c = {"fd", 1, 6, 1, 3, 2, GATE_RESET, 1e-2, 1, 1, 1, 1, 0, rs, -INFINITY};
    problem P;
    memset(&P, 0, sizeof P);
    rng_s = 99;
    P.B = 1;
    P.T = c.T;
    P.H = 1;
    P.dk = c.dk;
    P.dv = c.dv;
    P.scale = 0.75f;
    P.q = fnew(c.T * c.dk);
    P.k = fnew(c.T * c.dk);
    P.v = fnew(c.T * c.dv);
    P.d_o = fnew(c.T * c.dv);
    P.beta = fnew(c.T);
    P.g = fnew(c.T);
    P.h0 = fnew(c.dk * c.dv);
    P.d_ht = fnew(c.dk * c.dv);
    for (int i = 0; i < c.T * c.dk; i++) {
        P.q[i] = (float)sym();
        P.k[i] = (float)(0.5 * sym());
    }
    for (int i = 0; i < c.T * c.dv; i++) {
        P.v[i] = (float)sym();
        P.d_o[i] = (float)sym();
    }
    for (int t = 0; t < c.T; t++) {
        P.beta[t] = (float)(0.2 + urand());
        P.g[t] = (float)(-0.1 - urand());
    }
    P.g[3] = -INFINITY;
    for (int i = 0; i < c.dk * c.dv; i++) {
        P.h0[i] = (float)sym();
        P.d_ht[i] = (float)sym();
    }
    refout R;
    ref_run(&P, &R);
    const double h = 1.0 / (1 << 20);
    for (int pass = 0; pass < 2; pass++) {
        /* pass 1: the reverse pass at a perturbed input must disagree */
        refout Rp;
        if (pass == 1) {
            float k4 = P.k[4];
            P.k[4] *= 1.01f;
            ref_run(&P, &Rp);
            P.k[4] = k4;
        }
        const refout *G = pass ? &Rp : &R;
        struct { float *x; const double *gr; int n; const char *name; } in[] = {
            {P.q, G->dq, c.T * c.dk, "q"},   {P.k, G->dk, c.T * c.dk, "k"},
            {P.v, G->dv, c.T * c.dv, "v"},   {P.beta, G->dbeta, c.T, "beta"},
            {P.g, G->dg, c.T, "g"},          {P.h0, G->dh0, c.dk * c.dv, "h0"},
        };
        for (size_t m = 0; m < sizeof in / sizeof in[0]; m++) {
            double num = 0, den = 0;
            for (int i = 0; i < in[m].n; i++) {
                float x0 = in[m].x[i];
                double fd = 0;
                if (isfinite(x0)) { /* the steps actually taken in float32 */
                    float xp = x0 + (float)h, xm = x0 - (float)h;
                    in[m].x[i] = xp;
                    double lp = loss_of(&P);
                    in[m].x[i] = xm;
                    double lm = loss_of(&P);
                    in[m].x[i] = x0;
                    fd = (lp - lm) / ((double)xp - (double)xm);
                }
                double d = in[m].gr[i] - fd;
                num += d * d;
                den += fd * fd;
            }
            double e = sqrt(num / (den > 0 ? den : 1));
            if (pass == 0)
                ck_assert_msg(e <= 1e-7, "reference d%s vs finite differences: %.3e",
                              in[m].name, e);
            else
                ck_assert_msg(e > 1e-7, "finite differences accepted the perturbed d%s (%.3e)",
                              in[m].name, e);
        }
        if (pass == 1) ref_free(&Rp);
    }
    ref_free(&R);
    free_problem(&P);
}
END_TEST

START_TEST(bad_arguments_are_refused) {
    float *dbuf = NULL;
    ck_assert_int_eq(cudaMalloc((void **)&dbuf, 1 << 20), cudaSuccess);
    ttt_chunk_args a;
    memset(&a, 0, sizeof a);
    a.B = 1;
    a.T = 10;
    a.H = 1;
    a.d_k = 8;
    a.d_v = 8;
    a.dtype = TTT_CHUNK_F32;
    a.scale = 1;
    a.q = a.k = a.v = dbuf;
    a.o = (char *)dbuf + (1 << 18);
    size_t ws = ttt_cuda_delta_workspace(&a, 1);
    ck_assert(ws > 0 && ws <= (1 << 19));
    void *w = (char *)dbuf + (1 << 19);
    ttt_error err;
    ttt_chunk_grad g;
    memset(&g, 0, sizeof g);
    g.d_o = dbuf;
#define REFUSED(expr)                                                                        \
    do {                                                                                     \
        memset(&err, 0, sizeof err);                                                         \
        ttt_status s_ = (expr);                                                              \
        ck_assert_msg(s_ == TTT_ERR_ARG && err.msg[0], "not refused: %s", #expr);            \
    } while (0)
    ttt_chunk_args b = a;
    b.d_k = 257;
    REFUSED(ttt_cuda_delta_forward(&b, w, ws, NULL, &err));
    ck_assert_uint_eq(ttt_cuda_delta_workspace(&b, 0), 0);
    b = a;
    b.d_v = 0;
    REFUSED(ttt_cuda_delta_forward(&b, w, ws, NULL, &err));
    b = a;
    b.T = 0;
    REFUSED(ttt_cuda_delta_forward(&b, w, ws, NULL, &err));
    b = a;
    b.B = 0;
    REFUSED(ttt_cuda_delta_backward(&b, &g, w, ws, NULL, &err));
    b = a;
    b.B = b.T = b.H = 2000000000;
    REFUSED(ttt_cuda_delta_forward(&b, w, ws, NULL, &err));
    ck_assert_uint_eq(ttt_cuda_delta_workspace(&b, 1), 0);
    b = a;
    b.q = NULL;
    REFUSED(ttt_cuda_delta_forward(&b, w, ws, NULL, &err));
    b = a;
    b.o = NULL;
    REFUSED(ttt_cuda_delta_forward(&b, w, ws, NULL, &err));
    b = a;
    b.gate_per_key = 1;
    REFUSED(ttt_cuda_delta_forward(&b, w, ws, NULL, &err));
    b = a;
    b.dtype = (ttt_chunk_dtype)7;
    REFUSED(ttt_cuda_delta_forward(&b, w, ws, NULL, &err));
    REFUSED(ttt_cuda_delta_forward(NULL, w, ws, NULL, &err));
    REFUSED(ttt_cuda_delta_forward(&a, NULL, ws, NULL, &err));
    REFUSED(ttt_cuda_delta_forward(&a, w, 16, NULL, &err));
    REFUSED(ttt_cuda_delta_forward(&a, (char *)w + 4, ws, NULL, &err));
    REFUSED(ttt_cuda_delta_backward(&a, NULL, w, ws, NULL, &err));
    ttt_chunk_grad g2 = g;
    g2.d_o = NULL;
    REFUSED(ttt_cuda_delta_backward(&a, &g2, w, ws, NULL, &err));
    g2 = g;
    g2.d_beta = dbuf; /* without a.beta */
    REFUSED(ttt_cuda_delta_backward(&a, &g2, w, ws, NULL, &err));
    g2 = g;
    g2.d_g = dbuf; /* without a.g */
    REFUSED(ttt_cuda_delta_backward(&a, &g2, w, ws, NULL, &err));
    REFUSED(ttt_cuda_delta_backward(&a, &g, w, ttt_cuda_delta_workspace(&a, 0) - 1, NULL, &err));
    /* the valid call succeeds (the refusals above are not a blanket refusal) */
    memset(&err, 0, sizeof err);
    ck_assert_int_eq(ttt_cuda_delta_forward(&a, w, ws, NULL, &err), TTT_OK);
    ck_assert_int_eq(cudaDeviceSynchronize(), cudaSuccess);
#undef REFUSED
    cudaFree(dbuf);
}
END_TEST

static void print_worst(void) {
    for (int p = 0; p < 2; p++) {
        printf("worst relative RMS, %s:", p ? "bf16" : "fp32");
        for (int i = 0; i < 8; i++) printf(" %s %.2e", qnames[i], worst[p][i]);
        printf("\n");
    }
}

int main(void) {
    int ndev = 0;
    cudaError_t e = cudaGetDeviceCount(&ndev);
    if (e != cudaSuccess || ndev == 0) {
        printf("skipped: no CUDA device: %s\n",
               e != cudaSuccess ? cudaGetErrorString(e) : "no device present");
        return 77;
    }
    Suite *s = suite_create("cuda_delta");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 1200);
    tcase_add_test(tc, reference_gradient_matches_finite_differences);
    tcase_add_test(tc, bad_arguments_are_refused);
    tcase_add_loop_test(tc, cuda_delta_matches_recurrence, 0, N_CASES);
    tcase_add_loop_test(tc, cuda_delta_reference_twin, 0, N_CASES);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    print_worst();
    return failed == 0 ? 0 : 1;
}

#else

int main(void) {
    printf("skipped: built without CUDA (TTT_HAVE_CUDA)\n");
    return 77;
}

#endif

/* Gradients of the closed computation forms (outer-loop training, docs/math.md §5; layers/forms/composed.h,
 * layers/forms/fused_grad.h, layers/forms/ttt_linear/dual_grad.h) and of the recorded RoPE op.
 *
 * What ties what:
 *   (i)   composed forward = the fast kernels of kernels.h / ttt_dual.h (same math, float32);
 *   (ii)  composed AND fused gradients = central finite differences of float64 recurrences
 *         written here from docs/math.md (§4 rows, §1 mini-batch rule, titans/chunked.c's momentum rule), not
 *         from the forms: the definition, differentiated numerically;
 *   (iii) fused gradients = composed gradients at a training-like size (T = 100, C = 16, d = 16;
 *         the dual form also with b = 7, d = 12 and no learning rates);
 *   (iv)  ttt_layer_forward_diff (composed and fused) = the generic driver's gradients through the
 *         tape (the definition of the layer, docs/math.md §1, with q, k, v, η, log α and the initial
 *         state as parameters), for every (family, form) the closed forms cover;
 *   (v)   RoPE: the op's gradient by finite differences, and positions that continue from pos0.
 * A loss L = Σ R ⊙ (outputs and final state) with fixed random R turns each path into a scalar.
 *
 * Tolerances (|got − want| ≤ atol + rtol·max|want|, want the reference; "measured" = the largest
 * max-abs error / max|want| over all cases and inputs when this was written):
 *   (ii) and (v) hold a float32 tape gradient against float64 central differences, each side
 *     bounded on its own (fd_tolerance below; docs/hardening.md "Portable tolerances"):
 *     - the differences: D(h) with h = 1e-6·max(1, |x|) carries the truncation c·h², estimated
 *       by halving the step (D(h) − D(h/2) = ¾c·h², so c·h² = 4/3·|D(h) − D(h/2)|, which also
 *       carries the rounding of both quotients), plus the rounding of the two float64 losses,
 *       each within 6ε₆₄·√(n·T)·Σ|R ⊙ outputs| (ε₆₄ = 2^-53; n as below), divided by 2h. The
 *       largest over the elements is the comparison's absolute term (1e-10…1e-8 of the
 *       gradients: the float64 side is exact far below the float32 one);
 *     - the float32 gradient: the backward walk of the forms below, 6ε·√(2·n·T) of max|want|,
 *       times the conditioning the walk does not count:
 *       · the cumulative log gates. The forms sum G = cumsum(max(log α, −104)) within a chunk in
 *         double and keep it as float32, so every factor exp(G_i − G_j) carries a relative
 *         error up to ε·(|G_i| + |G_j|) ≤ 2ε·G_max, G_max the largest |G| of a chunk; a
 *         gradient entry sums such factors through the forward and the backward's dG, so
 *         2·2ε·G_max is added. Ordinary gates (G_max ≤ 5.5) make it ~1e-6; hard resets make
 *         G_max 104 per reset in a chunk (5 resets in the parallel cases: 520, 1.2e-4);
 *       · for the TTT-Linear dual form, the layer norm: a rounding of z's terms, ε·Σ|terms|,
 *         moves LN(z) by r = (var + eps)^(-1/2) times that, so the walk is multiplied by
 *         κ = max over the norms of r·max_j(|b_j| + Σ_l |x_l W_lj|) (from the float64 run; 7
 *         to 36 in these draws, where the d = 5, b = 3 draw reaches gradients of 170).
 *     Control: the differences of the same call with the third key 1 % larger reject the tape's
 *     gradient w.r.t. q, every case and path (a bound loose enough to let a changed input pass
 *     fails it); and test_harness_detects_wrong_gradient rejects one element off by 1e-3.
 *   (i), (iii), (iv) and the fused forward compare two float32 paths: each is bounded against
 *     the exact result and the sum of the two bounds is accepted (walk_rtol below; docs/hardening.md
 *     "Portable tolerances"). A path rounds every state entry through n = 4d + T + 10 operations
 *     per token, d = max(d_k, d_v) (a d-term product, the block's or the norm's sums over at most
 *     T terms, a few element-wise; the count of tests/test_layer.c and tests/test_dual.c), and a
 *     backward repeats each of them transposed: m·n roundings per entry per token (m = 1 forward,
 *     2 gradients), independent from token to token and carried by non-expanding steps
 *     (β‖k‖² ≤ 2 for unit-scale keys, retentions ≤ 1), a walk of deviation ε·√(m·n·T); c = 6
 *     covers the largest of the entries compared. The scale is max|want| of the compared tensor.
 *     At T = 100, d = 16 that is 6.7e-5 a path for the gradients, 4.7e-5 for the forward (was
 *     1e-5 and 2e-5, fixed). Each comparison keeps a control it must reject: the third key 1 %
 *     larger on one of the two paths.
 * test_harness_detects_wrong_gradient checks that a gradient off by a relative 1e-3 in one
 * element fails the FD comparison, so the tolerances are tight enough to catch real errors. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "composed.h"
#include "dual_grad.h"
#include "fused_grad.h"
#include "testutil.h"
#include "internal.h"

/* The sum of two float32 paths' bounds, relative to max|want| (the top of the file): 2·6ε·√(m·n·T)
 * with n = 4·max(d_k, d_v) + T + 10, m = 2 for gradients (forward and backward), 1 for outputs. */
static double walk_rtol(int T, int dk, int dv, int backward) {
    const double eps = 0x1p-24, n = 4.0 * (dk > dv ? dk : dv) + T + 10;
    return 2 * 6 * eps * sqrt((backward ? 2 : 1) * n * T);
}

/* ------------------------------------------------------------------------------------------ */
/* fixture */

static tu_tape_fixture g_fx;
static ttt_ctx *ctx = &g_fx.ctx;

static void setup(void) { tu_tape_fx_init(&g_fx); }
static void teardown(void) { tu_tape_fx_free(&g_fx); }
static void *zalloc(size_t bytes) { return tu_zalloc(ctx, bytes); }

/* ------------------------------------------------------------------------------------------ */
/* cases: a family, its gates and sizes */

typedef enum { FAM_LA, FAM_DELTA, FAM_DUAL, FAM_TITANS } fam_t;
enum { GATE_NONE, GATE_SCALAR, GATE_VECTOR };
/* the inputs of every form, in this order; X is M0 (Titans) or b0 (dual) */
enum { IN_Q, IN_K, IN_V, IN_B, IN_LA, IN_S0, IN_X, N_IN };
static const char *const in_names[N_IN] = {"q", "k", "v", "beta", "log_alpha", "S0", "M0/b0"};

typedef struct gcase {
    const char *name;
    fam_t fam;
    int gate;
    int T, d_k, d_v, C; /* C = chunk (mini_batch for the dual form and Titans) */
    int no_beta;        /* beta = NULL (= 1) */
    float mu;           /* Titans' momentum */
} gcase;

/* A drawn problem: float inputs and their exact float64 values. */
typedef struct problem {
    const gcase *c;
    size_t n[N_IN];   /* element counts (0 = absent) */
    float *f[N_IN];   /* float inputs */
    double *x[N_IN];  /* the same values in double */
    size_t n_out[3];  /* O, S, X */
    float *R[3];      /* loss weights */
} problem;


static void draw(problem *p, const gcase *c, uint64_t seed) {
    ttt_rng rng;
    ttt_rng_seed(&rng, seed);
    memset(p, 0, sizeof *p);
    p->c = c;
    const int T = c->T, dk = c->d_k, dv = c->d_v;
    const int gd = c->gate == GATE_VECTOR ? dk : 1;
    p->n[IN_Q] = p->n[IN_K] = (size_t)T * dk;
    p->n[IN_V] = (size_t)T * dv;
    p->n[IN_B] = c->no_beta ? 0 : (size_t)T;
    p->n[IN_LA] = c->gate == GATE_NONE ? 0 : (size_t)T * gd;
    p->n[IN_S0] = (size_t)dk * dv;
    p->n[IN_X] = c->fam == FAM_TITANS ? (size_t)dk * dv : c->fam == FAM_DUAL ? (size_t)dv : 0;
    for (int i = 0; i < N_IN; i++) {
        if (!p->n[i]) continue;
        p->f[i] = zalloc(p->n[i] * sizeof(float));
        p->x[i] = zalloc(p->n[i] * sizeof(double));
        for (size_t e = 0; e < p->n[i]; e++) {
            const double u = ttt_rng_uniform(&rng), z = ttt_rng_normal(&rng);
            double val;
            switch (i) {
            case IN_B: /* β = θη: LA/delta (0.1, 0.9), dual lr (0.2, 1), Titans (0.05, 0.3) */
                val = c->fam == FAM_TITANS ? 0.05 + 0.25 * u
                      : c->fam == FAM_DUAL ? 0.2 + 0.8 * u
                                           : 0.1 + 0.8 * u;
                break;
            case IN_LA: val = -0.02 - 0.48 * u; break; /* retentions 0.6 … 0.98 */
            case IN_S0: val = (c->fam == FAM_DUAL ? 0.4 : 0.3) * z; break;
            case IN_X: val = 0.1 * z; break;
            case IN_Q: val = 0.7 * z; break;
            default: val = z; break;
            }
            p->f[i][e] = (float)val;
        }
    }
    /* keys of the delta rule and Titans: unit rows (the stable regime, docs/math.md §6) */
    if (c->fam == FAM_DELTA || c->fam == FAM_TITANS)
        for (int t = 0; t < T; t++) {
            float *kt = p->f[IN_K] + (size_t)t * dk;
            double s = 0.0;
            for (int j = 0; j < dk; j++) s += (double)kt[j] * kt[j];
            for (int j = 0; j < dk; j++) kt[j] = (float)(kt[j] / sqrt(s));
        }
    for (int i = 0; i < N_IN; i++)
        for (size_t e = 0; e < p->n[i]; e++) p->x[i][e] = p->f[i][e];
    p->n_out[0] = (size_t)T * dv;
    p->n_out[1] = (size_t)dk * dv;
    p->n_out[2] = p->n[IN_X];
    for (int o = 0; o < 3; o++) {
        p->R[o] = zalloc((p->n_out[o] ? p->n_out[o] : 1) * sizeof(float));
        for (size_t e = 0; e < p->n_out[o]; e++) p->R[o][e] = (float)ttt_rng_normal(&rng);
    }
}

/* ------------------------------------------------------------------------------------------ */
/* float64 references: the recurrences, token by token */

/* Gated linear attention (docs/math.md §4 rows linear_attention … gla):
 *   S_t = Diag(α_t) S_{t−1} + β_t k_tᵀ v_t,  o_t = q_t S_t. */
static void ref_la(const gcase *c, double *const *x, double *O, double *S, double *X) {
    const int T = c->T, dk = c->d_k, dv = c->d_v;
    memcpy(S, x[IN_S0], sizeof(double) * (size_t)dk * dv);
    for (int t = 0; t < T; t++) {
        const double b = x[IN_B] ? x[IN_B][t] : 1.0;
        for (int i = 0; i < dk; i++) {
            const double a = c->gate == GATE_NONE     ? 1.0
                             : c->gate == GATE_SCALAR ? exp(x[IN_LA][t])
                                                      : exp(x[IN_LA][(size_t)t * dk + i]);
            for (int j = 0; j < dv; j++)
                S[i * dv + j] = a * S[i * dv + j] +
                                b * x[IN_K][(size_t)t * dk + i] * x[IN_V][(size_t)t * dv + j];
        }
        for (int j = 0; j < dv; j++) {
            double s = 0.0;
            for (int i = 0; i < dk; i++) s += x[IN_Q][(size_t)t * dk + i] * S[i * dv + j];
            O[(size_t)t * dv + j] = s;
        }
    }
    (void)X;
}

/* Gated delta rule (docs/math.md §4 rows deltanet, gated_deltanet):
 *   S_t = α_t (I − β_t k_tᵀ k_t) S_{t−1} + β_t k_tᵀ v_t,  o_t = q_t S_t. */
static void ref_delta(const gcase *c, double *const *x, double *O, double *S, double *X) {
    const int T = c->T, dk = c->d_k, dv = c->d_v;
    double u[64];
    memcpy(S, x[IN_S0], sizeof(double) * (size_t)dk * dv);
    for (int t = 0; t < T; t++) {
        const double b = x[IN_B] ? x[IN_B][t] : 1.0;
        const double a = c->gate == GATE_NONE ? 1.0 : exp(x[IN_LA][t]);
        const double *kt = x[IN_K] + (size_t)t * dk, *vt = x[IN_V] + (size_t)t * dv;
        for (int j = 0; j < dv; j++) { /* u = k_t S_{t−1} */
            u[j] = 0.0;
            for (int i = 0; i < dk; i++) u[j] += kt[i] * S[i * dv + j];
        }
        for (int i = 0; i < dk; i++)
            for (int j = 0; j < dv; j++)
                S[i * dv + j] = a * (S[i * dv + j] - b * kt[i] * u[j]) + b * kt[i] * vt[j];
        for (int j = 0; j < dv; j++) {
            double s = 0.0;
            for (int i = 0; i < dk; i++) s += x[IN_Q][(size_t)t * dk + i] * S[i * dv + j];
            O[(size_t)t * dv + j] = s;
        }
    }
    (void)X;
}

/* Titans' momentum with gradients at the chunk start (docs/math.md §3 "momentum"; the generic driver
 * with steps: per_token, mini_batch C), β_t = θ η_t:
 *   M_t = μ M_{t−1} − β_t k_tᵀ(k_t S_c − v_t),  S_t = α_t S_{t−1} + M_t,  o_t = q_t S_t. */
static void ref_titans(const gcase *c, double *const *x, double *O, double *S, double *M) {
    const int T = c->T, dk = c->d_k, dv = c->d_v, C = c->C;
    double Sc[64 * 64], e[64];
    memcpy(S, x[IN_S0], sizeof(double) * (size_t)dk * dv);
    memcpy(M, x[IN_X], sizeof(double) * (size_t)dk * dv);
    for (int t = 0; t < T; t++) {
        if (t % C == 0) memcpy(Sc, S, sizeof(double) * (size_t)dk * dv);
        const double b = x[IN_B] ? x[IN_B][t] : 1.0;
        const double a = c->gate == GATE_NONE ? 1.0 : exp(x[IN_LA][t]);
        const double *kt = x[IN_K] + (size_t)t * dk, *vt = x[IN_V] + (size_t)t * dv;
        for (int j = 0; j < dv; j++) {
            e[j] = -vt[j];
            for (int i = 0; i < dk; i++) e[j] += kt[i] * Sc[i * dv + j];
        }
        for (int i = 0; i < dk * dv; i++) {
            M[i] = (double)c->mu * M[i] - b * kt[i / dv] * e[i % dv];
            S[i] = a * S[i] + M[i];
        }
        for (int j = 0; j < dv; j++) {
            double s = 0.0;
            for (int i = 0; i < dk; i++) s += x[IN_Q][(size_t)t * dk + i] * S[i * dv + j];
            O[(size_t)t * dv + j] = s;
        }
    }
}

/* Layer norm without affine (biased variance), eps as the ttt_linear model: y; returns
 * r = (var + eps)^(-1/2). */
static double ref_ln(double *y, const double *z, int d) {
    double m = 0.0, var = 0.0;
    for (int j = 0; j < d; j++) m += z[j];
    m /= d;
    for (int j = 0; j < d; j++) var += (z[j] - m) * (z[j] - m);
    const double r = 1.0 / sqrt(var / d + (double)TTT_LINEAR_DUAL_LN_EPS);
    for (int j = 0; j < d; j++) y[j] = (z[j] - m) * r;
    return r;
}

/* TTT-Linear, primal mini-batch GD (docs/math.md §1 mini-batch rule, §2 TTT reconstruction, §5.4
 * position factors): in a block from (W_0, b_0), g_j = ∂ℓ_j/∂z at (W_0, b_0) with
 * ℓ = ½‖LN(k W_0 + b_0) − (v − k)‖², token i reads with
 * W_i = W_0 − (1/(i+1)) Σ_{j ≤ i} lr_j k_jᵀ g_j,
 * b_i likewise, o_i = q_i + LN(q_i W_i + b_i); the block ends with W_{n−1}, b_{n−1}. */
/* κ of the last ref_dual run: the largest r·max_j(|b_j| + Σ_l |x_l W_lj|) over its layer norms,
 * the factor by which they amplify a relative rounding of their input's terms (fd_tolerance). */
static double ref_dual_kappa;

/* r·max_j(|b_j| + Σ_l |x_l W_lj|) for z = x W + b normalized with r = (var + eps)^(-1/2). */
static double ln_kappa(const double *x, const double *W, const double *b, double r, int d) {
    double m = 0.0;
    for (int j = 0; j < d; j++) {
        double a = fabs(b[j]);
        for (int l = 0; l < d; l++) a += fabs(x[l] * W[l * d + j]);
        m = fmax(m, a);
    }
    return r * m;
}

static void ref_dual(const gcase *c, double *const *x, double *O, double *W, double *bias) {
    const int T = c->T, d = c->d_k, B = c->C;
    ref_dual_kappa = 0.0;
    double W0[64 * 64], b0[64], Gs[64 * 64], z[64], y[64], g[64 * 64], gb[64];
    memcpy(W, x[IN_S0], sizeof(double) * (size_t)d * d);
    memcpy(bias, x[IN_X], sizeof(double) * (size_t)d);
    for (int t0 = 0; t0 < T; t0 += B) {
        const int n = t0 + B <= T ? B : T - t0;
        memcpy(W0, W, sizeof(double) * (size_t)d * d);
        memcpy(b0, bias, sizeof(double) * (size_t)d);
        memset(Gs, 0, sizeof Gs);
        memset(gb, 0, sizeof gb);
        for (int i = 0; i < n; i++) {
            const int t = t0 + i;
            const double *kt = x[IN_K] + (size_t)t * d, *vt = x[IN_V] + (size_t)t * d;
            const double *qt = x[IN_Q] + (size_t)t * d;
            const double lr = x[IN_B] ? x[IN_B][t] : 1.0;
            /* g = ∂ℓ/∂z at (W_0, b_0): z = k W_0 + b_0, dy = LN(z) − (v − k), through LN */
            for (int j = 0; j < d; j++) {
                z[j] = b0[j];
                for (int l = 0; l < d; l++) z[j] += kt[l] * W0[l * d + j];
            }
            ref_ln(y, z, d);
            double m = 0.0, var = 0.0, sdy = 0.0, sdyy = 0.0, dy[64];
            for (int j = 0; j < d; j++) m += z[j];
            m /= d;
            for (int j = 0; j < d; j++) var += (z[j] - m) * (z[j] - m);
            const double r = 1.0 / sqrt(var / d + (double)TTT_LINEAR_DUAL_LN_EPS);
            ref_dual_kappa = fmax(ref_dual_kappa, ln_kappa(kt, W0, b0, r, d));
            for (int j = 0; j < d; j++) {
                dy[j] = y[j] - (vt[j] - kt[j]);
                sdy += dy[j];
                sdyy += dy[j] * y[j];
            }
            for (int j = 0; j < d; j++) g[j] = r * (dy[j] - sdy / d - y[j] * sdyy / d);
            /* accumulate Σ_{j ≤ i} lr_j k_jᵀ g_j and Σ lr_j g_j; weights of token i */
            for (int l = 0; l < d; l++)
                for (int j = 0; j < d; j++) Gs[l * d + j] += lr * kt[l] * g[j];
            for (int j = 0; j < d; j++) gb[j] += lr * g[j];
            const double tau = 1.0 / (i + 1);
            for (int l = 0; l < d * d; l++) W[l] = W0[l] - tau * Gs[l];
            for (int j = 0; j < d; j++) bias[j] = b0[j] - tau * gb[j];
            for (int j = 0; j < d; j++) {
                z[j] = bias[j];
                for (int l = 0; l < d; l++) z[j] += qt[l] * W[l * d + j];
            }
            ref_dual_kappa = fmax(ref_dual_kappa, ln_kappa(qt, W, bias, ref_ln(y, z, d), d));
            for (int j = 0; j < d; j++) O[(size_t)t * d + j] = qt[j] + y[j];
        }
    }
}

static void ref_run(const gcase *c, double *const *x, double *O, double *S, double *X) {
    switch (c->fam) {
    case FAM_LA: ref_la(c, x, O, S, X); break;
    case FAM_DELTA: ref_delta(c, x, O, S, X); break;
    case FAM_TITANS: ref_titans(c, x, O, S, X); break;
    case FAM_DUAL: ref_dual(c, x, O, S, X); break;
    }
}

static double ref_loss(const problem *p, double *const *x, double **scratch) {
    ref_run(p->c, x, scratch[0], scratch[1], scratch[2]);
    double L = 0.0;
    for (int o = 0; o < 3; o++)
        for (size_t e = 0; e < p->n_out[o]; e++) L += (double)p->R[o][e] * scratch[o][e];
    return L;
}

/* Σ|R ⊙ outputs| of the float64 run at x: the scale of the float64 loss's rounding. */
static double ref_loss_abs(const problem *p, double *const *x, double **scratch) {
    ref_run(p->c, x, scratch[0], scratch[1], scratch[2]);
    double a = 0.0;
    for (int o = 0; o < 3; o++)
        for (size_t e = 0; e < p->n_out[o]; e++) a += fabs((double)p->R[o][e] * scratch[o][e]);
    return a;
}

/* Central differences D(h) of the float64 loss w.r.t. every element of input i. *err (may be
 * NULL) gets their largest error estimate (the top of the file): 4/3·|D(h) − D(h/2)| for the
 * truncation, plus 2·6ε₆₄·√(n·T)·Σ|R ⊙ outputs| / (2h) for the two losses' rounding. */
static double *fd_grad_err(const problem *p, int i, double *err) {
    const gcase *c = p->c;
    double *g = zalloc(p->n[i] * sizeof(double));
    double *scratch[3];
    for (int o = 0; o < 3; o++) scratch[o] = zalloc((p->n_out[o] + 1) * sizeof(double));
    double *x[N_IN];
    for (int j = 0; j < N_IN; j++) x[j] = p->x[j];
    const double n = 4.0 * (c->d_k > c->d_v ? c->d_k : c->d_v) + c->T + 10;
    const double lround = 6 * 0x1p-53 * sqrt(n * c->T) * ref_loss_abs(p, x, scratch);
    double worst = 0.0;
    for (size_t e = 0; e < p->n[i]; e++) {
        const double x0 = x[i][e], h = 1e-6 * fmax(1.0, fabs(x0));
        if (!isfinite(x0)) { /* a −inf gate: the derivative's limit, α·(…) → 0 (docs/math.md §0
                              * "Hard resets"); the finite resets are differenced */
            g[e] = 0.0;
            continue;
        }
        double D[2];
        for (int k = 0; k < 2; k++) {
            const double hk = k ? h / 2 : h;
            x[i][e] = x0 + hk;
            const double lp = ref_loss(p, x, scratch);
            x[i][e] = x0 - hk;
            const double lm = ref_loss(p, x, scratch);
            D[k] = (lp - lm) / (2.0 * hk);
        }
        x[i][e] = x0;
        g[e] = D[0];
        worst = fmax(worst, 4.0 / 3.0 * fabs(D[0] - D[1]) + 2 * lround / (2 * h));
    }
    if (err) *err = worst;
    return g;
}
static double *fd_grad(const problem *p, int i) { return fd_grad_err(p, i, NULL); }

/* The float32 side of a comparison with the differences, relative to max|want| (the top of the
 * file): 6ε·√(2·n·T)·κ + 2·2ε·G_max, κ the dual form's layer-norm conditioning (1 elsewhere),
 * G_max the largest |cumsum(max(log α, −104))| within a chunk. */
static double fd_rtol(const problem *p) {
    const gcase *c = p->c;
    const double eps = 0x1p-24, n = 4.0 * (c->d_k > c->d_v ? c->d_k : c->d_v) + c->T + 10;
    double kappa = 1.0, gmax = 0.0;
    if (c->fam == FAM_DUAL) {
        double *scratch[3];
        for (int o = 0; o < 3; o++) scratch[o] = zalloc((p->n_out[o] + 1) * sizeof(double));
        ref_run(c, p->x, scratch[0], scratch[1], scratch[2]);
        kappa = fmax(1.0, ref_dual_kappa);
    }
    if (p->n[IN_LA]) {
        const int gd = c->gate == GATE_VECTOR ? c->d_k : 1;
        for (int t0 = 0; t0 < c->T; t0 += c->C)
            for (int j = 0; j < gd; j++) {
                double G = 0.0;
                for (int t = t0; t < t0 + c->C && t < c->T; t++) {
                    G += fmax(p->x[IN_LA][(size_t)t * gd + j], (double)TTT_GATE_RESET);
                    gmax = fmax(gmax, fabs(G));
                }
            }
    }
    return 6 * eps * sqrt(2 * n * c->T) * kappa + 2 * 2 * eps * gmax;
}

/* The differences of every input of p (NULL where absent) and their error estimates; *gall
 * gets the largest |difference| over all inputs. */
static void fd_all(const problem *p, double **fd, double *atol, double *gall) {
    *gall = 0.0;
    for (int i = 0; i < N_IN; i++) {
        fd[i] = NULL, atol[i] = 0.0;
        if (!p->n[i]) continue;
        fd[i] = fd_grad_err(p, i, &atol[i]);
        for (size_t e = 0; e < p->n[i]; e++) *gall = fmax(*gall, fabs(fd[i][e]));
    }
}

/* tu_close of input i's tape gradient against its differences. The scale of the float32
 * bound is max|want| of the input, except for log α: its gradient is a reverse cumulative sum
 * of per-token terms dG (fused_grad.c) made of the same products as q's and k's gradients, so
 * its rounding is on their scale, the largest gradient entry over all inputs (gall), while its
 * value can be a cancelling sum far below them (3e-3 against 6 in the long-span case, whose
 * e^-165 decays leave each gate little influence). */
#define fd_close(p, i, got, fd, atol, rtol, gall, msg, len)                                     \
    ((i) == IN_LA ? tu_close((got), (fd), (p)->n[i], (atol) + (rtol) * (gall), 0.0, msg, len)   \
                  : tu_close((got), (fd), (p)->n[i], (atol), (rtol), msg, len))

/* The control of every comparison with the differences: the same problem with the third key
 * 1 % larger (its float and float64 values). */
static void perturb_key(problem *p) {
    for (int j = 0; j < p->c->d_k; j++) {
        float *kf = p->f[IN_K] + 2 * p->c->d_k + j;
        *kf *= 1.01f;
        p->x[IN_K][2 * p->c->d_k + j] = *kf;
    }
}

/* ------------------------------------------------------------------------------------------ */
/* the float paths on the tape */

typedef enum { PATH_COMPOSED, PATH_FUSED } path_t;

typedef struct run_out {
    ttt_tensor *in[N_IN]; /* the inputs as parameters (NULL = absent) */
    float *grad[N_IN];    /* their gradients */
    ttt_tensor *out[3];   /* O, S, X */
} run_out;

/* The form of case c on the given path: returns O, the final state through *S and, for Titans
 * and the dual form, M / b through *X. in[] as in run_out (NULL = absent or a constant). */
static ttt_tensor *call_form(const gcase *c, path_t path, ttt_tensor *const *in, ttt_tensor **S,
                             ttt_tensor **X) {
    const int fused = path == PATH_FUSED;
    *X = NULL;
    switch (c->fam) {
    case FAM_LA:
        return fused ? ttt_la_chunkwise_fused(ctx, S, in[IN_Q], in[IN_K], in[IN_V], in[IN_B],
                                              in[IN_LA], in[IN_S0], c->C)
                     : ttt_la_chunkwise_composed(ctx, S, in[IN_Q], in[IN_K], in[IN_V], in[IN_B],
                                                 in[IN_LA], in[IN_S0], c->C);
    case FAM_DELTA:
        return fused ? ttt_delta_chunkwise_fused(ctx, S, in[IN_Q], in[IN_K], in[IN_V], in[IN_B],
                                                 in[IN_LA], in[IN_S0], c->C)
                     : ttt_delta_chunkwise_composed(ctx, S, in[IN_Q], in[IN_K], in[IN_V],
                                                    in[IN_B], in[IN_LA], in[IN_S0], c->C);
    case FAM_TITANS:
        ck_assert(!fused);
        return ttt_titans_chunked_composed(ctx, S, X, in[IN_Q], in[IN_K], in[IN_V], in[IN_B],
                                           in[IN_LA], in[IN_S0], in[IN_X], c->mu, c->C);
    case FAM_DUAL:
        return fused ? ttt_ttt_linear_dual_fused(ctx, S, X, in[IN_Q], in[IN_K], in[IN_V],
                                                 in[IN_B], in[IN_S0], in[IN_X], c->C)
                     : ttt_ttt_linear_dual_composed(ctx, S, X, in[IN_Q], in[IN_K], in[IN_V],
                                                    in[IN_B], in[IN_S0], in[IN_X], c->C);
    }
    return NULL;
}

/* Inputs as parameters with zeroed gradient buffers, the form on the tape, the loss
 * L = Σ R ⊙ outputs, backward. */
static void run_tape(run_out *r, const problem *p, path_t path) {
    const gcase *c = p->c;
    const int T = c->T, dk = c->d_k, dv = c->d_v;
    ttt_tape_reset(ctx->tape);
    memset(r, 0, sizeof *r);
    for (int i = 0; i < N_IN; i++) {
        if (!p->n[i]) continue;
        int shape[2], nd;
        switch (i) {
        case IN_Q: case IN_K: nd = 2; shape[0] = T; shape[1] = dk; break;
        case IN_V: nd = 2; shape[0] = T; shape[1] = dv; break;
        case IN_B: nd = 1; shape[0] = T; break;
        case IN_LA:
            nd = c->gate == GATE_VECTOR ? 2 : 1;
            shape[0] = T;
            shape[1] = dk;
            break;
        case IN_X:
            nd = c->fam == FAM_DUAL ? 1 : 2;
            shape[0] = c->fam == FAM_DUAL ? dv : dk;
            shape[1] = dv;
            break;
        default: nd = 2; shape[0] = dk; shape[1] = dv; break;
        }
        r->in[i] = ttt_tensor_new(ctx, nd, shape);
        memcpy(r->in[i]->data, p->f[i], p->n[i] * sizeof(float));
        r->grad[i] = zalloc(p->n[i] * sizeof(float));
        ttt_tensor_set_param(r->in[i], r->grad[i]);
    }
    r->out[0] = call_form(c, path, r->in, &r->out[1], &r->out[2]);
    ttt_tensor *L = NULL;
    for (int o = 0; o < 3; o++) {
        if (!r->out[o]) continue;
        ck_assert_uint_eq(r->out[o]->n, p->n_out[o]);
        ttt_tensor Rv = ttt_tensor_view(p->R[o], r->out[o]->ndim, r->out[o]->shape);
        ttt_tensor *Ro = ttt_tensor_copy(ctx, &Rv); /* a constant of the output's shape */
        ttt_tensor *term = ttt_sum(ctx, ttt_mul(ctx, r->out[o], Ro));
        L = L ? ttt_add(ctx, L, term) : term;
    }
    ttt_backward(ctx, L);
}

static int path_exists(const gcase *c, path_t path) {
    return path == PATH_COMPOSED || c->fam != FAM_TITANS;
}

/* ------------------------------------------------------------------------------------------ */
/* (ii) gradients against finite differences of the float64 recurrences */

static const gcase fd_cases[] = {
    /* T = 11 with chunk 4: two full chunks and a short one; chunk = T is the parallel form */
    {"la none chunk4", FAM_LA, GATE_NONE, 11, 4, 3, 4, 0, 0},
    {"la scalar chunk4", FAM_LA, GATE_SCALAR, 11, 4, 3, 4, 0, 0},
    {"la vector chunk4", FAM_LA, GATE_VECTOR, 11, 4, 3, 4, 0, 0},
    {"la scalar parallel", FAM_LA, GATE_SCALAR, 11, 3, 5, 11, 0, 0},
    {"la vector parallel", FAM_LA, GATE_VECTOR, 11, 5, 3, 11, 0, 0},
    {"la vector no beta", FAM_LA, GATE_VECTOR, 11, 3, 4, 4, 1, 0},
    {"delta none chunk4", FAM_DELTA, GATE_NONE, 11, 4, 3, 4, 0, 0},
    {"delta scalar chunk4", FAM_DELTA, GATE_SCALAR, 11, 4, 3, 4, 0, 0},
    {"delta scalar parallel", FAM_DELTA, GATE_SCALAR, 11, 5, 3, 11, 0, 0},
    {"delta scalar chunk3", FAM_DELTA, GATE_SCALAR, 11, 3, 5, 3, 0, 0},
    {"delta no beta", FAM_DELTA, GATE_SCALAR, 11, 4, 4, 4, 1, 0},
    {"dual b4", FAM_DUAL, GATE_NONE, 11, 4, 4, 4, 0, 0},
    {"dual b3 d5", FAM_DUAL, GATE_NONE, 11, 5, 5, 3, 0, 0},
    {"dual b4 no lr", FAM_DUAL, GATE_NONE, 11, 3, 3, 4, 1, 0},
    {"dual b1", FAM_DUAL, GATE_NONE, 11, 4, 4, 1, 0, 0},
    {"dual one block", FAM_DUAL, GATE_NONE, 11, 4, 4, 16, 0, 0},
    {"titans scalar chunk4", FAM_TITANS, GATE_SCALAR, 11, 4, 3, 4, 0, 0.9f},
    {"titans none chunk3", FAM_TITANS, GATE_NONE, 11, 3, 4, 3, 0, 0.5f},
    {"titans mu0", FAM_TITANS, GATE_SCALAR, 11, 4, 3, 4, 0, 0.0f},
};
#define N_FD_CASES ((int)(sizeof fd_cases / sizeof fd_cases[0]))

static void check_fd(const gcase *c, path_t path, uint64_t seed) {
    problem p;
    draw(&p, c, seed);
    run_out r;
    run_tape(&r, &p, path);
    const double rtol = fd_rtol(&p);
    double *fd[N_IN], atol[N_IN], gall;
    fd_all(&p, fd, atol, &gall);
    for (int i = 0; i < N_IN; i++) {
        if (!p.n[i]) continue;
        char msg[512];
        int ok = fd_close(&p, i, r.grad[i], fd[i], atol[i], rtol, gall, msg, sizeof msg);
        ck_assert_msg(ok, "%s (%s): d/d%s: %s", c->name,
                      path == PATH_FUSED ? "fused" : "composed", in_names[i], msg);
    }
    /* the control: the differences of the call with the third key 1 % larger */
    problem px;
    draw(&px, c, seed);
    perturb_key(&px);
    double *fdx = fd_grad(&px, IN_Q);
    tu_ratio_quiet = 1;
    ck_assert_msg(!tu_close(r.grad[IN_Q], fdx, p.n[IN_Q], atol[IN_Q], rtol, NULL, 0),
                  "%s (%s): d/dq passes as the gradient of a perturbed key", c->name,
                  path == PATH_FUSED ? "fused" : "composed");
    tu_ratio_quiet = 0;
}

START_TEST(test_composed_fd) {
    const gcase *c = &fd_cases[_i];
    check_fd(c, PATH_COMPOSED, 100 + (uint64_t)_i);
}
END_TEST

START_TEST(test_fused_fd) {
    const gcase *c = &fd_cases[_i];
    if (!path_exists(c, PATH_FUSED)) return;
    check_fd(c, PATH_FUSED, 100 + (uint64_t)_i);
}
END_TEST

/* The harness can fail: the composed gradient with one element off by a relative 1e-3 of the
 * largest gradient must not pass the FD comparison. */
START_TEST(test_harness_detects_wrong_gradient) {
    const gcase *c = &fd_cases[1];
    problem p;
    draw(&p, c, 7);
    run_out r;
    run_tape(&r, &p, PATH_COMPOSED);
    double *fd[N_IN], atol[N_IN], gall;
    fd_all(&p, fd, atol, &gall);
    const double rtol = fd_rtol(&p);
    ck_assert(fd_close(&p, IN_LA, r.grad[IN_LA], fd[IN_LA], atol[IN_LA], rtol, gall, NULL, 0));
    double mx = 0.0;
    for (size_t e = 0; e < p.n[IN_LA]; e++) mx = fmax(mx, fabs(fd[IN_LA][e]));
    r.grad[IN_LA][3] += (float)(1e-3 * mx);
    tu_ratio_quiet = 1;
    ck_assert(!fd_close(&p, IN_LA, r.grad[IN_LA], fd[IN_LA], atol[IN_LA], rtol, gall, NULL, 0));
    tu_ratio_quiet = 0;
}
END_TEST

/* Hard resets (docs/math.md §0 "Hard resets"): gates of −inf, −1e30, −1e4 and −200 in turn at
 * the first token, inside the first chunk of 4, at the first and the last token of the second, and
 * at the last token (with a vector gate every other one on half the key dimensions), for every
 * gated case of (ii): both paths must match the float64 finite differences (the derivative at
 * −inf is its limit 0; the finite resets are differenced: exp underflows to 0 in float64 too), the
 * gradient of every reset gate must be exactly 0, and the gradients with the resets must be
 * rejected as the gradients of the same call without them (q's and the gates'). */
static void add_resets(problem *p) {
    static const float values[] = {-INFINITY, -1e30f, -1e4f, -200.0f};
    const int T = p->c->T, gd = p->c->gate == GATE_VECTOR ? p->c->d_k : 1;
    int r = 0;
    for (int t = 0; t < T; t++) {
        if (!(t == 0 || t == 2 || t == 4 || t == 7 || t == T - 1)) continue;
        for (int j = 0; j < (gd > 1 && r % 2 ? gd / 2 : gd); j++) {
            p->f[IN_LA][(size_t)t * gd + j] = values[r % 4];
            p->x[IN_LA][(size_t)t * gd + j] = values[r % 4];
        }
        r++;
    }
}

START_TEST(test_resets_fd) {
    const gcase *c = &fd_cases[_i];
    if (c->gate == GATE_NONE) return;
    problem p, p0;
    draw(&p, c, 900 + (uint64_t)_i);
    draw(&p0, c, 900 + (uint64_t)_i); /* the same call without its resets */
    add_resets(&p);
    for (int path = 0; path < 2; path++) {
        if (!path_exists(c, path ? PATH_FUSED : PATH_COMPOSED)) continue;
        const char *pn = path ? "fused" : "composed";
        run_out r;
        run_tape(&r, &p, path ? PATH_FUSED : PATH_COMPOSED);
        const double rtol = fd_rtol(&p); /* with the resets' G_max */
        double *fd[N_IN], atol[N_IN], gall;
        fd_all(&p, fd, atol, &gall);
        for (int i = 0; i < N_IN; i++) {
            if (!p.n[i]) continue;
            char msg[512];
            const int ok = fd_close(&p, i, r.grad[i], fd[i], atol[i], rtol, gall, msg, sizeof msg);
            ck_assert_msg(ok, "%s (%s, resets): d/d%s: %s", c->name, pn, in_names[i], msg);
            tu_ratio_quiet = 1; /* a control: its passing elements are no margin */
            if (i == IN_Q || i == IN_LA)
                ck_assert_msg(!fd_close(&p, i, r.grad[i], fd_grad(&p0, i), atol[i], rtol, gall,
                                        NULL, 0),
                              "%s (%s): d/d%s with resets passes as the one without", c->name,
                              pn, in_names[i]);
            tu_ratio_quiet = 0;
        }
        for (size_t e = 0; e < p.n[IN_LA]; e++)
            ck_assert_msg(!(p.f[IN_LA][e] < TTT_GATE_RESET) || r.grad[IN_LA][e] == 0.0f,
                          "%s (%s): the reset gate %zu (%g) has gradient %g", c->name, pn, e,
                          (double)p.f[IN_LA][e], (double)r.grad[IN_LA][e]);
    }
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* (i) composed forward = the fast kernels */

static const gcase fwd_cases[] = {
    {"la none", FAM_LA, GATE_NONE, 100, 16, 16, 16, 0, 0},
    {"la scalar", FAM_LA, GATE_SCALAR, 100, 16, 16, 16, 0, 0},
    {"la vector", FAM_LA, GATE_VECTOR, 100, 16, 16, 16, 0, 0},
    {"la vector parallel", FAM_LA, GATE_VECTOR, 37, 8, 5, 37, 0, 0},
    {"delta none", FAM_DELTA, GATE_NONE, 100, 16, 16, 16, 0, 0},
    {"delta scalar", FAM_DELTA, GATE_SCALAR, 100, 16, 16, 16, 0, 0},
    {"delta parallel", FAM_DELTA, GATE_SCALAR, 37, 8, 5, 37, 0, 0},
    {"dual", FAM_DUAL, GATE_NONE, 100, 16, 16, 16, 0, 0},
    {"titans", FAM_TITANS, GATE_SCALAR, 100, 16, 16, 16, 0, 0.9f},
    {"titans no gate", FAM_TITANS, GATE_NONE, 50, 8, 6, 7, 0, 0.8f},
};
#define N_FWD_CASES ((int)(sizeof fwd_cases / sizeof fwd_cases[0]))

/* The fast kernel of c's family on p's float inputs; o, S (from S0) and X (from M0/b0) are
 * written. perturb: the third key 1 % larger (the controls). */
static void kernel_run(const problem *p, float *o, float *S, float *X, int perturb) {
    const gcase *c = p->c;
    const int T = c->T, dk = c->d_k, dv = c->d_v;
    memcpy(S, p->f[IN_S0], p->n_out[1] * sizeof(float));
    if (p->n[IN_X]) memcpy(X, p->f[IN_X], p->n[IN_X] * sizeof(float));
    ttt_ctx nograd = {.arena = ctx->arena};
    const float *b = p->f[IN_B], *la = p->f[IN_LA];
    float *k = zalloc(p->n[IN_K] * sizeof(float)); /* from the arena */
    memcpy(k, p->f[IN_K], p->n[IN_K] * sizeof(float));
    if (perturb)
        for (int j = 0; j < dk; j++) k[2 * dk + j] *= 1.01f;
    switch (c->fam) {
    case FAM_LA:
        ttt_linear_attention_chunkwise(&nograd, o, S, p->f[IN_Q], k, p->f[IN_V], b, la,
                                       c->gate == GATE_VECTOR, T, dk, dv, c->C);
        break;
    case FAM_DELTA:
        ttt_delta_rule_chunkwise(&nograd, o, S, p->f[IN_Q], k, p->f[IN_V], b, la, T, dk, dv, c->C);
        break;
    case FAM_TITANS: /* β = θη with θ = 1 */
        ttt_momentum_chunked(&nograd, o, S, X, p->f[IN_Q], k, p->f[IN_V], b, la, 1.0f, c->mu, T,
                             dk, dv, c->C);
        break;
    case FAM_DUAL:
        ttt_ttt_linear_dual(&nograd, o, S, X, p->f[IN_Q], k, p->f[IN_V], b, T, dk, c->C);
        break;
    }
}

/* r's outputs against the kernel's (perturb: the control, returns the number of outputs that
 * fail, asserting nothing). Two float32 paths: walk_rtol's forward bound. */
static int forward_vs_kernel(const problem *p, const run_out *r, int perturb) {
    const gcase *c = p->c;
    float *o = zalloc(p->n_out[0] * sizeof(float)), *S = zalloc(p->n_out[1] * sizeof(float));
    float *X = zalloc((p->n_out[2] + p->n[IN_X] + 1) * sizeof(float));
    kernel_run(p, o, S, X, perturb);
    const double rtol = walk_rtol(c->T, c->d_k, c->d_v, 0);
    const float *want[3] = {o, S, X};
    int fails = 0;
    tu_ratio_quiet = perturb;
    for (int k = 0; k < 3; k++) {
        if (!p->n_out[k]) continue;
        char msg[512];
        int ok = tu_close_f(r->out[k]->data, want[k], p->n_out[k], 0, rtol, msg, sizeof msg);
        if (perturb) fails += !ok;
        else ck_assert_msg(ok, "%s: output %d: %s", c->name, k, msg);
    }
    tu_ratio_quiet = 0;
    return fails;
}

START_TEST(test_composed_forward_matches_kernel) {
    const gcase *c = &fwd_cases[_i];
    problem p;
    draw(&p, c, 300 + (uint64_t)_i);
    run_out r;
    run_tape(&r, &p, PATH_COMPOSED);
    forward_vs_kernel(&p, &r, 0);
    ck_assert_msg(forward_vs_kernel(&p, &r, 1) > 0, "%s: a perturbed key passes", c->name);
}
END_TEST

/* The fused forward is the kernel itself, run chunk by chunk, so it equals the kernel run over
 * the whole sequence (bit for bit with today's kernels, which carry nothing across chunks but
 * the state; compared with the derived forward bound so that a kernel refactoring that reorders
 * a sum does not trip it). */
START_TEST(test_fused_forward_is_kernel) {
    const gcase *c = &fwd_cases[_i];
    if (!path_exists(c, PATH_FUSED)) return;
    problem p;
    draw(&p, c, 300 + (uint64_t)_i);
    run_out r;
    run_tape(&r, &p, PATH_FUSED);
    forward_vs_kernel(&p, &r, 0);
    ck_assert_msg(forward_vs_kernel(&p, &r, 1) > 0, "%s: a perturbed key passes", c->name);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* (iii) fused = composed at a training-like size */

static const gcase big_cases[] = {
    {"la none", FAM_LA, GATE_NONE, 100, 16, 16, 16, 0, 0},
    {"la scalar", FAM_LA, GATE_SCALAR, 100, 16, 16, 16, 0, 0},
    {"la vector", FAM_LA, GATE_VECTOR, 100, 16, 16, 16, 0, 0},
    {"la vector d_v 8", FAM_LA, GATE_VECTOR, 100, 16, 8, 16, 0, 0},
    {"delta none", FAM_DELTA, GATE_NONE, 100, 16, 16, 16, 0, 0},
    {"delta scalar", FAM_DELTA, GATE_SCALAR, 100, 16, 16, 16, 0, 0},
    {"delta scalar d_v 24", FAM_DELTA, GATE_SCALAR, 100, 16, 24, 16, 0, 0},
    {"dual b16", FAM_DUAL, GATE_NONE, 100, 16, 16, 16, 0, 0},
    {"dual b7 d12 no lr", FAM_DUAL, GATE_NONE, 100, 12, 12, 7, 1, 0},
};
#define N_BIG_CASES ((int)(sizeof big_cases / sizeof big_cases[0]))

START_TEST(test_fused_matches_composed) {
    const gcase *c = &big_cases[_i];
    problem p;
    draw(&p, c, 500 + (uint64_t)_i);
    run_out rc, rf;
    run_tape(&rc, &p, PATH_COMPOSED);
    const double rtol = walk_rtol(c->T, c->d_k, c->d_v, 1);
    for (int control = 0; control < 2; control++) {
        /* control 1: the fused path with the third key 1 % larger must be rejected */
        float k0[64];
        memcpy(k0, p.f[IN_K] + 2 * c->d_k, c->d_k * sizeof(float));
        if (control)
            for (int j = 0; j < c->d_k; j++) p.f[IN_K][2 * c->d_k + j] *= 1.01f;
        run_tape(&rf, &p, PATH_FUSED);
        memcpy(p.f[IN_K] + 2 * c->d_k, k0, c->d_k * sizeof(float));
        int fails = 0;
        tu_ratio_quiet = control;
        for (int i = 0; i < N_IN; i++) {
            if (!p.n[i]) continue;
            char msg[512];
            int ok = tu_close_f(rf.grad[i], rc.grad[i], p.n[i], 0, rtol, msg, sizeof msg);
            if (control) fails += !ok;
            else ck_assert_msg(ok, "%s: d/d%s: %s", c->name, in_names[i], msg);
        }
        tu_ratio_quiet = 0;
        if (control) ck_assert_msg(fails > 0, "%s: a perturbed key passes", c->name);
    }
}
END_TEST

/* Gradients of a subset of the inputs: the fused backward skips the others (NULL gradient
 * buffers) and must give exactly the same values for the ones requested. */
START_TEST(test_fused_partial_grads) {
    const gcase *c = &big_cases[_i];
    problem p;
    draw(&p, c, 700 + (uint64_t)_i);
    run_out full;
    run_tape(&full, &p, PATH_FUSED);
    for (int keep = 0; keep < 2; keep++) {
        /* keep 0: only log α, β and the initial state (S0; b0 of the dual form) require grad;
         * keep 1: only q and v */
        ttt_tape_reset(ctx->tape);
        ttt_tensor *in[N_IN] = {0};
        float *g[N_IN] = {0};
        for (int i = 0; i < N_IN; i++) {
            if (!full.in[i]) continue;
            in[i] = ttt_tensor_new(ctx, full.in[i]->ndim, full.in[i]->shape);
            memcpy(in[i]->data, p.f[i], p.n[i] * sizeof(float));
            const int want = keep == 0 ? (i == IN_LA || i == IN_B || i == IN_S0 || i == IN_X)
                                       : (i == IN_Q || i == IN_V);
            if (want) {
                g[i] = zalloc(p.n[i] * sizeof(float));
                ttt_tensor_set_param(in[i], g[i]);
            }
        }
        ttt_tensor *out[3];
        out[0] = call_form(c, PATH_FUSED, in, &out[1], &out[2]);
        ttt_tensor *L = NULL;
        for (int o = 0; o < 3; o++) {
            if (!out[o]) continue;
            ttt_tensor Rv = ttt_tensor_view(p.R[o], out[o]->ndim, out[o]->shape);
            ttt_tensor *term = ttt_sum(ctx, ttt_mul(ctx, out[o], ttt_tensor_copy(ctx, &Rv)));
            L = L ? ttt_add(ctx, L, term) : term;
        }
        ttt_backward(ctx, L);
        for (int i = 0; i < N_IN; i++) {
            if (!g[i]) continue;
            ck_assert_msg(memcmp(g[i], full.grad[i], p.n[i] * sizeof(float)) == 0, "%s: d/d%s",
                          c->name, in_names[i]);
        }
    }
}
END_TEST

/* Strong vector gates over a long chunk (decay span ≈ 165 nats > 60; e^165 overflows float):
 * the fused backward leaves the one-reference-row trick for exact per-pair sums, the composed
 * form cuts the chunk into pieces whose span fits (composed.h); both must still equal finite
 * differences (each fails without its safeguard: checked by hand). */
START_TEST(test_fused_vector_long_span) {
    const gcase c = {"la vector span", FAM_LA, GATE_VECTOR, 23, 3, 2, 23, 0, 0};
    problem p;
    draw(&p, &c, 41);
    for (size_t e = 0; e < p.n[IN_LA]; e++) { /* log α ∈ [−9, −6]: span ≈ 165 nats */
        p.f[IN_LA][e] = -6.0f - 3.0f * (float)((e * 7) % 11) / 10.0f;
        p.x[IN_LA][e] = p.f[IN_LA][e];
    }
    const double rtol = fd_rtol(&p); /* G_max ≈ 200: the chunk's summed gates */
    problem px = p; /* the control: the third key 1 % larger */
    px.f[IN_K] = zalloc(p.n[IN_K] * sizeof(float));
    px.x[IN_K] = zalloc(p.n[IN_K] * sizeof(double));
    memcpy(px.f[IN_K], p.f[IN_K], p.n[IN_K] * sizeof(float));
    memcpy(px.x[IN_K], p.x[IN_K], p.n[IN_K] * sizeof(double));
    perturb_key(&px);
    for (int path = 0; path < 2; path++) {
        run_out r;
        run_tape(&r, &p, path ? PATH_FUSED : PATH_COMPOSED);
        double *fd[N_IN], atol[N_IN], gall;
        fd_all(&p, fd, atol, &gall);
        for (int i = 0; i < N_IN; i++) {
            if (!p.n[i]) continue;
            char msg[512];
            int ok = fd_close(&p, i, r.grad[i], fd[i], atol[i], rtol, gall, msg, sizeof msg);
            ck_assert_msg(ok, "%s: d/d%s: %s", path ? "fused" : "composed", in_names[i], msg);
        }
        double *fdx = fd_grad(&px, IN_Q);
        tu_ratio_quiet = 1;
        ck_assert_msg(!tu_close(r.grad[IN_Q], fdx, p.n[IN_Q], atol[IN_Q], rtol, NULL, 0),
                      "%s: d/dq passes as the gradient of a perturbed key",
                      path ? "fused" : "composed");
        tu_ratio_quiet = 0;
    }
}
END_TEST

/* Memory of the fused ops: what a recorded forward leaves in the arena for the backward is the
 * packed result (T·d_v + d_k·d_v floats, + d for the dual form's bias) plus one state per chunk
 * (d_k × d_v; (W, b) per block of the dual form) and the list of chunks (with a vector gate a
 * reset starts one) — it grows with the number of chunks, not with T·d_k·d_v (a saved state
 * per token would be 64× more here for chunk 64, 16× for block 16). */
START_TEST(test_fused_memory_per_chunk) {
    const int T = 512, d = 16, C = 64, Bd = 16; /* Bd: the dual form's mini-batch */
    ttt_rng rng;
    ttt_rng_seed(&rng, 9);
    for (int op = 0; op < 3; op++) {
        ttt_tape_reset(ctx->tape);
        ttt_tensor *in[4] = {ttt_tensor_2d(ctx, T, d), ttt_tensor_2d(ctx, T, d),
                             ttt_tensor_2d(ctx, T, d), ttt_tensor_2d(ctx, d, d)};
        for (int i = 0; i < 4; i++) {
            ttt_rng_fill_normal(&rng, in[i]->data, in[i]->n, 0.0f, 0.25f);
            in[i]->requires_grad = 1;
        }
        ttt_tensor *la = ttt_tensor_1d(ctx, T);
        ttt_tensor_fill(la, -0.05f);
        ttt_tensor *b0 = ttt_tensor_1d(ctx, d), *bT = NULL;
        ttt_tensor_fill(b0, 0.1f);
        b0->requires_grad = 1;
        const size_t before = ttt_arena_footprint(ctx->arena);
        ttt_tensor *S;
        if (op == 0)
            ttt_la_chunkwise_fused(ctx, &S, in[0], in[1], in[2], NULL, la, in[3], C);
        else if (op == 1)
            ttt_delta_chunkwise_fused(ctx, &S, in[0], in[1], in[2], NULL, la, in[3], C);
        else
            ttt_ttt_linear_dual_fused(ctx, &S, &bT, in[0], in[1], in[2], NULL, in[3], b0, Bd);
        const size_t kept = ttt_arena_footprint(ctx->arena) - before;
        /* floats: result + saved chunk-start states; the chunk list of the linear-attention
         * and delta-rule ops (a first token and a saved-state slot per chunk, and a flag:
         * fused_grad.c, fused_chunks); plus headers, the tape entries and 64-byte alignment of
         * each allocation (< 2 KiB) */
        const size_t state = op < 2 ? (size_t)d * d : (size_t)d * d + d;
        const size_t nchunks = (size_t)(T / (op < 2 ? C : Bd));
        const size_t list = op < 2 ? 9 * (nchunks + 1) : 0;
        const size_t bound = 4 * ((size_t)T * d + state + nchunks * state) + list + 2048;
        ck_assert_msg(kept <= bound, "op %d keeps %zu bytes (bound %zu)", op, kept, bound);
        ck_assert(S->n == (size_t)d * d);
    }
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* (iv) ttt_layer_forward_diff = the generic driver through the tape */

typedef struct lcase {
    const char *name;
    const char *yaml; /* the tuple (form: generic); the closed form is set on a copy */
    const char *form;
    int gate;
    int T, d_k, d_v, chunk;
} lcase;

static const lcase layer_cases[] = {
    {"linear attention chunkwise vector",
     "layer: {model: linear, loss: dot, optimizer: {name: sgd, lr: 0.7}, form: generic}\n",
     "chunkwise", GATE_VECTOR, 13, 4, 3, 4},
    {"linear attention parallel scalar",
     "layer: {model: linear, loss: dot, optimizer: {name: sgd, lr: 0.7}, form: generic}\n",
     "parallel", GATE_SCALAR, 13, 4, 3, 4},
    {"linear attention recurrent none",
     "layer: {model: linear, loss: dot, optimizer: {name: sgd, lr: 0.7}, form: generic}\n",
     "recurrent", GATE_NONE, 13, 3, 4, 5},
    {"gated deltanet chunkwise",
     "layer: {preset: gated_deltanet, optimizer: {name: sgd, lr: 0.8, decay_placement: "
     "coupled}, form: generic}\n",
     "chunkwise", GATE_SCALAR, 13, 4, 3, 4},
    {"gated deltanet parallel",
     "layer: {preset: gated_deltanet, optimizer: {name: sgd, lr: 0.8, decay_placement: "
     "coupled}, form: generic}\n",
     "parallel", GATE_SCALAR, 13, 4, 3, 4},
    {"deltanet recurrent",
     "layer: {preset: deltanet, optimizer: {name: sgd, lr: 0.8, decay_placement: coupled}, "
     "form: generic}\n",
     "recurrent", GATE_NONE, 13, 3, 4, 4},
    {"ttt_linear dual",
     "layer: {preset: ttt_linear, mini_batch: 4, optimizer: {name: sgd, lr: 0.6}, form: "
     "generic}\n",
     "dual", GATE_NONE, 13, 4, 4, 4},
    {"titans chunkwise",
     "layer: {preset: titans, mini_batch: 4, optimizer: {name: momentum, lr: 0.3, momentum: "
     "0.8}, form: generic}\n",
     "chunkwise", GATE_SCALAR, 13, 4, 3, 4},
    /* the scan entry's differentiable path (layers/forms/linear_attention/scan.c) */
    {"linear attention scan vector",
     "layer: {model: linear, loss: dot, optimizer: {name: sgd, lr: 0.7}, form: generic}\n",
     "scan", GATE_VECTOR, 13, 4, 3, 4},
    {"linear attention scan scalar",
     "layer: {model: linear, loss: dot, optimizer: {name: sgd, lr: 0.7}, form: generic}\n",
     "scan", GATE_SCALAR, 13, 3, 4, 2},
};
#define N_LAYER_CASES ((int)(sizeof layer_cases / sizeof layer_cases[0]))

/* Parameters of one layer run: q, k, v, η, log α, and the state tensors. */
enum { LP_Q, LP_K, LP_V, LP_ETA, LP_LA, LP_W0, LP_W1, LP_OPT, N_LP };

typedef struct layer_run {
    ttt_tensor *p[N_LP];
    float *g[N_LP];
} layer_run;

static void parse_layer(const char *yaml, int d_k, int d_v, ttt_layer *L) {
    ttt_cfg_node *root = NULL;
    ttt_error err = {0};
    ck_assert_msg(ttt_cfg_load_string(yaml, "<test>", &root, &err) == TTT_OK, "%s", err.msg);
    ttt_status s = ttt_layer_parse((ttt_cfg_node *)ttt_cfg_get(root, "layer"), d_k, d_v, L, &err);
    ttt_cfg_free(root);
    ck_assert_msg(s == TTT_OK, "%s", err.msg);
}

/* One recorded forward (closed = -1: the generic driver; else fused 0/1) and the backward of
 * L = Σ Ro ⊙ o + Σ R_w ⊙ final state. vals holds the values of every parameter. */
static void layer_grads(layer_run *r, const ttt_layer *L, const lcase *lc, float *const *vals,
                        const float *const *R, int closed) {
    const int T = lc->T, dk = lc->d_k, dv = lc->d_v;
    ttt_tape_reset(ctx->tape);
    memset(r, 0, sizeof *r);
    ttt_layer_state st;
    ttt_layer_state_init(ctx, L, &st, NULL);
    const int shp[N_LP][2] = {{T, dk}, {T, dk}, {T, dv}, {T, 0}, {T, dk}, {dk, dv}, {dv, 0},
                              {dk, dv}};
    for (int i = 0; i < N_LP; i++) {
        if (!vals[i]) continue;
        ttt_tensor *t;
        if (i == LP_W0) t = st.W[0];
        else if (i == LP_W1) t = st.W[1];
        else if (i == LP_OPT) t = st.opt[0][0];
        else if (i == LP_LA && lc->gate == GATE_SCALAR) t = ttt_tensor_1d(ctx, T);
        else if (shp[i][1]) t = ttt_tensor_2d(ctx, shp[i][0], shp[i][1]);
        else t = ttt_tensor_1d(ctx, shp[i][0]);
        ck_assert_ptr_nonnull(t);
        memcpy(t->data, vals[i], t->n * sizeof(float));
        r->g[i] = zalloc(t->n * sizeof(float));
        ttt_tensor_set_param(t, r->g[i]);
        r->p[i] = t;
    }
    ttt_tensor *o = ttt_tensor_2d(ctx, T, dv);
    ttt_error err = {0};
    ttt_status s;
    if (closed < 0) {
        s = ttt_layer_forward(ctx, L, o, &st, r->p[LP_Q], r->p[LP_K], r->p[LP_V], r->p[LP_ETA],
                              r->p[LP_LA], &err);
    } else {
        ttt_layer Lc = *L;
        Lc.form = lc->form;
        Lc.chunk = lc->chunk;
        ttt_tensor *beta = ttt_scale(ctx, r->p[LP_ETA], L->lr); /* β = θ·η, recorded */
        s = ttt_layer_forward_diff(ctx, &Lc, o, &st, r->p[LP_Q], r->p[LP_K], r->p[LP_V], beta,
                                   r->p[LP_LA], closed, &err);
    }
    ck_assert_msg(s == TTT_OK, "%s: %s", lc->name, err.msg);
    ttt_tensor *outs[4] = {o, st.W[0], st.n_w > 1 ? st.W[1] : NULL,
                           st.n_opt ? st.opt[0][0] : NULL};
    ttt_tensor *loss = NULL;
    for (int i = 0; i < 4; i++) {
        if (!outs[i]) continue;
        ttt_tensor Rv = ttt_tensor_view((float *)R[i], outs[i]->ndim, outs[i]->shape);
        ttt_tensor *term = ttt_sum(ctx, ttt_mul(ctx, outs[i], ttt_tensor_copy(ctx, &Rv)));
        loss = loss ? ttt_add(ctx, loss, term) : term;
    }
    ttt_backward(ctx, loss);
}

START_TEST(test_layer_diff_matches_generic) {
    const lcase *lc = &layer_cases[_i];
    ttt_layer L;
    parse_layer(lc->yaml, lc->d_k, lc->d_v, &L);
    ck_assert_msg(tu_form_unavailable(&L, lc->form) == NULL, "%s", lc->name);
    const int T = lc->T, dk = lc->d_k, dv = lc->d_v;
    /* the state beyond W[0]: TTT-Linear's bias, Titans' momentum */
    const int has_bias = L.model->n_weights > 1, has_mom = ttt_layer_opt_state_count(&L) > 0;
    ttt_rng rng;
    ttt_rng_seed(&rng, 900 + (uint64_t)_i);
    /* parameter values */
    float *vals[N_LP] = {0};
    const size_t n[N_LP] = {(size_t)T * dk, (size_t)T * dk, (size_t)T * dv, (size_t)T,
                            lc->gate == GATE_NONE     ? 0
                            : lc->gate == GATE_SCALAR ? (size_t)T
                                                      : (size_t)T * dk,
                            (size_t)dk * dv, has_bias ? (size_t)dv : 0,
                            has_mom ? (size_t)dk * dv : 0};
    for (int i = 0; i < N_LP; i++) {
        if (!n[i]) continue;
        vals[i] = zalloc(n[i] * sizeof(float));
        for (size_t e = 0; e < n[i]; e++) {
            const double u = ttt_rng_uniform(&rng), z = ttt_rng_normal(&rng);
            vals[i][e] = (float)(i == LP_ETA  ? 0.3 + 0.7 * u
                                 : i == LP_LA ? -0.02 - 0.4 * u
                                 : i == LP_Q  ? 0.7 * z
                                 : i >= LP_W0 ? 0.3 * z
                                              : z);
        }
    }
    /* the squared loss on a linear map (delta rule, Titans): unit keys keep the steps stable */
    if ((L.model->traits & TTT_MODEL_LINEAR_MAP) && (L.loss->traits & TTT_LOSS_RESIDUAL))
        for (int t = 0; t < T; t++) { /* unit keys */
            float *kt = vals[LP_K] + (size_t)t * dk;
            double s = 0.0;
            for (int j = 0; j < dk; j++) s += (double)kt[j] * kt[j];
            for (int j = 0; j < dk; j++) kt[j] = (float)(kt[j] / sqrt(s));
        }
    float *R[4];
    const size_t nr[4] = {(size_t)T * dv, (size_t)dk * dv, (size_t)dv, (size_t)dk * dv};
    for (int i = 0; i < 4; i++) {
        R[i] = zalloc(nr[i] * sizeof(float));
        for (size_t e = 0; e < nr[i]; e++) R[i][e] = (float)ttt_rng_normal(&rng);
    }
    layer_run gen, clo[2];
    layer_grads(&gen, &L, lc, vals, (const float *const *)R, -1);
    const double rtol = walk_rtol(T, dk, dv, 1); /* two float32 paths, the top of the file */
    for (int fused = 0; fused < 2; fused++)
        for (int control = 0; control < 2; control++) {
            /* control 1: the third key 1 % larger on the closed path, to be rejected */
            float k0[64];
            memcpy(k0, vals[LP_K] + 2 * dk, dk * sizeof(float));
            if (control)
                for (int j = 0; j < dk; j++) vals[LP_K][2 * dk + j] *= 1.01f;
            layer_grads(&clo[fused], &L, lc, vals, (const float *const *)R, fused);
            memcpy(vals[LP_K] + 2 * dk, k0, dk * sizeof(float));
            int fails = 0;
            tu_ratio_quiet = control;
            for (int i = 0; i < N_LP; i++) {
                if (!vals[i]) continue;
                char msg[512];
                int ok = tu_close_f(clo[fused].g[i], gen.g[i], clo[fused].p[i]->n, 0, rtol, msg,
                                    sizeof msg);
                if (control) fails += !ok;
                else
                    ck_assert_msg(ok, "%s (%s): parameter %d: %s", lc->name,
                                  fused ? "fused" : "composed", i, msg);
            }
            tu_ratio_quiet = 0;
            if (control)
                ck_assert_msg(fails > 0, "%s (%s): a perturbed key passes", lc->name,
                              fused ? "fused" : "composed");
        }
}
END_TEST

/* Without a tape ttt_layer_forward_diff is an ordinary forward: the output of the entry's forward
 * and the final state written in place (the state tensors keep their identity). */
START_TEST(test_layer_diff_nograd) {
    const lcase *lc = &layer_cases[_i];
    ttt_layer L;
    parse_layer(lc->yaml, lc->d_k, lc->d_v, &L);
    L.form = lc->form;
    L.chunk = lc->chunk;
    const int T = lc->T, dk = lc->d_k, dv = lc->d_v;
    const double rtol = walk_rtol(T, dk, dv, 0); /* two float32 paths, the top of the file */
    ttt_ctx ng = {.arena = ctx->arena};
    ttt_rng rng;
    ttt_rng_seed(&rng, 77);
    ttt_tensor *q = ttt_tensor_2d(&ng, T, dk), *k = ttt_tensor_2d(&ng, T, dk);
    ttt_tensor *v = ttt_tensor_2d(&ng, T, dv), *eta = ttt_tensor_1d(&ng, T);
    ttt_tensor *la = lc->gate == GATE_VECTOR ? ttt_tensor_2d(&ng, T, dk)
                     : lc->gate == GATE_SCALAR ? ttt_tensor_1d(&ng, T)
                                               : NULL;
    ttt_rng_fill_normal(&rng, q->data, q->n, 0.0f, 0.7f);
    ttt_rng_fill_normal(&rng, k->data, k->n, 0.0f, 0.5f);
    ttt_rng_fill_normal(&rng, v->data, v->n, 0.0f, 1.0f);
    ttt_rng_fill_uniform(&rng, eta->data, eta->n, 0.3f, 1.0f);
    if (la) ttt_rng_fill_uniform(&rng, la->data, la->n, -0.4f, -0.02f);
    for (int fused = 0; fused < 2; fused++) {
        ttt_layer_state s1, s2;
        ttt_layer_state_init(&ng, &L, &s1, NULL);
        ttt_layer_state_init(&ng, &L, &s2, NULL);
        ttt_tensor *W0 = s2.W[0];
        ttt_tensor *o1 = ttt_tensor_2d(&ng, T, dv), *o2 = ttt_tensor_2d(&ng, T, dv);
        ttt_error err = {0};
        ck_assert(ttt_layer_forward(&ng, &L, o1, &s1, q, k, v, eta, la, &err) == TTT_OK);
        ttt_tensor *beta = ttt_scale(&ng, eta, L.lr);
        ck_assert_msg(ttt_layer_forward_diff(&ng, &L, o2, &s2, q, k, v, beta, la, fused, &err) ==
                          TTT_OK,
                      "%s", err.msg);
        ck_assert_ptr_eq(s2.W[0], W0);
        TU_ASSERT_CLOSE_F(o2->data, o1->data, o1->n, 0, rtol);
        for (int w = 0; w < s1.n_w; w++)
            TU_ASSERT_CLOSE_F(s2.W[w]->data, s1.W[w]->data, s1.W[w]->n, 0, rtol);
        for (int w = 0; w < s1.n_opt; w++)
            TU_ASSERT_CLOSE_F(s2.opt[0][w]->data, s1.opt[0][w]->data, s1.opt[0][w]->n, 0,
                              rtol);
        /* beta = NULL is η = 1: β_t = θ */
        ttt_layer_state_init(&ng, &L, &s1, NULL);
        ttt_layer_state_init(&ng, &L, &s2, NULL);
        ck_assert(ttt_layer_forward(&ng, &L, o1, &s1, q, k, v, NULL, la, &err) == TTT_OK);
        ck_assert(ttt_layer_forward_diff(&ng, &L, o2, &s2, q, k, v, NULL, la, fused, &err) ==
                  TTT_OK);
        TU_ASSERT_CLOSE_F(o2->data, o1->data, o1->n, 0, rtol);
        TU_ASSERT_CLOSE_F(s2.W[0]->data, s1.W[0]->data, s1.W[0]->n, 0, rtol);
        /* control: the third key 1 % larger on the closed path is rejected */
        ttt_layer_state_init(&ng, &L, &s2, NULL);
        float k0[64];
        memcpy(k0, k->data + 2 * dk, dk * sizeof(float));
        for (int j = 0; j < dk; j++) k->data[2 * dk + j] *= 1.01f;
        ck_assert(ttt_layer_forward_diff(&ng, &L, o2, &s2, q, k, v, NULL, la, fused, &err) ==
                  TTT_OK);
        memcpy(k->data + 2 * dk, k0, dk * sizeof(float));
        tu_ratio_quiet = 1;
        ck_assert_msg(!tu_close_f(o2->data, o1->data, o1->n, 0, rtol, NULL, 0) ||
                          !tu_close_f(s2.W[0]->data, s1.W[0]->data, s1.W[0]->n, 0, rtol, NULL, 0),
                      "%s: a perturbed key passes", lc->name);
        tu_ratio_quiet = 0;
    }
}
END_TEST

START_TEST(test_layer_diff_errors) {
    ttt_layer L;
    ttt_error err = {0};
    ttt_ctx ng = {.arena = ctx->arena};
    const int T = 5;
    ttt_tensor *q = ttt_tensor_2d(&ng, T, 3), *v = ttt_tensor_2d(&ng, T, 3);
    ttt_tensor *o = ttt_tensor_2d(&ng, T, 3), *la = ttt_tensor_2d(&ng, T, 3);
    ttt_tensor_fill(q, 0.1f);
    ttt_tensor_fill(v, 0.2f);
    ttt_tensor_fill(la, -0.1f);
    ttt_layer_state st;
    /* a vector gate on the delta rule's parallel form (the chunkwise form of a vector gate is
     * KDA's, layers/forms/delta_rule/kda_chunk.c) */
    parse_layer(layer_cases[3].yaml, 3, 3, &L);
    L.form = "parallel";
    ttt_layer_state_init(&ng, &L, &st, NULL);
    ck_assert_int_eq(ttt_layer_forward_diff(&ng, &L, o, &st, q, q, v, NULL, la, 0, &err),
                     TTT_ERR_UNSUPPORTED);
    /* auto runs a form that takes a vector gate */
    L.form = "auto";
    ck_assert_msg(ttt_layer_forward_diff(&ng, &L, o, &st, q, q, v, NULL, la, 0, &err) == TTT_OK,
                  "%s", err.msg);
    /* a gate on TTT-Linear */
    parse_layer(layer_cases[6].yaml, 3, 3, &L);
    L.form = "dual";
    ttt_layer_state_init(&ng, &L, &st, NULL);
    ttt_tensor *la1 = ttt_tensor_1d(&ng, T);
    ttt_tensor_fill(la1, -0.1f);
    ck_assert_int_eq(ttt_layer_forward_diff(&ng, &L, o, &st, q, q, v, NULL, la1, 0, &err),
                     TTT_ERR_UNSUPPORTED);
    ck_assert(strstr(err.msg, "forget gate") != NULL);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* (v) RoPE */

/* y = x R_p in double, written from the definition in rope.h. */
static void ref_rope(double *y, const double *x, int T, int d, int pos0, double base) {
    for (int t = 0; t < T; t++) {
        for (int i = 0; i + 1 < d; i += 2) {
            const double a = (pos0 + t) * pow(base, -(double)i / d);
            const double x0 = x[(size_t)t * d + i], x1 = x[(size_t)t * d + i + 1];
            y[(size_t)t * d + i] = x0 * cos(a) - x1 * sin(a);
            y[(size_t)t * d + i + 1] = x0 * sin(a) + x1 * cos(a);
        }
        if (d % 2) y[(size_t)t * d + d - 1] = x[(size_t)t * d + d - 1];
    }
}

START_TEST(test_rope_grad) {
    static const int dims[][3] = {{7, 6, 0}, {5, 5, 13}, {4, 8, -3}, {3, 1, 2}}; /* T, d, pos0 */
    const int T = dims[_i][0], d = dims[_i][1], pos0 = dims[_i][2];
    const double base = 100.0; /* a small base so every pair turns by a visible angle */
    ttt_rng rng;
    ttt_rng_seed(&rng, 31 + (uint64_t)_i);
    ttt_tape_reset(ctx->tape);
    ttt_tensor *x = ttt_tensor_2d(ctx, T, d);
    ttt_rng_fill_normal(&rng, x->data, x->n, 0.0f, 1.0f);
    float *gx = zalloc(x->n * sizeof(float)), *R = zalloc(x->n * sizeof(float));
    ttt_rng_fill_normal(&rng, R, x->n, 0.0f, 1.0f);
    ttt_tensor_set_param(x, gx);
    ttt_tensor *y = ttt_rope(ctx, x, pos0, (float)base);
    double *xd = zalloc(x->n * sizeof(double)), *yd = zalloc(x->n * sizeof(double));
    for (size_t e = 0; e < x->n; e++) xd[e] = x->data[e];
    ref_rope(yd, xd, T, d, pos0, base);
    /* The op rotates in double and rounds once to float32 (rope_op.c): within ε·|y| of the
     * double rotation, whose own error (a few ε₆₄) is far below; c = 3 over that exact bound. */
    const double eps = 0x1p-24;
    TU_ASSERT_CLOSE(y->data, yd, x->n, 0.0, 3 * eps);
    ttt_backward_from(ctx, y, R);
    /* Central differences of the double loss Σ R ⊙ rope(x) (pos_shift 1: the control, the rows
     * one position further on). The loss is linear in x, so the differences have no truncation;
     * each loss, a double sum of n products, is within (n + 2)·ε₆₄·Σ|R ⊙ y| of the exact one,
     * and the quotient carries twice that over 2h. */
    double *fd[2], fd_err = 0.0;
    for (int pos_shift = 0; pos_shift < 2; pos_shift++) {
        fd[pos_shift] = zalloc(x->n * sizeof(double));
        for (size_t e = 0; e < x->n; e++) {
            const double x0 = xd[e], h = 1e-6;
            double lp = 0.0, lm = 0.0, la = 0.0;
            xd[e] = x0 + h;
            ref_rope(yd, xd, T, d, pos0 + pos_shift, base);
            for (size_t j = 0; j < x->n; j++) lp += R[j] * yd[j], la += fabs(R[j] * yd[j]);
            xd[e] = x0 - h;
            ref_rope(yd, xd, T, d, pos0 + pos_shift, base);
            for (size_t j = 0; j < x->n; j++) lm += R[j] * yd[j], la += fabs(R[j] * yd[j]);
            xd[e] = x0;
            fd[pos_shift][e] = (lp - lm) / (2 * h);
            fd_err = fmax(fd_err, (double)(x->n + 2) * 0x1p-53 * la / (2 * h));
        }
    }
    /* The backward is the inverse rotation of R in double, rounded once to float32: ε·|g|,
     * c = 3 as above, plus the differences' own error. */
    TU_ASSERT_CLOSE(gx, fd[0], x->n, fd_err, 3 * eps);
    if (d >= 2) { /* the control: the gradient at the next position (a one-pass rope has none) */
        tu_ratio_quiet = 1;
        ck_assert(!tu_close(gx, fd[1], x->n, fd_err, 3 * eps, NULL, 0));
        tu_ratio_quiet = 0;
    }
}
END_TEST

/* A sequence processed in two pieces, the second at pos0 = T1, rotates exactly as one pass, and
 * the gradients of the pieces are the rows of the one-pass gradient. */
START_TEST(test_rope_positions_continue) {
    const int T = 9, T1 = 4, d = 6;
    ttt_rng rng;
    ttt_rng_seed(&rng, 5);
    ttt_tape_reset(ctx->tape);
    ttt_tensor *x = ttt_tensor_2d(ctx, T, d);
    ttt_rng_fill_normal(&rng, x->data, x->n, 0.0f, 1.0f);
    float *R = zalloc(x->n * sizeof(float)), *g1 = zalloc(x->n * sizeof(float));
    ttt_rng_fill_normal(&rng, R, x->n, 0.0f, 1.0f);
    ttt_tensor_set_param(x, g1);
    ttt_tensor *y = ttt_rope(ctx, x, 0, 10000.0f);
    ttt_backward_from(ctx, y, R);
    /* the pieces */
    ttt_tape_reset(ctx->tape);
    ttt_tensor *a = ttt_tensor_2d(ctx, T1, d), *b = ttt_tensor_2d(ctx, T - T1, d);
    memcpy(a->data, x->data, a->n * sizeof(float));
    memcpy(b->data, x->data + a->n, b->n * sizeof(float));
    float *ga = zalloc(a->n * sizeof(float)), *gb = zalloc(b->n * sizeof(float));
    ttt_tensor_set_param(a, ga);
    ttt_tensor_set_param(b, gb);
    ttt_tensor *ya = ttt_rope(ctx, a, 0, 10000.0f), *yb = ttt_rope(ctx, b, T1, 10000.0f);
    ttt_tensor *yab = ttt_concat_rows(ctx, ya, yb);
    ck_assert(memcmp(yab->data, y->data, y->n * sizeof(float)) == 0);
    ttt_backward_from(ctx, yab, R);
    ck_assert(memcmp(ga, g1, a->n * sizeof(float)) == 0);
    ck_assert(memcmp(gb, g1 + a->n, b->n * sizeof(float)) == 0);
    /* and a wrong offset is visibly different */
    ttt_tensor *yw = ttt_rope(ctx, b, T1 + 1, 10000.0f);
    ck_assert(ttt_max_abs_diff(yw, yb) > 1e-3f);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */

static Suite *form_grads_suite(void) {
    Suite *s = suite_create("form_grads");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 600);
    tcase_add_loop_test(tc, test_composed_fd, 0, N_FD_CASES);
    tcase_add_loop_test(tc, test_fused_fd, 0, N_FD_CASES);
    tcase_add_test(tc, test_harness_detects_wrong_gradient);
    tcase_add_loop_test(tc, test_resets_fd, 0, N_FD_CASES);
    tcase_add_loop_test(tc, test_composed_forward_matches_kernel, 0, N_FWD_CASES);
    tcase_add_loop_test(tc, test_fused_forward_is_kernel, 0, N_FWD_CASES);
    tcase_add_loop_test(tc, test_fused_matches_composed, 0, N_BIG_CASES);
    tcase_add_loop_test(tc, test_fused_partial_grads, 0, N_BIG_CASES);
    tcase_add_test(tc, test_fused_vector_long_span);
    tcase_add_test(tc, test_fused_memory_per_chunk);
    tcase_add_loop_test(tc, test_layer_diff_matches_generic, 0, N_LAYER_CASES);
    tcase_add_loop_test(tc, test_layer_diff_nograd, 0, N_LAYER_CASES);
    tcase_add_test(tc, test_layer_diff_errors);
    tcase_add_loop_test(tc, test_rope_grad, 0, 4);
    tcase_add_test(tc, test_rope_positions_continue);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(form_grads_suite()); }

/* Feature maps of normalized linear attention: the registry and its entries (feature_maps.h,
 * docs/math.md "Random features"). */
#include "feature_maps.h"

#include <lapacke.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "autograd.h"
#include "fault.h"
#include "rng.h"

/* ---- elu + 1 ---------------------------------------------------------------------------- */

static int width_same(int d, int m) {
    (void)m;
    return d;
}
static int rows_none(int m) {
    (void)m;
    return 0;
}

static ttt_status elu1_forward(float *y, const float *x, const float *omega, int T, int d, int m,
                         ttt_feature_role role) {
    (void)omega, (void)m, (void)role;
    for (size_t i = 0; i < (size_t)T * d; i++) y[i] = x[i] > 0.0f ? x[i] + 1.0f : expf(x[i]);
    return TTT_OK;
}
static ttt_status elu1_backward(float *gx, const float *gy, const float *x, const float *y,
                                const float *omega, int T, int d, int m, ttt_feature_role role) {
    (void)omega, (void)m, (void)role;
    /* dφ/dx = 1 for x > 0, e^x = φ(x) otherwise */
    for (size_t i = 0; i < (size_t)T * d; i++) gx[i] += gy[i] * (x[i] > 0.0f ? 1.0f : y[i]);
    return TTT_OK;
}

/* ---- random matrices ----------------------------------------------------------------------- */

static int rows_m(int m) { return m; }
static int width_m(int d, int m) {
    (void)d;
    return m;
}
static int width_2m(int d, int m) {
    (void)d;
    return 2 * m;
}

static ttt_status draw_gaussian(float *omega, int rows, int d, uint64_t seed) {
    ttt_rng r;
    ttt_rng_seed(&r, seed);
    ttt_rng_fill_normal(&r, omega, (size_t)rows * d, 0.0f, 1.0f);
    return TTT_OK;
}

/* Orthogonal random features: blocks of d rows, each the Q of a QR factorization of a d × d
 * Gaussian matrix (rows orthonormal; a last block of fewer rows keeps its first rows), every row
 * then scaled by the norm of an independent N(0, I_d) vector, so that each row has the length
 * distribution of an i.i.d. Gaussian row (χ_d) while rows of a block stay orthogonal. The signs
 * of R's diagonal are folded into Q so that Q is Haar-distributed. */
static ttt_status draw_orthogonal(float *omega, int rows, int d, uint64_t seed) {
    ttt_rng r;
    ttt_rng_seed(&r, seed);
    double *g = ttt_fault_malloc(sizeof(double) * (size_t)d * d);
    double *tau = ttt_fault_malloc(sizeof(double) * (size_t)d);
    if (!g || !tau) {
        free(g);
        free(tau);
        return TTT_ERR_NOMEM;
    }
    for (int b0 = 0; b0 < rows; b0 += d) {
        for (size_t i = 0; i < (size_t)d * d; i++) g[i] = ttt_rng_normal(&r);
        /* column-major QR of G: G = Q R, Q's columns orthonormal; we use them as rows */
        lapack_int info = LAPACKE_dgeqrf(LAPACK_COL_MAJOR, d, d, g, d, tau);
        TTT_ASSERT(info == 0);
        double sign[1024];
        TTT_ASSERT(d <= 1024);
        for (int j = 0; j < d; j++) sign[j] = g[(size_t)j * d + j] < 0 ? -1.0 : 1.0;
        info = LAPACKE_dorgqr(LAPACK_COL_MAJOR, d, d, d, g, d, tau);
        TTT_ASSERT(info == 0);
        const int n = rows - b0 < d ? rows - b0 : d;
        for (int j = 0; j < n; j++) {
            double s = 0.0;
            for (int i = 0; i < d; i++) {
                const double x = ttt_rng_normal(&r);
                s += x * x;
            }
            const double len = sqrt(s) * sign[j];
            for (int i = 0; i < d; i++)
                omega[(size_t)(b0 + j) * d + i] = (float)(g[(size_t)j * d + i] * len);
        }
    }
    free(g);
    free(tau);
    return TTT_OK;
}

/* ---- FAVOR+ --------------------------------------------------------------------------------- */

/* h (m) = ω x̃ − ‖x̃‖²/2 for one row, x̃ = x d^{−1/4}; returns max_j h_j and its index. */
static double favor_exponents(double *h, const float *x, const float *omega, int d, int m,
                              int *arg) {
    const double s = pow((double)d, -0.25);
    double nn = 0.0;
    for (int i = 0; i < d; i++) nn += (double)x[i] * x[i];
    nn *= s * s * 0.5;
    double best = -INFINITY;
    *arg = 0;
    for (int j = 0; j < m; j++) {
        const float *w = omega + (size_t)j * d;
        double u = 0.0;
        for (int i = 0; i < d; i++) u += (double)w[i] * x[i];
        h[j] = u * s - nn;
        if (h[j] > best) best = h[j], *arg = j;
    }
    return best;
}

static ttt_status favor_forward(float *y, const float *x, const float *omega, int T, int d,
                                int m, ttt_feature_role role) {
    double *h = ttt_fault_malloc(sizeof(double) * (size_t)m);
    if (!h) return TTT_ERR_NOMEM;
    const double inv = 1.0 / sqrt((double)m);
    for (int t = 0; t < T; t++) {
        int arg;
        const double c = favor_exponents(h, x + (size_t)t * d, omega, d, m, &arg);
        const double shift = role == TTT_FEATURE_QUERY ? c : 0.0;
        for (int j = 0; j < m; j++) y[(size_t)t * m + j] = (float)(exp(h[j] - shift) * inv);
    }
    free(h);
    return TTT_OK;
}

/* y_j = exp(h_j − c)/√m with h_j = ω_jᵀx̃ − ‖x̃‖²/2: ∂y_j/∂x̃ = y_j (ω_j − x̃) for keys (c = 0); for
 * queries c = h_{j*} (the largest) and ∂y_j/∂x̃ = y_j (ω_j − ω_{j*}) — the exact derivative of what
 * forward computes, wherever the maximum is unique. */
static ttt_status favor_backward(float *gx, const float *gy, const float *x, const float *y,
                                 const float *omega, int T, int d, int m, ttt_feature_role role) {
    double *h = ttt_fault_malloc(sizeof(double) * (size_t)m);
    double *g = ttt_fault_malloc(sizeof(double) * (size_t)d);
    if (!h || !g) {
        free(h);
        free(g);
        return TTT_ERR_NOMEM;
    }
    const double s = pow((double)d, -0.25);
    for (int t = 0; t < T; t++) {
        const float *xt = x + (size_t)t * d, *yt = y + (size_t)t * m, *gt = gy + (size_t)t * m;
        int arg = 0;
        if (role == TTT_FEATURE_QUERY) favor_exponents(h, xt, omega, d, m, &arg);
        double sum = 0.0;
        for (int i = 0; i < d; i++) g[i] = 0.0;
        for (int j = 0; j < m; j++) {
            const double a = (double)gt[j] * yt[j];
            const float *w = omega + (size_t)j * d;
            sum += a;
            for (int i = 0; i < d; i++) g[i] += a * w[i];
        }
        if (role == TTT_FEATURE_QUERY) {
            const float *w = omega + (size_t)arg * d;
            for (int i = 0; i < d; i++) g[i] -= sum * w[i];
        } else {
            for (int i = 0; i < d; i++) g[i] -= sum * xt[i] * s;
        }
        for (int i = 0; i < d; i++) gx[(size_t)t * d + i] += (float)(g[i] * s);
    }
    free(h);
    free(g);
    return TTT_OK;
}

/* ---- RFA ------------------------------------------------------------------------------------ */

#define RFA_NORM_EPS 1e-12 /* a zero row maps to the features of the zero direction */

static ttt_status rfa_forward(float *y, const float *x, const float *omega, int T, int d, int m,
                              ttt_feature_role role) {
    (void)role;
    const double inv = 1.0 / sqrt((double)m);
    for (int t = 0; t < T; t++) {
        const float *xt = x + (size_t)t * d;
        double nn = 0.0;
        for (int i = 0; i < d; i++) nn += (double)xt[i] * xt[i];
        const double r = 1.0 / (sqrt(nn) + RFA_NORM_EPS);
        float *yt = y + (size_t)t * 2 * m;
        for (int j = 0; j < m; j++) {
            const float *w = omega + (size_t)j * d;
            double u = 0.0;
            for (int i = 0; i < d; i++) u += (double)w[i] * xt[i];
            u *= r;
            yt[j] = (float)(sin(u) * inv);
            yt[m + j] = (float)(cos(u) * inv);
        }
    }
    return TTT_OK;
}

/* u_j = ω_jᵀx̂: ∂y_sin/∂u = y_cos, ∂y_cos/∂u = −y_sin; x̂ = x/‖x‖: ∂x̂ᵀg/∂x = (g − (gᵀx̂) x̂)/‖x‖. */
static ttt_status rfa_backward(float *gx, const float *gy, const float *x, const float *y,
                               const float *omega, int T, int d, int m, ttt_feature_role role) {
    (void)role;
    double *g = ttt_fault_malloc(sizeof(double) * (size_t)d);
    if (!g) return TTT_ERR_NOMEM;
    for (int t = 0; t < T; t++) {
        const float *xt = x + (size_t)t * d, *yt = y + (size_t)t * 2 * m;
        const float *gt = gy + (size_t)t * 2 * m;
        double nn = 0.0;
        for (int i = 0; i < d; i++) nn += (double)xt[i] * xt[i];
        const double len = sqrt(nn), r = 1.0 / (len + RFA_NORM_EPS);
        for (int i = 0; i < d; i++) g[i] = 0.0;
        for (int j = 0; j < m; j++) {
            const double gu = (double)gt[j] * yt[m + j] - (double)gt[m + j] * yt[j];
            const float *w = omega + (size_t)j * d;
            for (int i = 0; i < d; i++) g[i] += gu * w[i];
        }
        double gx_hat = 0.0; /* gᵀx̂ */
        for (int i = 0; i < d; i++) gx_hat += g[i] * xt[i] * r;
        for (int i = 0; i < d; i++) gx[(size_t)t * d + i] += (float)((g[i] - gx_hat * xt[i] * r) * r);
    }
    free(g);
    return TTT_OK;
}

/* ---- the registry --------------------------------------------------------------------------- */

static const ttt_feature_map maps[] = {
    {"elu1", "elu(x) + 1 elementwise (width d)", width_same, rows_none, NULL, elu1_forward,
     elu1_backward},
    {"favor", "Performer FAVOR+: exp(w_j.x - |x|^2/2)/sqrt(m), w_j iid N(0, I) (width m)",
     width_m, rows_m, draw_gaussian, favor_forward, favor_backward},
    {"favor_orth", "FAVOR+ with orthogonal random features (blocks of d, chi_d norms; width m)",
     width_m, rows_m, draw_orthogonal, favor_forward, favor_backward},
    {"rfa", "RFA random Fourier features [sin, cos](w_j.x/|x|)/sqrt(m) (width 2m)", width_2m,
     rows_m, draw_gaussian, rfa_forward, rfa_backward},
};
#define N_MAPS ((int)(sizeof maps / sizeof maps[0]))
static const char *const map_names[] = {"elu1", "favor", "favor_orth", "rfa"};
_Static_assert(sizeof map_names / sizeof map_names[0] == sizeof maps / sizeof maps[0],
               "map_names must list every feature map");

int ttt_feature_map_count(void) { return N_MAPS; }
const ttt_feature_map *ttt_feature_map_at(int i) { return i >= 0 && i < N_MAPS ? &maps[i] : NULL; }
const ttt_feature_map *ttt_feature_map_find(const char *name) {
    for (int i = 0; name && i < N_MAPS; i++)
        if (strcmp(maps[i].name, name) == 0) return &maps[i];
    return NULL;
}
const char *const *ttt_feature_map_names(void) { return map_names; }

float *ttt_feature_omega(ttt_ctx *ctx, const ttt_feature_map *fm, int d, int m, uint64_t seed) {
    const int rows = fm->rows(m);
    if (rows == 0 || !fm->draw) return NULL;
    float *omega = ttt_arena_alloc(ctx->arena, sizeof(float) * (size_t)rows * d);
    TTT_ASSERT(omega);
    if (fm->draw(omega, rows, d, seed) != TTT_OK) /* an op's draw has no status: the escape */
        ttt_ctx_out_of_memory(ctx, sizeof(double) * ((size_t)d * d + (size_t)d),
                              "the random feature map's draw");
    return omega;
}

/* ---- the op ---------------------------------------------------------------------------------- */

typedef struct feature_aux {
    const ttt_feature_map *fm;
    const float *omega;
} feature_aux;

static void feature_backward(ttt_ctx *ctx, const ttt_tape_entry *e, const float *dy) {
    const ttt_tensor *x = e->in[0];
    float *gx = ttt_grad(ctx, x);
    if (!gx) return;
    const feature_aux *a = e->aux;
    if (a->fm->backward(gx, dy, x->data, e->out->data, a->omega, TTT_ROWS(x), TTT_COLS(x),
                        e->iarg[0], (ttt_feature_role)e->iarg[1]) != TTT_OK)
        ttt_ctx_out_of_memory(ctx, sizeof(double) * ((size_t)e->iarg[0] + TTT_COLS(x)),
                              "the feature map's backward rows");
}

ttt_tensor *ttt_feature_apply(ttt_ctx *ctx, const ttt_feature_map *fm, const float *omega, int m,
                              ttt_feature_role role, const ttt_tensor *x) {
    const int T = TTT_ROWS(x), d = TTT_COLS(x);
    ttt_tensor *y = ttt_tensor_2d(ctx, T, fm->width(d, m));
    if (fm->forward(y->data, x->data, omega, T, d, m, role) != TTT_OK)
        ttt_ctx_out_of_memory(ctx, sizeof(double) * (size_t)m, "the feature map's rows");
    ttt_tape_entry *e = ttt_tape_record(ctx, feature_backward, y, (const ttt_tensor *const[]){x}, 1);
    if (e) {
        feature_aux *a = ttt_tape_alloc(ctx, sizeof *a);
        a->fm = fm;
        a->omega = omega;
        e->aux = a;
        e->iarg[0] = m;
        e->iarg[1] = (int)role;
        e->name = "feature_map";
    }
    return y;
}

/* PaTH attention (model.mixer: path; src/train/mixers/path.c, docs/math.md "PaTH attention"):
 * the mixer's output and its tape gradients against a float64 evaluation of the block written
 * here from the definition (not from the mixer's code path: the scores are walked with the
 * Householder factors applied in the other direction of the loop, and every projection is summed
 * in float64 from the float32 parameters):
 *     q, k, v = h W_q, h W_k, h W_v;   w = l2norm(silu(conv(h W_w1 W_w2))) per head;
 *     β = 2 σ(h W_β + b_β);   s_ij = q_i H_i ⋯ H_{j+1} k_jᵀ, H_t = I − β_t w_tᵀ w_t;
 *     o_i = Σ_{j ≤ i} softmax_j((s_ij + G_i − G_j) / sqrt(D)) v_j,
 * G the prefix sum of log f = logsigmoid(h W_f + b_f) with model.gate: scalar (else G = 0).
 *
 * (i) Forward, four blocks: the default block at small sizes (rank 3, kernel 3, T = 7, two
 *     sequences, two heads), the full-rank projection without convolution, a long one (T = 300,
 *     D = 64, β near 2, where the products of up to 299 factors are reflections all but in name),
 *     and the default block with the forget gate (T = 8). Tolerance per output element, a first-order forward error bound propagated next to
 *     the float64 values (ε = 2^-24, γ_n = nε/(1 − nε), the float32 inputs h and parameters exact):
 *       - a product y = x W over n terms: |δy| ≤ |δx|·|W| + γ_n·|x|·|W| (any summation order);
 *       - the convolution over K taps the same with γ_K; SiLU and σ: |silu'| ≤ 1.1, |σ'| ≤ 1/4,
 *         plus 8ε of the result (the fast exp's 2 ulp, the add, divide and multiply);
 *       - the L2 norm: ‖δŵ‖ ≤ ‖δz‖ / sqrt(‖z‖² + 10⁻⁶) + (D + 4)ε (the Jacobian of z ↦ z/‖z‖ has
 *         norm 1/‖z‖; the D-term sum of squares, the square root and the division);
 *       - a score: every factor has ‖H_t‖ ≤ 1 (eigenvalues 1 and 1 − β‖w‖² ∈ (−1, 1]), so
 *         ‖H_i ⋯ H_{j+1}‖ ≤ 1 and |δs_ij| ≤ ‖δq_i‖‖k_j‖ + ‖q_i‖‖δk_j‖ + ‖q_i‖‖k_j‖ Σ_{t=j+1}^{i}
 *         (|δβ_t|‖w_t‖² + 2β_t‖w_t‖‖δw_t‖), plus the op's own rounding: its float64 walk
 *         (T·(2D + 4) roundings of 2^-53) and ε|s_ij| for the float32 result; the scale ε|a_ij|;
 *       - the gate: |δ log f| ≤ |δz| + 8ε|log f| (|logsigmoid'| ≤ 1), the prefix sum
 *         |δG_t| ≤ Σ_{r ≤ t} (|δ log f_r| + γ_T |log f_r|), the bias ε|G_i − G_j| and its sum
 *         with the score ε|s_ij + G_i − G_j|;
 *       - the softmax: |δp_ij| ≤ 2 p_ij max_j |δa_ij| + (T + 4)ε p_ij (exp, the T-term sum, the
 *         division); o = p v: |δo| ≤ Σ_j |δp_ij||v_j| + p_ij|δv_j| + γ_T p_ij|v_j|;
 *     and twice that for the terms of second order. Every element must be within its bound. The
 *     bound is worst case: the errors measured are 1-2 % of it (1e-7 against max|o| ≈ 1.5), it
 *     is below 0.5 % of max|o| on the short blocks and 5 % on the long one (300 factors, each
 *     adding its w's and β's error bound), and it must stay below 10 % of max|o| and 10× below
 *     what a wrong convention moves: the float64 evaluation with each factor one token late
 *     (q_i H_i ⋯ H_j k_jᵀ) and without factors (plain softmax attention) must both be rejected
 *     by more than 10 bounds (measured: thousands on the short blocks, 27 and 37 on the long),
 *     and with the gate, its bias added after the scale (FoX's convention) as well (1760).
 * (ii) Gradients: L = Σ c ⊙ o (c normal) recorded on a tape; ttt_backward_from's gradient of every
 *     parameter of the block (W_q, W_k, W_v, W_w1, W_w2, the kernel, W_β, b_β) and of the input h
 *     (and W_f, b_f with the gate; blocks 0, 1 and 3) against central differences of the float64 evaluation (step 1e-6 of each entry's scale,
 *     exact to ~1e-9 relative). Tolerance per tensor |g − fd| ≤ 4·r·G + 1e-9·G, G = max|fd| of
 *     the tensor and r the forward's bound relative to max|o|: the backward walks the forward's
 *     operations transposed, over the same sums, so its values (the saved forward quantities)
 *     and its adjoints each carry at most the forward's relative error, twice over for the
 *     second-order terms. A gradient taken at b_β moved by 0.05 must be rejected. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autograd.h"
#include "mixer.h"
#include "ops.h"
#include "seqmodel.h"
#include "testutil.h"

#define EPS 0x1p-24

static double gam(int n) { return n * EPS / (1.0 - n * EPS); }

/* One block's parameters in float64 (copied from the float32 model) and its sizes. */
typedef struct net {
    int d, H, D, C, R, K, B, T;
    float scale;
    double *wq, *wk, *wv, *w1, *w2, *cw, *wb, *bb; /* w2 NULL: rank 0; cw NULL: kernel 0 */
    double *wf, *bf;                               /* the forget gate, or NULL */
} net;

/* the conventions evaluated: PaTH's; controls: the factors one token late, no factors, the
 * forget gate's bias added after the scale (FoX's convention) */
enum { PATH, LATE, NONE, UNSCALED };

static double *dup(const float *x, size_t n) {
    double *y = calloc(n ? n : 1, sizeof *y);
    for (size_t i = 0; i < n; i++) y[i] = x[i];
    return y;
}

static void drop(net *n) {
    free(n->wq), free(n->wk), free(n->wv), free(n->w1), free(n->w2), free(n->cw), free(n->wb),
        free(n->bb), free(n->wf), free(n->bf);
}

static const ttt_param *named(const ttt_seq_model *m, const char *name) {
    for (int p = 0; p < m->params.n; p++)
        if (strcmp(m->params.p[p]->name, name) == 0) return m->params.p[p];
    return NULL;
}

/* y (N, m) = x (N, n) W (n, m); with ey, the bound |δx|·|W| + γ_n |x|·|W| (ex NULL: x exact) */
static void mm(const double *x, const double *ex, const double *W, int N, int n, int m,
               double *y, double *ey) {
    for (int r = 0; r < N; r++)
        for (int c = 0; c < m; c++) {
            double s = 0, a = 0, e = 0;
            for (int i = 0; i < n; i++) {
                s += x[(size_t)r * n + i] * W[(size_t)i * m + c];
                a += fabs(x[(size_t)r * n + i] * W[(size_t)i * m + c]);
                if (ex) e += ex[(size_t)r * n + i] * fabs(W[(size_t)i * m + c]);
            }
            y[(size_t)r * m + c] = s;
            if (ey) ey[(size_t)r * m + c] = e + gam(n) * a;
        }
}

static double norm2(const double *x, int n) {
    double s = 0;
    for (int i = 0; i < n; i++) s += x[i] * x[i];
    return sqrt(s);
}

/* The block's output o (B·T, C) for input h (B·T, d) in float64, and with bound (may be NULL)
 * the first-order error bound of a float32 evaluation per element (the header). */
static void eval64(const net *n, const double *h, int variant, double *o, double *bound) {
    const int d = n->d, H = n->H, D = n->D, C = n->C, B = n->B, T = n->T, N = B * T;
    const size_t NC = (size_t)N * C;
    double *q = calloc(NC, sizeof *q), *k = calloc(NC, sizeof *k), *v = calloc(NC, sizeof *v);
    double *z = calloc(NC, sizeof *z), *w = calloc(NC, sizeof *w);
    double *eq = calloc(NC, sizeof *eq), *ek = calloc(NC, sizeof *ek), *ev = calloc(NC, sizeof *ev);
    double *ez = calloc(NC, sizeof *ez), *ew = calloc((size_t)N * H, sizeof *ew);
    double *be = calloc((size_t)N * H, sizeof *be), *eb = calloc((size_t)N * H, sizeof *eb);
    mm(h, NULL, n->wq, N, d, C, q, eq);
    mm(h, NULL, n->wk, N, d, C, k, ek);
    mm(h, NULL, n->wv, N, d, C, v, ev);
    if (n->w2) {
        const int R = n->R;
        double *z1 = calloc((size_t)N * R, sizeof *z1), *e1 = calloc((size_t)N * R, sizeof *e1);
        mm(h, NULL, n->w1, N, d, R, z1, e1);
        mm(z1, e1, n->w2, N, R, C, z, ez);
        free(z1), free(e1);
    } else {
        mm(h, NULL, n->w1, N, d, C, z, ez);
    }
    if (n->cw) { /* causal depthwise convolution restarting per sequence, then SiLU */
        double *cy = calloc(NC, sizeof *cy), *ey = calloc(NC, sizeof *ey);
        for (int b = 0; b < B; b++)
            for (int t = 0; t < T; t++)
                for (int c = 0; c < C; c++) {
                    double s = 0, a = 0, e = 0;
                    for (int j = 0; j < n->K && j <= t; j++) {
                        const size_t r = ((size_t)b * T + t - j) * C + c;
                        s += n->cw[j * C + c] * z[r];
                        a += fabs(n->cw[j * C + c] * z[r]);
                        e += fabs(n->cw[j * C + c]) * ez[r];
                    }
                    const size_t r = ((size_t)b * T + t) * C + c;
                    const double si = s / (1.0 + exp(-s));
                    cy[r] = si;
                    ey[r] = 1.1 * (e + gam(n->K) * a) + 8 * EPS * fabs(si);
                }
        memcpy(z, cy, NC * sizeof *z);
        memcpy(ez, ey, NC * sizeof *ez);
        free(cy), free(ey);
    }
    for (int r = 0; r < N; r++)
        for (int hh = 0; hh < H; hh++) { /* l2norm (eps 1e-6 under the root), β = 2 σ(·) */
            const size_t c0 = (size_t)r * C + (size_t)hh * D;
            const double nz = sqrt(norm2(z + c0, D) * norm2(z + c0, D) + 1e-6);
            for (int c = 0; c < D; c++) w[c0 + c] = z[c0 + c] / nz;
            ew[(size_t)r * H + hh] = norm2(ez + c0, D) / nz + (D + 4) * EPS;
            double zb = n->bb[hh], a = fabs(n->bb[hh]);
            for (int i = 0; i < d; i++) {
                zb += h[(size_t)r * d + i] * n->wb[i * H + hh];
                a += fabs(h[(size_t)r * d + i] * n->wb[i * H + hh]);
            }
            const double sg = 1.0 / (1.0 + exp(-zb));
            be[(size_t)r * H + hh] = 2 * sg;
            eb[(size_t)r * H + hh] = 0.5 * gam(d + 1) * a + 8 * EPS * 2 * sg;
        }
    /* the forget gate: log f = logsigmoid(h W_f + b_f), |d logsigmoid| ≤ 1, plus 8ε of it */
    double *lf = calloc((size_t)N * H, sizeof *lf), *elf = calloc((size_t)N * H, sizeof *elf);
    for (int r = 0; n->wf && r < N; r++)
        for (int hh = 0; hh < H; hh++) {
            double zf = n->bf[hh], a = fabs(n->bf[hh]);
            for (int i = 0; i < d; i++) {
                zf += h[(size_t)r * d + i] * n->wf[i * H + hh];
                a += fabs(h[(size_t)r * d + i] * n->wf[i * H + hh]);
            }
            lf[(size_t)r * H + hh] = -log1p(exp(-zf));
            elf[(size_t)r * H + hh] = gam(d + 1) * a + 8 * EPS * fabs(lf[(size_t)r * H + hh]);
        }
    double *G = malloc((size_t)T * sizeof *G), *eG = malloc((size_t)T * sizeof *eG);
    double *s = malloc((size_t)T * T * sizeof *s), *es = malloc((size_t)T * T * sizeof *es);
    double *cum = malloc((size_t)T * sizeof *cum), *u = malloc((size_t)D * sizeof *u);
    const double sc = n->scale;
    for (int b = 0; b < B; b++)
        for (int hh = 0; hh < H; hh++) {
            const size_t r0 = (size_t)b * T;
#define ROW(x, t) ((x) + (r0 + (t)) * C + (size_t)hh * D)
#define SC(x, t) ((x)[(r0 + (t)) * H + hh])
            /* the per-factor error ‖δH_t‖ ≤ |δβ_t|‖w_t‖² + 2β_t‖w_t‖‖δw_t‖, summed from the start */
            /* G = cumsum(log f): |δG_t| ≤ Σ_{r ≤ t} |δ log f_r| + γ_T Σ_{r ≤ t} |log f_r| */
            for (int t = 0; t < T; t++) {
                G[t] = (t ? G[t - 1] : 0) + SC(lf, t);
                eG[t] = (t ? eG[t - 1] : 0) + SC(elf, t) + gam(T) * fabs(SC(lf, t));
            }
            for (int t = 0; t < T; t++) {
                const double nw = norm2(ROW(w, t), D);
                cum[t] = (t ? cum[t - 1] : 0) + SC(eb, t) * nw * nw + 2 * SC(be, t) * nw * SC(ew, t);
            }
            /* for each key j, walk the queries forward from i = j: the key's row is carried by
             * the factors, k_j ← H_i-transformed, as a decoder does (the mixer carries queries) */
            for (int j = 0; j < T; j++) {
                for (int c = 0; c < D; c++) u[c] = ROW(k, j)[c];
                for (int i = j; i < T; i++) {
                    /* u = k_j H_{j+1} ⋯ H_i (PATH), k_j H_j ⋯ H_i (LATE), k_j (NONE) */
                    for (int t = (i == j ? (variant == LATE ? j : i + 1) : i); t <= i; t++) {
                        if (variant == NONE) break;
                        const double *wt = ROW(w, t);
                        double uw = 0;
                        for (int c = 0; c < D; c++) uw += u[c] * wt[c];
                        for (int c = 0; c < D; c++) u[c] -= SC(be, t) * uw * wt[c];
                    }
                    double dot = 0;
                    for (int c = 0; c < D; c++) dot += u[c] * ROW(q, i)[c];
                    /* the gate's bias G_i − G_j, added before the scale (FLA) */
                    const double gb = G[i] - G[j], eg = eG[i] + eG[j] + EPS * fabs(gb);
                    s[(size_t)i * T + j] = variant == UNSCALED ? sc * dot + gb : sc * (dot + gb);
                    const double nq = norm2(ROW(q, i), D), nk = norm2(ROW(k, j), D);
                    const double ds = norm2(ROW(eq, i), D) * nk + nq * norm2(ROW(ek, j), D) +
                                      nq * nk * (cum[i] - cum[j]) +
                                      T * (2.0 * D + 4) * 0x1p-53 * nq * nk + EPS * fabs(dot);
                    es[(size_t)i * T + j] = sc * (ds + eg + EPS * fabs(dot + gb)) +
                                            EPS * fabs(sc * (dot + gb));
                }
            }
            for (int i = 0; i < T; i++) {
                double mx = -INFINITY, sum = 0, dA = 0;
                for (int j = 0; j <= i; j++) mx = fmax(mx, s[(size_t)i * T + j]);
                for (int j = 0; j <= i; j++) {
                    sum += exp(s[(size_t)i * T + j] - mx);
                    dA = fmax(dA, es[(size_t)i * T + j]);
                }
                for (int c = 0; c < D; c++) {
                    double oc = 0, e = 0;
                    for (int j = 0; j <= i; j++) {
                        const double p = exp(s[(size_t)i * T + j] - mx) / sum;
                        oc += p * ROW(v, j)[c];
                        e += p * ((2 * dA + (2.0 * T + 8) * EPS) * fabs(ROW(v, j)[c]) +
                                  ROW(ev, j)[c]);
                    }
                    ROW(o, i)[c] = oc;
                    if (bound) ROW(bound, i)[c] = 2 * e;
                }
            }
#undef ROW
#undef SC
        }
    free(q), free(k), free(v), free(z), free(w), free(eq), free(ek), free(ev), free(ez), free(ew);
    free(be), free(eb), free(s), free(es), free(cum), free(u), free(lf), free(elf), free(G),
        free(eG);
}

/* ---- the model under test ----------------------------------------------------------------- */

typedef struct block {
    const char *model;          /* the model: map (one layer, no MLP) */
    int B, T;
    float std;                  /* every matrix redrawn N(0, std²) */
    float qk_std;               /* W_q and W_k: N(0, qk_std²) */
    float bb[2];                /* b_β per head */
} block;

typedef struct fixture {
    ttt_seq_model m;
    net n;
} fixture;

static void build(fixture *f, const block *bk, uint64_t seed) {
    char text[512];
    snprintf(text, sizeof text, "model: %s\n", bk->model);
    ttt_cfg_node *root = NULL;
    ttt_error err = {0};
    ck_assert_int_eq(ttt_cfg_load_string(text, "<test>", &root, &err), TTT_OK);
    ttt_seq_model_io io = {.vocab = 11, .seq_len = bk->T};
    ttt_seq_model_config c;
    ck_assert_msg(ttt_seq_model_parse((ttt_cfg_node *)ttt_cfg_get(root, "model"), NULL, &io, &c,
                                      &err) == TTT_OK,
                  "%s", err.msg);
    ttt_cfg_free(root);
    ck_assert_int_eq((int)c.mixer, TTT_MIXER_PATH);
    ck_assert_int_eq(ttt_seq_model_init(&f->m, &c, seed, &err), TTT_OK);
    ttt_rng r;
    ttt_rng_seed(&r, seed + 1);
    net *n = &f->n;
    *n = (net){.d = c.d_model, .H = c.n_heads, .D = c.head_dim, .C = c.n_heads * c.head_dim,
               .B = bk->B, .T = bk->T, .scale = 1.0f / sqrtf((float)c.head_dim)};
    for (int p = 0; p < f->m.params.n; p++) {
        ttt_param *pp = f->m.params.p[p];
        if (!strstr(pp->name, "layer0.mixer.")) continue;
        if (strstr(pp->name, ".b_b"))
            for (size_t j = 0; j < pp->n; j++) pp->data[j] = bk->bb[j % 2];
        else if (strstr(pp->name, ".b_f")) /* f ≈ 0.9 and 0.6: the gate matters */
            for (size_t j = 0; j < pp->n; j++) pp->data[j] = j % 2 ? 0.5f : 2.0f;
        else if (strstr(pp->name, ".conv_w"))
            ttt_param_init_normal(pp, &r, 0.6f);
        else if (strstr(pp->name, ".wq") || strstr(pp->name, ".wk"))
            ttt_param_init_normal(pp, &r, bk->qk_std);
        else
            ttt_param_init_normal(pp, &r, bk->std);
    }
#define GET(field, name)                                                                     \
    n->field = named(&f->m, name) ? dup(named(&f->m, name)->data, named(&f->m, name)->n) : NULL
    GET(wq, "layer0.mixer.wq");
    GET(wk, "layer0.mixer.wk");
    GET(wv, "layer0.mixer.wv");
    GET(w2, "layer0.mixer.w_w2");
    GET(cw, "layer0.mixer.conv_w");
    GET(wb, "layer0.mixer.w_b");
    GET(bb, "layer0.mixer.b_b");
    GET(wf, "layer0.mixer.w_f");
    GET(bf, "layer0.mixer.b_f");
    if (n->w2) {
        GET(w1, "layer0.mixer.w_w1");
        n->R = (int)named(&f->m, "layer0.mixer.w_w1")->shape[1];
    } else {
        GET(w1, "layer0.mixer.w_w");
    }
#undef GET
    n->K = n->cw ? (int)named(&f->m, "layer0.mixer.conv_w")->shape[0] : 0;
    ck_assert(n->wq && n->wk && n->wv && n->w1 && n->wb && n->bb);
}

static void destroy(fixture *f) {
    drop(&f->n);
    ttt_seq_model_free(&f->m);
}

/* the mixer's output for h on ctx (recorded when ctx records) */
static ttt_tensor *mixer_out(fixture *f, ttt_ctx *ctx, ttt_tensor *h) {
    const ttt_mixer_call call = {.ctx = ctx, .m = &f->m, .pt = f->m.pt, .ids = &f->m.blk[0],
                                 .h = h, .layer = 0, .B = f->n.B, .T = f->n.T};
    ttt_tensor *o = NULL;
    ttt_error err = {0};
    ck_assert_msg(ttt_mixer_at(TTT_MIXER_PATH)->forward(&call, &o, &err) == TTT_OK, "%s",
                  err.msg);
    ck_assert_int_eq(TTT_ROWS(o), f->n.B * f->n.T);
    ck_assert_int_eq(TTT_COLS(o), f->n.C);
    return o;
}

static const block blocks[] = {
    {"{d_model: 8, heads: 2, layers: 1, mlp: 0, mixer: path, path_w_rank: 3}", 2, 7, 0.5f, 0.5f,
     {1.5f, -0.5f}},
    {"{d_model: 8, heads: 2, layers: 1, mlp: 0, mixer: path, path_w_rank: 0, path_w_conv: 0}", 2,
     9, 0.5f, 0.5f, {0.3f, 2.0f}},
    {"{d_model: 16, heads: 1, head_dim: 64, layers: 1, mlp: 0, mixer: path, path_w_rank: 8}", 1,
     300, 0.3f, 0.1f, {3.0f, 3.0f}},
    {"{d_model: 8, heads: 2, layers: 1, mlp: 0, mixer: path, path_w_rank: 3, gate: scalar}", 2,
     8, 0.5f, 0.5f, {1.0f, 0.2f}},
};
#define N_BLOCKS ((int)(sizeof blocks / sizeof blocks[0]))

static ttt_tensor *input(ttt_ctx *ctx, const net *n, uint64_t seed) {
    ttt_tensor *h = ttt_tensor_2d(ctx, n->B * n->T, n->d);
    ttt_rng r;
    ttt_rng_seed(&r, seed);
    for (size_t i = 0; i < h->n; i++) h->data[i] = (float)(2.0 * ttt_rng_uniform(&r) - 1.0);
    return h;
}

START_TEST(path_mixer_equals_the_float64_block) {
    const block *bk = &blocks[_i];
    fixture f;
    build(&f, bk, 3 + (uint64_t)_i);
    const net *n = &f.n;
    ttt_arena arena;
    ttt_arena_init(&arena, 0);
    ttt_ctx ctx = {.arena = &arena};
    ttt_tensor *h = input(&ctx, n, 17 + (uint64_t)_i);
    ttt_tensor *o = mixer_out(&f, &ctx, h);
    const size_t no = o->n;
    double *h64 = dup(h->data, h->n), *want = malloc(no * sizeof *want);
    double *bound = malloc(no * sizeof *bound), *late = malloc(no * sizeof *late);
    double *none = malloc(no * sizeof *none), *unsc = malloc(no * sizeof *unsc);
    eval64(n, h64, PATH, want, bound);
    eval64(n, h64, LATE, late, NULL);
    eval64(n, h64, NONE, none, NULL);
    eval64(n, h64, UNSCALED, unsc, NULL);
    double worst = 0, err = 0, bmax = 0, omax = 0, dl_max = 0, dn_max = 0, bl = 0, bn = 0;
    double bu = 0;
    for (size_t i = 0; i < no; i++) {
        const double e = fabs(o->data[i] - want[i]);
        worst = fmax(worst, e / bound[i]);
        err = fmax(err, e);
        bmax = fmax(bmax, bound[i]);
        omax = fmax(omax, fabs(want[i]));
        /* the controls: the largest move beyond its element's bound */
        bl = fmax(bl, fabs(o->data[i] - late[i]) / bound[i]);
        bn = fmax(bn, fabs(o->data[i] - none[i]) / bound[i]);
        bu = fmax(bu, fabs(o->data[i] - unsc[i]) / bound[i]);
        dl_max = fmax(dl_max, fabs(late[i] - want[i]));
        dn_max = fmax(dn_max, fabs(none[i] - want[i]));
    }
    printf("path block %d (B %d, T %d, D %d): max error %.3g, bound up to %.3g (max|o| %.3g), "
           "worst error/bound %.3g; controls: factors one token late move o by %.3g (%.3g "
           "bounds), no factors by %.3g (%.3g bounds)\n",
           _i, n->B, n->T, n->D, err, bmax, omax, worst, dl_max, bl, dn_max, bn);
    fflush(stdout);
    TU_ASSERT_LE(worst, 1.0, "block %d: an output is off by %.3g of its bound", _i, worst);
    ck_assert_msg(bmax < 0.1 * omax, "block %d: the bound %.3g would hide an O(1) error", _i,
                  bmax);
    ck_assert_msg(bl > 10 && bn > 10, "block %d: a wrong convention went unseen (%.3g, %.3g)",
                  _i, bl, bn);
    if (n->wf) {
        printf("path block %d: the gate's bias after the scale moves o by %.3g bounds\n", _i, bu);
        ck_assert_msg(bu > 10, "block %d: the gate's scale went unseen (%.3g)", _i, bu);
    }
    free(h64), free(want), free(bound), free(late), free(none), free(unsc);
    ttt_arena_free(&arena);
    destroy(&f);
}
END_TEST

/* L(θ) = Σ c ⊙ o in float64 with one parameter entry (or input entry) replaced */
static double loss64(const net *n, const double *h, const double *c, double *o) {
    eval64(n, h, PATH, o, NULL);
    double L = 0;
    for (size_t i = 0; i < (size_t)n->B * n->T * n->C; i++) L += c[i] * o[i];
    return L;
}

/* the tensors compared: the block's parameters by name, and h */
static const char *const grad_names[] = {"layer0.mixer.wq",   "layer0.mixer.wk",
                                         "layer0.mixer.wv",   "layer0.mixer.w_w",
                                         "layer0.mixer.w_w1",
                                         "layer0.mixer.w_w2", "layer0.mixer.conv_w",
                                         "layer0.mixer.w_b",  "layer0.mixer.b_b",
                                         "layer0.mixer.w_f",  "layer0.mixer.b_f",
                                         "h"};
#define N_GRADS ((int)(sizeof grad_names / sizeof grad_names[0]))

static double *slot(net *n, double *h, const char *name) {
    if (strcmp(name, "h") == 0) return h;
    if (strstr(name, ".wq")) return n->wq;
    if (strstr(name, ".wk")) return n->wk;
    if (strstr(name, ".wv")) return n->wv;
    if (strstr(name, ".w_w2")) return n->w2;
    if (strstr(name, ".w_w")) return n->w1; /* w_w1, or w_w at rank 0 */
    if (strstr(name, ".conv_w")) return n->cw;
    if (strstr(name, ".w_b")) return n->wb;
    if (strstr(name, ".w_f")) return n->wf;
    if (strstr(name, ".b_f")) return n->bf;
    return n->bb;
}

/* The worst |g − fd| / tolerance over every compared tensor (header (ii)); *r the forward's
 * relative bound. bb_moved shifts b_β of the float32 model before the tape's run (a control). */
static double grad_check(int bi, float bb_moved, int verbose) {
    const block *bk = &blocks[bi];
    fixture f;
    build(&f, bk, 5);
    net *n = &f.n;
    tu_tape_fixture tf;
    tu_tape_fx_init(&tf);
    ttt_tensor *h = input(&tf.ctx, n, 23);
    h->requires_grad = 1;
    const ttt_param *bbp = named(&f.m, "layer0.mixer.b_b");
    for (size_t j = 0; j < bbp->n; j++) bbp->data[j] += bb_moved;
    for (int p = 0; p < f.m.params.n; p++) ttt_tensor_zero_grad(&f.m.pt[p]);
    ttt_tensor *o = mixer_out(&f, &tf.ctx, h);
    for (size_t j = 0; j < bbp->n; j++) bbp->data[j] -= bb_moved;
    const size_t no = o->n;
    double *c = malloc(no * sizeof *c), *o64 = malloc(no * sizeof *o64);
    double *bound = malloc(no * sizeof *bound);
    float *cf = malloc(no * sizeof *cf);
    ttt_rng r;
    ttt_rng_seed(&r, 29);
    ttt_rng_fill_normal(&r, cf, no, 0.0f, 1.0f);
    for (size_t i = 0; i < no; i++) c[i] = cf[i];
    ttt_backward_from(&tf.ctx, o, cf);
    double *h64 = dup(h->data, h->n);
    eval64(n, h64, PATH, o64, bound);
    double bmax = 0, omax = 0;
    for (size_t i = 0; i < no; i++) bmax = fmax(bmax, bound[i]), omax = fmax(omax, fabs(o64[i]));
    const double rel = bmax / omax;
    double worst = 0;
    for (int g = 0; g < N_GRADS; g++) {
        const ttt_param *pp = strcmp(grad_names[g], "h") ? named(&f.m, grad_names[g]) : NULL;
        if (strcmp(grad_names[g], "h") && !pp) continue; /* absent in this block */
        const float *got = pp ? pp->grad : h->grad;
        const size_t cnt = pp ? pp->n : h->n;
        double *x = slot(n, h64, grad_names[g]);
        double *fd = malloc(cnt * sizeof *fd), G = 0;
        for (size_t i = 0; i < cnt; i++) {
            const double keep = x[i], step = 1e-6 * fmax(fabs(keep), 1e-2);
            x[i] = keep + step;
            const double lp = loss64(n, h64, c, o64);
            x[i] = keep - step;
            const double lm = loss64(n, h64, c, o64);
            x[i] = keep;
            fd[i] = (lp - lm) / (2 * step);
            G = fmax(G, fabs(fd[i]));
        }
        const double tol = 4 * rel * G + 1e-9 * G;
        double e = 0;
        for (size_t i = 0; i < cnt; i++) e = fmax(e, fabs((double)got[i] - fd[i]));
        if (verbose)
            printf("path block %d gradient %-20s max|fd| %.3g, max|g - fd| %.3g, tolerance %.3g "
                   "(%.3g of it)\n",
                   bi, grad_names[g], G, e, tol, e / tol);
        worst = fmax(worst, e / tol);
        free(fd);
    }
    free(c), free(o64), free(bound), free(cf), free(h64);
    tu_tape_fx_free(&tf);
    destroy(&f);
    return worst;
}

START_TEST(path_gradients_equal_float64_differences) {
    const int bi = _i < 2 ? _i : 3; /* not the long block: its differences cost T² per entry */
    const double worst = grad_check(bi, 0.0f, 1);
    TU_ASSERT_LE(worst, 1.0, "block %d: a gradient is off by %.3g of its tolerance", bi, worst);
    tu_ratio_quiet = 1;
    const double moved = grad_check(bi, 0.05f, 0);
    tu_ratio_quiet = 0;
    printf("path block %d: gradients at b_beta moved by 0.05: %.3g of the tolerance\n", bi,
           moved);
    ck_assert_msg(moved > 1.0, "block %d: gradients at a moved b_beta passed (%.3g)", bi, moved);
}
END_TEST

/* The block FLA's PaTHAttention layer builds (docs/mixers.md): no convolution or activation on
 * q, k, v, no q/k norm, no positions, no output norm or gate; its own options are refused under
 * another mixer, and model.eta and a forget gate are refused under it, located. */
START_TEST(path_has_its_papers_block) {
    ttt_cfg_node *root = NULL;
    ttt_error err = {0};
    ck_assert_int_eq(ttt_cfg_load_string("model: {d_model: 8, heads: 2, mixer: path}\n", "m.yaml",
                                         &root, &err),
                     TTT_OK);
    ttt_seq_model_io io = {.vocab = 11, .seq_len = 7};
    ttt_seq_model_config c;
    ck_assert_int_eq(
        ttt_seq_model_parse((ttt_cfg_node *)ttt_cfg_get(root, "model"), NULL, &io, &c, &err),
        TTT_OK);
    ck_assert(c.conv == 0 && !c.act && !c.qk_norm && !c.out_norm && !c.out_gate);
    ck_assert(c.positions == TTT_POS_NONE && c.gate == TTT_GATE_NONE && c.eta == TTT_ETA_NONE);
    ttt_cfg_free(root);
    ttt_seq_model m;
    ck_assert_int_eq(ttt_seq_model_init(&m, &c, 1, &err), TTT_OK);
    /* d = 8, rank 32, H·D = 8, kernel 3, two heads: the default parameters and their shapes */
    const ttt_param *w1 = named(&m, "layer0.mixer.w_w1"), *w2 = named(&m, "layer0.mixer.w_w2");
    const ttt_param *cw = named(&m, "layer0.mixer.conv_w"), *bb = named(&m, "layer0.mixer.b_b");
    ck_assert(w1 && w1->shape[0] == 8 && w1->shape[1] == 32);
    ck_assert(w2 && w2->shape[0] == 32 && w2->shape[1] == 8);
    ck_assert(cw && cw->shape[0] == 3 && cw->shape[1] == 8);
    ck_assert(bb && bb->n == 2 && bb->data[0] == 0.0f && bb->data[1] == 0.0f); /* β = 1 */
    ck_assert(!named(&m, "layer0.mixer.conv_q"));
    ttt_seq_model_free(&m);
    static const struct {
        const char *text, *where, *what;
    } bad[] = {
        {"model: {d_model: 8, path_w_rank: 4}\nlayer: {preset: deltanet}\n", "m.yaml:1",
         "path_w_rank"},
        {"model: {d_model: 8, mixer: path, eta: true}\n", "m.yaml:1", "model.eta"},
        {"model: {d_model: 8, mixer: path, gate: vector}\n", "m.yaml:1", "not vector"},
        {"model: {d_model: 8, mixer: path, path_w_conv: -1}\n", "m.yaml:1", "path_w_conv"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_int_eq(ttt_cfg_load_string(bad[i].text, "m.yaml", &root, &err), TTT_OK);
        err = (ttt_error){0};
        ck_assert_int_ne(ttt_seq_model_parse((ttt_cfg_node *)ttt_cfg_get(root, "model"),
                                             (ttt_cfg_node *)ttt_cfg_get(root, "layer"), &io, &c,
                                             &err),
                         TTT_OK);
        ck_assert_msg(strstr(err.msg, bad[i].where) && strstr(err.msg, bad[i].what), "%s: %s",
                      bad[i].text, err.msg);
        ttt_cfg_free(root);
    }
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("path");
    TCase *t = tcase_create("core");
    tcase_set_timeout(t, 600);
    tcase_add_loop_test(t, path_mixer_equals_the_float64_block, 0, N_BLOCKS);
    tcase_add_loop_test(t, path_gradients_equal_float64_differences, 0, 3);
    tcase_add_test(t, path_has_its_papers_block);
    suite_add_tcase(s, t);
    return s;
}

int main(void) { return tu_run(suite()); }

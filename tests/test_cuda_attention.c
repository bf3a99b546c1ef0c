/* The fused causal attention on a CUDA device (ttt_attention_causal, src/core/cuda/
 * ops_attention.cu, docs/device_ops.md "Fused causal attention") against the CPU op at the
 * sizes the kernels tile: T from 1 to 1030 (one token, exactly one 64-token tile, one more
 * than a tile, many tiles), head dims 8 … 128 with dk ≠ dv, batches of sequences, peaked
 * softmax rows (scale 1 on dk = 16), and the gradient of an op whose output is used twice (the
 * kernels' accumulate path). tests/test_backend_ops.c checks the op's contract on small cases
 * with finite differences; this suite checks the tiling at real sizes, quickly.
 *
 * Reference: the CPU op, within one rounding of the exact values (tests/test_ops.c checks it
 * against float64). Bounds, per element, from the rounding analysis of the kernels (float32
 * products, double softmax sums, ε = 2^-24), in scales computed here in double from the inputs,
 * with p_ij = exp(s_ij − lse_i), s_ij = scale·q_i·k_j, κ_ij = scale·Σ_c|q_ic k_jc| (bounds the
 * float32 error of s_ij: (dk + 2)·ε·κ_ij) and n_t(i) = ⌈(i + 1)/64⌉ key tiles:
 *   o_ie:  ε·[(dk + 2)·Σ_j p_ij|v_je − o_ie|κ_ij               (scores: the softmax's shift)
 *             + (i + 5 + 3·n_t)·Σ_j p_ij|v_je|]                 (P V over i + 1 keys, expf and
 *                                                                the per-tile rescaling)
 *   p_ij relative, in units of ε: π_ij = (dk + 2)(κ_ij + max_j κ_ij) + |lse_i| + |s_ij| + 4
 *             (the recomputed score, the forward's lse: its scores and its float rounding)
 *   D_i = Σ_j p_ij dP_ij (the kernels form it from their own p and dP, in double), its error
 *          in units of ε: δD_i = Σ_j p_ij·(π_ij·|dP_ij| + (dv + 2)·Σ_e|dO_ie v_je|)
 *   dS_ij = p_ij(dP_ij − D_i), its error in units of ε:
 *          σ_ij = |dS_ij|·π_ij + p_ij·[(dv + 2)·Σ_e|dO_ie v_je| + δD_i]
 *   dV_je: ε·Σ_{i≥j} p_ij|dO_ie|·(π_ij + T − j + 3·n_t)
 *   dQ_ic: ε·scale·Σ_{j≤i} (σ_ij + (i + 3)|dS_ij|)·|k_jc|
 *   dK_jc: ε·scale·Σ_{i≥j} (σ_ij + (T − j + 3)|dS_ij|)·|q_ic|
 * each times c = 2 (second-order terms), plus ε|ref| for the reference's own rounding. The
 * accumulate case doubles the bound and adds the addition's rounding.
 *
 * Controls, each of which must be rejected (err/bound > 1, printed as "ctl fwd" and "ctl bwd"):
 * the device output for v_00 × (1 + 1e-4) (row 0's only key), and the device gradients for the
 * seed's last row's first element × (1 + 1e-3) (the last key's dV is that row's alone).
 *
 * Without a GPU it prints why and exits 77. TTT_CUDA_ATTENTION_SELF=1 runs everything with the
 * CPU standing in for the device: every error is then 0 and every control must be rejected. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autograd.h"
#include "device.h"
#include "ops.h"
#include "tensor.h"

#define EPS32 0x1p-24
#define TILE 64

typedef struct acase {
    int B, T, dk, dv;
    float scale;
    int twice; /* the output is A(q, k, v) + A(q, k, v): gradients accumulate */
} acase;

static const acase CASES[] = {
    {3, 1, 16, 16, 0.25f, 0},    {2, 64, 64, 64, 0.125f, 0},   {2, 65, 64, 64, 0.125f, 0},
    {2, 65, 64, 64, 0.125f, 1},  {1, 200, 40, 24, 0.16f, 0},   {2, 150, 16, 16, 1.0f, 0},
    {3, 129, 8, 8, 0.35f, 0},    {1, 97, 128, 32, 0.09f, 0},   {2, 300, 128, 128, 0.088f, 0},
    {1, 1030, 64, 64, 0.125f, 0},
};
#define N_CASES ((int)(sizeof CASES / sizeof CASES[0]))

static uint64_t rng_s = 0xA77E5EEDu;
static double urand(void) { /* splitmix64 → [0, 1) */
    uint64_t z = (rng_s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (double)(z >> 11) / 9007199254740992.0;
}
static float nrand(void) { /* a normal draw (Box–Muller) */
    const double u = urand() + 1e-300, v = urand();
    return (float)(sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v));
}

typedef struct result {
    float *o, *gq, *gk, *gv;
} result;

static void result_free(result *r) {
    free(r->o);
    free(r->gq);
    free(r->gk);
    free(r->gv);
}

static float *read_back(const ttt_tensor *t, const float *data, void *stream) {
    float *h = malloc((t->n ? t->n : 1) * sizeof(float));
    ttt_tensor v = ttt_tensor_view_on(ttt_tensor_device(t), (float *)data, t->ndim, t->shape);
    ttt_error err;
    if (ttt_tensor_read(&v, h, stream, &err) != TTT_OK) {
        printf("read back: %s\n", err.msg);
        exit(1);
    }
    return h;
}

/* Forward and backward (seed w) of the op on `arena`'s device. Returns 0 on a device error. */
static int run(ttt_arena *arena, const acase *c, const float *q, const float *k, const float *v,
               const float *w, result *out) {
    ttt_tape tape;
    ttt_tape_init(&tape);
    ttt_ctx ctx = {.arena = arena, .grad = 1, .tape = &tape};
    ttt_arena_mark m0 = ttt_arena_mark_get(arena);
    const float *src[3] = {q, k, v};
    ttt_tensor *in[3];
    for (int i = 0; i < 3; i++) {
        ttt_tensor h = ttt_tensor_view((float *)src[i], 3,
                                       (int[]){c->B, c->T, i == 2 ? c->dv : c->dk});
        in[i] = ttt_tensor_to(&ctx, &h);
        in[i]->requires_grad = 1;
    }
    ttt_tensor *y = ttt_attention_causal(&ctx, in[0], in[1], in[2], c->scale);
    if (c->twice) y = ttt_add(&ctx, y, ttt_attention_causal(&ctx, in[0], in[1], in[2], c->scale));
    ttt_tensor wh = ttt_tensor_view((float *)w, y->ndim, y->shape);
    ttt_backward_from(&ctx, y, ttt_tensor_to(&ctx, &wh)->data);
    out->o = read_back(y, y->data, arena->stream);
    out->gq = read_back(in[0], in[0]->grad, arena->stream);
    out->gk = read_back(in[1], in[1]->grad, arena->stream);
    out->gv = read_back(in[2], in[2]->grad, arena->stream);
    ttt_tape_free(&tape);
    ttt_arena_release(arena, m0);
    ttt_error e;
    if (ttt_device_ops_status(&e) != TTT_OK) {
        printf("device error: %s\n", e.msg);
        return 0;
    }
    return 1;
}

/* Per-element bounds (the header's formulas, c = 2) from the inputs and the CPU results. */
typedef struct bounds {
    double *o, *gq, *gk, *gv;
} bounds;

static bounds make_bounds(const acase *c, const float *q, const float *k, const float *v,
                          const float *w, const result *ref) {
    const int T = c->T, dk = c->dk, dv = c->dv;
    const size_t nq = (size_t)c->B * T * dk, nv = (size_t)c->B * T * dv;
    bounds b = {calloc(nv, sizeof(double)), calloc(nq, sizeof(double)),
                calloc(nq, sizeof(double)), calloc(nv, sizeof(double))};
    double *s = malloc((size_t)T * sizeof(double)), *kap = malloc((size_t)T * sizeof(double));
    double *p = malloc((size_t)T * sizeof(double)), *dp = malloc((size_t)T * sizeof(double));
    double *lse = malloc((size_t)T * sizeof(double)), *kmax = malloc((size_t)T * sizeof(double));
    double *pis = malloc((size_t)T * sizeof(double)), *dvas = malloc((size_t)T * sizeof(double));
    const double mult = c->twice ? 2.0 : 1.0; /* o and the seed as the single op sees them */
    for (int bb = 0; bb < c->B; bb++) {
        const size_t base = (size_t)bb * T;
        const float *qb = q + base * dk, *kb = k + base * dk, *vb = v + base * dv;
        const float *wb = w + base * dv, *ob = ref->o + base * dv;
        /* forward scales and the row log-sum-exp */
        for (int i = 0; i < T; i++) {
            double m = -INFINITY, km = 0.0;
            for (int j = 0; j <= i; j++) {
                double d = 0.0, a = 0.0;
                for (int e = 0; e < dk; e++) {
                    d += (double)qb[(size_t)i * dk + e] * kb[(size_t)j * dk + e];
                    a += fabs((double)qb[(size_t)i * dk + e] * kb[(size_t)j * dk + e]);
                }
                s[j] = c->scale * d;
                kap[j] = c->scale * a;
                m = fmax(m, s[j]);
                km = fmax(km, kap[j]);
            }
            double l = 0.0;
            for (int j = 0; j <= i; j++) l += exp(s[j] - m);
            lse[i] = m + log(l);
            kmax[i] = km;
            const int nt = (i + TILE) / TILE;
            for (int e = 0; e < dv; e++) {
                const double o = ob[(size_t)i * dv + e] / mult;
                double A = 0.0, V = 0.0;
                for (int j = 0; j <= i; j++) {
                    const double pj = exp(s[j] - lse[i]), x = vb[(size_t)j * dv + e];
                    A += pj * fabs(x - o) * kap[j];
                    V += pj * fabs(x);
                }
                b.o[(base + i) * dv + e] = EPS32 * ((dk + 2) * A + (i + 5 + 3 * nt) * V);
            }
        }
        /* backward scales, row by row of queries */
        for (int i = 0; i < T; i++) {
            const float *qi = qb + (size_t)i * dk, *wi = wb + (size_t)i * dv;
            const int nt = (i + TILE) / TILE;
            /* per key: p, dP, π and Σ_e|dO_ie v_je|; then D and its error (units of ε) */
            double delta = 0.0, dD = 0.0;
            for (int j = 0; j <= i; j++) {
                const float *kj = kb + (size_t)j * dk, *vj = vb + (size_t)j * dv;
                double d = 0.0, a = 0.0, dpj = 0.0, dva = 0.0;
                for (int e = 0; e < dk; e++) {
                    d += (double)qi[e] * kj[e];
                    a += fabs((double)qi[e] * kj[e]);
                }
                for (int e = 0; e < dv; e++) {
                    dpj += (double)wi[e] * vj[e];
                    dva += fabs((double)wi[e] * vj[e]);
                }
                const double sj = c->scale * d;
                p[j] = exp(sj - lse[i]);
                dp[j] = dpj;
                pis[j] = (dk + 2) * (c->scale * a + kmax[i]) + fabs(lse[i]) + fabs(sj) + 4.0;
                dvas[j] = dva;
                delta += p[j] * dpj;
                dD += p[j] * (pis[j] * fabs(dpj) + (dv + 2) * dva);
            }
            for (int j = 0; j <= i; j++) {
                const float *kj = kb + (size_t)j * dk;
                const double pi = pis[j], ds = p[j] * (dp[j] - delta);
                const double sig = fabs(ds) * pi + p[j] * ((dv + 2) * dvas[j] + dD);
                for (int e = 0; e < dv; e++)
                    b.gv[(base + j) * dv + e] +=
                        EPS32 * p[j] * fabs((double)wi[e]) * (pi + (T - j) + 3 * nt);
                for (int e = 0; e < dk; e++) {
                    b.gq[(base + i) * dk + e] +=
                        EPS32 * c->scale * (sig + (i + 3) * fabs(ds)) * fabs((double)kj[e]);
                    b.gk[(base + j) * dk + e] +=
                        EPS32 * c->scale * (sig + (T - j + 3) * fabs(ds)) * fabs((double)qi[e]);
                }
            }
        }
    }
    /* c = 2, the accumulate case twice that plus the addition, and the reference's rounding */
    double *all[4] = {b.o, b.gq, b.gk, b.gv};
    const float *refs[4] = {ref->o, ref->gq, ref->gk, ref->gv};
    const size_t ns[4] = {nv, nq, nq, nv};
    for (int t = 0; t < 4; t++)
        for (size_t i = 0; i < ns[t]; i++)
            all[t][i] = 2.0 * mult * all[t][i] + (c->twice ? 2.0 : 1.0) * EPS32 * fabs(refs[t][i]);
    free(s);
    free(kap);
    free(p);
    free(dp);
    free(lse);
    free(kmax);
    free(pis);
    free(dvas);
    return b;
}

static double worst(const float *got, const float *ref, const double *tol, size_t n) {
    double r = 0.0;
    for (size_t i = 0; i < n; i++) {
        const double e = fabs((double)got[i] - ref[i]);
        const double x = tol[i] > 0.0 ? e / tol[i] : (e > 0.0 ? INFINITY : 0.0);
        if (!(x <= r)) r = x; /* NaN is the worst */
    }
    return r;
}

int main(void) {
    const char *self_env = getenv("TTT_CUDA_ATTENTION_SELF");
    const int self = self_env && *self_env && strcmp(self_env, "0") != 0;
    ttt_arena host, dev;
    ttt_arena_init(&host, 0);
    if (!self) {
        if (!ttt_device_cuda_built()) {
            printf("skipped: built without CUDA (configure with -DTTT_CUDA=ON)\n");
            return 77;
        }
        ttt_error err;
        if (ttt_device_usable(ttt_device_cuda(0), &err) != TTT_OK) {
            printf("skipped: no usable CUDA device: %s\n", err.msg);
            return 77;
        }
        if (ttt_arena_init_device(&dev, (size_t)64 << 20, ttt_device_cuda(0), NULL, &err) !=
            TTT_OK) {
            printf("cuda:0 arena: %s\n", err.msg);
            return 1;
        }
    }
    ttt_arena *da = self ? &host : &dev;
    printf("%s against the CPU op; err/bound ≤ 1 passes (tests/test_cuda_attention.c)\n",
           self ? "host (self-check)" : "cuda:0");
    printf("%4s %5s %4s %4s %6s %5s %9s %9s %9s %9s %9s %9s  %s\n", "B", "T", "dk", "dv",
           "scale", "twice", "o", "dq", "dk", "dv", "ctl fwd", "ctl bwd", "result");
    int failures = 0;
    for (int ci = 0; ci < N_CASES; ci++) {
        const acase *c = &CASES[ci];
        const size_t nq = (size_t)c->B * c->T * c->dk, nv = (size_t)c->B * c->T * c->dv;
        float *q = malloc(nq * sizeof(float)), *k = malloc(nq * sizeof(float));
        float *v = malloc(nv * sizeof(float)), *w = malloc(nv * sizeof(float));
        for (size_t i = 0; i < nq; i++) q[i] = nrand(), k[i] = nrand();
        for (size_t i = 0; i < nv; i++) v[i] = nrand(), w[i] = nrand();
        result ref, got, fc, bc;
        int ok = run(&host, c, q, k, v, w, &ref) && run(da, c, q, k, v, w, &got);
        bounds b = make_bounds(c, q, k, v, w, &ref);
        const double eo = worst(got.o, ref.o, b.o, nv), eq = worst(got.gq, ref.gq, b.gq, nq);
        const double ek = worst(got.gk, ref.gk, b.gk, nq), ev = worst(got.gv, ref.gv, b.gv, nv);
        /* controls */
        const float keep_v = v[0];
        v[0] = keep_v * (1.0f + 1e-4f);
        ok = run(da, c, q, k, v, w, &fc) && ok;
        v[0] = keep_v;
        const double fcr = worst(fc.o, ref.o, b.o, nv);
        const int fwd_ctl = fcr > 1.0;
        const size_t last = nv - (size_t)c->dv; /* the last row's first element */
        const float keep_w = w[last];
        w[last] = keep_w * (1.0f + 1e-3f);
        ok = run(da, c, q, k, v, w, &bc) && ok;
        w[last] = keep_w;
        const double cq = worst(bc.gq, ref.gq, b.gq, nq), ck = worst(bc.gk, ref.gk, b.gk, nq);
        const double cv = worst(bc.gv, ref.gv, b.gv, nv);
        const double bcr = fmax(cq, fmax(ck, cv));
        const int bwd_ctl = bcr > 1.0;
        ok = ok && eo <= 1.0 && eq <= 1.0 && ek <= 1.0 && ev <= 1.0 && fwd_ctl && bwd_ctl;
        printf("%4d %5d %4d %4d %6.3g %5s %9.3g %9.3g %9.3g %9.3g %9.3g %9.3g  %s\n", c->B,
               c->T, c->dk, c->dv, (double)c->scale, c->twice ? "yes" : "no", eo, eq, ek, ev, fcr,
               bcr, ok ? "ok" : "FAIL");
        fflush(stdout);
        failures += !ok;
        result_free(&ref);
        result_free(&got);
        result_free(&fc);
        result_free(&bc);
        free(b.o);
        free(b.gq);
        free(b.gk);
        free(b.gv);
        free(q);
        free(k);
        free(v);
        free(w);
    }
    printf("%d of %d cases failed\n", failures, N_CASES);
    ttt_arena_free(&host);
    if (!self) ttt_arena_free(&dev);
    return failures ? 1 : 0;
}

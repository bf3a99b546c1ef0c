/* The two-level associative scan of linear recurrences (scan.h, docs/math.md §5.5): blocks
 * scanned in parallel from zero, a scan over the block carries, a fix-up in parallel. Every block
 * writes only its own rows and its own slot of the carries, so the threads share nothing but the
 * read-only inputs; the arena is used only outside the parallel regions. */
#include <cblas.h>
#include <math.h>
#include <string.h>

#include "fastexp.h"
#include "kernels.h"
#include "scan.h"

int ttt_scan_blocks(long T, int block) {
    if (block < 1) block = 1;
    long P = (T + block - 1) / block;
    if (P > TTT_SCAN_MAX_BLOCKS) P = TTT_SCAN_MAX_BLOCKS;
    return P < 1 ? 1 : (int)P;
}

void ttt_scan_block_range(int b, int P, int T, int *t0, int *t1) {
    const int len = (T + P - 1) / P;
    long a = (long)b * len, e = a + len;
    if (a > T) a = T;
    if (e > T) e = T;
    *t0 = (int)a;
    *t1 = (int)e;
}

static int clamp_blocks(int blocks, int T) {
    if (blocks > TTT_SCAN_MAX_BLOCKS) blocks = TTT_SCAN_MAX_BLOCKS;
    if (blocks > T) blocks = T;
    return blocks < 1 ? 1 : blocks;
}

/* ---- real diagonal ---- */

void ttt_scan_diag(ttt_ctx *ctx, float *h, float *h0, const float *a, const float *b, int lda,
                   int T, int n, int blocks) {
    if (T <= 0 || n <= 0) return;
    const int P = clamp_blocks(blocks, T);
    ttt_arena_mark m = ttt_arena_mark_get(ctx->arena);
    float *Ab = ttt_arena_alloc(ctx->arena, sizeof(float) * (size_t)P * n); /* (P, n) Π a */
    float *St = ttt_arena_alloc(ctx->arena, sizeof(float) * (size_t)P * n); /* (P, n) starts */
    TTT_SCAN_PARALLEL_BLOCKS(P)
    for (int p = 0; p < P; p++) { /* 1. local scans from zero */
        int t0, t1;
        ttt_scan_block_range(p, P, T, &t0, &t1);
        float *A = Ab + (size_t)p * n;
        for (int i = 0; i < n; i++) A[i] = 1.0f;
        for (int t = t0; t < t1; t++) {
            const float *at = a + (size_t)t * lda, *bt = b + (size_t)t * n;
            const float *prev = t > t0 ? h + (size_t)(t - 1) * n : NULL;
            float *ht = h + (size_t)t * n;
            for (int i = 0; i < n; i++) {
                ht[i] = (prev ? at[i] * prev[i] : 0.0f) + bt[i];
                A[i] *= at[i];
            }
        }
    }
    for (int p = 0; p < P; p++) { /* 2. the carries: start of each block */
        int t0, t1;
        ttt_scan_block_range(p, P, T, &t0, &t1);
        memcpy(St + (size_t)p * n, h0, sizeof(float) * n);
        if (t1 > t0) {
            const float *A = Ab + (size_t)p * n, *B = h + (size_t)(t1 - 1) * n;
            for (int i = 0; i < n; i++) h0[i] = A[i] * h0[i] + B[i];
        }
    }
    TTT_SCAN_PARALLEL_BLOCKS(P)
    for (int p = 0; p < P; p++) { /* 3. fix-up: h_t += (Π_{t0..t} a) h_start */
        int t0, t1;
        ttt_scan_block_range(p, P, T, &t0, &t1);
        const float *s = St + (size_t)p * n;
        float *cum = Ab + (size_t)p * n; /* reused: Ab's slot p was read in step 2 */
        for (int i = 0; i < n; i++) cum[i] = 1.0f;
        for (int t = t0; t < t1; t++) {
            const float *at = a + (size_t)t * lda;
            float *ht = h + (size_t)t * n;
            for (int i = 0; i < n; i++) {
                cum[i] *= at[i];
                ht[i] += cum[i] * s[i];
            }
        }
    }
    ttt_arena_release(ctx->arena, m);
}

void ttt_scan_diag_sequential(float *h, float *h0, const float *a, const float *b, int lda,
                              int T, int n) {
    /* the running pair (A, B) = (a_t, b_t) ∘ … ∘ (a_1, b_1), kept in double */
    for (int i = 0; i < n; i++) {
        double A = 1, B = 0;
        for (int t = 0; t < T; t++) {
            const double at = a[(size_t)t * lda + i];
            A = at * A;
            B = at * B + b[(size_t)t * n + i];
            h[(size_t)t * n + i] = (float)(A * h0[i] + B);
        }
        h0[i] = (float)(A * h0[i] + B);
    }
}

/* ---- complex diagonal ---- */

static inline void cmul(float *re, float *im, float ar, float ai, float br, float bi) {
    *re = ar * br - ai * bi;
    *im = ar * bi + ai * br;
}

void ttt_scan_cdiag(ttt_ctx *ctx, float *h, float *h0, const float *lam, const float *b, int lda,
                    int T, int n, int blocks) {
    if (T <= 0 || n <= 0) return;
    const int P = clamp_blocks(blocks, T), w = 2 * n;
    ttt_arena_mark m = ttt_arena_mark_get(ctx->arena);
    float *Ab = ttt_arena_alloc(ctx->arena, sizeof(float) * (size_t)P * w);
    float *St = ttt_arena_alloc(ctx->arena, sizeof(float) * (size_t)P * w);
    TTT_SCAN_PARALLEL_BLOCKS(P)
    for (int p = 0; p < P; p++) {
        int t0, t1;
        ttt_scan_block_range(p, P, T, &t0, &t1);
        float *A = Ab + (size_t)p * w;
        for (int i = 0; i < n; i++) A[2 * i] = 1.0f, A[2 * i + 1] = 0.0f;
        for (int t = t0; t < t1; t++) {
            const float *lt = lam + (size_t)t * lda, *bt = b + (size_t)t * w;
            const float *prev = t > t0 ? h + (size_t)(t - 1) * w : NULL;
            float *ht = h + (size_t)t * w;
            for (int i = 0; i < n; i++) {
                float r = 0, s = 0;
                if (prev) cmul(&r, &s, lt[2 * i], lt[2 * i + 1], prev[2 * i], prev[2 * i + 1]);
                ht[2 * i] = r + bt[2 * i];
                ht[2 * i + 1] = s + bt[2 * i + 1];
                cmul(&r, &s, lt[2 * i], lt[2 * i + 1], A[2 * i], A[2 * i + 1]);
                A[2 * i] = r, A[2 * i + 1] = s;
            }
        }
    }
    for (int p = 0; p < P; p++) {
        int t0, t1;
        ttt_scan_block_range(p, P, T, &t0, &t1);
        memcpy(St + (size_t)p * w, h0, sizeof(float) * w);
        if (t1 > t0) {
            const float *A = Ab + (size_t)p * w, *B = h + (size_t)(t1 - 1) * w;
            for (int i = 0; i < n; i++) {
                float r, s;
                cmul(&r, &s, A[2 * i], A[2 * i + 1], h0[2 * i], h0[2 * i + 1]);
                h0[2 * i] = r + B[2 * i];
                h0[2 * i + 1] = s + B[2 * i + 1];
            }
        }
    }
    TTT_SCAN_PARALLEL_BLOCKS(P)
    for (int p = 0; p < P; p++) {
        int t0, t1;
        ttt_scan_block_range(p, P, T, &t0, &t1);
        const float *s0 = St + (size_t)p * w;
        float *cum = Ab + (size_t)p * w;
        for (int i = 0; i < n; i++) cum[2 * i] = 1.0f, cum[2 * i + 1] = 0.0f;
        for (int t = t0; t < t1; t++) {
            const float *lt = lam + (size_t)t * lda;
            float *ht = h + (size_t)t * w;
            for (int i = 0; i < n; i++) {
                float r, s;
                cmul(&r, &s, lt[2 * i], lt[2 * i + 1], cum[2 * i], cum[2 * i + 1]);
                cum[2 * i] = r, cum[2 * i + 1] = s;
                cmul(&r, &s, cum[2 * i], cum[2 * i + 1], s0[2 * i], s0[2 * i + 1]);
                ht[2 * i] += r;
                ht[2 * i + 1] += s;
            }
        }
    }
    ttt_arena_release(ctx->arena, m);
}

void ttt_scan_cdiag_sequential(float *h, float *h0, const float *lam, const float *b, int lda,
                               int T, int n) {
    for (int i = 0; i < n; i++) {
        double Ar = 1, Ai = 0, Br = 0, Bi = 0; /* the running pair, complex, in double */
        const double sr = h0[2 * i], si = h0[2 * i + 1];
        for (int t = 0; t < T; t++) {
            const double lr = lam[(size_t)t * lda + 2 * i], li = lam[(size_t)t * lda + 2 * i + 1];
            const double ar = lr * Ar - li * Ai, ai = lr * Ai + li * Ar;
            const double br = lr * Br - li * Bi + b[(size_t)t * 2 * n + 2 * i];
            const double bi = lr * Bi + li * Br + b[(size_t)t * 2 * n + 2 * i + 1];
            Ar = ar, Ai = ai, Br = br, Bi = bi;
            h[(size_t)t * 2 * n + 2 * i] = (float)(Ar * sr - Ai * si + Br);
            h[(size_t)t * 2 * n + 2 * i + 1] = (float)(Ar * si + Ai * sr + Bi);
        }
        h0[2 * i] = (float)(Ar * sr - Ai * si + Br);
        h0[2 * i + 1] = (float)(Ar * si + Ai * sr + Bi);
    }
}

/* ---- gated linear attention: pairs (Diag(α_t), β_t k_tᵀ v_t), read-out q_t S_t ---- */

double ttt_linear_attention_scan_bytes(long T, int d_k, int d_v, int blocks) {
    const double P = blocks;
    /* M (P, d_k, d_v), Ab (P, d_k), Qd (T, d_k), 64-byte alignment slack per allocation */
    return (P * d_k * d_v + P * d_k + (double)T * d_k + 3 * 16) * sizeof(float);
}

ttt_status ttt_linear_attention_scan(ttt_ctx *ctx, float *o, float *S, const float *q,
                                     const float *k, const float *v, const float *beta,
                                     const float *log_alpha, int alpha_vec, int T, int d_k,
                                     int d_v, int blocks) {
    if (T <= 0) return TTT_OK;
    const int P = clamp_blocks(blocks, T);
    const size_t dd = (size_t)d_k * d_v;
    const int gk = log_alpha && alpha_vec ? d_k : 1; /* gate values per token */
    ttt_arena_mark m = ttt_arena_mark_get(ctx->arena);
    float *M = ttt_arena_alloc(ctx->arena, sizeof(float) * (size_t)P * dd);   /* (P, d_k, d_v) */
    float *Ab = ttt_arena_alloc(ctx->arena, sizeof(float) * (size_t)P * d_k); /* (P, d_k) */
    float *Qd = ttt_arena_alloc(ctx->arena, sizeof(float) * (size_t)T * d_k); /* (T, d_k) */
    /* each block's kernel status, read after the blocks ran (kernels.h: rows beyond 256) */
    ttt_status *bs = ttt_arena_alloc(ctx->arena, sizeof(ttt_status) * (size_t)P);
    memset(M, 0, sizeof(float) * (size_t)P * dd);
    const ttt_form_ld ld = {.o = d_v, .q = d_k, .k = d_k, .v = d_v, .beta = 1, .la = gk};
    TTT_SCAN_PARALLEL_BLOCKS(P)
    for (int p = 0; p < P; p++) {
        int t0, t1;
        ttt_scan_block_range(p, P, T, &t0, &t1);
        /* 1. the block's recurrence from zero: local outputs and its B (the local final state) */
        bs[p] = ttt_linear_attention_recurrent_ld(
            o + (size_t)t0 * d_v, M + (size_t)p * dd, q + (size_t)t0 * d_k,
            k + (size_t)t0 * d_k, v + (size_t)t0 * d_v, beta ? beta + t0 : NULL,
            log_alpha ? log_alpha + (size_t)t0 * gk : NULL, alpha_vec, t1 - t0, d_k, d_v, &ld);
        /* the decay from the block start to t, Π_{s=t0..t} α_s (cumulated in log space, in
         * double), scales q_t's key dimensions for the fix-up; its last value is Ā_b */
        double cum[gk];
        for (int i = 0; i < gk; i++) cum[i] = 0;
        float *A = Ab + (size_t)p * d_k;
        for (int i = 0; i < d_k; i++) A[i] = 1.0f;
        for (int t = t0; t < t1; t++) {
            const float *qt = q + (size_t)t * d_k;
            float *qd = Qd + (size_t)t * d_k;
            if (!log_alpha) {
                memcpy(qd, qt, sizeof(float) * d_k);
                continue;
            }
            /* one exponential per gate value (fastexp.h, ≤ 2 ulp; vectorized over a vector
             * gate): with libm's exp per key dimension it was most of the scan's extra time */
            for (int i = 0; i < gk; i++) cum[i] += log_alpha[(size_t)t * gk + i];
            if (gk == 1) {
                const float a = ttt_fast_expf((float)cum[0]);
                for (int i = 0; i < d_k; i++) A[i] = a;
            } else {
                for (int i = 0; i < d_k; i++) A[i] = ttt_fast_expf((float)cum[i]);
            }
            for (int i = 0; i < d_k; i++) qd[i] = qt[i] * A[i];
        }
    }
    for (int p = 0; p < P; p++)
        if (bs[p] != TTT_OK) { /* S not written yet */
            ttt_arena_release(ctx->arena, m);
            return bs[p];
        }
    /* 2. the carries, element by element of the state: M[p] becomes block p's starting state */
#ifdef _OPENMP
#pragma omp parallel for schedule(static) if (P > 1 && d_k > 1)
#endif
    for (int i = 0; i < d_k; i++)
        for (int j = 0; j < d_v; j++) {
            float c = S[(size_t)i * d_v + j];
            for (int p = 0; p < P; p++) {
                float *mp = M + (size_t)p * dd + (size_t)i * d_v + j;
                const float next = Ab[(size_t)p * d_k + i] * c + *mp;
                *mp = c;
                c = next;
            }
            S[(size_t)i * d_v + j] = c;
        }
    TTT_SCAN_PARALLEL_BLOCKS(P)
    for (int p = 0; p < P; p++) { /* 3. fix-up: O_b += (Q_b ⊙ Ā) S_start,b */
        int t0, t1;
        ttt_scan_block_range(p, P, T, &t0, &t1);
        if (t1 > t0)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, t1 - t0, d_v, d_k, 1.0f,
                        Qd + (size_t)t0 * d_k, d_k, M + (size_t)p * dd, d_v, 1.0f,
                        o + (size_t)t0 * d_v, d_v);
    }
    ttt_arena_release(ctx->arena, m);
    return TTT_OK;
}

void ttt_linear_attention_scan_sequential(float *o, float *S, const float *q, const float *k,
                                          const float *v, const float *beta,
                                          const float *log_alpha, int alpha_vec, int T, int d_k,
                                          int d_v) {
    /* the running pair (A, B): A (d_k) retentions, B (d_k, d_v); double, one row at a time
     * (rows of the state are independent: Diag(α) scales rows) */
    const int gk = log_alpha && alpha_vec ? d_k : 1;
    for (int t = 0; t < T; t++)
        for (int j = 0; j < d_v; j++) o[(size_t)t * d_v + j] = 0.0f;
    double B[d_v > 0 ? d_v : 1];
    for (int i = 0; i < d_k; i++) {
        double A = 1;
        for (int j = 0; j < d_v; j++) B[j] = 0;
        for (int t = 0; t < T; t++) {
            const double a = log_alpha ? exp(log_alpha[(size_t)t * gk + (gk > 1 ? i : 0)]) : 1.0;
            const double bk = (beta ? beta[t] : 1.0) * k[(size_t)t * d_k + i];
            A = a * A;
            for (int j = 0; j < d_v; j++) {
                B[j] = a * B[j] + bk * v[(size_t)t * d_v + j];
                /* o_t = q_t (A S_0 + B): row i's part */
                o[(size_t)t * d_v + j] += (float)(q[(size_t)t * d_k + i] *
                                                  (A * S[(size_t)i * d_v + j] + B[j]));
            }
        }
        for (int j = 0; j < d_v; j++) S[(size_t)i * d_v + j] = (float)(A * S[(size_t)i * d_v + j] + B[j]);
    }
}

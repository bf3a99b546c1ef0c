/* The scan form of gated linear attention as one recorded op with a hand-written backward
 * (docs/math.md §5.5), itself a two-level scan run backward in time:
 *
 *   the adjoint D_t = ∂L/∂S_t obeys D_t = q_tᵀ do_t + Diag(α_{t+1}) D_{t+1}, D_{T−1} ∋ ∂L/∂S_T,
 *   the same kind of recurrence as the forward (pairs (Diag(α_{t+1}), q_tᵀ do_t), composed right
 *   to left). So: (1) the forward's block carries give each block's starting state; (2) each
 *   block, in parallel, folds its own pairs backward from zero; (3) a sequential scan over the
 *   blocks, last to first, gives the adjoint entering each block from its right; (4) each block,
 *   in parallel, recomputes its states from its start and sweeps backward once, forming
 *       ∂q_t = S_t do_tᵀ,  ∂v_t = β_t k_t D_t,  ∂k_t = β_t D_t v_tᵀ,  ∂β_t = k_t D_t v_tᵀ,
 *       ∂log α_t = α_t ⊙ rowsum(D_t ⊙ S_{t−1})   (summed over rows for a scalar gate),
 *   and ∂S_0 = Diag(α_1) D_1 comes out of (3). Memory: the states of every token (T·d_k·d_v
 *   floats) during the backward, the block carries otherwise. */
#include <math.h>
#include <string.h>

#include "autograd.h"
#include "kernels.h"
#include "ops.h"
#include "scan.h"
#include "scan_grad.h"

/* α_t of key row i (1 without a gate). */
static inline float gate_at(const float *la, int gk, int t, int i) {
    return la ? expf(la[(size_t)t * gk + (gk > 1 ? i : 0)]) : 1.0f;
}

/* in: q, k, v, β, log α, S_0; out Y = [O; S_T] (T + d_k, d_v); iarg[0] = blocks. */
static void scan_backward(ttt_ctx *ctx, const ttt_tape_entry *e, const float *dY) {
    const ttt_tensor *q = e->in[0], *k = e->in[1], *v = e->in[2], *bt = e->in[3];
    const ttt_tensor *lat = e->in[4], *S0 = e->in[5];
    const int T = TTT_ROWS(q), dk = TTT_COLS(q), dv = TTT_COLS(v);
    const int gk = lat ? (lat->ndim == 2 ? TTT_COLS(lat) : 1) : 0;
    const float *la = lat ? lat->data : NULL, *beta = bt->data;
    float *gq = ttt_grad(ctx, q), *gk_ = ttt_grad(ctx, k), *gv = ttt_grad(ctx, v);
    float *gb = ttt_grad(ctx, bt), *gla = ttt_grad(ctx, lat), *gS0 = ttt_grad(ctx, S0);
    if (T <= 0) {
        if (gS0)
            for (int j = 0; j < dk * dv; j++) gS0[j] += dY[j];
        return;
    }
    int P = e->iarg[0] < 1 ? 1 : e->iarg[0];
    if (P > T) P = T;
    const size_t dd = (size_t)dk * dv;
    const float *dO = dY, *dSf = dY + (size_t)T * dv;
    ttt_arena_mark m = ttt_arena_mark_get(ctx->arena);
    float *Sst = ttt_arena_alloc(ctx->arena, sizeof(float) * (size_t)P * dd); /* starts */
    float *Lp = ttt_arena_alloc(ctx->arena, sizeof(float) * (size_t)P * dd);  /* then E_p */
    float *Ab = ttt_arena_alloc(ctx->arena, sizeof(float) * (size_t)P * dk);  /* Π α */
    float *Sall = ttt_arena_alloc(ctx->arena, sizeof(float) * (size_t)T * dd); /* S_t */
    memset(Sst, 0, sizeof(float) * (size_t)P * dd);
    memset(Lp, 0, sizeof(float) * (size_t)P * dd);
    /* (1) local states from zero (in Sall) and Π α per block; (2) backward folds from zero */
    TTT_SCAN_PARALLEL_BLOCKS(P)
    for (int p = 0; p < P; p++) {
        int t0, t1;
        ttt_scan_block_range(p, P, T, &t0, &t1);
        float *A = Ab + (size_t)p * dk;
        for (int i = 0; i < dk; i++) A[i] = 1.0f;
        for (int t = t0; t < t1; t++) {
            float *St = Sall + (size_t)t * dd;
            const float *Sp = t > t0 ? St - dd : NULL;
            for (int i = 0; i < dk; i++) {
                const float a = gate_at(la, gk, t, i), bk = beta[t] * k->data[(size_t)t * dk + i];
                A[i] *= a;
                for (int j = 0; j < dv; j++)
                    St[(size_t)i * dv + j] =
                        (Sp ? a * Sp[(size_t)i * dv + j] : 0.0f) + bk * v->data[(size_t)t * dv + j];
            }
        }
        float *R = Lp + (size_t)p * dd; /* R_t = q_tᵀ do_t + Diag(α_{t+1}) R_{t+1}, from zero */
        for (int t = t1 - 1; t >= t0; t--)
            for (int i = 0; i < dk; i++) {
                const float a = t < t1 - 1 ? gate_at(la, gk, t + 1, i) : 1.0f;
                const float qi = q->data[(size_t)t * dk + i];
                for (int j = 0; j < dv; j++)
                    R[(size_t)i * dv + j] = a * R[(size_t)i * dv + j] + qi * dO[(size_t)t * dv + j];
            }
        for (int i = 0; i < dk; i++) { /* L_p = Diag(α_{t0}) R_{t0} */
            const float a = gate_at(la, gk, t0, i);
            for (int j = 0; j < dv; j++) R[(size_t)i * dv + j] *= a;
        }
    }
    /* the carries: forward (starts), then backward (E_p: the adjoint entering block p from its
     * right, E_{P−1} = ∂L/∂S_T), element by element of the state */
#ifdef _OPENMP
#pragma omp parallel for schedule(static) if (P > 1 && dk > 1)
#endif
    for (int i = 0; i < dk; i++)
        for (int j = 0; j < dv; j++) {
            const size_t ij = (size_t)i * dv + j;
            float c = S0->data[ij];
            for (int p = 0; p < P; p++) {
                int t0, t1;
                ttt_scan_block_range(p, P, T, &t0, &t1);
                Sst[(size_t)p * dd + ij] = c;
                if (t1 > t0) c = Ab[(size_t)p * dk + i] * c + Sall[(size_t)(t1 - 1) * dd + ij];
            }
            float E = dSf[ij];
            for (int p = P - 1; p >= 0; p--) {
                const float Lv = Lp[(size_t)p * dd + ij];
                Lp[(size_t)p * dd + ij] = E; /* E_p */
                E = Lv + Ab[(size_t)p * dk + i] * E;
            }
            if (gS0) gS0[ij] += E; /* ∂S_0 */
        }
    /* (4) per block: the true states, then one backward sweep */
    TTT_SCAN_PARALLEL_BLOCKS(P)
    for (int p = 0; p < P; p++) {
        int t0, t1;
        ttt_scan_block_range(p, P, T, &t0, &t1);
        const float *Ss = Sst + (size_t)p * dd;
        float *D = Lp + (size_t)p * dd; /* E_p, becomes D_t */
        for (int t = t0; t < t1; t++) { /* S_t = local + (Π_{t0..t} α) S_start */
            float *St = Sall + (size_t)t * dd;
            const float *Sp = t > t0 ? St - dd : Ss;
            /* recomputed from S_{t−1} directly: the same recurrence, in order */
            for (int i = 0; i < dk; i++) {
                const float a = gate_at(la, gk, t, i), bk = beta[t] * k->data[(size_t)t * dk + i];
                for (int j = 0; j < dv; j++)
                    St[(size_t)i * dv + j] =
                        a * Sp[(size_t)i * dv + j] + bk * v->data[(size_t)t * dv + j];
            }
        }
        for (int t = t1 - 1; t >= t0; t--) {
            const float *St = Sall + (size_t)t * dd, *Sp = t > t0 ? St - dd : Ss;
            const float *qt = q->data + (size_t)t * dk, *kt = k->data + (size_t)t * dk;
            const float *vt = v->data + (size_t)t * dv, *dot = dO + (size_t)t * dv;
            double db = 0, dls = 0;
            for (int i = 0; i < dk; i++) {
                float *Di = D + (size_t)i * dv;
                const float an = t < t1 - 1 ? gate_at(la, gk, t + 1, i) : 1.0f;
                double dqi = 0, dki = 0, dli = 0;
                for (int j = 0; j < dv; j++) {
                    Di[j] = an * Di[j] + qt[i] * dot[j]; /* D_t */
                    dqi += (double)St[(size_t)i * dv + j] * dot[j];
                    dki += (double)Di[j] * vt[j];
                    dli += (double)Di[j] * Sp[(size_t)i * dv + j];
                    if (gv) gv[(size_t)t * dv + j] += beta[t] * kt[i] * Di[j];
                }
                if (gq) gq[(size_t)t * dk + i] += (float)dqi;
                if (gk_) gk_[(size_t)t * dk + i] += (float)(beta[t] * dki);
                db += kt[i] * dki;
                const double a = gate_at(la, gk, t, i);
                if (gla && gk > 1) gla[(size_t)t * dk + i] += (float)(a * dli);
                dls += a * dli;
            }
            if (gb) gb[t] += (float)db;
            if (gla && gk == 1) gla[t] += (float)dls;
        }
    }
    ttt_arena_release(ctx->arena, m);
}

ttt_tensor *ttt_la_scan_op(ttt_ctx *ctx, const ttt_tensor *q, const ttt_tensor *k,
                           const ttt_tensor *v, const ttt_tensor *beta,
                           const ttt_tensor *log_alpha, int alpha_vec, const ttt_tensor *S0,
                           int blocks) {
    const int T = TTT_ROWS(q), dk = TTT_COLS(q), dv = TTT_COLS(v);
    TTT_ASSERT(TTT_COLS(k) == dk && TTT_ROWS(k) == T && TTT_ROWS(v) == T);
    TTT_ASSERT((int)beta->n == T && S0->n == (size_t)dk * dv);
    TTT_ASSERT(!log_alpha || log_alpha->n == (size_t)T * (alpha_vec ? dk : 1));
    ttt_tensor *Y = ttt_tensor_2d(ctx, T + dk, dv);
    float *S = Y->data + (size_t)T * dv;
    memcpy(S, S0->data, sizeof(float) * (size_t)dk * dv);
    if (ttt_linear_attention_scan(ctx, Y->data, S, q->data, k->data, v->data, beta->data,
                                  log_alpha ? log_alpha->data : NULL, alpha_vec, T, dk, dv,
                                  blocks) != TTT_OK) /* an op has no status: the arena's escape */
        ttt_ctx_out_of_memory(ctx, sizeof(double) * (size_t)dk, "the scan's kernel rows");
    /* a vector gate arrives as (T, d_k): the backward reads its shape (a view for a scalar) */
    const ttt_tensor *la_in = log_alpha;
    ttt_tensor *la2 = NULL;
    if (log_alpha && alpha_vec && log_alpha->ndim != 2) {
        la2 = ttt_reshape(ctx, log_alpha, 2, (int[]){T, dk});
        la_in = la2;
    } else if (log_alpha && !alpha_vec && log_alpha->ndim != 1) {
        la2 = ttt_reshape(ctx, log_alpha, 1, (int[]){T});
        la_in = la2;
    }
    ttt_tape_entry *e = ttt_tape_record(
        ctx, scan_backward, Y, (const ttt_tensor *const[]){q, k, v, beta, la_in, S0}, 6);
    if (e) {
        e->name = "la_scan";
        e->iarg[0] = blocks;
    }
    return Y;
}

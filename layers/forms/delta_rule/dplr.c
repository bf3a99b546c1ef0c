/* The generalized delta rule (DPLR; RWKV-7), docs/math.md "RWKV-7": the recurrent forward, its
 * backward written by hand, and the op that records it on a tape (dplr.h).
 *
 * Forward. Token t needs u_t = a_t S_{t−1} before S_{t−1} is overwritten; the sweep over the
 * state that writes token t (row i: S_i ← w_{t,i} S_i + b_{t,i} u_t + k_{t,i} v_t) accumulates,
 * from each new row, the output o_t = Σ_i q_{t,i} S_i and the next token's u_{t+1} = Σ_i
 * a_{t+1,i} S_i: the state is read and written once per token. Each row's retentions are rounded
 * to float32 with their own drift correction (ttt_gate_dither, kernels.h), as the KDA kernel
 * does: a weak decay rounded the same way every step would otherwise bias a long sequence.
 *
 * Backward, token by token from the last, with the carried dS = ∂L/∂S_t:
 *     dS += q_tᵀ dO_t;          dq_t = dO_t S_tᵀ
 *     dk_t = dS v_tᵀ;           dv_t = k_t dS
 *     db_t = dS u_tᵀ;           du_t = b_t dS
 *     ∂L/∂log w_{t,i} = w_{t,i} Σ_j dS[i, j] S_{t−1}[i, j]
 *     da_t = du_t S_{t−1}ᵀ;     dS ← Diag(w_t) dS + a_tᵀ du_t       (= ∂L/∂S_{t−1}).
 * The states of a chunk are recomputed in float32 from the state the forward saved at its
 * start, with the forward's own kernel, so they are the forward's bits. */
#include "dplr.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "autograd.h"
#include "fault.h"
#include "fused_grad.h"
#include "ops_device.h"

/* The retentions of one token's row of log w (NULL: all 1), dithered per row. */
static void dplr_gates(float *w, double *drift, const float *lw, int d_k) {
    if (!lw) {
        for (int i = 0; i < d_k; i++) w[i] = 1.0f;
        return;
    }
    for (int i = 0; i < d_k; i++) w[i] = ttt_gate_dither(&drift[i], exp((double)lw[i]));
}

TTT_FP_CONTRACT ttt_status ttt_dplr_recurrent_ld(float *o, float *S, const float *q,
                                                 const float *k, const float *v, const float *a,
                                                 const float *b, const float *log_w, int T,
                                                 int d_k, int d_v, const ttt_form_ld *ld) {
    if (T <= 0) return TTT_OK;
    /* u, u_next (d_v each), w (d_k) and the per-row drifts (d_k doubles) */
    float stack[4 * 256];
    double dstack[256];
    const size_t need = 2 * (size_t)d_v + (size_t)d_k;
    float *buf = need <= 4 * 256 ? stack : ttt_fault_malloc(need * sizeof(float));
    double *drift = d_k <= 256 ? dstack : ttt_fault_malloc((size_t)d_k * sizeof(double));
    if (!buf || !drift) { /* before anything is written (kernels.h) */
        if (buf != stack) free(buf);
        if (drift != dstack) free(drift);
        return TTT_ERR_NOMEM;
    }
    float *u = buf, *un = buf + d_v, *w = buf + 2 * (size_t)d_v;
    for (int i = 0; i < d_k; i++) drift[i] = 1.0;
    for (int j = 0; j < d_v; j++) u[j] = 0.0f;
    for (int i = 0; i < d_k; i++) { /* u_0 = a_0 S_0 */
        const float ai = a[i], *restrict Si = S + (size_t)i * d_v;
        for (int j = 0; j < d_v; j++) u[j] += ai * Si[j];
    }
    for (int t = 0; t < T; t++) {
        const float *qt = q + (size_t)t * ld->q, *kt = k + (size_t)t * ld->k;
        const float *bt = b + (size_t)t * ld->k, *vt = v + (size_t)t * ld->v;
        const int next = t + 1 < T;
        const float *an = next ? a + (size_t)(t + 1) * ld->k : NULL;
        float *restrict ot = o + (size_t)t * ld->o;
        dplr_gates(w, drift, log_w ? log_w + (size_t)t * ld->la : NULL, d_k);
        for (int j = 0; j < d_v; j++) ot[j] = un[j] = 0.0f;
        for (int i = 0; i < d_k; i++) {
            float *restrict Si = S + (size_t)i * d_v;
            const float wi = w[i], bi = bt[i], ki = kt[i], qi = qt[i], ai = next ? an[i] : 0.0f;
            for (int j = 0; j < d_v; j++) {
                const float x = wi * Si[j] + bi * u[j] + ki * vt[j];
                Si[j] = x;
                ot[j] += qi * x;
                un[j] += ai * x;
            }
        }
        float *sw = u;
        u = un;
        un = sw;
    }
    if (buf != stack) free(buf);
    if (drift != dstack) free(drift);
    return TTT_OK;
}

size_t ttt_dplr_recurrent_backward_ws(int C, int d_k, int d_v) {
    const size_t dkv = (size_t)d_k * d_v;
    /* the chunk's states (C + 1), u per token (C d_v), du (d_v), w (d_k), the per-row drifts
     * (d_k doubles = 2 d_k floats, placed first so that they are aligned as the start) */
    return 2 * (size_t)d_k + (size_t)(C + 1) * dkv + (size_t)C * d_v + d_v + d_k;
}

/* States S_{t0} … S_{t0+n} of one chunk into St ((n + 1) d_k d_v) and u_t into U (n, d_v),
 * from the chunk's start state, with the forward's expressions and dithered gates (the drift
 * restarts at each chunk, as in the forward's chunked calls of ttt_dplr_recurrent_op); a
 * recomputed state may differ from the forward's by the order of a rounding. */
TTT_FP_CONTRACT static void dplr_chunk_states(float *St, float *U, const float *S0,
                                              const float *k, const float *v, const float *a,
                                              const float *b, const float *lw, int n, int d_k,
                                              int d_v, float *w, double *drift) {
    const size_t dkv = (size_t)d_k * d_v;
    memcpy(St, S0, dkv * sizeof(float));
    for (int i = 0; i < d_k; i++) drift[i] = 1.0;
    for (int t = 0; t < n; t++) {
        const float *Sp = St + (size_t)t * dkv, *at = a + (size_t)t * d_k;
        const float *bt = b + (size_t)t * d_k, *kt = k + (size_t)t * d_k;
        const float *vt = v + (size_t)t * d_v;
        float *Sn = St + (size_t)(t + 1) * dkv, *ut = U + (size_t)t * d_v;
        for (int j = 0; j < d_v; j++) ut[j] = 0.0f;
        for (int i = 0; i < d_k; i++)
            for (int j = 0; j < d_v; j++) ut[j] += at[i] * Sp[(size_t)i * d_v + j];
        dplr_gates(w, drift, lw ? lw + (size_t)t * d_k : NULL, d_k);
        for (int i = 0; i < d_k; i++)
            for (int j = 0; j < d_v; j++) {
                const size_t ij = (size_t)i * d_v + j;
                Sn[ij] = w[i] * Sp[ij] + bt[i] * ut[j] + kt[i] * vt[j];
            }
    }
}

void ttt_dplr_recurrent_backward(float *gq, float *gk, float *gv, float *ga, float *gb,
                                 float *glw, float *dS, const float *dO, const float *q,
                                 const float *k, const float *v, const float *a, const float *b,
                                 const float *log_w, const float *S0s, int T, int d_k, int d_v,
                                 int C, float *ws) {
    const size_t dkv = (size_t)d_k * d_v;
    const int nch = T > 0 ? (T + C - 1) / C : 0;
    double *drift = (double *)(void *)ws;
    float *St = ws + 2 * (size_t)d_k, *U = St + (size_t)(C + 1) * dkv, *du = U + (size_t)C * d_v;
    float *w = du + d_v;
    for (int c = nch - 1; c >= 0; c--) {
        const int t0 = c * C, n = t0 + C <= T ? C : T - t0;
        const size_t rk = (size_t)t0 * d_k, rv = (size_t)t0 * d_v;
        dplr_chunk_states(St, U, S0s + (size_t)c * dkv, k + rk, v + rv, a + rk, b + rk,
                          log_w ? log_w + rk : NULL, n, d_k, d_v, w, drift);
        for (int tt = n - 1; tt >= 0; tt--) {
            const int t = t0 + tt;
            const size_t tk = (size_t)t * d_k, tv = (size_t)t * d_v;
            const float *qt = q + tk, *kt = k + tk, *vt = v + tv, *at = a + tk, *bt = b + tk;
            const float *dOt = dO + tv, *ut = U + (size_t)tt * d_v;
            const float *Sp = St + (size_t)tt * dkv, *Sn = St + (size_t)(tt + 1) * dkv;
            /* w_t as the forward used it: the float32 exp of the gate (the dithered value
             * differs from it by the carried rounding only, far below the gradient's error) */
            for (int i = 0; i < d_k; i++) w[i] = log_w ? (float)exp((double)log_w[tk + i]) : 1.0f;
            /* read-out: dq = dO S_tᵀ, dS += qᵀ dO */
            for (int i = 0; i < d_k; i++) {
                float acc = 0.0f;
                float *dSi = dS + (size_t)i * d_v;
                const float *Si = Sn + (size_t)i * d_v;
                for (int j = 0; j < d_v; j++) {
                    acc += dOt[j] * Si[j];
                    dSi[j] += qt[i] * dOt[j];
                }
                if (gq) gq[tk + i] += acc;
            }
            /* the write k vᵀ, the low-rank term bᵀ u, the decay */
            for (int j = 0; j < d_v; j++) du[j] = 0.0f;
            for (int i = 0; i < d_k; i++) {
                const float *dSi = dS + (size_t)i * d_v, *Si = Sp + (size_t)i * d_v;
                float sk = 0.0f, sb = 0.0f, sw = 0.0f;
                for (int j = 0; j < d_v; j++) {
                    sk += dSi[j] * vt[j];
                    sb += dSi[j] * ut[j];
                    sw += dSi[j] * Si[j];
                    du[j] += bt[i] * dSi[j];
                }
                if (gk) gk[tk + i] += sk;
                if (gb) gb[tk + i] += sb;
                if (glw) glw[tk + i] += w[i] * sw;
            }
            if (gv)
                for (int i = 0; i < d_k; i++)
                    for (int j = 0; j < d_v; j++) gv[tv + j] += kt[i] * dS[(size_t)i * d_v + j];
            /* u = a S_{t−1}: da = du S_{t−1}ᵀ; dS_{t−1} = Diag(w) dS + aᵀ du */
            for (int i = 0; i < d_k; i++) {
                float *dSi = dS + (size_t)i * d_v;
                const float *Si = Sp + (size_t)i * d_v;
                float acc = 0.0f;
                for (int j = 0; j < d_v; j++) {
                    acc += du[j] * Si[j];
                    dSi[j] = w[i] * dSi[j] + at[i] * du[j];
                }
                if (ga) ga[tk + i] += acc;
            }
        }
    }
}

/* ---- the ops on the tape (recurrent and chunkwise share all but their kernels) ---- */

typedef struct dplr_saved {
    const float *S; /* (nch, d_k, d_v) the state at each chunk start */
    int T, d_k, d_v, C;
    int chunkwise;  /* the backward of ttt_dplr_chunkwise_op, else of the recurrence */
} dplr_saved;

static void dplr_op_backward(ttt_ctx *ctx, const ttt_tape_entry *e, const float *dP) {
    const ttt_tensor *q = e->in[0], *k = e->in[1], *v = e->in[2], *a = e->in[3], *b = e->in[4];
    const ttt_tensor *lw = e->in[5], *S0 = e->in[6];
    /* every gradient buffer before any scratch mark (autograd.h) */
    float *gq = ttt_grad(ctx, q), *gk = ttt_grad(ctx, k), *gv = ttt_grad(ctx, v);
    float *ga = ttt_grad(ctx, a), *gb = ttt_grad(ctx, b), *glw = ttt_grad(ctx, lw);
    float *gS0 = ttt_grad(ctx, S0);
    const dplr_saved *sv = e->aux;
    const int T = sv->T, d_k = sv->d_k, d_v = sv->d_v, C = sv->C;
    const size_t dkv = (size_t)d_k * d_v;
    ttt_arena_mark mark = ttt_arena_mark_get(ctx->arena);
    const size_t wsb = sv->chunkwise
                           ? ttt_dplr_chunkwise_backward_ws(C, d_k, d_v) * sizeof(double)
                           : ttt_dplr_recurrent_backward_ws(C, d_k, d_v) * sizeof(float);
    void *ws = ttt_fused_scratch(ctx, wsb);
    float *dS = ttt_fused_scratch(ctx, dkv * sizeof(float));
    memcpy(dS, dP + (size_t)T * d_v, dkv * sizeof(float));
    const float *lwd = lw ? lw->data : NULL;
    if (sv->chunkwise)
        ttt_dplr_chunkwise_backward(gq, gk, gv, ga, gb, glw, dS, dP, q->data, k->data, v->data,
                                    a->data, b->data, lwd, sv->S, T, d_k, d_v, C, ws);
    else
        ttt_dplr_recurrent_backward(gq, gk, gv, ga, gb, glw, dS, dP, q->data, k->data, v->data,
                                    a->data, b->data, lwd, sv->S, T, d_k, d_v, C, ws);
    if (gS0)
        for (size_t i = 0; i < dkv; i++) gS0[i] += dS[i];
    ttt_arena_release(ctx->arena, mark);
}

ttt_dplr_op ttt_dplr_op_begin(ttt_ctx *ctx, const ttt_tensor *q, const ttt_tensor *k,
                              const ttt_tensor *v, const ttt_tensor *a, const ttt_tensor *b,
                              const ttt_tensor *log_w, const ttt_tensor *S0, int chunk) {
    const int T = TTT_ROWS(k), d_k = TTT_COLS(k), d_v = TTT_COLS(v);
    TTT_ASSERT(TTT_ROWS(q) == T && TTT_ROWS(v) == T && TTT_COLS(q) == d_k && chunk >= 1);
    TTT_ASSERT(TTT_ROWS(a) == T && TTT_COLS(a) == d_k && TTT_ROWS(b) == T && TTT_COLS(b) == d_k);
    TTT_ASSERT(!log_w || (TTT_ROWS(log_w) == T && TTT_COLS(log_w) == d_k));
    TTT_ASSERT(S0->n == (size_t)d_k * d_v);
    ttt_dplr_op op = {.in = {q, k, v, a, b, log_w, S0}, .T = T, .d_k = d_k, .d_v = d_v};
    const size_t dkv = (size_t)d_k * d_v;
    int any = 0;
    for (int i = 0; i < 7; i++) any |= op.in[i] && op.in[i]->requires_grad;
    op.rec = ttt_recording(ctx) && any;
    op.P = ttt_tensor_1d(ctx, (int)((size_t)T * d_v + dkv));
    op.o = op.P->data;
    op.S = op.P->data + (size_t)T * d_v;
    memcpy(op.S, S0->data, dkv * sizeof(float));
    op.C = T > 0 ? (chunk < T ? chunk : T) : 1;
    op.nch = (T + op.C - 1) / op.C;
    op.saved = op.rec && op.nch ? ttt_tape_alloc(ctx, (size_t)op.nch * dkv * sizeof(float)) : NULL;
    return op;
}

ttt_tensor *ttt_dplr_op_end(ttt_ctx *ctx, const ttt_dplr_op *op, int chunkwise,
                            ttt_tensor **S_out) {
    ttt_tape_entry *e = op->rec ? ttt_tape_record(ctx, dplr_op_backward, op->P, op->in, 7) : NULL;
    if (e) {
        dplr_saved *sv = ttt_tape_alloc(ctx, sizeof *sv);
        *sv = (dplr_saved){.S = op->saved, .T = op->T, .d_k = op->d_k, .d_v = op->d_v,
                           .C = op->C, .chunkwise = chunkwise};
        e->aux = sv;
        e->name = chunkwise ? "dplr_chunkwise" : "dplr_recurrent";
    }
    *S_out = ttt_fused_part(ctx, op->P, (size_t)op->T * op->d_v, 2,
                            (const int[]){op->d_k, op->d_v}, "dplr_state");
    return ttt_fused_part(ctx, op->P, 0, 2, (const int[]){op->T, op->d_v}, "dplr_o");
}

ttt_tensor *ttt_dplr_recurrent_op(ttt_ctx *ctx, ttt_tensor **S_out, const ttt_tensor *q,
                                  const ttt_tensor *k, const ttt_tensor *v, const ttt_tensor *a,
                                  const ttt_tensor *b, const ttt_tensor *log_w,
                                  const ttt_tensor *S0, int chunk) {
    /* on a device: the recurrence's kernels (docs/device_ops.md "Recurrences") */
    if (TTT_OPS_ON_DEVICE3(ctx, q, k, v) ||
        (TTT_DEV_KIND_(a) | TTT_DEV_KIND_(b) | TTT_DEV_KIND_(log_w) | TTT_DEV_KIND_(S0)))
        return ttt_dev_dplr_recurrent(ctx, S_out, q, k, v, a, b, log_w, S0, chunk);
    ttt_dplr_op op = ttt_dplr_op_begin(ctx, q, k, v, a, b, log_w, S0, chunk);
    const int T = op.T, d_k = op.d_k, d_v = op.d_v, C = op.C;
    const size_t dkv = (size_t)d_k * d_v;
    const ttt_form_ld ld = {.o = d_v, .q = d_k, .k = d_k, .v = d_v, .beta = 1, .la = d_k};
    for (int c = 0; c < op.nch; c++) {
        const int t0 = c * C, n = t0 + C <= T ? C : T - t0;
        const size_t rk = (size_t)t0 * d_k;
        if (op.saved) memcpy(op.saved + (size_t)c * dkv, op.S, dkv * sizeof(float));
        if (ttt_dplr_recurrent_ld(op.o + (size_t)t0 * d_v, op.S, q->data + rk, k->data + rk,
                                  v->data + (size_t)t0 * d_v, a->data + rk, b->data + rk,
                                  log_w ? log_w->data + rk : NULL, n, d_k, d_v,
                                  &ld) != TTT_OK) /* an op has no status (tensor.h) */
            ttt_ctx_out_of_memory(ctx, sizeof(float) * (2 * (size_t)d_v + (size_t)d_k),
                                  "the DPLR kernel's rows");
    }
    return ttt_dplr_op_end(ctx, &op, 0, S_out);
}

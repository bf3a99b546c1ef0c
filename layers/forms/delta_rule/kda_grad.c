/* The backward of KDA's recurrence (docs/math.md §4.5), token by token from the last:
 *     S'_t = Diag(α_t) S_{t−1},  p_t = k_t S'_t,  e_t = v_t − p_t,
 *     S_t = S'_t + β_t k_tᵀ e_t,  o_t = q_t S_t,   α_t = exp(log α_t).
 * With the carried dS (= dL/dS_t, starting from the final state's gradient):
 *     dS   += q_tᵀ dO_t;           dq_t = dO_t S_tᵀ
 *     dβ_t  = k_t dS e_tᵀ;         dk_t = β_t dS e_tᵀ;   de_t = β_t k_t dS
 *     dv_t  = de_t;                dS' = dS − k_tᵀ de_t;  dk_t −= de_t S'_tᵀ
 *     d log α_{t,i} = Σ_j S'_t[i, j] dS'[i, j];             dS ← Diag(α_t) dS'.
 * A gate of −inf (α = 0) zeroes its row of S'_t, so its gradient is 0 and nothing flows back
 * through that row. The states of a chunk are recomputed, in float32 as above, from the state
 * the forward saved at the chunk's start (the forward's own kernel computed that one). */
#include "kda_grad.h"

#include <math.h>
#include <string.h>

#include "autograd.h"
#include "fused_grad.h"
#include "kernels.h"

typedef struct kda_saved {
    const float *S; /* (nch, d_k, d_v) the state at each chunk start */
    int T, d_k, d_v, C;
} kda_saved;

/* States S_{t0−1} … S_{t0+n−1} of one chunk into St ((n+1) d_k d_v), from its start state. */
static void kda_states(float *St, const float *S0, const float *q, const float *k,
                       const float *v, const float *beta, const float *la, float *e, int n,
                       int d_k, int d_v) {
    (void)q;
    const size_t dkv = (size_t)d_k * d_v;
    memcpy(St, S0, dkv * sizeof(float));
    for (int t = 0; t < n; t++) {
        const float *Sp = St + (size_t)t * dkv, *kt = k + (size_t)t * d_k;
        float *Sn = St + (size_t)(t + 1) * dkv;
        const float b = beta ? beta[t] : 1.0f;
        for (int i = 0; i < d_k; i++) {
            const float a = expf(la[(size_t)t * d_k + i]);
            for (int j = 0; j < d_v; j++) Sn[(size_t)i * d_v + j] = a * Sp[(size_t)i * d_v + j];
        }
        for (int j = 0; j < d_v; j++) e[j] = v[(size_t)t * d_v + j];
        for (int i = 0; i < d_k; i++)
            for (int j = 0; j < d_v; j++) e[j] -= kt[i] * Sn[(size_t)i * d_v + j];
        for (int i = 0; i < d_k; i++)
            for (int j = 0; j < d_v; j++) Sn[(size_t)i * d_v + j] += b * kt[i] * e[j];
    }
}

static void kda_backward(ttt_ctx *ctx, const ttt_tape_entry *ent, const float *dP) {
    const ttt_fused_io io = ttt_fused_io_get(ctx, ent);
    const ttt_tensor *q = io.q, *k = io.k, *v = io.v, *beta = io.beta, *la = io.la;
    const kda_saved *sv = ent->aux;
    float *gq = io.gq, *gk = io.gk, *gv = io.gv, *gb = io.gb, *gla = io.gla;
    const int T = sv->T, d_k = sv->d_k, d_v = sv->d_v, C = sv->C, nch = (T + C - 1) / C;
    const size_t dkv = (size_t)d_k * d_v;
    ttt_arena_mark mark = ttt_arena_mark_get(ctx->arena);
    float *St = ttt_fused_scratch(ctx, (size_t)(C + 1) * dkv * sizeof(float));
    float *dS = ttt_fused_scratch(ctx, dkv * sizeof(float));
    float *Sd = ttt_fused_scratch(ctx, dkv * sizeof(float));
    float *e = ttt_fused_scratch(ctx, (size_t)d_v * sizeof(float));
    float *de = ttt_fused_scratch(ctx, (size_t)d_v * sizeof(float));
    memcpy(dS, dP + (size_t)T * d_v, dkv * sizeof(float));
    for (int c = nch - 1; c >= 0; c--) {
        const int t0 = c * C, n = t0 + C <= T ? C : T - t0;
        const float *bc = beta ? beta->data + t0 : NULL;
        kda_states(St, sv->S + (size_t)c * dkv, q->data + (size_t)t0 * d_k,
                   k->data + (size_t)t0 * d_k, v->data + (size_t)t0 * d_v, bc,
                   la->data + (size_t)t0 * d_k, e, n, d_k, d_v);
        for (int tt = n - 1; tt >= 0; tt--) {
            const int t = t0 + tt;
            const float *qt = q->data + (size_t)t * d_k, *kt = k->data + (size_t)t * d_k;
            const float *vt = v->data + (size_t)t * d_v, *lat = la->data + (size_t)t * d_k;
            const float *dOt = dP + (size_t)t * d_v;
            const float *Sp = St + (size_t)tt * dkv, *Sn = St + (size_t)(tt + 1) * dkv;
            const float b = beta ? beta->data[t] : 1.0f;
            /* S' and e of this token */
            for (int i = 0; i < d_k; i++) {
                const float a = expf(lat[i]);
                for (int j = 0; j < d_v; j++) Sd[(size_t)i * d_v + j] = a * Sp[(size_t)i * d_v + j];
            }
            for (int j = 0; j < d_v; j++) e[j] = vt[j];
            for (int i = 0; i < d_k; i++)
                for (int j = 0; j < d_v; j++) e[j] -= kt[i] * Sd[(size_t)i * d_v + j];
            /* read-out: dq = dO S_tᵀ, dS += qᵀ dO */
            for (int i = 0; i < d_k; i++) {
                float acc = 0.0f;
                for (int j = 0; j < d_v; j++) {
                    acc += dOt[j] * Sn[(size_t)i * d_v + j];
                    dS[(size_t)i * d_v + j] += qt[i] * dOt[j];
                }
                if (gq) gq[(size_t)t * d_k + i] += acc;
            }
            /* the write: dβ, dk (from kᵀ e), de */
            ttt_delta_write_grad(dS, e, kt, b, d_k, d_v, de, gb ? gb + t : NULL,
                                 gk ? gk + (size_t)t * d_k : NULL, gv ? gv + (size_t)t * d_v : NULL);
            /* the prediction p = k S': dS' = dS − kᵀ de, dk −= de S'ᵀ; then the decay */
            for (int i = 0; i < d_k; i++) {
                float dk = 0.0f, dla = 0.0f;
                const float a = expf(lat[i]);
                for (int j = 0; j < d_v; j++) {
                    const size_t ij = (size_t)i * d_v + j;
                    dk += de[j] * Sd[ij];
                    const float g = dS[ij] - kt[i] * de[j];
                    dla += Sd[ij] * g;
                    dS[ij] = a * g;
                }
                if (gk) gk[(size_t)t * d_k + i] -= dk;
                if (gla) gla[(size_t)t * d_k + i] += dla;
            }
        }
    }
    ttt_fused_io_end(ctx, &io, dS, dkv, mark);
}

ttt_tensor *ttt_kda_recurrent_fused(ttt_ctx *ctx, ttt_tensor **S_out, const ttt_tensor *q,
                                    const ttt_tensor *k, const ttt_tensor *v,
                                    const ttt_tensor *beta, const ttt_tensor *log_alpha,
                                    const ttt_tensor *S0, int chunk) {
    const int T = TTT_ROWS(k), d_k = TTT_COLS(k), d_v = TTT_COLS(v);
    TTT_ASSERT(TTT_ROWS(q) == T && TTT_ROWS(v) == T && TTT_COLS(q) == d_k && chunk >= 1);
    TTT_ASSERT(log_alpha && TTT_ROWS(log_alpha) == T && TTT_COLS(log_alpha) == d_k);
    TTT_ASSERT(!beta || beta->n == (size_t)T);
    TTT_ASSERT(S0->n == (size_t)d_k * d_v);
    const size_t dkv = (size_t)d_k * d_v;
    const ttt_tensor *in[6] = {q, k, v, beta, log_alpha, S0};
    int rec;
    ttt_tensor *P = ttt_fused_result(ctx, in, T, d_v, dkv, &rec);
    float *o = P->data, *S = P->data + (size_t)T * d_v;
    const int C = T > 0 ? (chunk < T ? chunk : T) : 1, nch = (T + C - 1) / C;
    float *saved = rec && nch ? ttt_tape_alloc(ctx, (size_t)nch * dkv * sizeof(float)) : NULL;
    const ttt_form_ld ld = {.o = d_v, .q = d_k, .k = d_k, .v = d_v, .beta = 1, .la = d_k};
    for (int c = 0; c < nch; c++) {
        const int t0 = c * C, n = t0 + C <= T ? C : T - t0;
        if (saved) memcpy(saved + (size_t)c * dkv, S, dkv * sizeof(float));
        if (ttt_delta_rule_recurrent_key_ld(o + (size_t)t0 * d_v, S, q->data + (size_t)t0 * d_k,
                                            k->data + (size_t)t0 * d_k,
                                            v->data + (size_t)t0 * d_v,
                                            beta ? beta->data + t0 : NULL,
                                            log_alpha->data + (size_t)t0 * d_k, n, d_k, d_v,
                                            &ld) != TTT_OK) /* an op has no status (tensor.h) */
            ttt_ctx_out_of_memory(ctx, sizeof(float) * (3 * (size_t)d_v + 5 * (size_t)d_k),
                                  "the KDA kernel's rows");
    }
    ttt_tape_entry *e = ttt_tape_record(ctx, kda_backward, P, in, 6);
    if (e) {
        kda_saved *sv = ttt_tape_alloc(ctx, sizeof *sv);
        *sv = (kda_saved){.S = saved, .T = T, .d_k = d_k, .d_v = d_v, .C = C};
        e->aux = sv;
        e->name = "kda_recurrent_fused";
    }
    *S_out = ttt_fused_part(ctx, P, (size_t)T * d_v, 2, (const int[]){d_k, d_v}, "kda_state");
    return ttt_fused_part(ctx, P, 0, 2, (const int[]){T, d_v}, "kda_o");
}

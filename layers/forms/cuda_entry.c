/* The CUDA form entries' common part (cuda_entry.h): a layer and a batched call on device
 * pointers turned into one call of the chunk kernels (chunk_cuda.h) for all B·H sequences
 * (docs/forms.md "Device entries"). */
#include "cuda_entry.h"

#ifdef TTT_HAVE_CUDA

#include <math.h>
#include <stdint.h>
#include <string.h>

const char *ttt_cuda_entry_refuse(const ttt_layer *L, const ttt_form_inputs *in) {
    if (L->rope)
        return "the CUDA forms take no RoPE inside the layer: rotate q and k before the call "
               "(rope: false), or run on host buffers";
    if (L->normalize != TTT_NORMALIZE_NONE)
        return "the CUDA forms take no output normalization or feature map inside the layer "
               "(normalize: none), or run on host buffers";
    if (L->d_k > TTT_CHUNK_MAX_D || L->d_v > TTT_CHUNK_MAX_D)
        return "the CUDA forms take d_k and d_v up to 256; run wider heads on host buffers";
    if (in && in->tape)
        return "a call recorded on the host's tape cannot run on a CUDA device";
    return NULL;
}

/* Rounds n up to the 256-byte alignment the kernels' workspace needs (chunk_cuda.h). */
static size_t up256(size_t n) { return (n + 255) & ~(size_t)255; }

/* The kernels' arguments of one call, with the device scratch they read (β, constant gates)
 * and their workspace, all in one pool allocation. */
typedef struct prepared {
    ttt_chunk_args a;
    ttt_device_buffer buf;
    void *ws;
    size_t ws_bytes;
    float *d_beta; /* backward: d β when θ ≠ 1 (then d η = θ·d β), else NULL */
} prepared;

/* The kernels' arguments for io, β and the gate as they will be present (the scratch arrays
 * are placed by prepare; until then they point at q, for the size queries). */
static void args_of(ttt_chunk_args *a, const ttt_layer *L, const ttt_form_batch *io) {
    memset(a, 0, sizeof *a);
    a->B = io->B, a->T = io->T, a->H = io->H, a->d_k = L->d_k, a->d_v = L->d_v;
    a->dtype = io->dtype == TTT_DTYPE_BF16 ? TTT_CHUNK_BF16 : TTT_CHUNK_F32;
    a->q = io->q, a->k = io->k, a->v = io->v, a->o = io->o;
    a->scale = L->scale; /* the kernels scale the queries (o_t = scale · S_tᵀ q_t) */
    a->h0 = io->state_in ? io->state_in[0] : NULL;   /* NULL: S_0 = 0, the linear model's */
    a->ht = io->state_out ? io->state_out[0] : NULL;
    a->g = io->log_alpha;
    a->gate_per_key = io->log_alpha && io->alpha_vec;
    /* β = θ·η: η itself when θ = 1, nothing when neither is there (β = 1) */
    a->beta = L->lr != 1.0f ? (const float *)io->q : io->eta;
    if (!io->log_alpha && L->decay != 1.0f) a->g = (const float *)io->q;
}

size_t ttt_cuda_entry_kept_bytes(const ttt_cuda_kernels *k, const ttt_layer *L,
                                 const ttt_form_batch *io) {
    if (!k->kept_bytes || (long long)io->B * io->H * io->T == 0) return 0;
    ttt_chunk_args a;
    args_of(&a, L, io);
    return k->kept_bytes(&a);
}

static ttt_status prepare(prepared *p, const ttt_cuda_kernels *k, const ttt_layer *L,
                          const ttt_form_batch *io, int backward, int want_dbeta,
                          ttt_error *err) {
    memset(p, 0, sizeof *p);
    const size_t n_tok = (size_t)io->B * io->T * io->H;
    ttt_chunk_args *a = &p->a;
    args_of(a, L, io);
    const int beta_scratch = L->lr != 1.0f;
    const int gate_scratch = !io->log_alpha && L->decay != 1.0f;
    /* A kept forward (io->kept, docs/gpu.md "Kept forward") stores what the backward reads of
     * the forward in io->kept, and the backward then reads it from there */
    if (io->kept && k->kept_bytes) {
        const size_t need = k->kept_bytes(a);
        if (io->kept_bytes < need || ((uintptr_t)io->kept & 255) != 0)
            return ttt_error_set(err, TTT_ERR_ARG,
                                 "the kept buffer is %zu bytes at %p: %zu bytes, 256-byte "
                                 "aligned, are needed (ttt_layer_kept_bytes)",
                                 io->kept_bytes, io->kept, need);
        a->kept = io->kept;
    }
    /* the workspace the kernels ask for (both passes for a backward: the forward runs first,
     * unless it was kept), asked with β and g present when they will be, as the size may
     * depend on them; the arrays are placed after the workspace below */
    size_t ws = k->workspace(a, 0);
    if (backward) {
        const size_t wb = k->workspace(a, a->kept ? 2 : 1);
        if (a->kept || wb > ws) ws = wb;
    }
    const size_t n_beta = beta_scratch ? up256(n_tok * sizeof(float)) : 0;
    const size_t n_gate = gate_scratch ? up256(n_tok * sizeof(float)) : 0;
    const size_t n_dbeta = want_dbeta && beta_scratch ? up256(n_tok * sizeof(float)) : 0;
    const size_t total = 256 + up256(ws) + n_beta + n_gate + n_dbeta;
    TTT_TRY(ttt_device_alloc(&p->buf, io->device, total, io->stream,
                             backward ? "the CUDA backward's workspace"
                                      : "the CUDA forward's workspace",
                             err));
    char *base = (char *)(((uintptr_t)p->buf.ptr + 255) & ~(uintptr_t)255);
    p->ws = ws ? base : NULL;
    p->ws_bytes = ws;
    char *next = base + up256(ws);
    if (beta_scratch) {
        float *beta = (float *)next;
        next += n_beta;
        ttt_status s = io->eta ? ttt_cuda_scale_f32(beta, io->eta, L->lr, n_tok, io->stream, err)
                               : ttt_cuda_fill_f32(beta, L->lr, n_tok, io->stream, err);
        if (s != TTT_OK) return s;
        a->beta = beta;
    }
    if (gate_scratch) { /* the constant decay as a gate per token: log α */
        float *g = (float *)next;
        next += n_gate;
        TTT_TRY(ttt_cuda_fill_f32(g, logf(L->decay), n_tok, io->stream, err));
        a->g = g;
        a->gate_per_key = 0;
    }
    if (n_dbeta) p->d_beta = (float *)next;
    return TTT_OK;
}

/* T = 0: no token, the final state is the initial one (or zero), and the gradient of the
 * initial state is that of the final state. */
static ttt_status empty_call(const ttt_layer *L, const ttt_form_batch *io,
                             const ttt_form_batch_grad *g, ttt_error *err) {
    const size_t bytes = (size_t)io->B * io->H * L->d_k * L->d_v * sizeof(float);
    float *out = io->state_out ? io->state_out[0] : NULL;
    if (out) {
        const float *in = io->state_in ? io->state_in[0] : NULL;
        TTT_TRY(in ? ttt_device_copy(out, io->device, in, io->device, bytes, io->stream, err)
                   : ttt_device_zero(out, io->device, bytes, io->stream, err));
    }
    float *d_in = g && g->d_state_in ? g->d_state_in[0] : NULL;
    if (d_in) {
        const float *d_out = g->d_state_out ? g->d_state_out[0] : NULL;
        TTT_TRY(d_out ? ttt_device_copy(d_in, io->device, d_out, io->device, bytes, io->stream,
                                        err)
                      : ttt_device_zero(d_in, io->device, bytes, io->stream, err));
    }
    return TTT_OK;
}

static ttt_status forward_on_device(const ttt_cuda_kernels *k, const ttt_layer *L,
                                    const ttt_form_batch *io, ttt_error *err) {
    if ((long long)io->B * io->H == 0) return TTT_OK;
    if (io->T == 0) return empty_call(L, io, NULL, err);
    prepared p;
    ttt_status s = prepare(&p, k, L, io, 0, 0, err);
    if (s == TTT_OK) s = k->forward(&p.a, p.ws, p.ws_bytes, io->stream, err);
    ttt_device_free(&p.buf); /* stream-ordered: after the launches above */
    return s;
}

static ttt_status backward_on_device(const ttt_cuda_kernels *k, const ttt_layer *L,
                                     const ttt_form_batch *io, const ttt_form_batch_grad *g,
                                     ttt_error *err) {
    if ((long long)io->B * io->H == 0) return TTT_OK;
    if (io->T == 0) return empty_call(L, io, g, err);
    prepared p;
    const int want_dbeta = g->d_eta && io->eta;
    ttt_status s = prepare(&p, k, L, io, 1, want_dbeta, err);
    /* o and the final state are written, as the host's backward does: by a forward call
     * first, unless the kernels' backward writes them on its way or a kept forward did */
    if (s == TTT_OK && !k->backward_writes_outputs && !p.a.kept)
        s = k->forward(&p.a, p.ws, p.ws_bytes, io->stream, err);
    if (s == TTT_OK) {
        const size_t n_tok = (size_t)io->B * io->T * io->H;
        ttt_chunk_grad cg = {
            .d_o = g->d_o,
            .d_ht = g->d_state_out ? g->d_state_out[0] : NULL,
            .d_q = g->d_q, .d_k = g->d_k, .d_v = g->d_v,
            /* d η = θ · d β: straight into d_eta when θ = 1 */
            .d_beta = !want_dbeta ? NULL : p.d_beta ? p.d_beta : g->d_eta,
            /* the gradient of a given gate; a constant decay is the layer's, not an input */
            .d_g = io->log_alpha ? g->d_log_alpha : NULL,
            .d_h0 = g->d_state_in ? g->d_state_in[0] : NULL,
        };
        s = k->backward(&p.a, &cg, p.ws, p.ws_bytes, io->stream, err);
        if (s == TTT_OK && p.d_beta)
            s = ttt_cuda_scale_f32(g->d_eta, p.d_beta, L->lr, n_tok, io->stream, err);
    }
    ttt_device_free(&p.buf);
    return s;
}

/* Every entry point runs with the call's device current and the caller's current device
 * restored after; errors name the kernel family. */
ttt_status ttt_cuda_entry_forward(const ttt_cuda_kernels *k, const ttt_layer *L,
                                  const ttt_form_batch *io, ttt_error *err) {
    ttt_device_scope scope;
    TTT_TRY(ttt_device_enter(io->device, &scope, err));
    ttt_status s = forward_on_device(k, L, io, err);
    ttt_device_leave(&scope);
    if (s != TTT_OK) ttt_error_prefix(err, "%s forward (CUDA)", k->name);
    return s;
}

ttt_status ttt_cuda_entry_backward(const ttt_cuda_kernels *k, const ttt_layer *L,
                                   const ttt_form_batch *io, const ttt_form_batch_grad *g,
                                   ttt_error *err) {
    ttt_device_scope scope;
    TTT_TRY(ttt_device_enter(io->device, &scope, err));
    ttt_status s = backward_on_device(k, L, io, g, err);
    ttt_device_leave(&scope);
    if (s != TTT_OK) ttt_error_prefix(err, "%s backward (CUDA)", k->name);
    return s;
}

#else
typedef int ttt_cuda_entry_unused; /* this build has no CUDA: nothing to compile */
#endif

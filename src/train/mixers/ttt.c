/* The TTT mixer (model.mixer: ttt): H heads of the `layer:` TTT layer — any preset or tuple —
 * run on the shared q, k, v, with the per-token learning rate η and forget gate the options
 * choose (seqmodel.h gives the equations and the defaults). */
#include "mixer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_kernels.h"
#include "ops.h"
#include "ops_device.h"
#include "rope_device.h"

/* This mixer's own parameters in ttt_block_ids.own. */
enum {
    W_ETA,  /* (d, H) η projection */
    B_ETA,  /* (H) its bias */
    W_A,    /* (d, H) or (d, H·D): the gate's projection */
    B_A,    /* (H) dt_bias, or (H·D) b_a */
    A_LOG,  /* (H) log A of the scalar gate */
    /* steps_per_token n_h > 1 (Gated DeltaProduct, docs/math.md §4.7): the keys and values of
     * pairs 1 … n_h − 1, (d, 2·(n_h − 1)·H·D) [k_1 … k_{n_h−1} | v_1 … v_{n_h−1}], and their
     * short convolution kernels side by side (conv, 2·(n_h − 1)·H·D) */
    W_KV2,
    CONV_KV2,
    /* levels Λ > 1 (log-linear attention, docs/math.md §4.8): λ = softplus(h W_λ + b_λ),
     * (d, Λ·H) and (Λ·H), level ℓ of head h at column ℓ·H + h */
    W_LAM,
    B_LAM,
    W0,     /* W0 + w: the learned initial fast weight w, (H, shape of w) */
    /* OPT + i: the inner optimizer's outer parameter i (optim.h `outer`), its declared shape */
    OPT = W0 + TTT_MAX_WEIGHTS,
    N_OWN = OPT + TTT_OPTIM_MAX_OUTER
};
_Static_assert(N_OWN <= TTT_MIXER_MAX_IDS, "the TTT mixer's ids fit in ttt_block_ids.own");

/* The gate named s (an option value or a preset row's), or fallback when s is NULL. */
static ttt_gate_kind gate_of(const char *s, ttt_gate_kind fallback) {
    return !s                               ? fallback
           : strcmp(s, "none") == 0         ? TTT_GATE_NONE
           : strcmp(s, "constant") == 0     ? TTT_GATE_CONSTANT
           : strcmp(s, "scalar") == 0       ? TTT_GATE_SCALAR
           : strcmp(s, "vector") == 0       ? TTT_GATE_VECTOR
           : strcmp(s, "multiscale") == 0   ? TTT_GATE_MULTISCALE
                                            : fallback;
}

/* The option's value, or for `auto` the preset row's (NULL: no row). */
static const char *chosen(const ttt_cfg_node *map, const char *key,
                          const ttt_block_defaults *row, const char *row_value) {
    const char *s = ttt_cfg_str(map, key);
    if (strcmp(s, "auto") != 0) return s;
    return row ? row_value : NULL;
}

static int truth(const char *s, int fallback) { return s ? strcmp(s, "true") == 0 : fallback; }

static ttt_status parse(ttt_seq_model_config *c, const ttt_cfg_node *map,
                        const ttt_cfg_node *layer_map, ttt_cfg_node **layer_resolved,
                        ttt_error *err) {
    /* the preset's block (layers/layer_presets.c, docs/mixers.md) decides every `auto`; a tuple
     * without a preset falls back on the rules of its traits below */
    const ttt_cfg_node *pn = ttt_cfg_get(layer_map, "preset");
    const ttt_preset *P =
        pn && pn->kind == TTT_CFG_SCALAR && pn->scalar ? ttt_preset_find(pn->scalar) : NULL;
    const ttt_block_defaults *row = P && P->block.conv ? &P->block : NULL;
    /* the row's rope and normalize are the layer's own options: the layer resolves them */
    TTT_TRY(ttt_layer_parse_section(layer_map, c->head_dim, c->head_dim, 1, &c->layer,
                                    layer_resolved, err));
    const ttt_layer *L = &c->layer;
    /* the traits' rules (layers/models/model.h): a linear map trained on a residual loss is
     * the delta rule, whose step is stable for unit keys; a loss whose gradient does not depend
     * on the prediction (dot) writes unscaled */
    const int linear = (L->model->traits & TTT_MODEL_LINEAR_MAP) != 0;
    const int dot = L->loss->z_free;
    if (c->conv < 0) {
        const char *cs = row ? row->conv : NULL;
        c->conv = cs ? atoi(cs) : 4;
    }
    if (c->act < 0) c->act = row ? strcmp(row->act, "silu") == 0 : 1;
    c->qk_norm = truth(chosen(map, "qk_norm", row, row ? row->qk_norm : NULL),
                       linear && (L->loss->traits & TTT_LOSS_RESIDUAL));
    const char *eta = chosen(map, "eta", row, row ? row->eta : NULL);
    c->eta = !eta                     ? ((linear && dot) ? TTT_ETA_NONE : TTT_ETA_SIGMOID)
             : strcmp(eta, "dt") == 0 ? TTT_ETA_DT
             : strcmp(eta, "true") == 0 ? TTT_ETA_SIGMOID
                                        : TTT_ETA_NONE;
    c->gate = gate_of(chosen(map, "gate", row, row ? row->gate : NULL),
                      L->decay != 1.0f ? TTT_GATE_CONSTANT : TTT_GATE_NONE);
    if (c->eta == TTT_ETA_DT && c->gate != TTT_GATE_SCALAR) {
        static const char *const names[] = {"none", "constant", "scalar", "vector",
                                            "multiscale"};
        return ttt_cfg_error(err, TTT_ERR_CONFIG, ttt_cfg_get(map, "eta"),
                             "model.eta: dt writes with the scalar gate's step, so it needs "
                             "model.gate: scalar (the gate here is %s)",
                             names[c->gate]);
    }
    if (c->gate == TTT_GATE_VECTOR && !linear)
        return ttt_cfg_error(err, TTT_ERR_CONFIG, ttt_cfg_get(map, "gate"),
                             "model.gate: a decay per key dimension is defined for the "
                             "linear fast-weight model only, not %s",
                             L->model->name);
    if (L->substeps > 1 && c->eta == TTT_ETA_DT)
        return ttt_cfg_error(err, TTT_ERR_CONFIG, ttt_cfg_get(map, "eta"),
                             "model.eta: dt is one step size per token; layer.steps_per_token "
                             "= %d writes %d pairs per token, each with its own rate: expected "
                             "model.eta: true or false",
                             L->substeps, L->substeps);
    if (L->substeps > 1 && c->gate == TTT_GATE_VECTOR)
        return ttt_cfg_error(err, TTT_ERR_CONFIG, ttt_cfg_get(map, "gate"),
                             "model.gate: vector; layer.steps_per_token = %d (Gated "
                             "DeltaProduct) takes one gate per token: expected none, constant, "
                             "scalar or multiscale",
                             L->substeps);
    c->out_norm = truth(chosen(map, "out_norm", row, row ? row->out_norm : NULL), 1);
    c->out_gate = truth(chosen(map, "out_gate", row, row ? row->out_gate : NULL), 1);
    c->learn_init = truth(chosen(map, "learn_init", row, row ? row->learn_init : NULL), !linear);
    if (L->levels > 1 && c->learn_init)
        return ttt_cfg_error(err, TTT_ERR_CONFIG, ttt_cfg_get(map, "learn_init"),
                             "model.learn_init: layer.levels = %d (log-linear attention) starts "
                             "its levels empty, as the Fenwick tree starts; expected "
                             "learn_init: false",
                             L->levels);
    if (L->levels > 1 && c->gate == TTT_GATE_VECTOR)
        return ttt_cfg_error(err, TTT_ERR_CONFIG, ttt_cfg_get(map, "gate"),
                             "model.gate: vector; layer.levels = %d (log-linear attention) takes "
                             "one gate per token: expected none, constant, scalar or multiscale",
                             L->levels);
    if (c->positions == TTT_POS_ROPE)
        return ttt_cfg_error(err, TTT_ERR_CONFIG, ttt_cfg_get(map, "positions"),
                             "model.positions: rope for TTT mixers is the layer's own "
                             "option (layer.rope); model positions rope applies to softmax");
    return TTT_OK;
}

/* The inner optimizer's initial outer parameters, computed with ops (ttt_mixer_run). */
typedef struct optim_init {
    ttt_mixer_builder *b;
    const ttt_layer *L;
    const int *own;
    ttt_ctx *ctx;
    int n;
} optim_init;

static ttt_status optim_init_work(void *arg, ttt_error *err) {
    const optim_init *w = arg;
    ttt_tensor *init[TTT_OPTIM_MAX_OUTER];
    (void)err;
    ttt_optim_outer_new(w->ctx, w->L->optim, w->L->optim_cfg, init);
    for (int i = 0; i < w->n; i++) {
        ttt_param *p = ttt_mixer_param(w->b, w->own[OPT + i]);
        TTT_ASSERT(p->n == init[i]->n);
        memcpy(p->data, init[i]->data, p->n * sizeof(float));
    }
    return TTT_OK;
}

/* The inner optimizer's own outer-loop parameters (optim.h `outer`: a learned rule's network;
 * none for hand-written rules), "opt_<name>" of the declared shapes, one set per block shared by
 * its heads, at the rule's initialization (docs/optimizers.md "Outer parameters"). No weight
 * decay: it would pull the rule away from the one it starts as. */
static void add_optim_params(ttt_mixer_builder *b, const ttt_layer *L, int *own) {
    ttt_optim_param decl[TTT_OPTIM_MAX_OUTER];
    const int n = ttt_optim_n_outer(L->optim, L->optim_cfg, decl);
    if (n == 0) return;
    for (int i = 0; i < n && !ttt_mixer_failed(b); i++) {
        char nm[TTT_PARAM_NAME_LEN];
        snprintf(nm, sizeof nm, "opt_%s", decl[i].name);
        own[OPT + i] = ttt_mixer_add(b, nm, decl[i].ndim, decl[i].shape, 0, TTT_INIT_ZEROS, 0.0f);
    }
    if (ttt_mixer_failed(b)) return;
    ttt_arena a;
    ttt_arena_init(&a, 0);
    ttt_ctx cx = {.arena = &a};
    optim_init w = {.b = b, .L = L, .own = own, .ctx = &cx, .n = n};
    ttt_mixer_run(b, &a, optim_init_work, &w, "model: the inner optimizer's initial parameters");
    ttt_arena_free(&a);
}

/* The learned initial fast weights w0: each head's copy of the model's own initialization,
 * computed with ops (ttt_mixer_run). */
typedef struct w0_init {
    ttt_mixer_builder *b;
    const ttt_layer *L;
    const int *own;
    ttt_ctx *ctx;
    ttt_rng *r;
    int H;
} w0_init;

static ttt_status w0_init_work(void *arg, ttt_error *err) {
    const w0_init *w = arg;
    (void)err;
    for (int h = 0; h < w->H; h++) {
        ttt_layer_state st;
        ttt_layer_state_init(w->ctx, w->L, &st, w->r);
        for (int i = 0; i < st.n_w; i++) {
            ttt_param *p = ttt_mixer_param(w->b, w->own[W0 + i]);
            memcpy(p->data + (size_t)h * st.W[i]->n, st.W[i]->data, st.W[i]->n * sizeof(float));
        }
        ttt_arena_reset(w->ctx->arena);
    }
    return TTT_OK;
}

static void add_params(ttt_mixer_builder *b, const ttt_seq_model_config *c, int l,
                       ttt_block_ids *k) {
    const int d = c->d_model, H = c->n_heads, D = c->head_dim, C = H * D;
    const float std = c->init_std;
    int *own = k->own;
    ttt_mixer_add_qkv(b, c, l, k);
    /* n_h pairs per token: a rate per pair, and the keys and values of the pairs after the first
     * (FLA's gated_deltaproduct.py: the k, v and β projections n_h times wider) */
    const int nh = c->layer.substeps > 1 ? c->layer.substeps : 1;
    if (c->eta == TTT_ETA_SIGMOID) {
        own[W_ETA] = ttt_mixer_add(b, "w_eta", 2, (int[]){d, nh * H}, 1, TTT_INIT_NORMAL, std);
        own[B_ETA] = ttt_mixer_add(b, "b_eta", 1, (int[]){nh * H}, 0, TTT_INIT_ZEROS, 0.0f);
    }
    if (nh > 1) {
        const int W2 = 2 * (nh - 1) * C;
        own[W_KV2] = ttt_mixer_add(b, "w_kv_more", 2, (int[]){d, W2}, 1, TTT_INIT_NORMAL, std);
        if (c->conv > 0)
            own[CONV_KV2] = ttt_mixer_add(b, "conv_kv_more", 2, (int[]){c->conv, W2}, 0,
                                          TTT_INIT_NORMAL, 1.0f / sqrtf((float)c->conv));
    }
    const int nl = c->layer.levels > 1 ? c->layer.levels : 1;
    if (nl > 1) { /* the levels' weights λ (FLA's log_linear_mamba2.py: softplus of a
                   * projection; λ = log 2 for every level at initialization, as there) */
        own[W_LAM] = ttt_mixer_add(b, "w_lambda", 2, (int[]){d, nl * H}, 1, TTT_INIT_NORMAL, std);
        own[B_LAM] = ttt_mixer_add(b, "b_lambda", 1, (int[]){nl * H}, 0, TTT_INIT_ZEROS, 0.0f);
    }
    if (c->gate == TTT_GATE_SCALAR) {
        own[W_A] = ttt_mixer_add(b, "w_a", 2, (int[]){d, H}, 1, TTT_INIT_NORMAL, std);
        own[B_A] = ttt_mixer_add(b, "dt_bias", 1, (int[]){H}, 0, TTT_INIT_DT_BIAS, 0.0f);
        own[A_LOG] = ttt_mixer_add(b, "a_log", 1, (int[]){H}, 0, TTT_INIT_A_LOG, 0.0f);
    } else if (c->gate == TTT_GATE_VECTOR) {
        own[W_A] = ttt_mixer_add(b, "w_a", 2, (int[]){d, C}, 1, TTT_INIT_NORMAL, std);
        own[B_A] = ttt_mixer_add(b, "b_a", 1, (int[]){C}, 0, TTT_INIT_ZEROS, 0.0f);
    }
    const ttt_layer *L = &c->layer;
    add_optim_params(b, L, own);
    if (!c->learn_init) return;
    /* one copy of the fast-weight model's own initialization per head */
    char nm[TTT_PARAM_NAME_LEN];
    snprintf(nm, sizeof nm, "layer%d.mixer.w0", l);
    ttt_rng r = ttt_mixer_rng(b, ttt_hash_str(nm) + (uint64_t)l);
    for (int w = 0; w < L->model->n_weights && !ttt_mixer_failed(b); w++) {
        int shp[TTT_MAX_DIMS + 1] = {H};
        /* rows: the key width the state sees (a feature map's width, layer.h) */
        const int nd = L->model->shape(w, L->d_phi, D, shp + 1);
        snprintf(nm, sizeof nm, "w0_%d", w);
        own[W0 + w] = ttt_mixer_add(b, nm, nd + 1, shp, 0, TTT_INIT_ZEROS, 0.0f);
    }
    if (ttt_mixer_failed(b)) return;
    ttt_arena a;
    ttt_arena_init(&a, 0);
    ttt_ctx cx = {.arena = &a};
    w0_init w = {.b = b, .L = L, .own = own, .ctx = &cx, .r = &r, .H = H};
    ttt_mixer_run(b, &a, w0_init_work, &w, "model: the learned initial fast weights");
    ttt_arena_free(&a);
}

static double param_bound(const ttt_seq_model_config *c) {
    const double d = c->d_model, H = c->n_heads, C = H * c->head_dim;
    double w0 = 0.0; /* the fast-weight model's learned initialization, per head */
    if (c->learn_init && c->layer.model)
        for (int w = 0; w < c->layer.model->n_weights; w++) {
            int shp[TTT_MAX_DIMS];
            const int nd = c->layer.model->shape(w, c->layer.d_phi, c->head_dim, shp);
            double e = 1.0;
            for (int i = 0; i < nd; i++) e *= shp[i];
            w0 += H * e;
        }
    const double opt = c->layer.optim ? ttt_optim_outer_floats(c->layer.optim, c->layer.optim_cfg)
                                      : 0.0; /* the inner optimizer's own parameters */
    /* steps_per_token n_h: the wider rates, the other pairs' keys and values and kernels */
    const double nh = c->layer.substeps > 1 ? c->layer.substeps : 1;
    const double more = (nh - 1) * (d * H + H + 2.0 * C * (d + (c->conv > 0 ? c->conv : 0))) +
                        (c->layer.levels > 1 ? c->layer.levels * H * (d + 1.0) : 0.0); /* λ */
    return d * C + d * H + 3.0 * C + 3.0 * H + w0 + opt + more; /* gates, rates, biases */
}

/* ---- the block on a CUDA device (docs/training.md "Device and precision") ----
 * All B·H sequences of the block go through the layer's CUDA form in one batched call
 * (ttt_layer_forward_batched: the delta rule and gated delta rule, linear attention with or
 * without a scalar or per-key gate; layers/forms/cuda_entry.c), recorded on the tape as one op
 * whose backward is the form's batched CUDA backward. q, k, v are (B, T, H, D) row-major, which
 * is (B, T, H·D) as the projections give them; η is β before the layer's θ, the gate is log α. */

/* The gate's log α has a tensor (scalar, per-key, multiscale) rather than the tuple's constant. */
static int gate_given(const ttt_seq_model_config *c) {
    return c->gate == TTT_GATE_SCALAR || c->gate == TTT_GATE_VECTOR ||
           c->gate == TTT_GATE_MULTISCALE;
}

/* The layer the CUDA form is asked for: RoPE inside the layer is applied by the block before the
 * call (the forms take q and k rotated), so the form sees the layer without it. */
static ttt_layer form_layer(const ttt_layer *L) {
    ttt_layer f = *L;
    f.rope = 0;
    return f;
}

/* Whether config c's block runs on a CUDA device: NULL, with *entry the form entry the device
 * step chooses, or a sentence in buf saying why not (*entry NULL). */
static const char *device_check(const ttt_seq_model_config *c, char *buf, size_t len,
                                const ttt_form_entry **entry) {
    *entry = NULL;
    const ttt_layer Lf = form_layer(&c->layer), *L = &Lf;
    char name[128];
    ttt_layer_describe(&c->layer, name, sizeof name);
    if (L->substeps > 1) {
        snprintf(buf, len, "layer %s: steps_per_token = %d has no CUDA form (the CUDA forms take "
                 "one key-value pair per token)", name, L->substeps);
        return buf;
    }
    const ttt_form_inputs in =
        ttt_layer_batch_inputs(L, c->io.seq_len > 0 ? c->io.seq_len : 1, c->eta != TTT_ETA_NONE,
                               gate_given(c), c->gate == TTT_GATE_VECTOR, TTT_DEVICE_CUDA);
    ttt_error e = {0};
    ttt_form_plan plan;
    const ttt_form_entry *fe = ttt_form_plan_with(NULL, L, &in, &plan, &e);
    if (!fe) {
        snprintf(buf, len, "layer %s has no CUDA form: %s", name, e.msg);
        return buf;
    }
    if (!fe->forward_batched || !fe->backward_batched) {
        snprintf(buf, len, "layer %s has no CUDA form: form %s/%s has no batched forward and "
                 "backward", name, fe->family, fe->form);
        return buf;
    }
    if (c->learn_init) {
        snprintf(buf, len, "layer %s: learned initial fast weights (model.learn_init: true) are "
                 "not passed to the CUDA forms; set model.learn_init: false", name);
        return buf;
    }
    if (ttt_optim_n_outer(L->optim, L->optim_cfg, NULL) > 0) {
        snprintf(buf, len, "layer %s: an inner optimizer with learned parameters has no CUDA "
                 "form", name);
        return buf;
    }
    *entry = fe;
    return NULL;
}

static const char *device_refuse(const ttt_seq_model_config *c, char *buf, size_t len) {
    const ttt_form_entry *fe;
    return device_check(c, buf, len, &fe);
}

static const char *device_form(const ttt_seq_model_config *c) {
    char why[TTT_ERROR_MSG_LEN + 256]; /* the refusal (a name and an error message), unread */
    const ttt_form_entry *fe;
    return device_check(c, why, sizeof why, &fe) ? NULL : fe->form;
}

/* What the recorded op keeps: the layer the form computes and the call's shape. */
typedef struct batched_rec {
    ttt_layer L;
    int B, T, H, alpha_vec;
} batched_rec;

/* A device gradient for input t written whole by the form: t's own buffer when this is its
 * first writer, else scratch that is added to it afterwards (autograd.h "First writer
 * assigns"); NULL when t needs none. */
typedef struct dgrad {
    float *g, *write;
    size_t n;
} dgrad;

static dgrad dgrad_get(ttt_ctx *ctx, const ttt_tensor *t) {
    dgrad d = {0};
    if (!t || !t->requires_grad) return d;
    int add = 0;
    d.g = ttt_grad_acc(ctx, t, &add);
    if (!d.g) return d;
    d.n = t->n;
    d.write = d.g;
    if (add) {
        d.write = ttt_arena_alloc(ctx->arena, t->n * sizeof(float) + 1);
        TTT_ASSERT(d.write != NULL);
    }
    return d;
}

static void dgrad_done(ttt_ctx *ctx, const dgrad *d) {
    if (!d->g || d->write == d->g) return;
    ttt_device_ops_note(ttt_cuda_map(TTT_MAP_SCALE, d->g, 1, d->write, NULL, TTT_B_SAME, NULL,
                                     d->n, d->n, 1.0f, 0.0f, ctx->arena->stream,
                                     ttt_device_ops_err()));
}

static ttt_form_batch batch_io(ttt_ctx *ctx, const batched_rec *r, float *o, const ttt_tensor *q,
                               const ttt_tensor *k, const ttt_tensor *v, const ttt_tensor *eta,
                               const ttt_tensor *la) {
    return (ttt_form_batch){.B = r->B, .T = r->T, .H = r->H,
                            .device = ctx->arena->device, .stream = ctx->arena->stream,
                            .dtype = TTT_DTYPE_F32, .o = o,
                            .q = q->data, .k = k->data, .v = v->data,
                            .eta = eta ? eta->data : NULL,
                            .log_alpha = la ? la->data : NULL, .alpha_vec = r->alpha_vec};
}

/* ---- bfloat16 (ttt_ctx.mixed; docs/gpu.md "bfloat16 training") ----
 * Under mixed precision the form is called with q, k, v, o and their gradients in bf16 (its
 * products then run on bf16 operands with fp32 sums, as the device's matmuls do), η, the gate
 * and the fast-weight state in fp32 (the forms take them in fp32 only). The tape keeps the fp32
 * tensors; the bf16 copies are arena scratch of the one call, rounded again by the backward. */

static uint16_t *bf16_scratch(ttt_ctx *ctx, size_t n) {
    uint16_t *h = ttt_arena_alloc(ctx->arena, (n ? n : 1) * sizeof(uint16_t));
    TTT_ASSERT(h != NULL);
    return h;
}

static const uint16_t *bf16_of(ttt_ctx *ctx, const float *x, size_t n) {
    uint16_t *h = bf16_scratch(ctx, n);
    ttt_device_ops_note(ttt_cuda_to_bf16(h, x, n, ctx->arena->stream, ttt_device_ops_err()));
    return h;
}

/* The fp32 gradient of q, k or v (NULL: not wanted), which the form writes whole: *add = 0 when
 * this is its first writer (assign), else 1 (autograd.h "First writer assigns"). */
static float *grad_whole(ttt_ctx *ctx, const ttt_tensor *t, int *add) {
    *add = 0;
    return t && t->requires_grad ? ttt_grad_acc(ctx, t, add) : NULL;
}

/* g (+)= the bf16 gradient h the form wrote, widened (exact). */
static void grad_from_bf16(ttt_ctx *ctx, float *g, int add, const uint16_t *h, size_t n) {
    if (!g) return;
    ttt_device_ops_note(
        ttt_cuda_from_bf16(g, add, h, n, ctx->arena->stream, ttt_device_ops_err()));
}

static void batched_backward_bf16(ttt_ctx *ctx, const ttt_tape_entry *e, const float *dout) {
    const batched_rec *r = e->aux;
    const ttt_tensor *q = e->in[0], *k = e->in[1], *v = e->in[2], *eta = e->in[3],
                     *la = e->in[4];
    /* every ttt_grad before any scratch (autograd.h) */
    int aq, ak, av;
    float *dq = grad_whole(ctx, q, &aq), *dk = grad_whole(ctx, k, &ak),
          *dv = grad_whole(ctx, v, &av);
    const dgrad de = dgrad_get(ctx, eta), dl = dgrad_get(ctx, la);
    const ttt_arena_mark mark = ttt_arena_mark_get(ctx->arena);
    ttt_form_batch io = batch_io(ctx, r, NULL, q, k, v, eta, la);
    io.dtype = TTT_DTYPE_BF16;
    io.q = bf16_of(ctx, q->data, q->n);
    io.k = bf16_of(ctx, k->data, k->n);
    io.v = bf16_of(ctx, v->data, v->n);
    io.o = bf16_scratch(ctx, e->out->n); /* the backward's forward writes o again */
    uint16_t *gq = dq ? bf16_scratch(ctx, q->n) : NULL, *gk = dk ? bf16_scratch(ctx, k->n) : NULL,
             *gv = dv ? bf16_scratch(ctx, v->n) : NULL;
    const ttt_form_batch_grad g = {.d_o = bf16_of(ctx, dout, e->out->n), .d_q = gq, .d_k = gk,
                                   .d_v = gv, .d_eta = de.write, .d_log_alpha = dl.write};
    ttt_device_ops_note(ttt_layer_backward_batched(&r->L, &io, &g, ttt_device_ops_err()));
    grad_from_bf16(ctx, dq, aq, gq, q->n);
    grad_from_bf16(ctx, dk, ak, gk, k->n);
    grad_from_bf16(ctx, dv, av, gv, v->n);
    dgrad_done(ctx, &de);
    dgrad_done(ctx, &dl);
    ttt_arena_release(ctx->arena, mark); /* stream-ordered: after the calls above */
}

static void batched_backward(ttt_ctx *ctx, const ttt_tape_entry *e, const float *dout) {
    if (ctx->mixed) {
        batched_backward_bf16(ctx, e, dout);
        return;
    }
    const batched_rec *r = e->aux;
    const ttt_tensor *q = e->in[0], *k = e->in[1], *v = e->in[2], *eta = e->in[3],
                     *la = e->in[4];
    /* every ttt_grad before any scratch (autograd.h) */
    const dgrad dq = dgrad_get(ctx, q), dk = dgrad_get(ctx, k), dv = dgrad_get(ctx, v),
                de = dgrad_get(ctx, eta), dl = dgrad_get(ctx, la);
    const ttt_form_batch io = batch_io(ctx, r, e->out->data, q, k, v, eta, la);
    const ttt_form_batch_grad g = {.d_o = dout, .d_q = dq.write, .d_k = dk.write,
                                   .d_v = dv.write, .d_eta = de.write, .d_log_alpha = dl.write};
    ttt_device_ops_note(ttt_layer_backward_batched(&r->L, &io, &g, ttt_device_ops_err()));
    dgrad_done(ctx, &dq);
    dgrad_done(ctx, &dk);
    dgrad_done(ctx, &dv);
    dgrad_done(ctx, &de);
    dgrad_done(ctx, &dl);
}

/* o (B, T, H·D) of layer L on q, k, v (B, T, H·D), η (B, T, H) or NULL, log α (B, T, H) or
 * (B, T, H·D) or NULL, all on the arena's device, as one recorded op. */
static ttt_status batched_op(ttt_ctx *ctx, const ttt_layer *L, int B, int T, int H,
                             const ttt_tensor *q, const ttt_tensor *k, const ttt_tensor *v,
                             const ttt_tensor *eta, const ttt_tensor *la, int alpha_vec,
                             ttt_tensor **out, ttt_error *err) {
    ttt_tensor *o = ttt_tensor_3d(ctx, B, T, H * L->d_v);
    batched_rec rec = {.L = *L, .B = B, .T = T, .H = H, .alpha_vec = alpha_vec};
    ttt_form_batch io = batch_io(ctx, &rec, o->data, q, k, v, eta, la);
    if (ctx->mixed) { /* bf16 q, k, v and o (above) */
        const ttt_arena_mark mark = ttt_arena_mark_get(ctx->arena);
        io.dtype = TTT_DTYPE_BF16;
        io.q = bf16_of(ctx, q->data, q->n);
        io.k = bf16_of(ctx, k->data, k->n);
        io.v = bf16_of(ctx, v->data, v->n);
        uint16_t *o16 = bf16_scratch(ctx, o->n);
        io.o = o16;
        ttt_status s = ttt_layer_forward_batched(L, &io, NULL, err);
        if (s == TTT_OK) s = ttt_cuda_from_bf16(o->data, 0, o16, o->n, ctx->arena->stream, err);
        ttt_arena_release(ctx->arena, mark);
        TTT_TRY(s);
    } else {
        TTT_TRY(ttt_layer_forward_batched(L, &io, NULL, err));
    }
    ttt_tape_entry *e = ttt_tape_record(ctx, batched_backward, o,
                                        (const ttt_tensor *const[]){q, k, v, eta, la}, 5);
    if (e) {
        batched_rec *saved = ttt_tape_alloc(ctx, sizeof *saved);
        *saved = rec;
        e->aux = saved;
        e->name = "ttt_layer_batched";
    }
    *out = o;
    return TTT_OK;
}

/* The layer's RoPE on q or k (B, T, H·D): each head's row at token t turned by position t (the
 * host layer's ttt_rope per sequence and head, from position 0), recorded; the backward turns the
 * gradient back. */
static void rope_heads_backward(ttt_ctx *ctx, const ttt_tape_entry *e, const float *dy) {
    const ttt_tensor *x = e->in[0];
    float *g = ttt_grad(ctx, x);
    if (!g) return;
    ttt_device_ops_note(ttt_cuda_rope_heads(g, 1, dy, e->iarg[0], e->iarg[1], e->iarg[2],
                                            e->iarg[3], e->farg[0], 1, ctx->arena->stream,
                                            ttt_device_ops_err()));
}

static ttt_tensor *rope_heads(ttt_ctx *ctx, const ttt_tensor *x, int B, int T, int H, int D,
                              float base) {
    ttt_tensor *y = ttt_tensor_new(ctx, x->ndim, x->shape);
    ttt_device_ops_note(ttt_cuda_rope_heads(y->data, 0, x->data, B, T, H, D, base, 0,
                                            ctx->arena->stream, ttt_device_ops_err()));
    ttt_tape_entry *e =
        ttt_tape_record(ctx, rope_heads_backward, y, (const ttt_tensor *const[]){x}, 1);
    if (e) {
        e->name = "rope_heads";
        e->iarg[0] = B, e->iarg[1] = T, e->iarg[2] = H, e->iarg[3] = D;
        e->farg[0] = base;
    }
    return y;
}

static ttt_status forward_device(const ttt_mixer_call *call, ttt_tensor *qkv, ttt_tensor *eta,
                                 ttt_tensor *la, ttt_tensor **out, ttt_error *err) {
    ttt_ctx *ctx = call->ctx;
    const ttt_seq_model_config *c = &call->m->cfg;
    const int H = c->n_heads, D = c->head_dim, B = call->B, T = call->T, C = H * D;
    char why[512];
    if (device_refuse(c, why, sizeof why)) {
        char dn[32];
        return ttt_error_set(err, TTT_ERR_UNSUPPORTED, "model.mixer ttt on %s: %s",
                             ttt_device_name(ctx->arena->device, dn, sizeof dn), why);
    }
    /* q, k, v as (B, T, H, D) arrays of their own (the form reads rows of H·D contiguous) */
    ttt_tensor *q = ttt_slice_cols(ctx, qkv, 0, C);
    ttt_tensor *k = ttt_slice_cols(ctx, qkv, C, 2 * C);
    ttt_tensor *v = ttt_slice_cols(ctx, qkv, 2 * C, 3 * C);
    if (c->qk_norm) { /* per head: rows of D */
        q = ttt_mixer_reshape3(
            ctx, ttt_mixer_l2norm(ctx, ttt_mixer_reshape2(ctx, q, B * T * H, D)), B, T, C);
        k = ttt_mixer_reshape3(
            ctx, ttt_mixer_l2norm(ctx, ttt_mixer_reshape2(ctx, k, B * T * H, D)), B, T, C);
    }
    if (c->layer.rope) { /* after the mixer's q/k normalization, as the host layer turns them */
        q = rope_heads(ctx, q, B, T, H, D, c->layer.rope_base);
        k = rope_heads(ctx, k, B, T, H, D, c->layer.rope_base);
    }
    if (c->gate == TTT_GATE_MULTISCALE) { /* head h's constant log γ_h at every token */
        float *g = ttt_arena_alloc(ttt_arena_host(ctx->arena), (size_t)H * sizeof(float));
        TTT_ASSERT(g != NULL);
        for (int hh = 0; hh < H; hh++) g[hh] = (float)log1p(-ldexp(1.0, -5 - hh));
        ttt_tensor host = ttt_tensor_view(g, 1, (int[]){H});
        ttt_tensor *row = ttt_tensor_to(ctx, &host);
        ttt_tensor *z = ttt_tensor_2d(ctx, B * T, H);
        ttt_tensor_fill(z, 0.0f);
        la = ttt_mixer_reshape3(ctx, ttt_add(ctx, z, row), B, T, H);
    }
    ttt_tensor *o;
    const ttt_layer Lf = form_layer(&c->layer);
    TTT_TRY(batched_op(ctx, &Lf, B, T, H, q, k, v, eta, la, c->gate == TTT_GATE_VECTOR, &o,
                       err));
    *out = ttt_mixer_reshape2(ctx, o, B * T, C);
    return TTT_OK;
}

static ttt_status forward(const ttt_mixer_call *call, ttt_tensor **out, ttt_error *err) {
    ttt_ctx *ctx = call->ctx;
    const ttt_seq_model_config *c = &call->m->cfg;
    const ttt_layer *L = &c->layer;
    const int *own = call->ids->own;
    const int H = c->n_heads, D = c->head_dim, B = call->B, T = call->T;
    const ttt_tensor *h = call->h;
    const int C = H * D;
    ttt_tensor *qkv = ttt_mixer_qkv_packed(call); /* (B, T, 3·H·D): [q | k | v] */
    const int nh = L->substeps > 1 ? L->substeps : 1;
    ttt_tensor *eta = NULL, *la = NULL, *kv2 = NULL, *lam = NULL;
    const int nl = L->levels > 1 ? L->levels : 1;
    if (nl > 1) /* λ = softplus(h W_λ + b_λ): (B, T, Λ·H) */
        lam = ttt_mixer_reshape3(
            ctx,
            ttt_softplus(ctx, ttt_add(ctx, ttt_matmul(ctx, h, 0, ttt_mixer_p(call, own[W_LAM]), 0),
                                      ttt_mixer_p(call, own[B_LAM]))),
            B, T, nl * H);
    if (c->eta == TTT_ETA_SIGMOID) { /* η = sigmoid(h W_η + b_η): (B, T, n_h·H) */
        eta = ttt_sigmoid(ctx, ttt_add(ctx, ttt_matmul(ctx, h, 0, ttt_mixer_p(call, own[W_ETA]), 0),
                                       ttt_mixer_p(call, own[B_ETA])));
        eta = ttt_mixer_reshape3(ctx, eta, B, T, nh * H);
    }
    if (nh > 1) { /* the other pairs' keys and values, with q, k, v's convolution and SiLU */
        kv2 = ttt_matmul(ctx, h, 0, ttt_mixer_p(call, own[W_KV2]), 0);
        kv2 = ttt_mixer_reshape3(ctx, kv2, B, T, TTT_COLS(kv2));
        if (c->conv > 0)
            kv2 = c->act ? ttt_conv1d_causal_silu(ctx, kv2, ttt_mixer_p(call, own[CONV_KV2]))
                         : ttt_conv1d_causal(ctx, kv2, ttt_mixer_p(call, own[CONV_KV2]), NULL);
        else if (c->act)
            kv2 = ttt_silu(ctx, kv2);
    }
    if (c->gate == TTT_GATE_SCALAR) { /* log α = −exp(a_log) dt, dt = softplus(h W_a + dt_bias) */
        ttt_tensor *dt = ttt_softplus(
            ctx, ttt_add(ctx, ttt_matmul(ctx, h, 0, ttt_mixer_p(call, own[W_A]), 0),
                         ttt_mixer_p(call, own[B_A])));
        la = ttt_neg(ctx, ttt_mul(ctx, dt, ttt_exp(ctx, ttt_mixer_p(call, own[A_LOG]))));
        la = ttt_mixer_reshape3(ctx, la, B, T, H);
        if (c->eta == TTT_ETA_DT) eta = ttt_mixer_reshape3(ctx, dt, B, T, H); /* (B, T, H) */
    } else if (c->gate == TTT_GATE_VECTOR) { /* log α = logsigmoid(h W_a + b_a)/16 */
        ttt_tensor *z = ttt_add(ctx, ttt_matmul(ctx, h, 0, ttt_mixer_p(call, own[W_A]), 0),
                                ttt_mixer_p(call, own[B_A]));
        la = ttt_scale(ctx, ttt_softplus(ctx, ttt_neg(ctx, z)), -1.0f / 16.0f);
        la = ttt_mixer_reshape3(ctx, la, B, T, H * D);
    }
    if (!ttt_device_is_host(ctx->arena->device))
        return forward_device(call, qkv, eta, la, out, err);
    /* the heads' outputs (T, D), sequence b's head h at b·H + h: joined in one copy */
    ttt_tensor **heads = ttt_arena_alloc(ctx->arena, (size_t)B * H * sizeof *heads);
    TTT_ASSERT(heads);
    ttt_tensor **ms = NULL; /* multiscale: head h's constant log γ_h (T), shared by the batch */
    if (c->gate == TTT_GATE_MULTISCALE) {
        ms = ttt_arena_alloc(ctx->arena, (size_t)H * sizeof *ms);
        TTT_ASSERT(ms);
        for (int hh = 0; hh < H; hh++) {
            ms[hh] = ttt_tensor_1d(ctx, T);
            ttt_tensor_fill(ms[hh], (float)log1p(-ldexp(1.0, -5 - hh)));
        }
    }
    for (int b = 0; b < B; b++) {
        const int r0 = b * T, r1 = r0 + T; /* sequence b's rows of (B·T, …) */
        for (int hh = 0; hh < H; hh++) {
            const int c0 = hh * D, c1 = c0 + D;
            /* each head's q, k, v, η and gate straight out of the packed tensors, one copy */
            ttt_tensor *qh = ttt_slice_block(ctx, qkv, r0, r1, c0, c1); /* (T, D) */
            ttt_tensor *kh = ttt_slice_block(ctx, qkv, r0, r1, C + c0, C + c1);
            ttt_tensor *vh = ttt_slice_block(ctx, qkv, r0, r1, 2 * C + c0, 2 * C + c1);
            if (nh > 1) {
                /* pair j of token t at row n_h·t + j: the pairs side by side, read as rows */
                const ttt_tensor *kp[64], *vp[64];
                TTT_ASSERT(nh <= 64);
                kp[0] = kh;
                vp[0] = vh;
                for (int j = 1; j < nh; j++) {
                    const int kc = (j - 1) * C + c0, vc = (nh - 1 + j - 1) * C + c0;
                    kp[j] = ttt_slice_block(ctx, kv2, r0, r1, kc, kc + D);
                    vp[j] = ttt_slice_block(ctx, kv2, r0, r1, vc, vc + D);
                }
                kh = ttt_reshape(ctx, ttt_concat_cols_n(ctx, kp, nh), 2, (int[]){nh * T, D});
                vh = ttt_reshape(ctx, ttt_concat_cols_n(ctx, vp, nh), 2, (int[]){nh * T, D});
            }
            if (c->qk_norm) {
                qh = ttt_mixer_l2norm(ctx, qh);
                kh = ttt_mixer_l2norm(ctx, kh);
            }
            if (lam) { /* level ℓ's query λ^ℓ q, the levels side by side: (T, Λ·D) */
                const ttt_tensor *qp[64];
                TTT_ASSERT(nl <= 64);
                for (int l = 0; l < nl; l++)
                    qp[l] = ttt_scale_rows(
                        ctx, qh,
                        ttt_reshape(ctx,
                                    ttt_slice_block(ctx, lam, r0, r1, l * H + hh, l * H + hh + 1),
                                    1, (int[]){T}));
                qh = ttt_concat_cols_n(ctx, qp, nl);
            }
            ttt_tensor *eh = NULL, *lh = NULL;
            if (eta && nh > 1) { /* pair j's rate of head hh at column j·H + hh */
                const ttt_tensor *ep[64];
                for (int j = 0; j < nh; j++)
                    ep[j] = ttt_slice_block(ctx, eta, r0, r1, j * H + hh, j * H + hh + 1);
                eh = ttt_reshape(ctx, ttt_concat_cols_n(ctx, ep, nh), 1, (int[]){nh * T});
            } else if (eta)
                eh = ttt_reshape(ctx, ttt_slice_block(ctx, eta, r0, r1, hh, hh + 1), 1,
                                 (int[]){T});
            if (la && c->gate == TTT_GATE_SCALAR)
                lh = ttt_reshape(ctx, ttt_slice_block(ctx, la, r0, r1, hh, hh + 1), 1,
                                 (int[]){T});
            else if (la)
                lh = ttt_slice_block(ctx, la, r0, r1, c0, c1); /* (T, D) */
            else if (ms)
                lh = ms[hh];
            ttt_layer_state st;
            ttt_layer_state_init(ctx, L, &st, NULL);
            /* the rule's outer parameters are the block's (trained), not their initial values */
            for (int i = 0; i < st.n_outer; i++) st.outer[i] = ttt_mixer_p(call, own[OPT + i]);
            if (c->learn_init)
                for (int w = 0; w < st.n_w; w++) {
                    ttt_tensor *w0 = ttt_slice_rows(ctx, ttt_mixer_p(call, own[W0 + w]), hh, hh + 1);
                    st.W[w] = ttt_reshape(ctx, w0, st.W[w]->ndim, st.W[w]->shape);
                    /* a copy: a form may update its state in place */
                    st.W[w] = ttt_tensor_copy(ctx, st.W[w]);
                    /* state that depends on W (large_batch's target norms ‖W_0‖) from the
                     * learned W_0, differentiably (optim.h) */
                    ttt_optim_reinit_state(ctx, L->optim, L->optim_cfg, st.opt[w], st.n_opt,
                                           st.W[w]);
                }
            ttt_tensor *o = ttt_tensor_2d(ctx, T, D);
            TTT_TRY(ttt_layer_forward(ctx, L, o, &st, qh, kh, vh, eh, lh, err));
            heads[(size_t)b * H + hh] = o;
        }
    }
    *out = B * H == 1 ? heads[0] : ttt_concat_grid(ctx, (const ttt_tensor *const *)heads, B, H);
    return TTT_OK; /* (B·T, H·D) */
}

static const char *describe(const ttt_seq_model_config *c, char *buf, size_t len) {
    return ttt_layer_describe(&c->layer, buf, len);
}

const ttt_mixer ttt_mixer_ttt = {
    .name = "ttt",
    .help = "the `layer:` TTT layer (any preset or tuple), H heads on the shared q, k, v",
    .uses_layer = 1,
    .positions = TTT_POS_NONE,
    .parse = parse,
    .add_params = add_params,
    .param_bound = param_bound,
    .forward = forward,
    .describe = describe,
    .device_refuse = device_refuse,
    .device_form = device_form,
};

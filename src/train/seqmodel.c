/* Sequence models trained in the outer loop (see model.h). */
#include "seqmodel.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autograd.h"
#include "batch.h"
#include "ops.h"
#include "rope.h"

/* ------------------------------------------------------------------------------------------ */
/* Configuration */

const ttt_option ttt_seq_model_options[] = {
    {"mixer", TTT_OPT_CHOICE, "ttt", TTT_NO_RANGE, "ttt|softmax",
     "token mixer: the `layer:` TTT layer, or softmax attention (the quadratic baseline)"},
    {"d_model", TTT_OPT_INT, "64", 1, 65536, NULL, "width of the residual stream"},
    {"layers", TTT_OPT_INT, "2", 1, TTT_SEQ_MAX_LAYERS, NULL, "number of blocks"},
    {"heads", TTT_OPT_INT, "2", 1, 4096, NULL, "heads per mixer"},
    {"head_dim", TTT_OPT_INT, "0", 0, 65536, NULL, "width D of a head; 0 = d_model / heads"},
    {"mlp", TTT_OPT_INT, "4", 0, 64, NULL,
     "hidden width of the MLP after each mixer as a multiple of d_model; 0 = no MLP"},
    {"norm", TTT_OPT_CHOICE, "rms", TTT_NO_RANGE, "rms|layer",
     "pre-norm of each block and the final norm: RMSNorm or LayerNorm, learned gain"},
    {"norm_eps", TTT_OPT_FLOAT, "1e-5", 1e-12, 1.0, NULL, "epsilon of every norm"},
    {"positions", TTT_OPT_CHOICE, "auto", TTT_NO_RANGE, "auto|none|learned|rope",
     "position information; auto = learned for softmax, none for TTT mixers (their "
     "recurrence and convolution are causal already)"},
    {"max_len", TTT_OPT_INT, "0", 0, 1 << 24, NULL,
     "rows of the learned position table; 0 = the task's sequence length"},
    {"conv", TTT_OPT_INT, "4", 0, 64, NULL,
     "kernel of the short causal depthwise convolution (then SiLU) on q, k, v; 0 = off"},
    {"qk_norm", TTT_OPT_CHOICE, "auto", TTT_NO_RANGE, "auto|true|false",
     "L2-normalize q and k per head; auto = on for the delta-rule family (linear model, "
     "squared loss)"},
    {"eta", TTT_OPT_CHOICE, "auto", TTT_NO_RANGE, "auto|true|false|dt",
     "per-token inner learning rate per head: true = learned sigmoid(x W + b); dt = the scalar "
     "gate's step dt (Mamba2's write x dt); auto = dt for mamba2, else on unless the fast-weight "
     "model is linear with the dot loss"},
    {"gate", TTT_OPT_CHOICE, "auto", TTT_NO_RANGE, "auto|none|constant|scalar|vector|multiscale",
     "forget gate: learned log decay per token (scalar per head, or vector per key dimension), "
     "the tuple's constant, a constant 1 - 2^(-5-h) per head h (multiscale, RetNet), or none; "
     "auto follows the preset (see model.h)"},
    {"out_norm", TTT_OPT_CHOICE, "auto", TTT_NO_RANGE, "auto|true|false",
     "RMSNorm of each head's output; auto = on for TTT mixers, off for softmax"},
    {"out_gate", TTT_OPT_CHOICE, "auto", TTT_NO_RANGE, "auto|true|false",
     "multiply the mixer output by silu(x W_g); auto = on for TTT mixers, off for softmax"},
    {"learn_init", TTT_OPT_CHOICE, "auto", TTT_NO_RANGE, "auto|true|false",
     "learn the initial fast weights (one set per head and block); auto = on for models "
     "other than linear"},
    {"init_std", TTT_OPT_FLOAT, "0.02", 0.0, 10.0, NULL,
     "standard deviation of the initial weight matrices"},
    {"dt_min", TTT_OPT_FLOAT, "1e-3", 1e-9, 10.0, NULL,
     "scalar forget gate: the initial step dt per head is log-uniform in [dt_min, dt_max] "
     "(Mamba2's 1e-3 .. 1e-1); the retention per token at init is exp(-A dt), A in [1, 16]"},
    {"dt_max", TTT_OPT_FLOAT, "0.1", 1e-9, 10.0, NULL,
     "scalar forget gate: upper end of the initial dt (see dt_min)"},
    {"rope_base", TTT_OPT_FLOAT, "10000.0", 1.0, 1e9, NULL, "RoPE frequency base"},
    TTT_OPTION_END,
};

/* auto|true|false → -1|1|0 */
static int tri(const ttt_cfg_node *map, const char *key) {
    const char *s = ttt_cfg_str(map, key);
    return strcmp(s, "auto") == 0 ? -1 : strcmp(s, "true") == 0;
}

static ttt_gate_kind auto_gate(const ttt_layer *L) {
    const char *p = L->preset ? L->preset : "";
    if (strcmp(p, "mamba2") == 0 || strcmp(p, "gated_deltanet") == 0 || strcmp(p, "titans") == 0)
        return TTT_GATE_SCALAR;
    if (strcmp(p, "gla") == 0) return TTT_GATE_VECTOR;
    if (strcmp(p, "retnet") == 0) return TTT_GATE_MULTISCALE;
    return L->decay != 1.0f ? TTT_GATE_CONSTANT : TTT_GATE_NONE;
}

ttt_status ttt_seq_model_parse(ttt_cfg_node *map, ttt_cfg_node *layer_map,
                               const ttt_seq_model_io *io, ttt_seq_model_config *c,
                               ttt_error *err) {
    memset(c, 0, sizeof *c);
    if (map->kind != TTT_CFG_MAP)
        return ttt_cfg_error(err, TTT_ERR_CONFIG, map, "model: expected a mapping");
    /* `layer: {mixer: softmax}` is shorthand for model.mixer: softmax, so that one sweep over
     * `layer` can put softmax attention next to the TTT presets; it moves into the model map. */
    const ttt_cfg_node *lm = layer_map ? ttt_cfg_get(layer_map, "mixer") : NULL;
    if (lm) {
        if (lm->kind != TTT_CFG_SCALAR || !lm->scalar ||
            (strcmp(lm->scalar, "softmax") != 0 && strcmp(lm->scalar, "ttt") != 0))
            return ttt_cfg_error(err, TTT_ERR_CONFIG, lm,
                                 "layer.mixer: expected ttt or softmax (shorthand for "
                                 "model.mixer)");
        ttt_cfg_map_set(map, "mixer", ttt_cfg_clone(lm));
        ttt_cfg_map_remove(layer_map, "mixer");
    }
    TTT_TRY(ttt_cfg_check_map(map, "model", ttt_seq_model_options, NULL, err));
    c->io = *io;
    c->mixer = strcmp(ttt_cfg_str(map, "mixer"), "softmax") == 0 ? TTT_MIXER_SOFTMAX
                                                                 : TTT_MIXER_TTT;
    c->d_model = (int)ttt_cfg_int(map, "d_model");
    c->n_layers = (int)ttt_cfg_int(map, "layers");
    c->n_heads = (int)ttt_cfg_int(map, "heads");
    c->head_dim = (int)ttt_cfg_int(map, "head_dim");
    if (c->head_dim == 0) {
        if (c->d_model % c->n_heads != 0)
            return ttt_cfg_error(err, TTT_ERR_CONFIG, ttt_cfg_get(map, "heads"),
                                 "model.heads: d_model = %d is not a multiple of heads = %d; "
                                 "set head_dim explicitly",
                                 c->d_model, c->n_heads);
        c->head_dim = c->d_model / c->n_heads;
    }
    c->mlp = (int)ttt_cfg_int(map, "mlp");
    c->layernorm = strcmp(ttt_cfg_str(map, "norm"), "layer") == 0;
    c->norm_eps = (float)ttt_cfg_float(map, "norm_eps");
    c->conv = (int)ttt_cfg_int(map, "conv");
    c->init_std = (float)ttt_cfg_float(map, "init_std");
    c->dt_min = ttt_cfg_float(map, "dt_min");
    c->dt_max = ttt_cfg_float(map, "dt_max");
    if (c->dt_max < c->dt_min)
        return ttt_cfg_error(err, TTT_ERR_CONFIG, ttt_cfg_get(map, "dt_max"),
                             "model.dt_max = %g is below dt_min = %g", c->dt_max,
                             c->dt_min);
    c->rope_base = (float)ttt_cfg_float(map, "rope_base");
    const char *pos = ttt_cfg_str(map, "positions");
    c->positions = strcmp(pos, "learned") == 0 ? TTT_POS_LEARNED
                   : strcmp(pos, "rope") == 0  ? TTT_POS_ROPE
                   : strcmp(pos, "none") == 0  ? TTT_POS_NONE
                   : c->mixer == TTT_MIXER_SOFTMAX ? TTT_POS_LEARNED
                                                   : TTT_POS_NONE;
    ttt_cfg_map_set(map, "positions",
                    ttt_cfg_new_scalar(c->positions == TTT_POS_LEARNED ? "learned"
                                       : c->positions == TTT_POS_ROPE  ? "rope"
                                                                       : "none",
                                       ttt_cfg_get(map, "positions")));
    c->max_len = (int)ttt_cfg_int(map, "max_len");
    if (c->max_len == 0) c->max_len = io->seq_len;
    if (c->positions == TTT_POS_LEARNED && c->max_len < io->seq_len)
        return ttt_cfg_error(err, TTT_ERR_CONFIG, ttt_cfg_get(map, "max_len"),
                             "model.max_len = %d is shorter than the task's sequences (%d)",
                             c->max_len, io->seq_len);
    if (c->positions == TTT_POS_ROPE && c->head_dim % 2 != 0)
        return ttt_cfg_error(err, TTT_ERR_CONFIG, ttt_cfg_get(map, "positions"),
                             "model.positions: rope rotates pairs of dimensions; head_dim = %d "
                             "is odd",
                             c->head_dim);

    const char *eta_s = ttt_cfg_str(map, "eta");
    int qk = tri(map, "qk_norm"), on = tri(map, "out_norm"),
        eta = strcmp(eta_s, "dt") == 0 ? TTT_ETA_DT : tri(map, "eta"),
        og = tri(map, "out_gate"), li = tri(map, "learn_init");
    const char *gate = ttt_cfg_str(map, "gate");
    if (c->mixer == TTT_MIXER_TTT) {
        if (!layer_map)
            return ttt_cfg_error(err, TTT_ERR_CONFIG, map,
                                 "model.mixer: ttt needs a `layer:` section");
        TTT_TRY(ttt_layer_parse(layer_map, c->head_dim, c->head_dim, &c->layer, err));
        const ttt_layer *L = &c->layer;
        /* defaults from the tuple's traits (layers/models/model.h): a linear map trained on a
         * residual loss is the delta rule, whose step is stable for unit keys; a loss whose
         * gradient does not depend on the prediction (dot) writes unscaled */
        const int linear = (L->model->traits & TTT_MODEL_LINEAR_MAP) != 0;
        const int dot = L->loss->z_free;
        c->qk_norm = qk >= 0 ? qk : (linear && (L->loss->traits & TTT_LOSS_RESIDUAL));
        const int mamba2 = L->preset && strcmp(L->preset, "mamba2") == 0;
        c->eta = eta >= 0 ? (ttt_eta_kind)eta
                 : mamba2 ? TTT_ETA_DT
                          : (linear && dot) ? TTT_ETA_NONE : TTT_ETA_SIGMOID;
        c->gate = strcmp(gate, "none") == 0         ? TTT_GATE_NONE
                  : strcmp(gate, "constant") == 0   ? TTT_GATE_CONSTANT
                  : strcmp(gate, "scalar") == 0     ? TTT_GATE_SCALAR
                  : strcmp(gate, "vector") == 0     ? TTT_GATE_VECTOR
                  : strcmp(gate, "multiscale") == 0 ? TTT_GATE_MULTISCALE
                                                    : auto_gate(L);
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
        c->out_norm = on >= 0 ? on : 1;
        c->out_gate = og >= 0 ? og : 1;
        c->learn_init = li >= 0 ? li : !linear;
        if (c->positions == TTT_POS_ROPE)
            return ttt_cfg_error(err, TTT_ERR_CONFIG, ttt_cfg_get(map, "positions"),
                                 "model.positions: rope for TTT mixers is the layer's own "
                                 "option (layer.rope); model positions rope applies to softmax");
    } else {
        c->qk_norm = qk > 0;
        if (eta > 0)
            return ttt_cfg_error(err, TTT_ERR_CONFIG, ttt_cfg_get(map, "eta"),
                                 "model.eta: softmax attention has no inner learning rate");
        c->eta = TTT_ETA_NONE;
        c->gate = TTT_GATE_NONE;
        c->out_norm = on > 0;
        c->out_gate = og > 0;
        c->learn_init = 0;
    }
    static const char *const tf[] = {"false", "true"};
    static const char *const gates[] = {"none", "constant", "scalar", "vector", "multiscale"};
    _Static_assert(TTT_GATE_MULTISCALE == 4, "gates[] lists every ttt_gate_kind");
    static const char *const etas[] = {"false", "true", "dt"};
    ttt_cfg_map_set(map, "qk_norm", ttt_cfg_new_scalar(tf[c->qk_norm], ttt_cfg_get(map, "qk_norm")));
    ttt_cfg_map_set(map, "eta", ttt_cfg_new_scalar(etas[c->eta], ttt_cfg_get(map, "eta")));
    ttt_cfg_map_set(map, "gate", ttt_cfg_new_scalar(gates[c->gate], ttt_cfg_get(map, "gate")));
    ttt_cfg_map_set(map, "out_norm",
                    ttt_cfg_new_scalar(tf[c->out_norm], ttt_cfg_get(map, "out_norm")));
    ttt_cfg_map_set(map, "out_gate",
                    ttt_cfg_new_scalar(tf[c->out_gate], ttt_cfg_get(map, "out_gate")));
    ttt_cfg_map_set(map, "learn_init",
                    ttt_cfg_new_scalar(tf[c->learn_init], ttt_cfg_get(map, "learn_init")));
    if (io->vocab <= 0 && (io->in_dim <= 0 || io->out_dim <= 0))
        return ttt_error_set(err, TTT_ERR_CONFIG, "model: the task gives no vocabulary and no "
                                                  "input/output widths");
    return TTT_OK;
}

const char *ttt_seq_model_describe(const ttt_seq_model_config *c, char *buf, size_t len) {
    if (c->mixer == TTT_MIXER_SOFTMAX) {
        snprintf(buf, len, "softmax");
        return buf;
    }
    return ttt_layer_describe(&c->layer, buf, len);
}

/* ------------------------------------------------------------------------------------------ */
/* Parameters */

typedef struct builder {
    ttt_seq_model *m;
    ttt_rng base;
    ttt_error *err;
    ttt_status s;
} builder;

enum { INIT_NORMAL, INIT_ONES, INIT_ZEROS, INIT_A_LOG, INIT_DT_BIAS };

/* Add a parameter (index returned, −1 after an error) initialized from its own stream. */
static int add(builder *b, const char *name, int ndim, const int *shape, int decay, int init,
               float std) {
    if (b->s != TTT_OK) return -1;
    ttt_param *p;
    b->s = ttt_params_add(&b->m->params, name, ndim, shape, decay, &p, b->err);
    if (b->s != TTT_OK) return -1;
    ttt_rng r = ttt_rng_fork(&b->base, ttt_hash_str(name));
    switch (init) {
    case INIT_NORMAL: ttt_param_init_normal(p, &r, std); break;
    case INIT_ONES: ttt_param_init_ones(p); break;
    case INIT_ZEROS: ttt_param_init_zeros(p); break;
    case INIT_A_LOG: /* A ~ U[1, 16], stored as log A (Mamba2) */
        for (size_t i = 0; i < p->n; i++)
            p->data[i] = (float)log(1.0 + 15.0 * ttt_rng_uniform(&r));
        break;
    case INIT_DT_BIAS: /* dt = exp(U[log dt_min, log dt_max]); bias = softplus⁻¹(dt) = dt + log(1 − e^−dt) */
        for (size_t i = 0; i < p->n; i++) {
            const double lo = log(b->m->cfg.dt_min), hi = log(b->m->cfg.dt_max);
            double dt = exp(lo + (hi - lo) * ttt_rng_uniform(&r));
            p->data[i] = (float)(dt + log(-expm1(-dt)));
        }
        break;
    }
    return b->m->params.n - 1;
}

static int add2(builder *b, const char *name, int r, int c, int decay, int init, float std) {
    return add(b, name, 2, (int[]){r, c}, decay, init, std);
}
static int add1(builder *b, const char *name, int n, int init) {
    return add(b, name, 1, (int[]){n}, 0, init, 0.0f);
}

void ttt_seq_model_bind(const ttt_seq_model *m, ttt_tensor *out, float *const *grads) {
    for (int i = 0; i < m->params.n; i++) {
        const ttt_param *p = m->params.p[i];
        out[i] = ttt_param_view(p);
        ttt_tensor_set_param(&out[i], grads ? grads[i] : p->grad);
    }
}

double ttt_seq_model_param_bound(const ttt_seq_model_config *c) {
    /* Each term takes the largest of what ttt_seq_model_init may add for it (the mixer's
     * optional parts all counted), so that the memory check it feeds never underestimates. */
    const double d = c->d_model, H = c->n_heads, D = c->head_dim, C = H * D;
    const double n_in = c->io.vocab > 0 ? c->io.vocab : (double)c->io.in_dim + 1.0;
    const double n_out = c->io.vocab > 0 ? c->io.vocab : c->io.out_dim;
    double w0 = 0.0; /* the fast-weight model's learned initialization, per head */
    if (c->learn_init && c->mixer == TTT_MIXER_TTT && c->layer.model)
        for (int w = 0; w < c->layer.model->n_weights; w++) {
            int shp[TTT_MAX_DIMS];
            const int nd = c->layer.model->shape(w, c->head_dim, c->head_dim, shp);
            double e = 1.0;
            for (int i = 0; i < nd; i++) e *= shp[i];
            w0 += H * e;
        }
    const double block = 4.0 * d + 2.0 * D         /* norms (with biases), output norm */
                         + 5.0 * d * C              /* wq, wk, wv, w_g, wo */
                         + 3.0 * (double)c->conv * C /* short convolutions */
                         + d * C + d * H + 3.0 * C + 3.0 * H /* gates, learning rates, biases */
                         + 2.0 * (double)c->mlp * d * d + w0;
    return n_in * d + (double)c->max_len * d + (double)c->n_layers * block + 2.0 * d +
           d * n_out + n_out;
}

ttt_status ttt_seq_model_init(ttt_seq_model *m, const ttt_seq_model_config *cfg, uint64_t seed,
                              ttt_error *err) {
    memset(m, 0, sizeof *m);
    m->cfg = *cfg;
    ttt_params_init(&m->params);
    const ttt_seq_model_config *c = &m->cfg;
    builder b = {.m = m, .err = err, .s = TTT_OK};
    ttt_rng root;
    ttt_rng_seed(&root, seed);
    b.base = ttt_rng_fork(&root, ttt_hash_str("model.init"));
    const int d = c->d_model, H = c->n_heads, D = c->head_dim, C = H * D;
    const float std = c->init_std, out_std = std / sqrtf(2.0f * (float)c->n_layers);
    m->embed_b = m->pos = m->norm_f_b = m->head_b = -1;
    if (c->io.vocab > 0) {
        m->embed = add2(&b, "embed", c->io.vocab, d, 1, INIT_NORMAL, std);
    } else {
        m->embed = add2(&b, "embed_in", c->io.in_dim, d, 1, INIT_NORMAL, std);
        m->embed_b = add1(&b, "embed_in.b", d, INIT_ZEROS);
    }
    if (c->positions == TTT_POS_LEARNED)
        m->pos = add2(&b, "pos", c->max_len, d, 1, INIT_NORMAL, std);
    char nm[TTT_PARAM_NAME_LEN];
#define NAME(fmt) (snprintf(nm, sizeof nm, "layer%d." fmt, l), nm)
    for (int l = 0; l < c->n_layers; l++) {
        ttt_block_ids *k = &m->blk[l];
        memset(k, -1, sizeof *k);
        k->norm1 = add1(&b, NAME("norm1"), d, INIT_ONES);
        if (c->layernorm) k->norm1_b = add1(&b, NAME("norm1.b"), d, INIT_ZEROS);
        k->wq = add2(&b, NAME("mixer.wq"), d, C, 1, INIT_NORMAL, std);
        k->wk = add2(&b, NAME("mixer.wk"), d, C, 1, INIT_NORMAL, std);
        k->wv = add2(&b, NAME("mixer.wv"), d, C, 1, INIT_NORMAL, std);
        if (c->conv > 0) {
            /* a kernel per channel; N(0, 1/K) keeps the output's scale near the input's */
            const float cs = 1.0f / sqrtf((float)c->conv);
            k->conv_q = add2(&b, NAME("mixer.conv_q"), c->conv, C, 0, INIT_NORMAL, cs);
            k->conv_k = add2(&b, NAME("mixer.conv_k"), c->conv, C, 0, INIT_NORMAL, cs);
            k->conv_v = add2(&b, NAME("mixer.conv_v"), c->conv, C, 0, INIT_NORMAL, cs);
        }
        if (c->eta == TTT_ETA_SIGMOID) {
            k->w_eta = add2(&b, NAME("mixer.w_eta"), d, H, 1, INIT_NORMAL, std);
            k->b_eta = add1(&b, NAME("mixer.b_eta"), H, INIT_ZEROS);
        }
        if (c->gate == TTT_GATE_SCALAR) {
            k->w_a = add2(&b, NAME("mixer.w_a"), d, H, 1, INIT_NORMAL, std);
            k->b_a = add1(&b, NAME("mixer.dt_bias"), H, INIT_DT_BIAS);
            k->a_log = add1(&b, NAME("mixer.a_log"), H, INIT_A_LOG);
        } else if (c->gate == TTT_GATE_VECTOR) {
            k->w_a = add2(&b, NAME("mixer.w_a"), d, C, 1, INIT_NORMAL, std);
            k->b_a = add1(&b, NAME("mixer.b_a"), C, INIT_ZEROS);
        }
        if (c->learn_init && c->mixer == TTT_MIXER_TTT) {
            /* one copy of the fast-weight model's own initialization per head */
            const ttt_layer *L = &c->layer;
            ttt_arena a;
            ttt_arena_init(&a, 0);
            ttt_ctx cx = {.arena = &a};
            ttt_rng r = ttt_rng_fork(&b.base, ttt_hash_str(NAME("mixer.w0")) + (uint64_t)l);
            for (int w = 0; w < L->model->n_weights && b.s == TTT_OK; w++) {
                int shp[TTT_MAX_DIMS + 1] = {H};
                int nd = L->model->shape(w, D, D, shp + 1);
                snprintf(nm, sizeof nm, "layer%d.mixer.w0_%d", l, w);
                k->w0[w] = add(&b, nm, nd + 1, shp, 0, INIT_ZEROS, 0.0f);
            }
            for (int h = 0; h < H && b.s == TTT_OK; h++) {
                ttt_layer_state st;
                ttt_layer_state_init(&cx, L, &st, &r);
                for (int w = 0; w < st.n_w; w++) {
                    ttt_param *p = m->params.p[k->w0[w]];
                    memcpy(p->data + (size_t)h * st.W[w]->n, st.W[w]->data,
                           st.W[w]->n * sizeof(float));
                }
                ttt_arena_reset(&a);
            }
            ttt_arena_free(&a);
        }
        if (c->out_norm) k->onorm = add1(&b, NAME("mixer.onorm"), D, INIT_ONES);
        if (c->out_gate) k->w_g = add2(&b, NAME("mixer.w_g"), d, C, 1, INIT_NORMAL, std);
        k->wo = add2(&b, NAME("mixer.wo"), C, d, 1, INIT_NORMAL, out_std);
        if (c->mlp > 0) {
            k->norm2 = add1(&b, NAME("norm2"), d, INIT_ONES);
            if (c->layernorm) k->norm2_b = add1(&b, NAME("norm2.b"), d, INIT_ZEROS);
            k->mlp_w1 = add2(&b, NAME("mlp.w1"), d, c->mlp * d, 1, INIT_NORMAL, std);
            k->mlp_w2 = add2(&b, NAME("mlp.w2"), c->mlp * d, d, 1, INIT_NORMAL, out_std);
        }
    }
#undef NAME
    m->norm_f = add1(&b, "norm_f", d, INIT_ONES);
    if (c->layernorm) m->norm_f_b = add1(&b, "norm_f.b", d, INIT_ZEROS);
    const int n_out = c->io.vocab > 0 ? c->io.vocab : c->io.out_dim;
    m->head = add2(&b, "head", d, n_out, 1, INIT_NORMAL, std);
    if (c->io.vocab <= 0) m->head_b = add1(&b, "head.b", n_out, INIT_ZEROS);
    if (b.s != TTT_OK) {
        ttt_params_free(&m->params);
        return b.s;
    }
    m->pt = calloc((size_t)m->params.n, sizeof *m->pt);
    if (!m->pt) {
        ttt_params_free(&m->params);
        return ttt_error_set(err, TTT_ERR_NOMEM, "model: out of memory");
    }
    ttt_seq_model_bind(m, m->pt, NULL);
    return TTT_OK;
}

void ttt_seq_model_free(ttt_seq_model *m) {
    if (!m) return;
    free(m->pt);
    ttt_params_free(&m->params);
    memset(m, 0, sizeof *m);
}

/* ------------------------------------------------------------------------------------------ */
/* Forward */

/* The recorded RoPE op on a batch of sequences x (B, T, D) (or (T, D)): row t of every sequence
 * turns by the position-t rotation R_t (src/core/rope.h); the backward turns dy back by R_tᵀ =
 * R_{−t}, row by row. */
static void rope_backward(ttt_ctx *ctx, const ttt_tape_entry *e, const float *dy) {
    const ttt_tensor *x = e->in[0];
    const int T = e->iarg[0], D = e->iarg[1];
    const float base = e->farg[0];
    float *g = ttt_grad(ctx, x);
    const size_t nrows = x->n / (size_t)D;
    float tmp[1024];
    TTT_ASSERT(D <= 1024);
    for (size_t r = 0; r < nrows; r++) {
        const int t = (int)(r % (size_t)T);
        ttt_rope_apply(tmp, dy + r * D, 1, D, -t, base);
        for (int j = 0; j < D; j++) g[r * D + j] += tmp[j];
    }
}

static ttt_tensor *rope_op(ttt_ctx *ctx, const ttt_tensor *x, int T, float base) {
    const int D = TTT_COLS(x);
    ttt_tensor *y = ttt_tensor_new(ctx, x->ndim, x->shape);
    const size_t nseq = x->n / ((size_t)T * D);
    for (size_t s = 0; s < nseq; s++)
        ttt_rope_apply(y->data + s * T * D, x->data + s * T * D, T, D, 0, base);
    ttt_tape_entry *e = ttt_tape_record(ctx, rope_backward, y, (const ttt_tensor *const[]){x}, 1);
    if (e) {
        e->name = "rope";
        e->iarg[0] = T;
        e->iarg[1] = D;
        e->farg[0] = base;
    }
    return y;
}

static ttt_tensor *P(const ttt_tensor *pt, int i) {
    TTT_ASSERT(i >= 0);
    return (ttt_tensor *)&pt[i];
}

static ttt_tensor *norm(ttt_ctx *ctx, const ttt_seq_model *m, const ttt_tensor *pt,
                        const ttt_tensor *x, int g, int b) {
    return m->cfg.layernorm ? ttt_layernorm(ctx, x, P(pt, g), P(pt, b), m->cfg.norm_eps)
                            : ttt_rmsnorm(ctx, x, P(pt, g), m->cfg.norm_eps);
}

static ttt_tensor *reshape2(ttt_ctx *ctx, const ttt_tensor *x, int r, int c) {
    return ttt_reshape(ctx, x, 2, (int[]){r, c});
}
static ttt_tensor *reshape3(ttt_ctx *ctx, const ttt_tensor *x, int a, int b, int c) {
    return ttt_reshape(ctx, x, 3, (int[]){a, b, c});
}

/* q, k or v of a block: h W, then the short convolution and SiLU; (B, T, C). */
static ttt_tensor *qkv(ttt_ctx *ctx, const ttt_seq_model *m, const ttt_tensor *pt,
                       const ttt_tensor *h, int w, int conv, int B, int T) {
    ttt_tensor *x = ttt_matmul(ctx, h, 0, P(pt, w), 0); /* (B·T, C) */
    x = reshape3(ctx, x, B, T, TTT_COLS(x));
    if (m->cfg.conv > 0) x = ttt_silu(ctx, ttt_conv1d_causal(ctx, x, P(pt, conv), NULL));
    return x;
}

/* Sequence b of a (B, T, n) tensor as (T, n). */
static ttt_tensor *seq(ttt_ctx *ctx, const ttt_tensor *x, int b) {
    const int T = x->shape[1], n = x->shape[2];
    return reshape2(ctx, ttt_slice_rows(ctx, x, b, b + 1), T, n);
}

static ttt_status mixer_ttt(ttt_ctx *ctx, const ttt_seq_model *m, const ttt_tensor *pt,
                            const ttt_block_ids *k, const ttt_tensor *h, int B, int T,
                            ttt_tensor **out, ttt_error *err) {
    const ttt_seq_model_config *c = &m->cfg;
    const ttt_layer *L = &c->layer;
    const int H = c->n_heads, D = c->head_dim;
    ttt_tensor *q = qkv(ctx, m, pt, h, k->wq, k->conv_q, B, T); /* (B, T, H·D) */
    ttt_tensor *kk = qkv(ctx, m, pt, h, k->wk, k->conv_k, B, T);
    ttt_tensor *v = qkv(ctx, m, pt, h, k->wv, k->conv_v, B, T);
    ttt_tensor *eta = NULL, *la = NULL;
    if (c->eta == TTT_ETA_SIGMOID) { /* η = sigmoid(h W_η + b_η): (B, T, H) */
        eta = ttt_sigmoid(ctx, ttt_add(ctx, ttt_matmul(ctx, h, 0, P(pt, k->w_eta), 0),
                                       P(pt, k->b_eta)));
        eta = reshape3(ctx, eta, B, T, H);
    }
    if (c->gate == TTT_GATE_SCALAR) { /* log α = −exp(a_log) dt, dt = softplus(h W_a + dt_bias) */
        ttt_tensor *dt = ttt_softplus(
            ctx, ttt_add(ctx, ttt_matmul(ctx, h, 0, P(pt, k->w_a), 0), P(pt, k->b_a)));
        la = ttt_neg(ctx, ttt_mul(ctx, dt, ttt_exp(ctx, P(pt, k->a_log))));
        la = reshape3(ctx, la, B, T, H);
        if (c->eta == TTT_ETA_DT) eta = reshape3(ctx, dt, B, T, H); /* (B, T, H) */
    } else if (c->gate == TTT_GATE_VECTOR) { /* log α = logsigmoid(h W_a + b_a)/16 */
        ttt_tensor *z = ttt_add(ctx, ttt_matmul(ctx, h, 0, P(pt, k->w_a), 0), P(pt, k->b_a));
        la = ttt_scale(ctx, ttt_softplus(ctx, ttt_neg(ctx, z)), -1.0f / 16.0f);
        la = reshape3(ctx, la, B, T, H * D);
    }
    ttt_tensor **rows = ttt_arena_alloc(ctx->arena, (size_t)B * sizeof *rows);
    ttt_tensor **heads = ttt_arena_alloc(ctx->arena, (size_t)H * sizeof *heads);
    TTT_ASSERT(rows && heads);
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
        ttt_tensor *qb = seq(ctx, q, b), *kb = seq(ctx, kk, b), *vb = seq(ctx, v, b);
        ttt_tensor *eb = eta ? seq(ctx, eta, b) : NULL, *lb = la ? seq(ctx, la, b) : NULL;
        for (int hh = 0; hh < H; hh++) {
            const int c0 = hh * D, c1 = c0 + D;
            ttt_tensor *qh = ttt_slice_cols(ctx, qb, c0, c1); /* (T, D) */
            ttt_tensor *kh = ttt_slice_cols(ctx, kb, c0, c1);
            ttt_tensor *vh = ttt_slice_cols(ctx, vb, c0, c1);
            if (c->qk_norm) {
                qh = ttt_l2norm_rows(ctx, qh, 1e-6f);
                kh = ttt_l2norm_rows(ctx, kh, 1e-6f);
            }
            ttt_tensor *eh = NULL, *lh = NULL;
            if (eb) eh = ttt_reshape(ctx, ttt_slice_cols(ctx, eb, hh, hh + 1), 1, (int[]){T});
            if (lb && c->gate == TTT_GATE_SCALAR)
                lh = ttt_reshape(ctx, ttt_slice_cols(ctx, lb, hh, hh + 1), 1, (int[]){T});
            else if (lb)
                lh = ttt_slice_cols(ctx, lb, c0, c1); /* (T, D) */
            else if (ms)
                lh = ms[hh];
            ttt_layer_state st;
            ttt_layer_state_init(ctx, L, &st, NULL);
            if (c->learn_init)
                for (int w = 0; w < st.n_w; w++) {
                    ttt_tensor *w0 = ttt_slice_rows(ctx, P(pt, k->w0[w]), hh, hh + 1);
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
            heads[hh] = o;
        }
        rows[b] = H == 1 ? heads[0] : ttt_concat_cols_n(ctx, (const ttt_tensor *const *)heads, H);
    }
    *out = B == 1 ? rows[0] : ttt_concat_rows_n(ctx, (const ttt_tensor *const *)rows, B);
    return TTT_OK; /* (B·T, H·D) */
}

static ttt_tensor *mixer_softmax(ttt_ctx *ctx, const ttt_seq_model *m, const ttt_tensor *pt,
                                 const ttt_block_ids *k, const ttt_tensor *h, int B, int T) {
    const ttt_seq_model_config *c = &m->cfg;
    const int H = c->n_heads, D = c->head_dim;
    ttt_tensor *q = qkv(ctx, m, pt, h, k->wq, k->conv_q, B, T); /* (B, T, H·D) */
    ttt_tensor *kk = qkv(ctx, m, pt, h, k->wk, k->conv_k, B, T);
    ttt_tensor *v = qkv(ctx, m, pt, h, k->wv, k->conv_v, B, T);
    ttt_tensor **heads = ttt_arena_alloc(ctx->arena, (size_t)H * sizeof *heads);
    TTT_ASSERT(heads);
    const float scale = 1.0f / sqrtf((float)D);
    for (int hh = 0; hh < H; hh++) {
        const int c0 = hh * D, c1 = c0 + D;
        ttt_tensor *qh = ttt_slice_cols(ctx, q, c0, c1); /* (B, T, D) */
        ttt_tensor *kh = ttt_slice_cols(ctx, kk, c0, c1);
        ttt_tensor *vh = ttt_slice_cols(ctx, v, c0, c1);
        if (c->qk_norm) {
            qh = ttt_l2norm_rows(ctx, qh, 1e-6f);
            kh = ttt_l2norm_rows(ctx, kh, 1e-6f);
        }
        if (c->positions == TTT_POS_ROPE) {
            qh = rope_op(ctx, qh, T, c->rope_base);
            kh = rope_op(ctx, kh, T, c->rope_base);
        }
        /* O = softmax(Q Kᵀ/sqrt(D) + log M) V, batched over sequences (docs/math.md §4) */
        ttt_tensor *s = ttt_scale(ctx, ttt_matmul(ctx, qh, 0, kh, 1), scale); /* (B, T, T) */
        ttt_tensor *p = ttt_softmax_rows(ctx, ttt_causal_fill(ctx, s));
        heads[hh] = ttt_matmul(ctx, p, 0, vh, 0); /* (B, T, D) */
    }
    ttt_tensor *o = H == 1 ? heads[0] : ttt_concat_cols_n(ctx, (const ttt_tensor *const *)heads, H);
    return reshape2(ctx, o, B * T, H * D);
}

static ttt_status block(ttt_ctx *ctx, const ttt_seq_model *m, const ttt_tensor *pt, int l,
                        ttt_tensor **x, int B, int T, ttt_error *err) {
    const ttt_seq_model_config *c = &m->cfg;
    const ttt_block_ids *k = &m->blk[l];
    const int H = c->n_heads, D = c->head_dim;
    ttt_tensor *h = norm(ctx, m, pt, *x, k->norm1, k->norm1_b); /* (B·T, d) */
    ttt_tensor *o;
    if (c->mixer == TTT_MIXER_TTT)
        TTT_TRY(mixer_ttt(ctx, m, pt, k, h, B, T, &o, err));
    else
        o = mixer_softmax(ctx, m, pt, k, h, B, T);
    if (c->out_norm) /* per head: rows of D */
        o = reshape2(ctx, ttt_rmsnorm(ctx, reshape2(ctx, o, B * T * H, D), P(pt, k->onorm),
                                      c->norm_eps),
                     B * T, H * D);
    if (c->out_gate) o = ttt_mul(ctx, o, ttt_silu(ctx, ttt_matmul(ctx, h, 0, P(pt, k->w_g), 0)));
    *x = ttt_add(ctx, *x, ttt_matmul(ctx, o, 0, P(pt, k->wo), 0));
    if (c->mlp > 0) {
        ttt_tensor *u = norm(ctx, m, pt, *x, k->norm2, k->norm2_b);
        u = ttt_gelu(ctx, ttt_matmul(ctx, u, 0, P(pt, k->mlp_w1), 0));
        *x = ttt_add(ctx, *x, ttt_matmul(ctx, u, 0, P(pt, k->mlp_w2), 0));
    }
    return TTT_OK;
}

ttt_status ttt_seq_model_forward(ttt_ctx *ctx, const ttt_seq_model *m, const ttt_tensor *pt,
                                 const ttt_seq_batch *bt, ttt_tensor **out, ttt_error *err) {
    const ttt_seq_model_config *c = &m->cfg;
    if (!pt) pt = m->pt;
    const int B = bt->B, T = bt->T, d = c->d_model;
    if (B < 1 || T < 1)
        return ttt_error_set(err, TTT_ERR_SHAPE, "model: empty batch (%d x %d)", B, T);
    if (c->positions == TTT_POS_LEARNED && T > c->max_len)
        return ttt_error_set(err, TTT_ERR_SHAPE,
                             "model: sequences of %d positions exceed max_len = %d", T,
                             c->max_len);
    ttt_tensor *x;
    if (c->io.vocab > 0) {
        if (!bt->tokens)
            return ttt_error_set(err, TTT_ERR_ARG, "model: a token model needs token ids");
        for (long i = 0; i < (long)B * T; i++)
            if (bt->tokens[i] < 0 || bt->tokens[i] >= c->io.vocab)
                return ttt_error_set(err, TTT_ERR_RANGE,
                                     "model: token %d at position %ld is outside the vocabulary "
                                     "[0, %d)",
                                     bt->tokens[i], i, c->io.vocab);
        x = ttt_embedding(ctx, P(pt, m->embed), bt->tokens, B * T); /* (B·T, d) */
    } else {
        if (!bt->inputs)
            return ttt_error_set(err, TTT_ERR_ARG, "model: a vector model needs inputs");
        ttt_tensor *in = ttt_tensor_2d(ctx, B * T, c->io.in_dim);
        memcpy(in->data, bt->inputs, in->n * sizeof(float));
        x = ttt_add(ctx, ttt_matmul(ctx, in, 0, P(pt, m->embed), 0), P(pt, m->embed_b));
    }
    if (c->positions == TTT_POS_LEARNED) {
        ttt_tensor *p = ttt_slice_rows(ctx, P(pt, m->pos), 0, T); /* (T, d) */
        if (B > 1) {
            ttt_tensor **reps = ttt_arena_alloc(ctx->arena, (size_t)B * sizeof *reps);
            TTT_ASSERT(reps);
            for (int b = 0; b < B; b++) reps[b] = p;
            p = ttt_concat_rows_n(ctx, (const ttt_tensor *const *)reps, B);
        }
        x = ttt_add(ctx, x, p);
    }
    (void)d;
    for (int l = 0; l < c->n_layers; l++) TTT_TRY(block(ctx, m, pt, l, &x, B, T, err));
    x = norm(ctx, m, pt, x, m->norm_f, m->norm_f_b);
    ttt_tensor *y = ttt_matmul(ctx, x, 0, P(pt, m->head), 0);
    if (m->head_b >= 0) y = ttt_add(ctx, y, P(pt, m->head_b));
    *out = y;
    return TTT_OK;
}

ttt_status ttt_seq_model_loss(ttt_ctx *ctx, const ttt_seq_model *m, const ttt_tensor *pt,
                              const ttt_seq_batch *bt, double denominator, ttt_tensor **loss,
                              ttt_seq_stats *stats, ttt_tensor **out_pred, ttt_error *err) {
    const ttt_seq_model_config *c = &m->cfg;
    ttt_tensor *y;
    TTT_TRY(ttt_seq_model_forward(ctx, m, pt, bt, &y, err));
    if (out_pred) *out_pred = y;
    const int N = bt->B * bt->T;
    ttt_seq_stats s = {0};
    if (c->io.vocab > 0) {
        ttt_ce_stats ce;
        ttt_tensor *l = ttt_cross_entropy(ctx, y, bt->labels, N, &ce);
        s.count = ce.count;
        s.correct = ce.correct;
        s.loss_sum = ce.loss_sum;
        /* cross_entropy divides by its own count; rescale to the caller's denominator */
        if (denominator > 0 && ce.count > 0) l = ttt_scale(ctx, l, (float)(ce.count / denominator));
        *loss = l;
    } else {
        const int n_out = c->io.out_dim;
        ttt_tensor *tgt = ttt_tensor_2d(ctx, N, n_out), *mask = ttt_tensor_1d(ctx, N);
        memcpy(tgt->data, bt->targets, tgt->n * sizeof(float));
        memcpy(mask->data, bt->mask, mask->n * sizeof(float));
        for (int i = 0; i < N; i++) {
            if (mask->data[i] == 0.0f) continue;
            s.count++;
            for (int j = 0; j < n_out; j++) {
                double e = (double)y->data[(size_t)i * n_out + j] - tgt->data[(size_t)i * n_out + j];
                s.loss_sum += e * e;
            }
        }
        ttt_tensor *sq = ttt_scale_rows(ctx, ttt_square(ctx, ttt_sub(ctx, y, tgt)), mask);
        double den = denominator > 0 ? denominator : (double)(s.count > 0 ? s.count : 1);
        *loss = ttt_scale(ctx, ttt_sum(ctx, sq), (float)(1.0 / (den * n_out)));
    }
    if (stats) *stats = s;
    return TTT_OK;
}

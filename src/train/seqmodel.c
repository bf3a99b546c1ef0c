/* Sequence models trained in the outer loop (see model.h). */
#include "seqmodel.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autograd.h"
#include "batch.h"
#include "cuda_kernels.h"
#include "mixer.h"
#include "ops.h"
#include "ops_device.h"
#include "rope.h"

/* ------------------------------------------------------------------------------------------ */
/* Configuration */

/* "ttt|softmax|…" from the registry list: "|ttt" "|softmax" … without the first bar */
static const char mixer_choices[] = ""
#define TTT_MIXER(name, ID) "|" #name
#include "mixer_list.h"
#undef TTT_MIXER
    ;
#define MIXER_CHOICES (mixer_choices + 1)

const ttt_option ttt_seq_model_options[] = {
    {"mixer", TTT_OPT_CHOICE, "ttt", TTT_NO_RANGE, MIXER_CHOICES,
     "token mixer: the `layer:` TTT layer (ttt), softmax attention, … (`ttt list`: Mixers)"},
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
     "position information; auto = the mixer's (rope for softmax; none for fox, whose gate "
     "carries position, and for TTT mixers, whose RoPE is layer.rope)"},
    {"max_len", TTT_OPT_INT, "0", 0, 1 << 24, NULL,
     "rows of the learned position table; 0 = the task's sequence length"},
    {"conv", TTT_OPT_STRING, "auto", TTT_NO_RANGE, NULL,
     "kernel of the short causal depthwise convolution on q, k, v (0 = off, at most 64); auto = "
     "the mixer's default block (docs/mixers.md)"},
    {"act", TTT_OPT_CHOICE, "auto", TTT_NO_RANGE, "auto|silu|none",
     "activation of q, k, v after the convolution (or the projection when conv = 0); auto = "
     "the mixer's default block"},
    {"qk_norm", TTT_OPT_CHOICE, "auto", TTT_NO_RANGE, "auto|true|false",
     "L2-normalize q and k per head; auto = the mixer's default block (docs/mixers.md); for a "
     "tuple without a preset, on for the delta-rule family (linear model, squared loss)"},
    {"eta", TTT_OPT_CHOICE, "auto", TTT_NO_RANGE, "auto|true|false|dt",
     "per-token inner learning rate per head: true = learned sigmoid(x W + b); dt = the scalar "
     "gate's step dt (Mamba2's write x dt); auto = the mixer's default block; for a tuple "
     "without a preset, on unless the fast-weight model is linear with the dot loss"},
    {"gate", TTT_OPT_CHOICE, "auto", TTT_NO_RANGE, "auto|none|constant|scalar|vector|multiscale",
     "forget gate: learned log decay per token (scalar per head, or vector per key dimension), "
     "the tuple's constant, a constant 1 - 2^(-5-h) per head h (multiscale, RetNet), or none; "
     "auto = the mixer's default block (docs/mixers.md); for a tuple without a preset, constant "
     "when its decay is not 1"},
    {"out_norm", TTT_OPT_CHOICE, "auto", TTT_NO_RANGE, "auto|true|false",
     "RMSNorm of each head's output; auto = the mixer's default block (docs/mixers.md)"},
    {"out_gate", TTT_OPT_CHOICE, "auto", TTT_NO_RANGE, "auto|true|false",
     "multiply the mixer output by silu(x W_g); auto = the mixer's default block"},
    {"learn_init", TTT_OPT_CHOICE, "auto", TTT_NO_RANGE, "auto|true|false",
     "learn the initial fast weights (one set per head and block); auto = the mixer's default "
     "block; for a tuple without a preset, on for models other than linear"},
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
int ttt_mixer_tri(const ttt_cfg_node *map, const char *key) {
    const char *s = ttt_cfg_str(map, key);
    return strcmp(s, "auto") == 0 ? -1 : strcmp(s, "true") == 0;
}

/* The shared options followed by the mixer's own: the table `model:` is checked against. */
static int model_options(ttt_option *out, int cap, const ttt_mixer *mx) {
    int n = 0;
    for (const ttt_option *o = ttt_seq_model_options; o->name && n < cap - 1; o++) out[n++] = *o;
    for (const ttt_option *o = mx ? mx->options : NULL; o && o->name && n < cap - 1; o++)
        out[n++] = *o;
    out[n] = (ttt_option)TTT_OPTION_END;
    return n;
}

/* The model section read into c; `map` is the plan's copy of the section, which the check
 * completes with the defaults and the values the parse resolves are rendered into (the section
 * as config.resolved.yaml shows it). layer_map, the `layer:` section as given, is only read; its
 * rendering goes to *layer_resolved. */
static ttt_status parse_model(ttt_cfg_node *map, const ttt_cfg_node *layer_map,
                              const ttt_seq_model_io *io, ttt_seq_model_config *c,
                              ttt_cfg_node **layer_resolved, ttt_error *err) {
    /* `layer: {mixer: NAME}` is shorthand for model.mixer: NAME, so that one sweep over `layer`
     * can put any registered mixer next to the TTT presets; it is read here, from the layer
     * section as given, and shows as the model's mixer. */
    const ttt_cfg_node *lm = layer_map ? ttt_cfg_get(layer_map, "mixer") : NULL;
    if (lm) {
        const char *names[TTT_MIXER_COUNT];
        for (int i = 0; i < TTT_MIXER_COUNT; i++) names[i] = ttt_mixer_at(i)->name;
        if (lm->kind != TTT_CFG_SCALAR || !lm->scalar)
            return ttt_cfg_error(err, TTT_ERR_CONFIG, lm,
                                 "layer.mixer: expected a mixer name, one of %s (shorthand for "
                                 "model.mixer)",
                                 MIXER_CHOICES);
        TTT_TRY(ttt_cfg_check_name(lm, "mixer (layer.mixer, shorthand for model.mixer)", names,
                                   TTT_MIXER_COUNT, err));
        ttt_cfg_map_set(map, "mixer", ttt_cfg_clone(lm));
    }
    /* a mixer's name given as a layer preset (`layer: {preset: rwkv7}`): say where it lives
     * rather than list the layer presets only */
    const ttt_cfg_node *pn = layer_map && !lm ? ttt_cfg_get(layer_map, "preset") : NULL;
    const ttt_mixer *pm =
        pn && pn->kind == TTT_CFG_SCALAR && pn->scalar && !ttt_preset_find(pn->scalar)
            ? ttt_mixer_find(pn->scalar)
            : NULL;
    if (pm && !pm->uses_layer)
        return ttt_cfg_error(err, TTT_ERR_NAME, pn,
                             "layer.preset: '%s' is a token mixer, not a preset of the TTT "
                             "layer; write layer: {mixer: %s} (or model.mixer: %s)",
                             pn->scalar, pn->scalar, pn->scalar);
    /* the table depends on the mixer: the shared options and the chosen mixer's own (an
     * unknown mixer name is then reported by the check, with the valid ones) */
    const ttt_cfg_node *mn = ttt_cfg_get(map, "mixer");
    const ttt_mixer *mx =
        ttt_mixer_find(mn && mn->kind == TTT_CFG_SCALAR && mn->scalar ? mn->scalar : "ttt");
    ttt_option opts[96];
    model_options(opts, (int)(sizeof opts / sizeof opts[0]), mx);
    TTT_TRY(ttt_cfg_check_map(map, "model", opts, NULL, err));
    c->io = *io;
    mx = ttt_mixer_find(ttt_cfg_str(map, "mixer"));
    TTT_ASSERT(mx);
    for (int i = 0; i < TTT_MIXER_COUNT; i++)
        if (ttt_mixer_at(i) == mx) c->mixer = (ttt_mixer_kind)i;
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
    /* conv and act: "auto" (−1) until the mixer's parse resolves them */
    const ttt_cfg_node *conv = ttt_cfg_get(map, "conv");
    if (strcmp(conv->scalar, "auto") == 0) {
        c->conv = -1;
    } else {
        char *end = NULL;
        const long k = strtol(conv->scalar, &end, 10);
        if (!end || *end || end == conv->scalar || k < 0 || k > 64)
            return ttt_cfg_error(err, TTT_ERR_CONFIG, conv,
                                 "model.conv: expected auto or a kernel size in [0, 64] (0 = "
                                 "no convolution), got '%s'",
                                 conv->scalar);
        c->conv = (int)k;
    }
    c->act = ttt_mixer_tri(map, "act") < 0 ? -1 : strcmp(ttt_cfg_str(map, "act"), "silu") == 0;
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
                                               : mx->positions;
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

    if (mx->uses_layer && !layer_map)
        return ttt_cfg_error(err, TTT_ERR_CONFIG, map, "model.mixer: %s needs a `layer:` section",
                             mx->name);
    if (!mx->uses_layer && layer_map) {
        /* not read: the section shows as given, without the shorthand the model took */
        if ((*layer_resolved = ttt_cfg_clone(layer_map)))
            ttt_cfg_map_remove(*layer_resolved, "mixer");
        else
            return ttt_cfg_out_of_memory(err, "layer");
    }
    TTT_TRY(mx->parse(c, map, mx->uses_layer ? layer_map : NULL, layer_resolved, err));
    TTT_ASSERT(c->conv >= 0 && c->act >= 0); /* every mixer resolves them */
    char conv_text[16];
    snprintf(conv_text, sizeof conv_text, "%d", c->conv);
    ttt_cfg_map_set(map, "conv", ttt_cfg_new_scalar(conv_text, ttt_cfg_get(map, "conv")));
    ttt_cfg_map_set(map, "act",
                    ttt_cfg_new_scalar(c->act ? "silu" : "none", ttt_cfg_get(map, "act")));
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

ttt_status ttt_seq_model_parse_section(const ttt_cfg_node *model_map,
                                       const ttt_cfg_node *layer_map, const ttt_seq_model_io *io,
                                       ttt_seq_model_config *c, ttt_cfg_node **model_resolved,
                                       ttt_cfg_node **layer_resolved, ttt_error *err) {
    memset(c, 0, sizeof *c);
    *model_resolved = *layer_resolved = NULL;
    if (model_map->kind != TTT_CFG_MAP)
        return ttt_cfg_error(err, TTT_ERR_CONFIG, model_map, "model: expected a mapping");
    ttt_cfg_node *map = ttt_cfg_clone(model_map);
    if (!map) return ttt_cfg_out_of_memory(err, "model");
    ttt_status s = parse_model(map, layer_map, io, c, layer_resolved, err);
    if (s == TTT_OK) {
        *model_resolved = map;
        return TTT_OK;
    }
    ttt_cfg_free(map);
    ttt_cfg_free(*layer_resolved);
    *layer_resolved = NULL;
    return s;
}

ttt_status ttt_seq_model_parse(ttt_cfg_node *model_map, ttt_cfg_node *layer_map,
                               const ttt_seq_model_io *io, ttt_seq_model_config *c,
                               ttt_error *err) {
    ttt_cfg_node *m = NULL, *l = NULL;
    ttt_status s = ttt_seq_model_parse_section(model_map, layer_map, io, c, &m, &l, err);
    if (m) ttt_cfg_swap(model_map, m);
    if (l && layer_map) ttt_cfg_swap(layer_map, l);
    ttt_cfg_free(m);
    ttt_cfg_free(l);
    return s;
}

const char *ttt_seq_model_describe(const ttt_seq_model_config *c, char *buf, size_t len) {
    const ttt_mixer *mx = ttt_mixer_at(c->mixer);
    if (mx->describe) return mx->describe(c, buf, len);
    snprintf(buf, len, "%s", mx->name);
    return buf;
}

/* ------------------------------------------------------------------------------------------ */
/* Parameters */

struct ttt_mixer_builder {
    ttt_seq_model *m;
    ttt_rng base;
    ttt_error *err;
    ttt_status s;
    int layer; /* the block whose mixer parameters ttt_mixer_add names */
};
typedef ttt_mixer_builder builder;

/* Add a parameter (index returned, −1 after an error) initialized from its own stream. */
static int add(builder *b, const char *name, int ndim, const int *shape, int decay, int init,
               float std) {
    if (b->s != TTT_OK) return -1;
    ttt_param *p;
    b->s = ttt_params_add(&b->m->params, name, ndim, shape, decay, &p, b->err);
    if (b->s != TTT_OK) return -1;
    ttt_rng r = ttt_rng_fork(&b->base, ttt_hash_str(name));
    switch (init) {
    case TTT_INIT_NORMAL: ttt_param_init_normal(p, &r, std); break;
    case TTT_INIT_ONES: ttt_param_init_ones(p); break;
    case TTT_INIT_ZEROS: ttt_param_init_zeros(p); break;
    case TTT_INIT_A_LOG: /* A ~ U[1, 16], stored as log A (Mamba2) */
        for (size_t i = 0; i < p->n; i++)
            p->data[i] = (float)log(1.0 + 15.0 * ttt_rng_uniform(&r));
        break;
    case TTT_INIT_DT_BIAS: /* dt = exp(U[log dt_min, log dt_max]); bias = softplus⁻¹(dt) = dt + log(1 − e^−dt) */
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

int ttt_mixer_add(builder *b, const char *name, int ndim, const int *shape, int decay,
                  ttt_mixer_init init, float std) {
    char nm[TTT_PARAM_NAME_LEN];
    if (snprintf(nm, sizeof nm, "layer%d.mixer.%s", b->layer, name) >= (int)sizeof nm) {
        if (b->s == TTT_OK)
            b->s = ttt_error_set(b->err, TTT_ERR_ARG, "model: parameter name 'layer%d.mixer.%s' "
                                 "is too long", b->layer, name);
        return -1;
    }
    return add(b, nm, ndim, shape, decay, (int)init, std);
}

ttt_param *ttt_mixer_param(builder *b, int i) {
    TTT_ASSERT(i >= 0 && i < b->m->params.n);
    return b->m->params.p[i];
}

ttt_rng ttt_mixer_rng(const builder *b, uint64_t key) { return ttt_rng_fork(&b->base, key); }

int ttt_mixer_failed(const builder *b) { return b->s != TTT_OK; }

void ttt_mixer_run(builder *b, ttt_arena *a, ttt_status (*work)(void *arg, ttt_error *err),
                   void *arg, const char *what) {
    if (b->s == TTT_OK) b->s = ttt_arena_run(a, work, arg, what, b->err);
}

void ttt_mixer_add_qkv(builder *b, const ttt_seq_model_config *c, int l, ttt_block_ids *k) {
    const int d = c->d_model, C = c->n_heads * c->head_dim;
    const float std = c->init_std;
    (void)l;
    k->wq = ttt_mixer_add(b, "wq", 2, (int[]){d, C}, 1, TTT_INIT_NORMAL, std);
    k->wk = ttt_mixer_add(b, "wk", 2, (int[]){d, C}, 1, TTT_INIT_NORMAL, std);
    k->wv = ttt_mixer_add(b, "wv", 2, (int[]){d, C}, 1, TTT_INIT_NORMAL, std);
    if (c->conv > 0) {
        /* a kernel per channel; N(0, 1/K) keeps the output's scale near the input's */
        const float cs = 1.0f / sqrtf((float)c->conv);
        k->conv_q = ttt_mixer_add(b, "conv_q", 2, (int[]){c->conv, C}, 0, TTT_INIT_NORMAL, cs);
        k->conv_k = ttt_mixer_add(b, "conv_k", 2, (int[]){c->conv, C}, 0, TTT_INIT_NORMAL, cs);
        k->conv_v = ttt_mixer_add(b, "conv_v", 2, (int[]){c->conv, C}, 0, TTT_INIT_NORMAL, cs);
    }
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
    const ttt_mixer *mx = ttt_mixer_at(c->mixer);
    const double block = 4.0 * d + 2.0 * D          /* norms (with biases), output norm */
                         + 5.0 * d * C              /* wq, wk, wv, w_g, wo */
                         + 3.0 * (double)c->conv * C /* short convolutions */
                         + 2.0 * (double)c->mlp * d * d
                         + (mx && mx->param_bound ? mx->param_bound(c) : 0.0);
    (void)H;
    return n_in * d + (double)c->max_len * d + (double)c->n_layers * block + 2.0 * d +
           d * n_out + n_out;
}

ttt_status ttt_seq_model_init(ttt_seq_model *m, const ttt_seq_model_config *cfg, uint64_t seed,
                              ttt_error *err) {
    memset(m, 0, sizeof *m);
    m->cfg = *cfg;
    ttt_params_init(&m->params);
    const ttt_seq_model_config *c = &m->cfg;
    const ttt_mixer *mx = ttt_mixer_at(c->mixer);
    if (!mx)
        return ttt_error_set(err, TTT_ERR_ARG, "model: no mixer number %d", (int)c->mixer);
    builder b = {.m = m, .err = err, .s = TTT_OK};
    ttt_rng root;
    ttt_rng_seed(&root, seed);
    b.base = ttt_rng_fork(&root, ttt_hash_str("model.init"));
    const int d = c->d_model, H = c->n_heads, D = c->head_dim, C = H * D;
    const float std = c->init_std, out_std = std / sqrtf(2.0f * (float)c->n_layers);
    m->embed_b = m->pos = m->norm_f_b = m->head_b = -1;
    if (c->io.vocab > 0) {
        m->embed = add2(&b, "embed", c->io.vocab, d, 1, TTT_INIT_NORMAL, std);
    } else {
        m->embed = add2(&b, "embed_in", c->io.in_dim, d, 1, TTT_INIT_NORMAL, std);
        m->embed_b = add1(&b, "embed_in.b", d, TTT_INIT_ZEROS);
    }
    if (c->positions == TTT_POS_LEARNED)
        m->pos = add2(&b, "pos", c->max_len, d, 1, TTT_INIT_NORMAL, std);
    char nm[TTT_PARAM_NAME_LEN];
#define NAME(fmt) (snprintf(nm, sizeof nm, "layer%d." fmt, l), nm)
    for (int l = 0; l < c->n_layers; l++) {
        ttt_block_ids *k = &m->blk[l];
        memset(k, -1, sizeof *k);
        k->norm1 = add1(&b, NAME("norm1"), d, TTT_INIT_ONES);
        if (c->layernorm) k->norm1_b = add1(&b, NAME("norm1.b"), d, TTT_INIT_ZEROS);
        b.layer = l;
        mx->add_params(&b, c, l, k);
        /* the post-mixer pieces every mixer shares (mixer.h) */
        if (c->out_norm) k->onorm = add1(&b, NAME("mixer.onorm"), D, TTT_INIT_ONES);
        if (c->out_gate) k->w_g = add2(&b, NAME("mixer.w_g"), d, C, 1, TTT_INIT_NORMAL, std);
        k->wo = add2(&b, NAME("mixer.wo"), C, d, 1, TTT_INIT_NORMAL, out_std);
        if (c->mlp > 0) {
            k->norm2 = add1(&b, NAME("norm2"), d, TTT_INIT_ONES);
            if (c->layernorm) k->norm2_b = add1(&b, NAME("norm2.b"), d, TTT_INIT_ZEROS);
            k->mlp_w1 = add2(&b, NAME("mlp.w1"), d, c->mlp * d, 1, TTT_INIT_NORMAL, std);
            k->mlp_w2 = add2(&b, NAME("mlp.w2"), c->mlp * d, d, 1, TTT_INIT_NORMAL, out_std);
        }
    }
#undef NAME
    m->norm_f = add1(&b, "norm_f", d, TTT_INIT_ONES);
    if (c->layernorm) m->norm_f_b = add1(&b, "norm_f.b", d, TTT_INIT_ZEROS);
    const int n_out = c->io.vocab > 0 ? c->io.vocab : c->io.out_dim;
    m->head = add2(&b, "head", d, n_out, 1, TTT_INIT_NORMAL, std);
    if (c->io.vocab <= 0) m->head_b = add1(&b, "head.b", n_out, TTT_INIT_ZEROS);
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
    const size_t n = (size_t)T * D, nseq = x->n / n;
    /* each sequence from position 0; any head width (a row buffer would bound it) */
    for (size_t s = 0; s < nseq; s++) ttt_rope_inverse_add(g + s * n, dy + s * n, T, D, 0, base);
}

/* The same op on a device: one launch of the RoPE kernel per sequence, each from position 0
 * (the kernel numbers the rows of one call from pos0); the backward turns dy back by −angle. */
static void rope_backward_dev(ttt_ctx *ctx, const ttt_tape_entry *e, const float *dy) {
    const ttt_tensor *x = e->in[0];
    const int T = e->iarg[0], D = e->iarg[1];
    float *g = ttt_grad(ctx, x);
    if (!g) return;
    const size_t n = (size_t)T * D, nseq = x->n / n;
    for (size_t s = 0; s < nseq; s++)
        ttt_device_ops_note(ttt_cuda_rope(g + s * n, 1, dy + s * n, T, D, 0, e->farg[0], 1,
                                          ctx->arena->stream, ttt_device_ops_err()));
}

static ttt_tensor *rope_dev(ttt_ctx *ctx, const ttt_tensor *x, int T, float base) {
    const int D = TTT_COLS(x);
    ttt_tensor *y = ttt_tensor_new(ctx, x->ndim, x->shape);
    const size_t n = (size_t)T * D, nseq = n ? x->n / n : 0;
    for (size_t s = 0; s < nseq; s++)
        ttt_device_ops_note(ttt_cuda_rope(y->data + s * n, 0, x->data + s * n, T, D, 0, base, 0,
                                          ctx->arena->stream, ttt_device_ops_err()));
    ttt_tape_entry *e =
        ttt_tape_record(ctx, rope_backward_dev, y, (const ttt_tensor *const[]){x}, 1);
    if (e) {
        e->name = "rope";
        e->iarg[0] = T;
        e->iarg[1] = D;
        e->farg[0] = base;
    }
    return y;
}

ttt_tensor *ttt_mixer_rope(ttt_ctx *ctx, const ttt_tensor *x, int T, float base) {
    if (TTT_OPS_ON_DEVICE(ctx, x, NULL)) return rope_dev(ctx, x, T, base);
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

ttt_tensor *ttt_mixer_reshape2(ttt_ctx *ctx, const ttt_tensor *x, int r, int c) {
    return ttt_reshape(ctx, x, 2, (int[]){r, c});
}
ttt_tensor *ttt_mixer_reshape3(ttt_ctx *ctx, const ttt_tensor *x, int a, int b, int c) {
    return ttt_reshape(ctx, x, 3, (int[]){a, b, c});
}
#define reshape2 ttt_mixer_reshape2

ttt_tensor *ttt_mixer_p(const ttt_mixer_call *call, int i) { return P(call->pt, i); }

/* q, k or v of a block: h W, then the short convolution and the activation; (B, T, C). */
static ttt_tensor *qkv(const ttt_mixer_call *call, int w, int conv) {
    ttt_ctx *ctx = call->ctx;
    ttt_tensor *x = ttt_matmul(ctx, call->h, 0, P(call->pt, w), 0); /* (B·T, C) */
    x = ttt_mixer_reshape3(ctx, x, call->B, call->T, TTT_COLS(x));
    if (call->m->cfg.conv > 0) x = ttt_conv1d_causal(ctx, x, P(call->pt, conv), NULL);
    if (call->m->cfg.act) x = ttt_silu(ctx, x);
    return x;
}

ttt_tensor *ttt_mixer_qkv_packed(const ttt_mixer_call *call) {
    ttt_ctx *ctx = call->ctx;
    const ttt_block_ids *id = call->ids;
    const ttt_tensor *pt = call->pt;
    /* One product h [W_q W_k W_v] instead of three: h is packed once, and the backward's dh is
     * one product of depth 3·H·D instead of three accumulating passes over (B·T, d); dW comes
     * back through the concatenation into the three parameters, whose names and shapes stay
     * what checkpoints and exports see. The packed weight is a copy of d × 3·H·D floats per
     * call, small beside the (B·T, d) activations it saves passes over. */
    ttt_tensor *w = ttt_concat_cols_n(
        ctx, (const ttt_tensor *const[]){P(pt, id->wq), P(pt, id->wk), P(pt, id->wv)}, 3);
    ttt_tensor *x = ttt_matmul(ctx, call->h, 0, w, 0); /* (B·T, 3·H·D) */
    x = ttt_mixer_reshape3(ctx, x, call->B, call->T, TTT_COLS(x));
    if (call->m->cfg.conv > 0) { /* depthwise: the three kernels side by side are one kernel */
        ttt_tensor *kw = ttt_concat_cols_n(
            ctx,
            (const ttt_tensor *const[]){P(pt, id->conv_q), P(pt, id->conv_k), P(pt, id->conv_v)},
            3);
        /* with the SiLU, one op: the convolution's output never goes through memory */
        return call->m->cfg.act ? ttt_conv1d_causal_silu(ctx, x, kw)
                                : ttt_conv1d_causal(ctx, x, kw, NULL);
    }
    if (call->m->cfg.act) x = ttt_silu(ctx, x);
    return x;
}

void ttt_mixer_qkv(const ttt_mixer_call *call, ttt_tensor **q, ttt_tensor **k, ttt_tensor **v) {
    const ttt_block_ids *id = call->ids;
    *q = qkv(call, id->wq, id->conv_q);
    *k = qkv(call, id->wk, id->conv_k);
    *v = qkv(call, id->wv, id->conv_v);
}

void ttt_mixer_attention_qk(ttt_ctx *ctx, const ttt_seq_model_config *c, int T, ttt_tensor **q,
                            ttt_tensor **k) {
    if (c->qk_norm) {
        *q = ttt_mixer_l2norm(ctx, *q);
        *k = ttt_mixer_l2norm(ctx, *k);
    }
    if (c->positions == TTT_POS_ROPE) {
        *q = ttt_mixer_rope(ctx, *q, T, c->rope_base);
        *k = ttt_mixer_rope(ctx, *k, T, c->rope_base);
    }
}

ttt_tensor *ttt_mixer_l2norm(ttt_ctx *ctx, const ttt_tensor *x) {
    return ttt_l2norm_rows(ctx, x, 1e-6f);
}

ttt_tensor *ttt_mixer_seq(ttt_ctx *ctx, const ttt_tensor *x, int b) {
    const int T = x->shape[1], n = x->shape[2];
    return reshape2(ctx, ttt_slice_rows(ctx, x, b, b + 1), T, n);
}

/* Integer inputs (token ids, targets) where the model's tensors are (ops.h "Devices"): the host
 * array itself, or for a device arena a copy in it, queued on the arena's stream. The host array
 * may change once this returns: a copy from pageable host memory is staged before
 * cudaMemcpyAsync returns. A failed copy is the ops' sticky device error. */
static const int *ids_on(ttt_ctx *ctx, const int *ids, int n) {
    if (ttt_device_is_host(ctx->arena->device) || !ids || n <= 0) return ids;
    int *d = ttt_arena_alloc(ctx->arena, (size_t)n * sizeof(int));
    TTT_ASSERT(d != NULL);
    ttt_device_ops_note(ttt_device_copy(d, ctx->arena->device, ids, ttt_device_host(),
                                        (size_t)n * sizeof(int), ctx->arena->stream,
                                        ttt_device_ops_err()));
    return d;
}

/* ------------------------------------------------------------------------------------------ */
/* Packed documents (seqmodel.h, ttt_seq_model_io.packed) */

/* The documents of a batch: document i is rows [row[i], row[i] + len[i]) of the (B·T, ·)
 * tensors, in row order. The mixer runs on the documents of one length at a time, as a batch of
 * its own: group g holds the n[g] documents of length glen[g], document i being member pos[i]
 * of group grp[i]; member j of group g is document mem[first[g] + j]. */
typedef struct doc_plan {
    int n_docs, n_groups;
    int *row, *len, *grp, *pos;
    int *glen, *gn, *first, *mem;
} doc_plan;

/* The documents of a token batch of a model whose io.packed is set, in the host arena; NULL when
 * every sequence is one document (no separator after position 0): the model then runs as without
 * packing, the same operations. */
static const doc_plan *plan_docs(ttt_ctx *ctx, const ttt_seq_model *m, const ttt_seq_batch *bt) {
    const ttt_seq_model_io *io = &m->cfg.io;
    if (!io->packed || !bt->tokens) return NULL;
    const int B = bt->B, T = bt->T, sep = io->doc_sep;
    int n = 0;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) n += t == 0 || bt->tokens[(size_t)b * T + t] == sep;
    if (n == B) return NULL;
    ttt_arena *a = ttt_arena_host(ctx->arena);
    doc_plan *p = ttt_arena_alloc(a, sizeof *p);
    int *ints = ttt_arena_alloc(a, (size_t)(8 * n + 1) * sizeof(int));
    TTT_ASSERT(p && ints);
    *p = (doc_plan){.n_docs = n, .row = ints, .len = ints + n, .grp = ints + 2 * n,
                    .pos = ints + 3 * n, .glen = ints + 4 * n, .gn = ints + 5 * n,
                    .first = ints + 6 * n, .mem = ints + 7 * n};
    int i = 0;
    for (int r = 0; r < B * T; r++)
        if (r % T == 0 || bt->tokens[r] == sep) p->row[i++] = r;
    /* a document ends where the next begins (every sequence begins one) */
    for (i = 0; i < n; i++) p->len[i] = (i + 1 < n ? p->row[i + 1] : B * T) - p->row[i];
    /* the groups in the order their lengths first occur */
    for (i = 0; i < n; i++) {
        int g = 0;
        while (g < p->n_groups && p->glen[g] != p->len[i]) g++;
        if (g == p->n_groups) {
            p->glen[g] = p->len[i];
            p->gn[g] = 0;
            p->n_groups++;
        }
        p->grp[i] = g;
        p->pos[i] = p->gn[g]++;
    }
    for (int g = 0, f = 0; g < p->n_groups; g++) {
        p->first[g] = f;
        f += p->gn[g];
    }
    for (i = 0; i < n; i++) p->mem[p->first[p->grp[i]] + p->pos[i]] = i;
    return p;
}

/* The rows of x (B·T, ·) of each document in the order `order` (n indices into the plan), one
 * tensor: a slice when there is one. */
static ttt_tensor *gather_docs(ttt_ctx *ctx, const doc_plan *p, const ttt_tensor *x,
                               const int *order, int n) {
    if (n == 1)
        return ttt_slice_rows(ctx, x, p->row[order[0]], p->row[order[0]] + p->len[order[0]]);
    ttt_tensor **parts = ttt_arena_alloc(ttt_arena_host(ctx->arena), (size_t)n * sizeof *parts);
    TTT_ASSERT(parts);
    for (int j = 0; j < n; j++)
        parts[j] = ttt_slice_rows(ctx, x, p->row[order[j]], p->row[order[j]] + p->len[order[j]]);
    return ttt_concat_rows_n(ctx, (const ttt_tensor *const *)parts, n);
}

/* The mixer of block l on h (B·T, d): one call on the whole batch, or with packed documents
 * one call per group of documents of equal length (each document a sequence of that call),
 * the outputs put back in row order. */
static ttt_status mix(const ttt_mixer_call *call, const doc_plan *p, ttt_tensor **o,
                      ttt_error *err) {
    const ttt_mixer *mx = ttt_mixer_at(call->m->cfg.mixer);
    if (!p) return mx->forward(call, o, err);
    ttt_ctx *ctx = call->ctx;
    ttt_tensor **outs = ttt_arena_alloc(ttt_arena_host(ctx->arena),
                                        (size_t)(p->n_groups + p->n_docs) * sizeof *outs);
    TTT_ASSERT(outs);
    ttt_tensor **pieces = outs + p->n_groups;
    for (int g = 0; g < p->n_groups; g++) {
        ttt_mixer_call gc = *call;
        gc.h = gather_docs(ctx, p, call->h, p->mem + p->first[g], p->gn[g]);
        gc.B = p->gn[g];
        gc.T = p->glen[g];
        TTT_TRY(mx->forward(&gc, &outs[g], err)); /* (n·len, H·D) */
    }
    for (int i = 0; i < p->n_docs; i++) {
        const int g = p->grp[i], L = p->len[i];
        pieces[i] = p->gn[g] == 1
                        ? outs[g]
                        : ttt_slice_rows(ctx, outs[g], p->pos[i] * L, (p->pos[i] + 1) * L);
    }
    *o = ttt_concat_rows_n(ctx, (const ttt_tensor *const *)pieces, p->n_docs);
    return TTT_OK;
}

static ttt_status block(ttt_ctx *ctx, const ttt_seq_model *m, const ttt_tensor *pt, int l,
                        ttt_tensor **x, int B, int T, const doc_plan *docs, ttt_error *err) {
    const ttt_seq_model_config *c = &m->cfg;
    const ttt_block_ids *k = &m->blk[l];
    const int H = c->n_heads, D = c->head_dim;
    ttt_tensor *h = norm(ctx, m, pt, *x, k->norm1, k->norm1_b); /* (B·T, d) */
    const ttt_mixer_call call = {.ctx = ctx, .m = m, .pt = pt, .ids = k, .h = h, .layer = l,
                                 .B = B, .T = T};
    ttt_tensor *o;
    TTT_TRY(mix(&call, docs, &o, err)); /* (B·T, H·D) */
    /* the post-mixer pieces every mixer shares (mixer.h) */
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

/* ---- Recomputed blocks (train.recompute; docs/training.md "Memory of a training step") ----
 * A block's tape keeps a few dozen (B·T, d)-sized tensors; a recomputed block keeps its input
 * and output only. Its forward runs on a tape of its own (recording: the same kernels as the
 * recomputation, so the output has the same bits; without a tape some ops take other paths)
 * whose memory is released as soon as the output is copied out; the backward runs the block
 * again on that tape, walks it from the output's gradient, hands the input's gradient on and
 * releases it all again. The parameters' gradients arrive from the same ops in the same order
 * as without recomputation: the same bits. */

typedef struct recompute_rec {
    const ttt_seq_model *m;
    const ttt_tensor *pt;
    const doc_plan *docs; /* the batch's packed documents (host arena, the step's), or NULL */
    int l, B, T;
} recompute_rec;

/* dst (+)= src over n floats on t's device: assign when add is 0 (autograd.h "First writer
 * assigns"); src NULL: zeros. */
static void grad_into(ttt_ctx *ctx, const ttt_tensor *t, float *dst, int add, const float *src,
                      size_t n) {
    if (!src) {
        if (add) return;
        if (ttt_tensor_on_device(t))
            ttt_device_ops_note(ttt_device_zero(dst, ttt_tensor_device(t), n * sizeof(float),
                                                ctx->arena->stream, ttt_device_ops_err()));
        else
            memset(dst, 0, n * sizeof(float));
        return;
    }
    if (ttt_tensor_on_device(t))
        ttt_device_ops_note(ttt_cuda_map(TTT_MAP_SCALE, dst, add, src, NULL, 0, NULL, 1, n, 1.0f,
                                         0.0f, ctx->arena->stream, ttt_device_ops_err()));
    else if (add)
        for (size_t i = 0; i < n; i++) dst[i] += src[i];
    else
        memcpy(dst, src, n * sizeof(float));
}

static void recomputed_block_backward(ttt_ctx *ctx, const ttt_tape_entry *e, const float *dout) {
    const recompute_rec *r = e->aux;
    ttt_tensor *x = e->in[0];
    /* the input's gradient before the mark: it outlives the block's tape */
    int add = 1;
    float *gx = ttt_grad_acc(ctx, x, &add);
    const ttt_arena_mark mark = ttt_arena_mark_get(ctx->arena);
    ttt_tape tape;
    ttt_tape_init(&tape);
    tape.recycle = ctx->tape ? ctx->tape->recycle : 0;
    ttt_ctx bc = *ctx;
    bc.grad = 1;
    bc.tape = &tape;
    /* the input as a leaf of the block's tape, so that its gradient arrives here whole */
    ttt_tensor *xl = ttt_tape_alloc(&bc, sizeof *xl);
    *xl = *x;
    xl->requires_grad = 1;
    xl->grad_persistent = 0;
    xl->grad = NULL;
    xl->grad_stale = 0;
    ttt_tensor *y = xl;
    ttt_error err = {0};
    const ttt_status s = block(&bc, r->m, r->pt, r->l, &y, r->B, r->T, r->docs, &err);
    if (s != TTT_OK) { /* it ran once already; a failure now is the ops' sticky error */
        *ttt_device_ops_err() = err;
        ttt_device_ops_note(s);
    } else {
        ttt_backward_from(&bc, y, dout);
    }
    if (gx) /* nothing arrived: zeros over the garbage of a first writer */
        grad_into(ctx, x, gx, add, s == TTT_OK ? xl->grad : NULL, x->n);
    ttt_tape_free(&tape);
    ttt_arena_release(ctx->arena, mark); /* stream-ordered: after the work above */
}

/* Block l on *x as a recomputed block (above): *x becomes its output, one tape entry. */
static ttt_status block_recomputed(ttt_ctx *ctx, const ttt_seq_model *m, const ttt_tensor *pt,
                                   int l, ttt_tensor **x, int B, int T, const doc_plan *docs,
                                   ttt_error *err) {
    ttt_tensor *in = *x;
    ttt_tensor *out = ttt_tensor_new(ctx, in->ndim, in->shape); /* before the mark: it stays */
    recompute_rec *rec = ttt_tape_alloc(ctx, sizeof *rec);
    *rec = (recompute_rec){.m = m, .pt = pt, .docs = docs, .l = l, .B = B, .T = T};
    const ttt_arena_mark mark = ttt_arena_mark_get(ctx->arena);
    ttt_tape tape;
    ttt_tape_init(&tape);
    ttt_ctx bc = *ctx;
    bc.tape = &tape; /* recording (above) */
    ttt_tensor *y = in;
    ttt_status s = block(&bc, m, pt, l, &y, B, T, docs, err);
    if (s == TTT_OK && y->n != out->n)
        s = ttt_error_set(err, TTT_ERR_SHAPE, "model: block %d changed the shape of the "
                          "residual stream", l);
    if (s == TTT_OK) {
        if (ttt_tensor_on_device(out))
            s = ttt_device_copy(out->data, ttt_tensor_device(out), y->data,
                                ttt_tensor_device(y), out->n * sizeof(float), ctx->arena->stream,
                                err);
        else
            memcpy(out->data, y->data, out->n * sizeof(float));
    }
    ttt_tape_free(&tape);
    ttt_arena_release(ctx->arena, mark); /* stream-ordered: after the copy */
    TTT_TRY(s);
    ttt_tape_entry *e = ttt_tape_record(ctx, recomputed_block_backward, out,
                                        (const ttt_tensor *const[]){in}, 1);
    if (e) {
        e->aux = rec;
        e->name = "recomputed_block";
    }
    *x = out;
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
        x = ttt_embedding(ctx, P(pt, m->embed), ids_on(ctx, bt->tokens, B * T),
                          B * T); /* (B·T, d) */
    } else {
        if (!bt->inputs)
            return ttt_error_set(err, TTT_ERR_ARG, "model: a vector model needs inputs");
        ttt_tensor *in;
        if (ttt_device_is_host(ctx->arena->device)) {
            in = ttt_tensor_2d(ctx, B * T, c->io.in_dim);
            memcpy(in->data, bt->inputs, in->n * sizeof(float));
        } else { /* copied to the device on the arena's stream */
            ttt_tensor v = ttt_tensor_view((float *)bt->inputs, 2, (int[]){B * T, c->io.in_dim});
            in = ttt_tensor_to(ctx, &v);
        }
        x = ttt_add(ctx, ttt_matmul(ctx, in, 0, P(pt, m->embed), 0), P(pt, m->embed_b));
    }
    const doc_plan *docs = plan_docs(ctx, m, bt);
    if (docs && !ttt_device_is_host(ctx->arena->device))
        return ttt_error_set(err, TTT_ERR_UNSUPPORTED,
                             "model: packed documents (task.doc_separator) run on the host only");
    if (c->positions == TTT_POS_LEARNED && docs) {
        /* each document's positions from 0: rows [0, len) of the table per document */
        ttt_tensor **reps =
            ttt_arena_alloc(ttt_arena_host(ctx->arena), (size_t)docs->n_docs * sizeof *reps);
        TTT_ASSERT(reps);
        for (int i = 0; i < docs->n_docs; i++)
            reps[i] = ttt_slice_rows(ctx, P(pt, m->pos), 0, docs->len[i]);
        x = ttt_add(ctx, x, ttt_concat_rows_n(ctx, (const ttt_tensor *const *)reps, docs->n_docs));
    } else if (c->positions == TTT_POS_LEARNED) {
        ttt_tensor *p = ttt_slice_rows(ctx, P(pt, m->pos), 0, T); /* (T, d) */
        if (B > 1) {
            /* a host array of headers, also when the tensors are on a device */
            ttt_tensor **reps =
                ttt_arena_alloc(ttt_arena_host(ctx->arena), (size_t)B * sizeof *reps);
            TTT_ASSERT(reps);
            for (int b = 0; b < B; b++) reps[b] = p;
            p = ttt_concat_rows_n(ctx, (const ttt_tensor *const *)reps, B);
        }
        x = ttt_add(ctx, x, p);
    }
    (void)d;
    for (int l = 0; l < c->n_layers; l++)
        TTT_TRY(l < ctx->recompute && ttt_recording(ctx) && x->requires_grad
                    ? block_recomputed(ctx, m, pt, l, &x, B, T, docs, err)
                    : block(ctx, m, pt, l, &x, B, T, docs, err));
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
        /* the logits (a product, or a product plus the head's bias) feed only the loss: unless
         * the caller keeps them, their gradient is written over them (N·V floats saved) */
        const int *tg = ids_on(ctx, bt->labels, N);
        ttt_tensor *l = out_pred ? ttt_cross_entropy(ctx, y, tg, N, &ce)
                                 : ttt_cross_entropy_consume(ctx, y, tg, N, &ce);
        s.count = ce.count;
        s.correct = ce.correct;
        s.loss_sum = ce.loss_sum;
        /* cross_entropy divides by its own count; rescale to the caller's denominator */
        if (denominator > 0 && ce.count > 0) l = ttt_scale(ctx, l, (float)(ce.count / denominator));
        *loss = l;
    } else {
        const int n_out = c->io.out_dim;
        ttt_tensor *tgt, *mask;
        const float *yv = y->data; /* the predictions, read on the host for the statistics */
        float *yh = NULL;
        if (ttt_device_is_host(ctx->arena->device)) {
            tgt = ttt_tensor_2d(ctx, N, n_out);
            mask = ttt_tensor_1d(ctx, N);
            memcpy(tgt->data, bt->targets, tgt->n * sizeof(float));
            memcpy(mask->data, bt->mask, mask->n * sizeof(float));
        } else { /* targets and mask to the device, the predictions back for the statistics */
            ttt_tensor tv = ttt_tensor_view((float *)bt->targets, 2, (int[]){N, n_out});
            ttt_tensor mv = ttt_tensor_view((float *)bt->mask, 1, (int[]){N});
            tgt = ttt_tensor_to(ctx, &tv);
            mask = ttt_tensor_to(ctx, &mv);
            yh = ttt_arena_alloc(ttt_arena_host(ctx->arena), y->n * sizeof(float) + 1);
            TTT_ASSERT(yh != NULL);
            TTT_TRY(ttt_tensor_read(y, yh, ctx->arena->stream, err));
            yv = yh;
        }
        for (int i = 0; i < N; i++) {
            if (bt->mask[i] == 0.0f) continue;
            s.count++;
            for (int j = 0; j < n_out; j++) {
                double e = (double)yv[(size_t)i * n_out + j] - bt->targets[(size_t)i * n_out + j];
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

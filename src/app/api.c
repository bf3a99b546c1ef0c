/* The public C API (include/ttt/ttt.h, docs/api.md) over the library's internals: descriptors
 * become ttt_layer_desc (layers/layer.h), batched calls ttt_layer_forward_batch, gradients the
 * tape (src/core/autograd.h) per (batch, head) sequence, experiments src/app/experiment.h. The
 * internal headers come first: ttt.h then reuses their ttt_status and ttt_error. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api_device.h"
#include "autograd.h"
#include "experiment.h"
#include "feature_maps.h"
#include "layer.h"
#include "task.h"

#include <ttt/ttt.h>

struct ttt_layer_handle {
    ttt_layer L;
    char tuple[768];
};

const char *ttt_errmsg(const ttt_error *err) { return err ? err->msg : ""; }

const char *ttt_version(void) { return TTT_VERSION; }

/* ---- registries ---- */

int ttt_registry_count(ttt_registry r) {
    switch (r) {
    case TTT_REGISTRY_OPTIMIZERS: return ttt_optim_count();
    case TTT_REGISTRY_MODELS: return ttt_model_count();
    case TTT_REGISTRY_LOSSES: return ttt_loss_count();
    case TTT_REGISTRY_PRESETS: return ttt_preset_count();
    case TTT_REGISTRY_FORMS: return ttt_form_count();
    case TTT_REGISTRY_TASKS: return ttt_task_count();
    default: return -1;
    }
}

ttt_status ttt_registry_entry(const char **name, const char **help, ttt_registry r, int i,
                              ttt_error *err) {
    const int n = ttt_registry_count(r);
    if (n < 0) return ttt_error_set(err, TTT_ERR_ARG, "registry %d: no such registry", (int)r);
    if (i < 0 || i >= n)
        return ttt_error_set(err, TTT_ERR_ARG, "registry entry %d: expected 0 <= i < %d", i, n);
    const char *nm = NULL, *hp = NULL;
    switch (r) {
    case TTT_REGISTRY_OPTIMIZERS: nm = ttt_optim_at(i)->name, hp = ttt_optim_at(i)->help; break;
    case TTT_REGISTRY_MODELS: nm = ttt_model_at(i)->name, hp = ttt_model_at(i)->help; break;
    case TTT_REGISTRY_LOSSES: nm = ttt_loss_at(i)->name, hp = ttt_loss_at(i)->help; break;
    case TTT_REGISTRY_PRESETS: nm = ttt_preset_at(i)->name, hp = ttt_preset_at(i)->help; break;
    case TTT_REGISTRY_FORMS: nm = ttt_form_at(i)->form, hp = ttt_form_at(i)->help; break;
    case TTT_REGISTRY_TASKS: nm = ttt_task_at(i)->name, hp = ttt_task_at(i)->help; break;
    default: break;
    }
    if (name) *name = nm;
    if (help) *help = hp;
    return TTT_OK;
}

/* ---- layers ---- */

/* ---- growable structs (ttt.h, docs/api.md "Versions and the ABI") ---- */

/* Where each struct's first layout ends: a caller's size below it cannot hold every field the
 * library reads, so it is refused. Fields appended later lie beyond these ends. */
#define DESC_FIRST_END offsetof(ttt_layer_descriptor, feature_map)
#define IO_FIRST_END (offsetof(ttt_batch_io, n_seqs) + sizeof(int))
#define GRAD_FIRST_END (offsetof(ttt_batch_grad, d_state_in) + sizeof(float *const *))

/* An init function writes the library's initial struct `full` into the caller's, but only its
 * first `size` bytes: a caller compiled with an older, smaller struct owns no more than that. */
static void init_prefix(void *dst, void *full, size_t full_size, size_t size) {
    memcpy(full, &size, sizeof size); /* every growable struct starts with size_t size */
    memcpy(dst, full, size < full_size ? size : full_size);
}

/* The caller's struct src read into dst, which holds the library's initial struct (every field
 * unset): its first src->size bytes are copied over it, so that fields beyond them stay unset,
 * and dst->size becomes the library's own size (dst is then a struct of this library's layout,
 * which the internal calls pass on). */
static ttt_status read_sized(void *dst, size_t full_size, const void *src, size_t first_end,
                             const char *what, ttt_error *err) {
    size_t size;
    memcpy(&size, src, sizeof size);
    if (size < first_end)
        return ttt_error_set(err, TTT_ERR_ARG,
                             "%s: size = %zu; expected sizeof(%s) as the caller compiled it (at "
                             "least %zu): set it with %s_init(&x, sizeof x) or .size = sizeof x",
                             what, size, what, first_end, what);
    if (size > full_size)
        return ttt_error_set(err, TTT_ERR_ARG,
                             "%s: size = %zu, larger than this library's %s (%zu bytes): the "
                             "program was built against a newer ttt.h than libttt %s",
                             what, size, what, full_size, TTT_VERSION);
    memcpy(dst, src, size);
    memcpy(dst, &full_size, sizeof full_size);
    return TTT_OK;
}

static ttt_layer_descriptor desc_unset(void) {
    ttt_layer_descriptor s;
    memset(&s, 0, sizeof s);
    s.size = sizeof s;
    s.lr = s.decay = s.scale = s.rope_base = TTT_DESC_UNSET_NUM;
    s.mini_batch = s.chunk = s.rope = TTT_DESC_UNSET_INT;
    s.features = s.feature_seed = s.feature_gate = s.steps_per_token = TTT_DESC_UNSET_INT;
    s.levels = TTT_DESC_UNSET_INT;
    return s;
}

void ttt_layer_descriptor_init(ttt_layer_descriptor *s, size_t size) {
    if (!s) return; /* nothing to initialize (ttt.h) */
    ttt_layer_descriptor full = desc_unset();
    init_prefix(s, &full, sizeof full, size);
}

void ttt_batch_io_init(ttt_batch_io *io, size_t size) {
    if (!io) return;
    ttt_batch_io full;
    memset(&full, 0, sizeof full);
    init_prefix(io, &full, sizeof full, size);
}

void ttt_batch_grad_init(ttt_batch_grad *g, size_t size) {
    if (!g) return;
    ttt_batch_grad full;
    memset(&full, 0, sizeof full);
    init_prefix(g, &full, sizeof full, size);
}

/* io_in (NULL allowed: check_io refuses it) as a struct of this library's layout. */
static ttt_status read_io(ttt_batch_io *io, const ttt_batch_io *io_in, ttt_error *err) {
    memset(io, 0, sizeof *io);
    if (!io_in) return TTT_OK;
    return read_sized(io, sizeof *io, io_in, IO_FIRST_END, "ttt_batch_io", err);
}

static ttt_status read_grad(ttt_batch_grad *g, const ttt_batch_grad *g_in, ttt_error *err) {
    memset(g, 0, sizeof *g);
    if (!g_in) return TTT_OK;
    return read_sized(g, sizeof *g, g_in, GRAD_FIRST_END, "ttt_batch_grad", err);
}

static double num(double x) { return x == TTT_DESC_UNSET_NUM ? TTT_UNSET_NUM : x; }
static int integer(int x) { return x == TTT_DESC_UNSET_INT ? TTT_UNSET_INT : x; }

_Static_assert(sizeof(ttt_option_value) == sizeof(ttt_opt_value) &&
                   offsetof(ttt_option_value, number) == offsetof(ttt_opt_value, number) &&
                   offsetof(ttt_option_value, text) == offsetof(ttt_opt_value, text),
               "ttt_option_value mirrors ttt_opt_value");

static void tuple_text(char *buf, size_t len, const ttt_layer *L) {
    char name[128], features[160] = "";
    /* the feature_* fields take part only with normalize: ratio (elsewhere they are refused
     * unless left at their defaults), so only ratio layers list them */
    if (L->fmap)
        snprintf(features, sizeof features,
                 ", feature_map %s, features %d, feature_seed %llu, feature_gate %s",
                 L->fmap->name, L->features, (unsigned long long)L->feature_seed,
                 L->feature_gate ? "true" : "false");
    snprintf(buf, len,
             "%s = (model %s, loss %s, optimizer %s, lr %g, decay %g, decay_placement %s, "
             "mini_batch %d, order %s, steps %s, position_scale %s, form %s, chunk %d, "
             "scale %g, rope %s, rope_base %g, normalize %s%s)",
             ttt_layer_describe(L, name, sizeof name), L->model->name, L->loss->name,
             L->optim->name, (double)L->lr, (double)L->decay,
             L->coupled ? "coupled" : "decoupled", L->mini_batch,
             L->order == TTT_ORDER_UPDATE_THEN_APPLY ? "update_then_apply" : "apply_then_update",
             L->step_per_token ? "per_token" : "per_block", L->pos_inverse ? "inverse" : "none",
             L->form, L->chunk, (double)L->scale, L->rope ? "true" : "false",
             (double)L->rope_base,
             L->normalize == TTT_NORMALIZE_RATIO ? "ratio"
             : L->normalize == TTT_NORMALIZE_RMS ? "rms"
                                                 : "none",
             features);
    if (L->substeps > 1) { /* n_h delta steps per token (docs/math.md §4.7) */
        const size_t n = strlen(buf);
        if (n > 0 && n < len)
            snprintf(buf + n - 1, len - (n - 1), ", steps_per_token %d)", L->substeps);
    }
    if (L->levels > 1) { /* Λ levels of state (docs/math.md §4.8) */
        const size_t n = strlen(buf);
        if (n > 0 && n < len)
            snprintf(buf + n - 1, len - (n - 1), ", levels %d)", L->levels);
    }
}

/* The widest d_k and d_v a layer may have: the widest d_model of a trained model
 * (src/train/seqmodel.c). Every width a model derives from them (an MLP's hidden layer is 4 d)
 * then stays far inside an int, and one sequence's state (d_k·d_v floats) inside 16 GiB. */
#define API_MAX_WIDTH 65536

/* Every option names its key once: a key given twice would leave which value counts to the
 * order of the option table's lookup, so it is refused, as a YAML mapping refuses a repeated key.
 * n is at most a few dozen, so the quadratic scan costs nothing. */
static ttt_status check_options(const ttt_option_value *opts, int n, ttt_error *err) {
    for (int i = 0; i < n; i++) {
        if (!opts[i].key)
            return ttt_error_set(err, TTT_ERR_ARG, "layer.optimizer: option %d has no key (NULL)",
                                 i);
        for (int j = 0; j < i; j++)
            if (strcmp(opts[i].key, opts[j].key) == 0)
                return ttt_error_set(err, TTT_ERR_CONFIG,
                                     "layer.optimizer.%s: given twice (options %d and %d); "
                                     "expected each option once",
                                     opts[i].key, j, i);
    }
    return TTT_OK;
}

ttt_status ttt_layer_new(ttt_layer_handle **out, const ttt_layer_descriptor *desc_in, int d_k,
                         int d_v, ttt_error *err) {
    if (err) ttt_error_clear(err);
    if (!out) return ttt_error_set(err, TTT_ERR_ARG, "ttt_layer_new: out is NULL");
    *out = NULL;
    if (!desc_in) return ttt_error_set(err, TTT_ERR_ARG, "ttt_layer_new: desc is NULL");
    ttt_layer_descriptor full = desc_unset();
    TTT_TRY(read_sized(&full, sizeof full, desc_in, DESC_FIRST_END, "ttt_layer_descriptor", err));
    const ttt_layer_descriptor *desc = &full;
    if (d_k < 1 || d_v < 1 || d_k > API_MAX_WIDTH || d_v > API_MAX_WIDTH)
        return ttt_error_set(err, TTT_ERR_ARG,
                             "ttt_layer_new: d_k = %d, d_v = %d; expected >= 1 and <= %d", d_k,
                             d_v, API_MAX_WIDTH);
    if (desc->n_options < 0 || (desc->n_options > 0 && !desc->options))
        return ttt_error_set(err, TTT_ERR_ARG,
                             "layer.optimizer: %d options given without an array",
                             desc->n_options);
    TTT_TRY(check_options(desc->options, desc->n_options, err));
    ttt_layer_desc d;
    ttt_layer_desc_init(&d);
    d.preset = desc->preset;
    d.model = desc->model;
    d.loss = desc->loss;
    d.optimizer = desc->optimizer;
    d.opts = (const ttt_opt_value *)desc->options;
    d.n_opts = desc->n_options;
    d.lr = num(desc->lr);
    d.decay = num(desc->decay);
    d.decay_placement = desc->decay_placement;
    d.mini_batch = integer(desc->mini_batch);
    d.order = desc->order;
    d.steps = desc->steps;
    d.position_scale = desc->position_scale;
    d.form = desc->form;
    d.chunk = integer(desc->chunk);
    d.scale = num(desc->scale);
    d.rope = integer(desc->rope);
    d.rope_base = num(desc->rope_base);
    d.normalize = desc->normalize;
    d.feature_map = desc->feature_map;
    d.features = integer(desc->features);
    d.feature_seed = integer(desc->feature_seed);
    d.feature_gate = integer(desc->feature_gate);
    d.steps_per_token = integer(desc->steps_per_token);
    d.levels = integer(desc->levels);
    ttt_layer_handle *h = calloc(1, sizeof *h);
    if (!h) return ttt_error_set(err, TTT_ERR_NOMEM, "ttt_layer_new: out of memory");
    ttt_status s = ttt_layer_build(&d, d_k, d_v, &h->L, err);
    if (s != TTT_OK) {
        free(h);
        return s;
    }
    tuple_text(h->tuple, sizeof h->tuple, &h->L);
    *out = h;
    return TTT_OK;
}

void ttt_layer_free(ttt_layer_handle *h) { free(h); }

const char *ttt_layer_tuple(const ttt_layer_handle *h) { return h ? h->tuple : ""; }

/* The accessors below cannot return a status; what they do with a NULL handle is written in
 * ttt.h (zeros, −1), so that a caller's mistake never reads through NULL. */
void ttt_layer_dims(int *d_k, int *d_v, const ttt_layer_handle *h) {
    if (d_k) *d_k = h ? h->L.d_k : 0;
    if (d_v) *d_v = h ? h->L.d_v : 0;
}

int ttt_layer_state_tensors(const ttt_layer_handle *h) {
    return h ? ttt_layer_state_count(&h->L) : -1;
}

int ttt_layer_state_shape(const char **name, int shape[4], const ttt_layer_handle *h, int i) {
    _Static_assert(TTT_MAX_DIMS == 4, "ttt.h documents 4 dimensions");
    if (name) *name = NULL;
    if (!h || !shape) return -1;
    return ttt_layer_state_info(&h->L, i, name, shape);
}

/* What a forward and a backward call both need of io (ttt.h, docs/api.md "Misuse"): the same
 * checks for both, so that a call the forward refuses is refused by the backward too. Sizes
 * whose buffers would exceed PTRDIFF_MAX bytes (B = H = INT_MAX, …), which no caller can hold,
 * are refused here, before any index is computed from them; ttt_layer_forward_batch checks them
 * again for its other callers. */
static ttt_status check_io(const ttt_layer_handle *h, const ttt_batch_io *io, ttt_error *err) {
    if (!h || !io) return ttt_error_set(err, TTT_ERR_ARG, "layer call: handle or io is NULL");
    if (io->B < 1 || io->T < 0 || io->H < 1)
        return ttt_error_set(err, TTT_ERR_SHAPE,
                             "layer call: B = %d, T = %d, H = %d; expected B >= 1, T >= 0, "
                             "H >= 1", io->B, io->T, io->H);
    if (!io->o || !io->q || !io->k || !io->v)
        return ttt_error_set(err, TTT_ERR_ARG, "layer call: o, q, k and v are required");
    if (io->alpha_vec != 0 && io->alpha_vec != 1)
        return ttt_error_set(err, TTT_ERR_ARG, "layer call: alpha_vec = %d; expected 0 or 1",
                             io->alpha_vec);
    if (io->alpha_vec && !io->log_alpha)
        return ttt_error_set(err, TTT_ERR_ARG,
                             "layer call: alpha_vec = 1 without log_alpha (alpha_vec says "
                             "log_alpha is (B, T, H, d_k))");
    return ttt_layer_batch_check_sizes(&h->L, io->B, io->T, io->H, err);
}

/* ---- packed variable-length batches (docs/api.md "Packed sequences") ---- */

/* io->cu_seqlens against io (ttt_layer_check_cu_seqlens): B = 1, n_seqs ≥ 1, offsets from 0
 * to T that never decrease (an empty sequence is allowed: its final state is its initial one). */
static ttt_status varlen_check(const ttt_batch_io *io, ttt_error *err) {
    if (!io->cu_seqlens)
        return ttt_error_set(err, TTT_ERR_ARG, "layer call: io->n_seqs = %d without "
                             "io->cu_seqlens: give both (packed sequences) or neither",
                             io->n_seqs);
    if (io->kept)
        return ttt_error_set(err, TTT_ERR_ARG, "layer call: io->kept with io->cu_seqlens: a "
                             "packed call keeps no forward (ttt_layer_kept_bytes is 0); pass "
                             "NULL");
    ttt_status s = ttt_layer_check_cu_seqlens(io->cu_seqlens, io->n_seqs, io->B, io->T,
                                              "io->cu_seqlens", err);
    if (s != TTT_OK) ttt_error_prefix(err, "layer call");
    return s;
}

/* Sequence n of a packed call as a call of its own: B = 1, T = its length, every token buffer
 * advanced to its first token and every state buffer to its (n, 0) block. */
typedef struct varlen_segment {
    ttt_batch_io io;
    ttt_batch_grad g;
    const float *state_in[TTT_BATCH_MAX_STATE], *d_state_out[TTT_BATCH_MAX_STATE];
    float *state_out[TTT_BATCH_MAX_STATE], *d_state_in[TTT_BATCH_MAX_STATE];
} varlen_segment;

/* p advanced by `elems` elements of es bytes (the buffers of io->dtype) */
static void *rows_at(void *p, size_t elems, size_t es) { return (char *)p + elems * es; }
static const float *rows_atc(const float *p, size_t elems, size_t es) {
    return (const float *)(const void *)((const char *)p + elems * es);
}

static void varlen_at(varlen_segment *s, const ttt_layer *L, const ttt_batch_io *io,
                      const ttt_batch_grad *g, int n) {
    const size_t t0 = (size_t)io->cu_seqlens[n], H = (size_t)io->H;
    /* levels Λ (docs/math.md §4.8): q holds Λ·d_k columns */
    const size_t rq = t0 * H * L->d_k * (size_t)(L->levels > 1 ? L->levels : 1);
    const size_t rk = t0 * H * L->d_k, rv = t0 * H * L->d_v, r1 = t0 * H,
                 rl = io->alpha_vec ? rk : r1;
    /* steps_per_token n_h (docs/math.md §4.7): k, v and η have n_h rows per token */
    const size_t nh = L->substeps > 1 ? (size_t)L->substeps : 1;
    const size_t pk = nh * rk, pv = nh * rv, p1 = nh * r1;
    /* q, k, v, o and their gradients are of io->dtype (bf16 on a device: two bytes each) */
    const size_t es = io->dtype == TTT_DTYPE_BF16 ? 2 : sizeof(float);
    s->io = *io;
    s->io.cu_seqlens = NULL;
    s->io.n_seqs = 0;
    s->io.T = (int)(io->cu_seqlens[n + 1] - io->cu_seqlens[n]);
    s->io.o = (float *)rows_at(io->o, rv, es);
    s->io.q = rows_atc(io->q, rq, es);
    s->io.k = rows_atc(io->k, pk, es);
    s->io.v = rows_atc(io->v, pv, es);
    if (io->eta) s->io.eta = io->eta + p1;
    if (io->log_alpha) s->io.log_alpha = io->log_alpha + rl;
    const int n_state = ttt_layer_state_count(L);
    size_t block[TTT_BATCH_MAX_STATE]; /* floats of sequence n's H heads of state tensor i */
    for (int i = 0; i < n_state; i++) {
        int shape[TTT_MAX_DIMS];
        const int nd = ttt_layer_state_info(L, i, NULL, shape);
        block[i] = H;
        for (int d = 0; d < nd; d++) block[i] *= (size_t)shape[d];
    }
#define VARLEN_STATES(dst, src)                                                             \
    do {                                                                                    \
        for (int i = 0; (src) && i < n_state; i++)                                          \
            (dst)[i] = (src)[i] ? (src)[i] + (size_t)n * block[i] : NULL;                   \
    } while (0)
    VARLEN_STATES(s->state_in, io->state_in);
    VARLEN_STATES(s->state_out, io->state_out);
    s->io.state_in = io->state_in ? s->state_in : NULL;
    s->io.state_out = io->state_out ? s->state_out : NULL;
    if (!g) return;
    s->g = *g;
    s->g.d_o = rows_atc(g->d_o, rv, es);
    if (g->d_q) s->g.d_q = (float *)rows_at(g->d_q, rq, es);
    if (g->d_k) s->g.d_k = (float *)rows_at(g->d_k, pk, es);
    if (g->d_v) s->g.d_v = (float *)rows_at(g->d_v, pv, es);
    if (g->d_eta) s->g.d_eta = g->d_eta + p1;
    if (g->d_log_alpha) s->g.d_log_alpha = g->d_log_alpha + rl;
    VARLEN_STATES(s->d_state_out, g->d_state_out);
    VARLEN_STATES(s->d_state_in, g->d_state_in);
#undef VARLEN_STATES
    s->g.d_state_out = g->d_state_out ? s->d_state_out : NULL;
    s->g.d_state_in = g->d_state_in ? s->d_state_in : NULL;
}

/* A packed call: each sequence run as its own call, one after the other (the H heads of each in
 * parallel), so that its outputs are those of that call bit for bit. g = NULL: a forward. */
static ttt_status varlen_run(const ttt_layer_handle *h, const ttt_batch_io *io, int threads,
                             const ttt_batch_grad *g, ttt_error *err) {
    TTT_TRY(varlen_check(io, err));
    for (int n = 0; n < io->n_seqs; n++) {
        varlen_segment s;
        varlen_at(&s, &h->L, io, g, n);
        ttt_status st = g ? ttt_layer_backward_run(h, &s.io, &s.g, err)
                          : ttt_layer_forward_run(h, &s.io, threads, err);
        if (st != TTT_OK) {
            ttt_error_prefix(err, "sequence %d (tokens %lld..%lld of io->cu_seqlens)", n,
                             (long long)io->cu_seqlens[n], (long long)io->cu_seqlens[n + 1]);
            return st;
        }
    }
    return TTT_OK;
}

ttt_status ttt_layer_forward_run(const ttt_layer_handle *h, const ttt_batch_io *io_in,
                                 int threads, ttt_error *err) {
    if (err) ttt_error_clear(err);
    ttt_batch_io io_full;
    TTT_TRY(read_io(&io_full, io_in, err));
    const ttt_batch_io *io = io_in ? &io_full : NULL;
    TTT_TRY(check_io(h, io, err));
    if (threads < 0)
        return ttt_error_set(err, TTT_ERR_ARG,
                             "layer call: threads = %d; expected >= 1, or 0 for the default",
                             threads);
    if (io->cu_seqlens || io->n_seqs) return varlen_run(h, io, threads, NULL, err);
    /* buffers on a GPU: the device entries (api_device.c, docs/api.md "Device buffers") */
    if (io->device != TTT_DEVICE_HOST) return ttt_api_device_forward(&h->L, io, err);
    TTT_TRY(ttt_api_host_check(&h->L, io, NULL, err));
    const ttt_layer_io in = {
        .B = io->B, .T = io->T, .H = io->H, .o = io->o, .q = io->q, .k = io->k, .v = io->v,
        .eta = io->eta, .log_alpha = io->log_alpha, .alpha_vec = io->alpha_vec,
        .state_in = io->state_in, .state_out = io->state_out, .seed = io->seed};
    return ttt_layer_forward_batch(&h->L, &in, threads, err);
}

size_t ttt_layer_kept_bytes(const ttt_layer_handle *h, const ttt_batch_io *io_in) {
    ttt_batch_io io;
    if (!h || !io_in || read_io(&io, io_in, NULL) != TTT_OK || io.device == TTT_DEVICE_HOST ||
        io.cu_seqlens || io.n_seqs)
        return 0;
    return ttt_api_device_kept_bytes(&h->L, &io);
}

/* The inputs the form registry sees for a forward call on io, as ttt_layer_forward_batch
 * describes them: a constant decay other than 1 is a gate per token. */
const char *ttt_layer_form_for(const ttt_layer_handle *h, const ttt_batch_io *io_in) {
    ttt_batch_io io_full;
    if (!h || !io_in || read_io(&io_full, io_in, NULL) != TTT_OK) return "none";
    const ttt_batch_io *io = &io_full;
    if (io->device != TTT_DEVICE_HOST) return ttt_api_device_form(&h->L, io);
    const ttt_layer *L = &h->L;
    const ttt_form_inputs in = {.T = io->T, .eta = io->eta != NULL,
                                .gate = io->log_alpha && io->alpha_vec ? TTT_FORM_GATE_KEY
                                        : io->log_alpha || L->decay != 1.0f ? TTT_FORM_GATE_TOKEN
                                                                            : TTT_FORM_GATE_NONE,
                                .tape = 0};
    return ttt_layer_form_used(L, &in);
}

/* ---- gradients ---- */

/* State tensor i of a sequence's state, in the order of ttt_layer_state_info. */
static ttt_tensor **state_slot(ttt_layer_state *st, int i) {
    if (i < st->n_w) return &st->W[i];
    i -= st->n_w;
    if (i < st->n_w * st->n_opt) return &st->opt[i / st->n_opt][i % st->n_opt];
    return &st->z;
}

/* Copy rows of sequence (b, h) between the (B, T, H, w) layout and a (T, w) block. */
static void gather(float *dst, const float *src, int b, int h, int T, int H, int w) {
    for (int t = 0; t < T; t++)
        memcpy(dst + (size_t)t * w, src + (((size_t)b * T + t) * H + h) * w, w * sizeof(float));
}
static void scatter(float *dst, const float *src, int b, int h, int T, int H, int w) {
    for (int t = 0; t < T; t++)
        memcpy(dst + (((size_t)b * T + t) * H + h) * w, src + (size_t)t * w, w * sizeof(float));
}

/* A leaf of the graph: a (rows, cols) or (rows) tensor holding sequence (b, h) of a batched
 * buffer, whose gradient accumulates into a zeroed buffer of the arena. */
static ttt_tensor *leaf(ttt_ctx *ctx, int ndim, int T, int w, const float *src, int b, int h,
                        int H) {
    ttt_tensor *t = ndim == 1 ? ttt_tensor_1d(ctx, T) : ttt_tensor_2d(ctx, T, w);
    gather(t->data, src, b, h, T, H, w);
    float *g = ttt_arena_alloc(ctx->arena, t->n * sizeof(float) + 1);
    TTT_ASSERT(g);
    memset(g, 0, t->n * sizeof(float));
    ttt_tensor_set_param(t, g);
    return t;
}

/* One sequence's work (backward_one), under ttt_arena_run. */
typedef struct backward_args {
    const ttt_layer *L;
    const ttt_batch_io *io;
    const ttt_batch_grad *g;
    int b, h;
    ttt_ctx *ctx;
} backward_args;

static ttt_status backward_work(void *arg, ttt_error *err) {
    const backward_args *A = arg;
    const ttt_layer *L = A->L;
    const ttt_batch_io *io = A->io;
    const ttt_batch_grad *g = A->g;
    const int b = A->b, h = A->h;
    ttt_ctx *ctx = A->ctx;
    const int T = io->T, H = io->H, d_k = L->d_k, d_v = L->d_v, gk = io->alpha_vec ? d_k : 1;
    /* steps_per_token n_h (docs/math.md §4.7): k, v and η have n_h rows per token */
    const int Tk = (L->substeps > 1 ? L->substeps : 1) * T;
    const size_t bh = (size_t)b * H + h;
    const int d_q = (L->levels > 1 ? L->levels : 1) * d_k; /* Λ levels' queries (§4.8) */
    ttt_tensor *q = leaf(ctx, 2, T, d_q, io->q, b, h, H);
    ttt_tensor *k = leaf(ctx, 2, Tk, d_k, io->k, b, h, H);
    ttt_tensor *v = leaf(ctx, 2, Tk, d_v, io->v, b, h, H);
    ttt_tensor *eta = io->eta ? leaf(ctx, 1, Tk, 1, io->eta, b, h, H) : NULL;
    ttt_tensor *la = io->log_alpha ? leaf(ctx, io->alpha_vec ? 2 : 1, T, gk, io->log_alpha, b,
                                          h, H)
                                   : NULL;
    /* the initial state as the forward would start it (ttt_layer_forward_batch), then leaves */
    ttt_rng base;
    ttt_rng_seed(&base, io->seed);
    ttt_rng rng = ttt_rng_fork(&base, (uint64_t)h);
    ttt_layer_state st;
    ttt_layer_state_init(ctx, L, &st, &rng);
    const int n_state = ttt_layer_state_count(L);
    int w_given = 0;
    for (int i = 0; io->state_in && i < n_state; i++)
        if (io->state_in[i]) {
            ttt_tensor *x = *state_slot(&st, i);
            memcpy(x->data, io->state_in[i] + bh * x->n, x->n * sizeof(float));
            w_given |= i < st.n_w;
        }
    for (int w = 0; w < st.n_w && w_given; w++) {
        ttt_tensor *given[TTT_MAX_OPT_STATE];
        memcpy(given, st.opt[w], sizeof given);
        ttt_optim_reinit_state(ctx, L->optim, L->optim_cfg, st.opt[w], st.n_opt, st.W[w]);
        for (int j = 0; j < st.n_opt; j++)
            if (io->state_in[st.n_w + w * st.n_opt + j]) st.opt[w][j] = given[j];
    }
    ttt_tensor *init[TTT_MAX_WEIGHTS * (1 + TTT_MAX_OPT_STATE) + 1];
    for (int i = 0; i < n_state; i++) {
        ttt_tensor **slot = state_slot(&st, i);
        /* a fresh copy per slot: state tensors may share storage with each other */
        ttt_tensor *x = ttt_tensor_copy(ctx, *slot);
        float *gb = ttt_arena_alloc(ctx->arena, x->n * sizeof(float) + 1);
        TTT_ASSERT(gb);
        memset(gb, 0, x->n * sizeof(float));
        ttt_tensor_set_param(x, gb);
        *slot = init[i] = x;
    }

    ttt_tensor *o = ttt_tensor_2d(ctx, T, d_v);
    ttt_status s = T > 0 ? ttt_layer_forward(ctx, L, o, &st, q, k, v, eta, la, err) : TTT_OK;
    if (s != TTT_OK) return s;
    ttt_tensor *dO = ttt_tensor_2d(ctx, T, d_v);
    gather(dO->data, g->d_o, b, h, T, H, d_v);
    ttt_tensor *loss = ttt_dot(ctx, o, dO);
    for (int i = 0; g->d_state_out && i < n_state; i++)
        if (g->d_state_out[i]) {
            const ttt_tensor *x = *state_slot(&st, i);
            ttt_tensor *dS = ttt_tensor_zeros_like(ctx, x);
            memcpy(dS->data, g->d_state_out[i] + bh * x->n, x->n * sizeof(float));
            loss = ttt_add(ctx, loss, ttt_dot(ctx, x, dS));
        }
    ttt_backward(ctx, loss);

    scatter(io->o, o->data, b, h, T, H, d_v);
    for (int i = 0; io->state_out && i < n_state; i++) {
        const ttt_tensor *x = *state_slot(&st, i);
        if (io->state_out[i]) memcpy(io->state_out[i] + bh * x->n, x->data, x->n * sizeof(float));
    }
    if (g->d_q) scatter(g->d_q, q->grad, b, h, T, H, d_q);
    if (g->d_k) scatter(g->d_k, k->grad, b, h, Tk, H, d_k);
    if (g->d_v) scatter(g->d_v, v->grad, b, h, Tk, H, d_v);
    if (g->d_eta && eta) scatter(g->d_eta, eta->grad, b, h, Tk, H, 1);
    if (g->d_log_alpha && la) scatter(g->d_log_alpha, la->grad, b, h, T, H, gk);
    for (int i = 0; g->d_state_in && i < n_state; i++)
        if (g->d_state_in[i])
            memcpy(g->d_state_in[i] + bh * init[i]->n, init[i]->grad,
                   init[i]->n * sizeof(float));
    return TTT_OK;
}

/* One sequence: the recorded forward, L = Σ d_o ⊙ o + Σ d_state_out ⊙ state, its backward. Its
 * tensors and tape entries live in an arena of its own, armed (ttt_arena_run): running out of
 * memory returns TTT_ERR_NOMEM to the caller of the library instead of ending its process. */
static ttt_status backward_one(const ttt_layer *L, const ttt_batch_io *io,
                               const ttt_batch_grad *g, int b, int h, ttt_error *err) {
    ttt_arena arena;
    ttt_arena_init(&arena, 1 << 20);
    ttt_tape tape;
    ttt_tape_init(&tape);
    ttt_ctx ctx = {.arena = &arena, .grad = 1, .tape = &tape};
    backward_args A = {.L = L, .io = io, .g = g, .b = b, .h = h, .ctx = &ctx};
    ttt_status s = ttt_arena_run(&arena, backward_work, &A, "the layer's recorded forward", err);
    if (s != TTT_OK) ttt_error_prefix(err, "batch %d, head %d", b, h);
    ttt_tape_free(&tape);
    ttt_arena_free(&arena);
    return s;
}

ttt_status ttt_layer_backward_run(const ttt_layer_handle *h, const ttt_batch_io *io_in,
                                  const ttt_batch_grad *g_in, ttt_error *err) {
    if (err) ttt_error_clear(err);
    ttt_batch_io io_full;
    ttt_batch_grad g_full;
    TTT_TRY(read_io(&io_full, io_in, err));
    TTT_TRY(read_grad(&g_full, g_in, err));
    const ttt_batch_io *io = io_in ? &io_full : NULL;
    const ttt_batch_grad *g = g_in ? &g_full : NULL;
    TTT_TRY(check_io(h, io, err));
    if (!g || !g->d_o) return ttt_error_set(err, TTT_ERR_ARG, "layer backward: d_o is required");
    if ((g->d_eta && !io->eta) || (g->d_log_alpha && !io->log_alpha))
        return ttt_error_set(err, TTT_ERR_ARG,
                             "layer backward: d_eta and d_log_alpha need io->eta and "
                             "io->log_alpha");
    if (io->cu_seqlens || io->n_seqs) return varlen_run(h, io, 0, g, err);
    if (io->device != TTT_DEVICE_HOST) return ttt_api_device_backward(&h->L, io, g, err);
    TTT_TRY(ttt_api_host_check(&h->L, io, g, err));
    for (int b = 0; b < io->B; b++)
        for (int hh = 0; hh < io->H; hh++)
            TTT_TRY(backward_one(&h->L, io, g, b, hh, err));
    return TTT_OK;
}

/* ---- experiments ---- */

/* sets[0..n_sets-1]: each an assignment string (ttt.h). */
static ttt_status check_sets(const char *const *sets, int n_sets, ttt_error *err) {
    if (n_sets < 0)
        return ttt_error_set(err, TTT_ERR_ARG, "experiment: n_sets = %d; expected >= 0", n_sets);
    if (n_sets > 0 && !sets)
        return ttt_error_set(err, TTT_ERR_ARG,
                             "experiment: n_sets = %d but sets is NULL; expected an array of "
                             "%d \"key=value\" strings", n_sets, n_sets);
    for (int i = 0; i < n_sets; i++)
        if (!sets[i])
            return ttt_error_set(err, TTT_ERR_ARG,
                                 "experiment: sets[%d] is NULL; expected a \"key=value\" string",
                                 i);
    return TTT_OK;
}

static ttt_status run_loaded(ttt_experiment *e, const char *out_dir, ttt_error *err) {
    ttt_status s = ttt_experiment_run(e, out_dir, 0, NULL, err);
    ttt_experiment_free(e);
    return s;
}

ttt_status ttt_experiment_run_file(const char *path, const char *const *sets, int n_sets,
                                   const char *out_dir, ttt_error *err) {
    if (err) ttt_error_clear(err);
    if (!path) return ttt_error_set(err, TTT_ERR_ARG, "experiment: path is NULL");
    TTT_TRY(check_sets(sets, n_sets, err));
    ttt_experiment *e = NULL;
    TTT_TRY(ttt_experiment_load(path, sets, n_sets, &e, err));
    return run_loaded(e, out_dir, err);
}

ttt_status ttt_experiment_run_string(const char *yaml, const char *name,
                                     const char *const *sets, int n_sets, const char *out_dir,
                                     ttt_error *err) {
    if (err) ttt_error_clear(err);
    if (!yaml) return ttt_error_set(err, TTT_ERR_ARG, "experiment: text is NULL");
    TTT_TRY(check_sets(sets, n_sets, err));
    ttt_experiment *e = NULL;
    TTT_TRY(ttt_experiment_load_string(yaml, name ? name : "experiment.yaml", sets, n_sets, &e,
                                       err));
    return run_loaded(e, out_dir, err);
}

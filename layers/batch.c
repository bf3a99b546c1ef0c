/* The batched runner (layer.h, ttt_layer_forward_batch): a layer over (B, T, H, D) arrays of the
 * caller, one (batch, head) sequence at a time, with its whole carried state (weights, optimizer
 * state, normalizer) in and out. What `ttt apply` (src/app/apply.c) and the C API run. */
#define _DEFAULT_SOURCE /* madvise(MADV_HUGEPAGE) next to the build's _POSIX_C_SOURCE */
#include "layer.h"

#include "blas.h"
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "kernels.h"
#include "rng.h"

/* ---- the carried state, as a list of tensors ---- */

int ttt_layer_state_count(const ttt_layer *L) {
    const int n_w = L->model->n_weights;
    return n_w * (1 + ttt_layer_opt_state_count(L)) + (L->normalize == TTT_NORMALIZE_RATIO);
}

/* The names of the state tensors: constants, so that any thread may hand them out. */
_Static_assert(TTT_MAX_WEIGHTS == 8 && TTT_MAX_OPT_STATE == 4, "extend the name tables below");
static const char *const names_one[1 + TTT_MAX_OPT_STATE] = {"W", "W.opt0", "W.opt1", "W.opt2",
                                                              "W.opt3"};
static const char *const names_multi[TTT_MAX_WEIGHTS][1 + TTT_MAX_OPT_STATE] = {
    {"W.0", "W.0.opt0", "W.0.opt1", "W.0.opt2", "W.0.opt3"},
    {"W.1", "W.1.opt0", "W.1.opt1", "W.1.opt2", "W.1.opt3"},
    {"W.2", "W.2.opt0", "W.2.opt1", "W.2.opt2", "W.2.opt3"},
    {"W.3", "W.3.opt0", "W.3.opt1", "W.3.opt2", "W.3.opt3"},
    {"W.4", "W.4.opt0", "W.4.opt1", "W.4.opt2", "W.4.opt3"},
    {"W.5", "W.5.opt0", "W.5.opt1", "W.5.opt2", "W.5.opt3"},
    {"W.6", "W.6.opt0", "W.6.opt1", "W.6.opt2", "W.6.opt3"},
    {"W.7", "W.7.opt0", "W.7.opt1", "W.7.opt2", "W.7.opt3"}};

int ttt_layer_state_info(const ttt_layer *L, int i, const char **name, int shape[TTT_MAX_DIMS]) {
    const int n_w = L->model->n_weights, n_opt = ttt_layer_opt_state_count(L);
    if (i < 0 || i >= ttt_layer_state_count(L)) return -1;
    if (i >= n_w * (1 + n_opt)) { /* the normalizer z of normalize: ratio */
        if (name) *name = "z";
        shape[0] = L->d_phi;
        shape[1] = 1;
        return 2;
    }
    /* weights first, then each weight's optimizer state tensors, of the shapes the optimizer
     * declares for that weight (optim.h state_shape: e.g. Adam's step count is one float) */
    const int w = i < n_w ? i : (i - n_w) / n_opt, s = i < n_w ? 0 : 1 + (i - n_w) % n_opt;
    if (name) *name = n_w == 1 ? names_one[s] : names_multi[w][s];
    const int nd = L->model->shape(w, L->d_phi, L->d_v, shape); /* rows: the feature width */
    if (L->levels > 1) shape[0] *= L->levels; /* the levels one after the other (docs/math.md §4.8) */
    if (s == 0) return nd;
    int w_shape[TTT_MAX_DIMS];
    memcpy(w_shape, shape, sizeof w_shape);
    return ttt_optim_state_shape(L->optim, L->optim_cfg, shape, s - 1, w_shape, nd);
}

/* The state slot i of st. */
static ttt_tensor *state_slot(const ttt_layer *L, ttt_layer_state *st, int i) {
    const int n_w = st->n_w, n_opt = st->n_opt;
    (void)L;
    if (i < n_w) return st->W[i];
    if (i < n_w * (1 + n_opt)) return st->opt[(i - n_w) / n_opt][(i - n_w) % n_opt];
    return st->z;
}

/* The threads that run the sequences: `threads` if positive, else OpenMP's default (the machine's
 * cores, or OMP_NUM_THREADS), never more than there are sequences; 1 without OpenMP, and 1 in a
 * process forked after a call, where OpenMP's workers cannot run (src/core/fork.c). */
int ttt_layer_batch_threads(int threads, long n_seq) {
#ifdef _OPENMP
    int ttt_fork_threads(int n); /* src/core/fork.c */
    int n = ttt_fork_threads(threads > 0 ? threads : omp_get_max_threads());
#else
    int n = 1;
    (void)threads;
#endif
    if (n > n_seq) n = (int)n_seq;
    if (n > TTT_BATCH_MAX_THREADS) n = TTT_BATCH_MAX_THREADS;
    return n < 1 ? 1 : n;
}


/* Layers whose forward (ttt_layer_forward without a tape) is one closed-form kernel with nothing
 * around it but the query scale, β = θ·η and the constant decay — the entries with a
 * forward_strided (form.h), for layers without RoPE or output normalization — run on the
 * (B, T, H, D) arrays in place, with row strides (kernels.h, ttt_form_ld), instead of gathering
 * each head into (T, D) slices and scattering the output back: those copies, bound by memory
 * bandwidth, took ~40 % of the time of the chunkwise linear attention at H = 8, d = 64,
 * T = 4096. The kernels' arithmetic does not depend on the strides, so the outputs are the same
 * bits either way (tests/test_apply.c compares the two paths on every such layer,
 * tests/test_contract_forms.c every entry).
 *
 * Setting the environment variable TTT_APPLY_GATHER to 1 makes every layer take the gathered path
 * (the one all other layers take): a switch for that test and for measuring the copies, which
 * changes no output. */

/* The registry entry that runs L in place for these inputs, or NULL for the gathered path. The
 * entry is the one ttt_layer_forward would choose for the same inputs (ttt_form_choose), so both
 * paths run the same form. */
static const ttt_form_entry *strided_entry(const ttt_layer *L, int T, int has_eta,
                                                 int has_la, int alpha_vec, int H, int d_k,
                                                 int d_v, int *chunk) {
    *chunk = L->chunk;
    const char *gather = getenv("TTT_APPLY_GATHER");
    if (gather && strcmp(gather, "1") == 0) return NULL;
    if (L->rope || L->normalize != TTT_NORMALIZE_NONE) return NULL;
    const int d = d_k > d_v ? d_k : d_v;
    if ((long long)H * d > INT_MAX) return NULL; /* strides are BLAS ints */
    const ttt_form_inputs in = {.T = T, .eta = has_eta,
                                .gate = alpha_vec ? TTT_FORM_GATE_KEY
                                        : has_la || L->decay != 1.0f ? TTT_FORM_GATE_TOKEN
                                                                     : TTT_FORM_GATE_NONE,
                                .tape = 0};
    ttt_form_plan plan;
    const ttt_form_entry *e = ttt_form_plan_with(NULL, L, &in, &plan, NULL);
    if (e) *chunk = plan.chunk; /* form: auto may run another chunk (ttt_form_plan) */
    return e && e->forward_strided ? e : NULL;
}

/* Everything the sequences need; read-only while the threads run, except the disjoint slices of
 * the outputs each sequence writes. */
typedef struct batch_args {
    const ttt_layer *L;
    const ttt_form_entry *kernel; /* the in-place form (strided_entry), or NULL */
    const ttt_layer_io *io;
    int alpha_vec;
    int n_state;
    size_t numel[TTT_BATCH_MAX_STATE]; /* elements of each state tensor, per sequence */
    int B, T, H, d_k, d_v;
    size_t arena_bytes; /* the first arena block of each thread: one sequence's temporaries */
} batch_args;


/* Large buffers that a call writes once (the output, each thread's slices) are fresh memory
 * in a fresh process, and the first touch of each 4 KiB page is a page fault: 1–2 µs each on the
 * measured machine (a VM), more than writing the page (touching 8 MiB for the first time took
 * 4–8 ms, the second time 0.2 ms). Aligned to 2 MiB and advised as transparent huge pages
 * (THP in "madvise" mode, the common default), the same 8 MiB faulted in 0.3–1.3 ms. Where
 * huge pages are unavailable the advice does nothing. Released with free(). */
#define BATCH_HUGE ((size_t)2 << 20)
void *ttt_batch_alloc(size_t bytes) {
    if (bytes < BATCH_HUGE) return malloc(bytes + 1); /* + 1: never malloc(0) */
    const size_t n = (bytes + BATCH_HUGE - 1) / BATCH_HUGE * BATCH_HUGE;
    void *p = aligned_alloc(BATCH_HUGE, n);
#ifdef MADV_HUGEPAGE
    if (p) (void)madvise(p, n, MADV_HUGEPAGE); /* advice only: failure changes nothing */
#endif
    return p;
}

/* Floats rounded up to 64 bytes, so that every slice starts where an arena allocation would. */
static size_t up16(size_t n) { return (n + 15) & ~(size_t)15; }

/* A head's rows in the file are H·D floats apart, so each one starts a new run of cache lines
 * (and at H·D ≥ 512 a new 4 KiB page), which the hardware prefetcher does not anticipate and
 * the gather then waits for. Asking for the rows this many tokens ahead cut the gather's CPU
 * time by ~20 % (mamba2, H = 8, d = 64, T = 4096: 6.9 → 5.6 ms per call; 4 and 16 rows ahead
 * did no better than 8). */
#define BATCH_PREFETCH_ROWS 8
static void prefetch_row(const float *p, /* (n) */ int n) {
#if defined(__GNUC__)
    for (int i = 0; i < n; i += 16) __builtin_prefetch(p + i, 0, 0); /* one per 64 bytes */
#else
    (void)p, (void)n;
#endif
}


/* Sequence s = b·H + h of the (B, T, H, D) layout gathered into (T, D) slices, one pass over
 * the tokens for all inputs: row t of every input of (b, h) is at ((b·T + t)·H + h)·D. NULL
 * beta / la (and their slices) are skipped; la holds gk values per token. The pass is bound by
 * memory bandwidth: gathering all heads of a (b, t) row at once (contiguous reads into H slices)
 * measured no faster (~4 ms for q, k, v at H = 8, d = 64, T = 4096 either way, including the
 * layer's read of the slices) and needs H slices per thread. */
static void batch_gather(float *qs, float *ks, float *vs, /* (T, d_k), (T, d_k), (T, d_v) */
                         float *es, float *ls,            /* (T), (T, gk) or NULL */
                         const batch_args *A, long s, int gk) {
    const int T = A->T, H = A->H, d_k = A->d_k, d_v = A->d_v;
    const float *q = A->io->q, *k = A->io->k, *v = A->io->v;
    const float *beta = es ? A->io->eta : NULL, *la = ls ? A->io->log_alpha : NULL;
    const size_t row0 = (size_t)(s / H) * T * H + (size_t)(s % H); /* (b, 0, h) */
    for (size_t t = 0; t < (size_t)T; t++) {
        const size_t r = row0 + t * H; /* (b, t, h) */
        if (t + BATCH_PREFETCH_ROWS < (size_t)T) {
            const size_t rp = r + (size_t)BATCH_PREFETCH_ROWS * H;
            prefetch_row(q + rp * d_k, d_k);
            prefetch_row(k + rp * d_k, d_k);
            prefetch_row(v + rp * d_v, d_v);
            if (la && gk > 1) prefetch_row(la + rp * gk, gk);
        }
        memcpy(qs + t * d_k, q + r * d_k, (size_t)d_k * sizeof(float));
        memcpy(ks + t * d_k, k + r * d_k, (size_t)d_k * sizeof(float));
        memcpy(vs + t * d_v, v + r * d_v, (size_t)d_v * sizeof(float));
        if (beta) es[t] = beta[r];
        if (la && gk == 1) ls[t] = la[r];
        else if (la) memcpy(ls + t * gk, la + r * gk, (size_t)gk * sizeof(float));
    }
}

/* The (T, d_v) output of sequence s into o (B, T, H, d_v). */
static void batch_scatter(float *o,        /* (B, T, H, d_v) */
                          const float *os, /* (T, d_v) */
                          long s, int T, int H, int d_v) {
    const size_t row0 = (size_t)(s / H) * T * H + (size_t)(s % H);
    for (size_t t = 0; t < (size_t)T; t++)
        memcpy(o + (row0 + t * H) * d_v, os + t * d_v, (size_t)d_v * sizeof(float));
}

/* Sequence s of A through its in-place form (strided_entry), in place in the (B, T, H, D) arrays:
 * exactly what ttt_layer_forward computes for it on gathered slices. Its prologue is reproduced
 * operation for operation: β_t = θ·η_t (θ·1 without η), the constant decay log(decay) per token
 * when no gates are given, q·scale when scale ≠ 1. Those go into the thread's buffers qs (T, d_k),
 * bs (T), ls (T); θ·η_t = η_t exactly when θ = 1, so then η is read in place, like the gates
 * and, with scale 1, the queries. S (d_k, d_v) is the state, in/out. */
static ttt_status batch_kernel_run(const batch_args *A, long s, float *S, float *qs, float *bs,
                                   const float *ls, ttt_ctx *ctx, ttt_error *err) {
    const ttt_layer *L = A->L;
    const int T = A->T, H = A->H, d_k = A->d_k, d_v = A->d_v;
    const int gk = A->alpha_vec ? d_k : 1;
    const size_t row0 = (size_t)(s / H) * T * H + (size_t)(s % H); /* (b, 0, h) */
    ttt_form_ld ld = {.o = H * d_v, .q = H * d_k, .k = H * d_k, .v = H * d_v, .beta = H,
                      .la = H * gk};
    const float *q = A->io->q + row0 * d_k;
    if (L->scale != 1.0f) { /* ttt_scale: one rounding per element */
        for (size_t t = 0; t < (size_t)T; t++)
            for (int c = 0; c < d_k; c++)
                qs[t * d_k + c] = q[t * ld.q + c] * L->scale;
        q = qs;
        ld.q = d_k;
    }
    const float *eta = A->io->eta ? A->io->eta + row0 : NULL, *beta = eta;
    if (!eta || L->lr != 1.0f) { /* the entries' β (ttt_form_beta_array) */
        for (size_t t = 0; t < (size_t)T; t++) bs[t] = L->lr * (eta ? eta[t * H] : 1.0f);
        beta = bs;
        ld.beta = 1;
    }
    const float *la = A->io->log_alpha ? A->io->log_alpha + row0 * gk : NULL;
    if (!la && L->decay != 1.0f) { /* the constant decay, filled in once per thread */
        la = ls;
        ld.la = 1;
    }
    const float *k = A->io->k + row0 * d_k, *v = A->io->v + row0 * d_v;
    float *o = A->io->o + row0 * d_v;
    const ttt_form_strided a = {.o = o, .q = q, .k = k, .v = v, .beta = beta, .log_alpha = la,
                                .alpha_vec = A->alpha_vec, .T = T, .ld = ld};
    return A->kernel->forward_strided(ctx, L, S, &a, err);
}

/* The caller's initial state of sequence bh into st: every given tensor replaces the layer's
 * own initial value. A weight given without its optimizer state gets that state rebuilt from it
 * (optim.h: init_state, e.g. large_batch's renormalization target ‖W_0‖), as the layer's
 * initialization would have; given optimizer state then overrides. */
static void batch_state_in(const batch_args *A, ttt_ctx *ctx, ttt_layer_state *st, size_t bh) {
    const float *const *in = A->io->state_in;
    if (!in) return;
    const ttt_layer *L = A->L;
    for (int i = 0; i < A->n_state; i++)
        if (in[i]) memcpy(state_slot(L, st, i)->data, in[i] + bh * A->numel[i],
                          A->numel[i] * sizeof(float));
    for (int w = 0; w < st->n_w && L->optim->init_state; w++) {
        if (!in[w]) continue;
        ttt_tensor *fresh[TTT_MAX_OPT_STATE];
        for (int s = 0; s < st->n_opt; s++) fresh[s] = ttt_tensor_zeros_like(ctx, st->opt[w][s]);
        L->optim->init_state(L->optim_cfg, fresh, st->W[w]);
        for (int s = 0; s < st->n_opt; s++)
            if (!in[st->n_w + w * st->n_opt + s])
                memcpy(st->opt[w][s]->data, fresh[s]->data, fresh[s]->n * sizeof(float));
    }
}

/* One sequence (b, h) = s on its thread's arena, run under ttt_arena_run (batch_range). */
typedef struct batch_seq {
    const batch_args *A;
    ttt_ctx *ctx;
    ttt_rng rng;
    long s;
    ttt_tensor *o, *q, *k, *v, *eta, *la; /* views of the sequence's rows; eta, la may be NULL */
    float *kqs, *kbs, *kls;               /* an in-place kernel's buffers (batch_range) */
} batch_seq;

static ttt_status batch_seq_work(void *arg, ttt_error *err) {
    batch_seq *w = arg;
    const batch_args *A = w->A;
    ttt_layer_state state;
    ttt_layer_state_init(w->ctx, A->L, &state, &w->rng);
    /* state_in[i] (B, H, shape_i…): tensor i of (b, h) is the block at (b·H + h)·|shape_i| */
    const size_t bh = (size_t)w->s;
    batch_state_in(A, w->ctx, &state, bh);
    if (A->T > 0 && A->kernel) {
        TTT_TRY(batch_kernel_run(A, w->s, state.W[0]->data, w->kqs, w->kbs, w->kls, w->ctx,
                                 err));
    } else if (A->T > 0) {
        TTT_TRY(ttt_layer_forward(w->ctx, A->L, w->o, &state, w->q, w->k, w->v, w->eta, w->la,
                                  err));
    }
    for (int i = 0; A->io->state_out && i < A->n_state; i++)
        if (A->io->state_out[i])
            memcpy(A->io->state_out[i] + bh * A->numel[i], state_slot(A->L, &state, i)->data,
                   A->numel[i] * sizeof(float));
    return TTT_OK;
}

/* One sequence's arena: the layer's estimate (layer.h) plus the state several times over (the
 * driver's block copies and gradients), 1 MiB of slack for tensor headers and alignment. */
static double arena_bytes(const ttt_layer *L, long T) {
    double gram;
    const double w = ttt_layer_weight_floats(L, &gram);
    return ttt_layer_forward_bytes(L, T) + (1 << 20) +
           ((4.0 + TTT_MAX_OPT_STATE) * w + 2.0 * ttt_layer_opt_state_floats(L)) * sizeof(float);
}

/* Run sequences [first, first + count) of the B·H (batch-major) on one thread: gather each
 * one's (T, D) slices, run the layer, which writes its output straight into the output slice
 * (ttt_layer_forward), scatter it — or, for a layer with an in-place kernel (strided_entry),
 * run that kernel on the caller's arrays and the output directly. The slices and the arena's
 * first block are allocated once per thread and reused by every sequence (the arena is reset to
 * a mark after each), so only the first sequence touches fresh pages. Each sequence's computation is the same code on one
 * thread with single-threaded BLAS, so its output does not depend on which thread ran it.
 * Returns the index of the first failing sequence (its error in err), or -1. */
static long batch_range(const batch_args *A, long first, long count, ttt_status *st_out,
                        ttt_error *err) {
    const int T = A->T, H = A->H, d_k = A->d_k, d_v = A->d_v;
    const int gk = A->alpha_vec ? d_k : 1; /* gate values per token */
    const int kernel = A->kernel != NULL;
    /* one head: (B, T, 1, D) is already (T, D) per batch element, so the layer reads the caller's
     * arrays and writes the output in place (no slices, no copies) */
    const int direct = H == 1 || kernel;
    const size_t n = direct ? 0 : (size_t)T;
    const size_t nq = up16(n * d_k), nv = up16(n * d_v), ne = A->io->eta ? up16(n) : 0,
                 nl = A->io->log_alpha ? up16(n * gk) : 0;
    /* an in-place kernel's buffers (batch_kernel_run): scaled queries, β, constant gates */
    const size_t kq = kernel && A->L->scale != 1.0f ? up16((size_t)T * d_k) : 0,
                 kb = kernel ? up16((size_t)T) : 0,
                 kl = kernel && !A->io->log_alpha ? up16((size_t)T) : 0;
    float *buf = ttt_batch_alloc(sizeof(float) * (2 * nq + 2 * nv + ne + nl + kq + kb + kl));
    float *qs = buf, *ks = qs + nq;          /* (T, d_k) each */
    float *vs = ks + nq, *os = vs + nv;      /* (T, d_v) each */
    float *es = A->io->eta ? os + nv : NULL;          /* (T) */
    float *ls = A->io->log_alpha ? os + nv + ne : NULL; /* (T, gk) */
    float *kqs = os + nv + ne + nl, *kbs = kqs + kq, *kls = kbs + kb; /* (T, d_k), (T), (T) */
    /* the layer's temporaries (state, β, the form's scratch) in one first block sized for a
     * whole sequence, created now: the marks below are taken after it, so releasing to them
     * keeps the block and its mapped pages for the next sequence */
    ttt_arena arena;
    ttt_arena_init(&arena, A->arena_bytes);
    ttt_ctx ctx = {.arena = &arena, .grad = 0};
    if (!buf || !ttt_arena_alloc(&arena, 1)) {
        free(buf);
        ttt_arena_free(&arena);
        *st_out = ttt_error_set(err, TTT_ERR_NOMEM, "out of memory for the sequences' slices");
        return first;
    }
    if (kl && A->L->decay != 1.0f) /* ttt_layer_forward's constant gates */
        for (size_t t = 0; t < (size_t)T; t++) kls[t] = logf(A->L->decay);
    ttt_rng base;
    ttt_rng_seed(&base, A->io->seed);
    long failed = -1;
    for (long s = first; s < first + count; s++) {
        const int b = (int)(s / H), h = (int)(s % H);
        float *q0 = qs, *k0 = ks, *v0 = vs, *o0 = os, *e0 = es, *l0 = ls;
        if (kernel) {
            /* the kernel reads the caller's arrays in place (batch_kernel_run) */
        } else if (direct) { /* s = b: the slices are the caller's rows */
            q0 = (float *)A->io->q + (size_t)s * T * d_k;
            k0 = (float *)A->io->k + (size_t)s * T * d_k;
            v0 = (float *)A->io->v + (size_t)s * T * d_v;
            o0 = A->io->o + (size_t)s * T * d_v;
            if (es) e0 = (float *)A->io->eta + (size_t)s * T;
            if (ls) l0 = (float *)A->io->log_alpha + (size_t)s * T * gk;
        } else {
            batch_gather(qs, ks, vs, es, ls, A, s, gk);
        }
        ttt_arena_mark mark = ttt_arena_mark_get(&arena);
        ttt_tensor q = ttt_tensor_view2(q0, T, d_k);
        ttt_tensor k = ttt_tensor_view2(k0, T, d_k);
        ttt_tensor v = ttt_tensor_view2(v0, T, d_v);
        ttt_tensor o = ttt_tensor_view2(o0, T, d_v);
        ttt_tensor eta = es ? ttt_tensor_view(e0, 1, (int[]){T}) : (ttt_tensor){0};
        ttt_tensor la = !ls           ? (ttt_tensor){0}
                        : A->alpha_vec ? ttt_tensor_view2(l0, T, d_k)
                                       : ttt_tensor_view(l0, 1, (int[]){T});
        batch_seq w = {.A = A, .ctx = &ctx, .rng = ttt_rng_fork(&base, (uint64_t)h), .s = s,
                       .o = &o, .q = &q, .k = &k, .v = &v, .eta = es ? &eta : NULL,
                       .la = ls ? &la : NULL, .kqs = kqs, .kbs = kbs, .kls = kls};
        /* armed: an arena block that cannot be had ends this sequence with TTT_ERR_NOMEM on
         * this thread, which batch_sequences carries out of the parallel region */
        ttt_status st = ttt_arena_run(&arena, batch_seq_work, &w, "the layer's temporaries", err);
        ttt_arena_release(&arena, mark);
        if (st != TTT_OK) {
            ttt_error_prefix(err, "batch %d, head %d", b, h);
            *st_out = st;
            failed = s;
            break;
        }
        if (!direct) batch_scatter(A->io->o, os, s, T, H, d_v);
    }
    free(buf);
    ttt_arena_free(&arena);
    return failed;
}

/* steps_per_token n_h > 1 (Gated DeltaProduct, docs/math.md §4.7): k, v and η are
 * (B, n_h·T, H, ·), q, o and the gates (B, T, H, ·). Each sequence is gathered into slices of
 * its own row counts and run through ttt_layer_forward (batch_seq_work), one after the other on
 * the calling thread: there is no in-place kernel for it. */
static void gather_rows(float *dst, const float *src, long s, int H, int rows, int w) {
    const size_t row0 = (size_t)(s / H) * rows * H + (size_t)(s % H); /* (b, 0, h) */
    for (size_t t = 0; t < (size_t)rows; t++)
        memcpy(dst + t * w, src + (row0 + t * H) * w, (size_t)w * sizeof(float));
}

/* Layers whose rows are wider than one token's (B, T, H, d) row: n_h key/value pairs per token
 * (steps_per_token, docs/math.md §4.7; k, v, η (B, n_h·T, H, ·)) or Λ levels' queries per token
 * (levels, docs/math.md §4.8; q (B, T, H, Λ·d_k)), gathered sequence by sequence and run by
 * ttt_layer_forward. Each call starts at position 0 (log-linear attention's Fenwick schedule
 * included). */
static ttt_status batch_substeps(const batch_args *A, ttt_error *err) {
    const int T = A->T, H = A->H, d_k = A->d_k, d_v = A->d_v;
    const int nh = A->L->substeps > 1 ? A->L->substeps : 1;
    const int d_q = (A->L->levels > 1 ? A->L->levels : 1) * d_k;
    const int Tk = nh * T;
    const size_t nq = up16((size_t)T * d_q), nk = up16((size_t)Tk * d_k),
                 nv = up16((size_t)Tk * d_v), no = up16((size_t)T * d_v),
                 ne = A->io->eta ? up16((size_t)Tk) : 0, nl = A->io->log_alpha ? up16(T) : 0;
    float *buf = malloc(sizeof(float) * (nq + nk + nv + no + ne + nl + 1));
    ttt_arena arena;
    ttt_arena_init(&arena, A->arena_bytes);
    ttt_ctx ctx = {.arena = &arena, .grad = 0};
    if (!buf || !ttt_arena_alloc(&arena, 1)) {
        free(buf);
        ttt_arena_free(&arena);
        return ttt_error_set(err, TTT_ERR_NOMEM, "out of memory for the sequences' slices");
    }
    float *qs = buf, *ks = qs + nq, *vs = ks + nk, *os = vs + nv, *es = os + no, *ls = es + ne;
    ttt_rng base;
    ttt_rng_seed(&base, A->io->seed);
    ttt_status st = TTT_OK;
    for (long s = 0; s < (long)A->B * H && st == TTT_OK; s++) {
        gather_rows(qs, A->io->q, s, H, T, d_q);
        gather_rows(ks, A->io->k, s, H, Tk, d_k);
        gather_rows(vs, A->io->v, s, H, Tk, d_v);
        if (ne) gather_rows(es, A->io->eta, s, H, Tk, 1);
        if (nl) gather_rows(ls, A->io->log_alpha, s, H, T, 1);
        ttt_arena_mark mark = ttt_arena_mark_get(&arena);
        ttt_tensor q = ttt_tensor_view2(qs, T, d_q), k = ttt_tensor_view2(ks, Tk, d_k);
        ttt_tensor v = ttt_tensor_view2(vs, Tk, d_v), o = ttt_tensor_view2(os, T, d_v);
        ttt_tensor eta = ne ? ttt_tensor_view(es, 1, (int[]){Tk}) : (ttt_tensor){0};
        ttt_tensor la = nl ? ttt_tensor_view(ls, 1, (int[]){T}) : (ttt_tensor){0};
        batch_seq w = {.A = A, .ctx = &ctx, .rng = ttt_rng_fork(&base, (uint64_t)(s % H)),
                       .s = s, .o = &o, .q = &q, .k = &k, .v = &v, .eta = ne ? &eta : NULL,
                       .la = nl ? &la : NULL};
        st = ttt_arena_run(&arena, batch_seq_work, &w, "the layer's temporaries", err);
        ttt_arena_release(&arena, mark);
        if (st != TTT_OK)
            ttt_error_prefix(err, "batch %d, head %d", (int)(s / H), (int)(s % H));
        else
            batch_scatter(A->io->o, os, s, T, H, d_v);
    }
    free(buf);
    ttt_arena_free(&arena);
    return st;
}

/* ⌊n·t / parts⌋ without forming n·t, which can exceed a long when n is near its limit:
 * n = a·parts + r gives n·t / parts = a·t + r·t / parts, and r·t < parts² stays small. */
static long split_at(long n, int t, int parts) {
    return n / parts * t + n % parts * t / parts;
}

/* docs/math.md §0 / docs/design.md "Performance stance": the (batch, head) pairs are independent, so they
 * are split over OpenMP threads in fixed contiguous ranges (the static schedule, computed here
 * rather than left to the runtime), with single-threaded BLAS inside each. Nothing is reduced
 * across threads, so the outputs are bit-identical for any thread count. The error reported is
 * that of the first failing sequence in (batch, head) order, whichever thread met it. */
static ttt_status batch_sequences(const batch_args *A, int nthreads, ttt_error *err) {
    const long n_seq = (long)A->B * A->H;
    /* BLAS threads would fight the OpenMP ones, and one thread per call keeps each sequence's
     * arithmetic the same whatever the thread count. The caller's BLAS thread count is the
     * process's, not the library's: it is restored before returning. */
    const int blas_threads = ttt_blas_get_threads();
    ttt_blas_set_threads(1);
    long *failed_at = calloc((size_t)nthreads, sizeof *failed_at);
    ttt_status *failed_st = calloc((size_t)nthreads, sizeof *failed_st);
    ttt_error *errs = calloc((size_t)nthreads, sizeof *errs);
    if (!failed_at || !failed_st || !errs) {
        ttt_blas_set_threads(blas_threads);
        free(failed_at);
        free(failed_st);
        free(errs);
        return ttt_error_set(err, TTT_ERR_NOMEM, "ttt_layer_forward_batch: out of memory");
    }
#ifdef _OPENMP
#pragma omp parallel for schedule(static, 1) num_threads(nthreads)
#endif
    for (int t = 0; t < nthreads; t++) {
        const long first = split_at(n_seq, t, nthreads), last = split_at(n_seq, t + 1, nthreads);
        failed_st[t] = TTT_OK;
        failed_at[t] = batch_range(A, first, last - first, &failed_st[t], &errs[t]);
    }
    ttt_status st = TTT_OK;
    for (int t = 0; t < nthreads; t++)
        if (failed_at[t] >= 0) { /* ranges are in order: the first failure is the earliest */
            st = failed_st[t];
            if (err) *err = errs[t];
            break;
        }
    ttt_blas_set_threads(blas_threads);
    free(failed_at);
    free(failed_st);
    free(errs);
    return st;
}

double ttt_layer_batch_work_bytes(const ttt_layer *L, long T) {
    /* the slices q, k, v, o, β and gates (batch_range; k, v and β with n_h rows per token for
     * steps_per_token n_h, batch_substeps) */
    const double nh = L->substeps > 1 ? L->substeps : 1;
    const double nq = L->levels > 1 ? L->levels : 1; /* Λ levels' queries per token (docs/math.md §4.8) */
    const double slices =
        (double)T * (nq * L->d_k + nh * (L->d_k + L->d_v + 1) + L->d_v + L->d_k) *
        sizeof(float);
    /* the state several times over (weights, optimizer state and the driver's block copies and
     * gradients) and the form's temporaries (T² floats for parallel forms); 1 MiB of slack for
     * tensor headers and alignment. The arena's first block is this size: it is reserved, and
     * only the pages a sequence touches are mapped. */
    return slices + arena_bytes(L, T);
}

/* a·b into *out unless it exceeds limit (a, b ≥ 0). */
static int mul_within(size_t a, size_t b, size_t limit, size_t *out) {
    if (b != 0 && a > limit / b) return 0;
    *out = a * b;
    return 1;
}

ttt_status ttt_layer_batch_check_sizes(const ttt_layer *L, long B, long T, long H,
                                       ttt_error *err) {
    /* the largest buffer a caller can hold: pointer differences within it must fit */
    const size_t limit = PTRDIFF_MAX;
    /* steps_per_token n_h: k and v hold n_h rows per token, the widest buffers */
    size_t d = (size_t)(L->d_k > L->d_v ? L->d_k : L->d_v) *
               (size_t)(L->substeps > 1 ? L->substeps : 1);
    /* levels Λ: q holds Λ·d_k columns (docs/math.md §4.8) */
    if (L->levels > 1 && (size_t)L->levels * (size_t)L->d_k > d)
        d = (size_t)L->levels * (size_t)L->d_k;
    size_t rows = 0, bytes = 0, seq = 0;
    int ok = B >= 0 && T >= 0 && H >= 0 && mul_within((size_t)B, (size_t)H, limit, &seq) &&
             mul_within(seq, (size_t)T, limit, &rows) &&
             mul_within(rows, d * sizeof(float), limit, &bytes);
    const char *what = "(B, T, H, d) buffers";
    for (int i = 0; ok && i < ttt_layer_state_count(L); i++) {
        int shape[TTT_MAX_DIMS];
        const int nd = ttt_layer_state_info(L, i, NULL, shape);
        size_t n = seq;
        for (int j = 0; ok && j < nd; j++) ok = mul_within(n, (size_t)shape[j], limit, &n);
        if (ok) ok = mul_within(n, sizeof(float), limit, &bytes);
        what = "(B, H, …) state buffers";
    }
    if (!ok)
        return ttt_error_set(err, TTT_ERR_SHAPE,
                             "layer call: B = %ld, T = %ld, H = %ld with d_k = %d, d_v = %d: the "
                             "%s would hold more than %zu bytes, which no buffer can",
                             B, T, H, L->d_k, L->d_v, what, limit);
    return TTT_OK;
}

ttt_status ttt_layer_forward_batch(const ttt_layer *L, const ttt_layer_io *io, int threads,
                                   ttt_error *err) {
    if (!io || io->B < 1 || io->H < 1 || io->T < 0 ||
        (io->T > 0 && (!io->o || !io->q || !io->k || !io->v)))
        return ttt_error_set(err, TTT_ERR_SHAPE,
                             "ttt_layer_forward_batch: B, H ≥ 1, T ≥ 0 and o, q, k, v are "
                             "required");
    if (io->alpha_vec && !io->log_alpha)
        return ttt_error_set(err, TTT_ERR_SHAPE,
                             "ttt_layer_forward_batch: alpha_vec set without log_alpha");
    if (io->alpha_vec != 0 && io->alpha_vec != 1)
        return ttt_error_set(err, TTT_ERR_SHAPE,
                             "ttt_layer_forward_batch: alpha_vec = %d; expected 0 or 1",
                             io->alpha_vec);
    if (threads < 0)
        return ttt_error_set(err, TTT_ERR_ARG,
                             "ttt_layer_forward_batch: threads = %d; expected >= 0 (0 = the "
                             "default)", threads);
    TTT_TRY(ttt_layer_batch_check_sizes(L, io->B, io->T, io->H, err));
    batch_args A = {.L = L, .io = io, .alpha_vec = io->alpha_vec && io->log_alpha,
                    .n_state = ttt_layer_state_count(L), .B = io->B, .T = io->T, .H = io->H,
                    .d_k = L->d_k, .d_v = L->d_v};
    TTT_ASSERT(A.n_state <= TTT_BATCH_MAX_STATE);
    for (int i = 0; i < A.n_state; i++) {
        int shape[TTT_MAX_DIMS];
        const int nd = ttt_layer_state_info(L, i, NULL, shape);
        A.numel[i] = 1;
        for (int d = 0; d < nd; d++) A.numel[i] *= (size_t)shape[d];
    }
    if (L->levels > 1 && A.alpha_vec)
        return ttt_error_set(err, TTT_ERR_SHAPE,
                             "ttt_layer_forward_batch: levels = %d (log-linear attention) takes "
                             "a gate per token (B, T, H), not one per key dimension (alpha_vec)",
                             L->levels);
    if (L->substeps > 1 || L->levels > 1) {
        if (A.alpha_vec)
            return ttt_error_set(err, TTT_ERR_SHAPE,
                                 "ttt_layer_forward_batch: steps_per_token = %d takes a gate per "
                                 "token (B, T, H), not one per key dimension (alpha_vec)",
                                 L->substeps);
        A.arena_bytes = (size_t)arena_bytes(L, io->T);
        return batch_substeps(&A, err);
    }
    int chunk;
    A.kernel = strided_entry(L, io->T, io->eta != NULL, io->log_alpha != NULL, A.alpha_vec,
                             io->H, L->d_k, L->d_v, &chunk);
    ttt_layer run = *L; /* with the chunk form: auto chose (the same plan as ttt_layer_forward) */
    run.chunk = chunk;
    A.L = &run;
    /* in place the entry updates a single weight and nothing else */
    if (A.kernel && (L->model->n_weights != 1 || ttt_layer_opt_state_count(L) != 0))
        A.kernel = NULL;
    A.arena_bytes = (size_t)arena_bytes(L, io->T);
    return batch_sequences(&A, ttt_layer_batch_threads(threads, (long)io->B * io->H), err);
}

/* ---- batched calls of one entry, on any device (docs/design.md "Devices") ---- */

ttt_form_inputs ttt_layer_batch_inputs(const ttt_layer *L, int T, int has_eta, int has_la,
                                       int alpha_vec, ttt_device_kind device) {
    return (ttt_form_inputs){.T = T, .eta = has_eta,
                             .gate = has_la && alpha_vec ? TTT_FORM_GATE_KEY
                                     : has_la || L->decay != 1.0f ? TTT_FORM_GATE_TOKEN
                                                                  : TTT_FORM_GATE_NONE,
                             .tape = 0, .device = device};
}

/* The entry with a batched call that computes L for io, or NULL with the reason. */
static const ttt_form_entry *batched_entry(const ttt_layer *L, const ttt_form_batch *io,
                                           int backward, ttt_error *err) {
    const ttt_form_inputs in = ttt_layer_batch_inputs(L, io->T, io->eta != NULL,
                                                      io->log_alpha != NULL, io->alpha_vec,
                                                      io->device.kind);
    ttt_form_plan plan;
    const ttt_form_entry *e = ttt_form_plan_with(NULL, L, &in, &plan, err);
    char name[128], dev[32];
    if (!e) {
        ttt_error_prefix(err, "layer %s on %s", ttt_layer_describe(L, name, sizeof name),
                         ttt_device_name(io->device, dev, sizeof dev));
        return NULL;
    }
    if (backward ? !e->backward_batched : !e->forward_batched) {
        ttt_error_set(err, TTT_ERR_UNSUPPORTED, "layer %s on %s: form %s/%s has no batched %s",
                      ttt_layer_describe(L, name, sizeof name),
                      ttt_device_name(io->device, dev, sizeof dev), e->family, e->form,
                      backward ? "backward" : "forward");
        return NULL;
    }
    return e;
}

ttt_status ttt_layer_forward_batched(const ttt_layer *L, const ttt_form_batch *io,
                                     const ttt_form_entry **used, ttt_error *err) {
    const ttt_form_entry *e = batched_entry(L, io, 0, err);
    if (used) *used = e;
    if (!e) return err ? err->status : TTT_ERR_UNSUPPORTED;
    return e->forward_batched(L, io, err);
}

ttt_status ttt_layer_backward_batched(const ttt_layer *L, const ttt_form_batch *io,
                                      const ttt_form_batch_grad *g, ttt_error *err) {
    const ttt_form_entry *e = batched_entry(L, io, 1, err);
    if (!e) return err ? err->status : TTT_ERR_UNSUPPORTED;
    return e->backward_batched(L, io, g, err);
}

size_t ttt_layer_kept_bytes_batched(const ttt_layer *L, const ttt_form_batch *io) {
    const ttt_form_entry *e = batched_entry(L, io, 1, NULL);
    return e && e->kept_bytes_batched ? e->kept_bytes_batched(L, io) : 0;
}

/* ---- packed variable-length batches (docs/api.md "Packed sequences") ---- */

ttt_status ttt_layer_check_cu_seqlens(const int64_t *cu, int n_seqs, int B, int T,
                                      const char *what, ttt_error *err) {
    if (n_seqs < 1)
        return ttt_error_set(err, TTT_ERR_ARG, "%s with n_seqs = %d; expected >= 1 (it holds "
                             "n_seqs + 1 offsets)", what, n_seqs);
    if (B != 1)
        return ttt_error_set(err, TTT_ERR_SHAPE, "%s with B = %d; packed sequences lie back to "
                             "back in one row, expected B = 1", what, B);
    if (cu[0] != 0)
        return ttt_error_set(err, TTT_ERR_ARG, "%s[0] = %lld; expected 0", what,
                             (long long)cu[0]);
    for (int n = 1; n <= n_seqs; n++) {
        if (cu[n] < cu[n - 1])
            return ttt_error_set(err, TTT_ERR_ARG, "%s[%d] = %lld < %s[%d] = %lld; expected "
                                 "offsets that never decrease", what, n, (long long)cu[n], what,
                                 n - 1, (long long)cu[n - 1]);
        if (cu[n] > T)
            return ttt_error_set(err, TTT_ERR_ARG, "%s[%d] = %lld is past T = %d", what, n,
                                 (long long)cu[n], T);
    }
    if (cu[n_seqs] != T)
        return ttt_error_set(err, TTT_ERR_ARG, "%s[%d] = %lld (the last offset); expected T = %d",
                             what, n_seqs, (long long)cu[n_seqs], T);
    return TTT_OK;
}

ttt_status ttt_layer_forward_packed(const ttt_layer *L, const ttt_layer_io *io,
                                    const int64_t *cu, int n_seqs, int threads,
                                    ttt_error *err) {
    TTT_TRY(ttt_layer_check_cu_seqlens(cu, n_seqs, io->B, io->T, "cu_seqlens", err));
    const int n_state = ttt_layer_state_count(L);
    TTT_ASSERT(n_state <= TTT_BATCH_MAX_STATE);
    size_t block[TTT_BATCH_MAX_STATE]; /* floats of one sequence's H heads of state tensor i */
    for (int i = 0; i < n_state; i++) {
        int shape[TTT_MAX_DIMS];
        const int nd = ttt_layer_state_info(L, i, NULL, shape);
        block[i] = (size_t)io->H;
        for (int d = 0; d < nd; d++) block[i] *= (size_t)shape[d];
    }
    const size_t H = (size_t)io->H, gk = io->alpha_vec ? (size_t)L->d_k : 1;
    for (int n = 0; n < n_seqs; n++) {
        const size_t r = (size_t)cu[n] * H; /* the sequence's first (token, head) row */
        const float *sin[TTT_BATCH_MAX_STATE];
        float *sout[TTT_BATCH_MAX_STATE];
        for (int i = 0; i < n_state; i++) {
            sin[i] = io->state_in && io->state_in[i] ? io->state_in[i] + n * block[i] : NULL;
            sout[i] = io->state_out && io->state_out[i] ? io->state_out[i] + n * block[i] : NULL;
        }
        ttt_layer_io seg = *io;
        seg.T = (int)(cu[n + 1] - cu[n]);
        seg.o = io->o + r * L->d_v;
        seg.q = io->q + r * L->d_k * (size_t)(L->levels > 1 ? L->levels : 1); /* Λ·d_k */
        /* steps_per_token n_h: k, v and η have n_h rows per token */
        const size_t rn = r * (size_t)(L->substeps > 1 ? L->substeps : 1);
        seg.k = io->k + rn * L->d_k;
        seg.v = io->v + rn * L->d_v;
        if (io->eta) seg.eta = io->eta + rn;
        if (io->log_alpha) seg.log_alpha = io->log_alpha + r * gk;
        seg.state_in = io->state_in ? sin : NULL;
        seg.state_out = io->state_out ? sout : NULL;
        ttt_status s = ttt_layer_forward_batch(L, &seg, threads, err);
        if (s != TTT_OK) {
            ttt_error_prefix(err, "sequence %d (tokens %lld..%lld of cu_seqlens)", n,
                             (long long)cu[n], (long long)cu[n + 1]);
            return s;
        }
    }
    return TTT_OK;
}

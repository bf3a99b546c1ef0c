/* Tensors in, tensors out (apply.h): the (B, T, H, D) files of PyTorch libraries through any
 * layer, one (batch, head) sequence at a time. */
#define _DEFAULT_SOURCE /* madvise(MADV_HUGEPAGE) next to the build's _POSIX_C_SOURCE */
#include "apply.h"

#include <cblas.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "finite.h"
#include "kernels.h"
#include "progress.h"
#include "rng.h"
#include "tensor.h"
#include "layer.h"

#ifndef TTT_VERSION
#define TTT_VERSION "unknown"
#endif

_Static_assert(TTT_APPLY_MAX_OUT >= 1 + TTT_MAX_WEIGHTS, "room for o and every weight");

/* Initial weights for models that draw them at random: one fixed stream per head (the same for
 * every batch element, as a model's per-head initial weights would be). */
#define APPLY_SEED 0

static char *dupstr(const char *s) {
    size_t n = strlen(s) + 1;
    char *p = malloc(n);
    if (p) memcpy(p, s, n);
    return p;
}

void ttt_apply_out_free(ttt_apply_out *out) {
    if (!out) return;
    for (int i = 0; i < out->n; i++) {
        free(out->t[i].name);
        free(out->t[i].data);
    }
    for (int i = 0; i < 2 * out->n_meta; i++) free(out->meta[i]);
    memset(out, 0, sizeof *out);
}

/* The state tensor names for weight w of a model with n_w weights. */
static void state_name(char *buf, size_t len, const char *stem, int w, int n_w) {
    if (n_w == 1) snprintf(buf, len, "%s", stem);
    else snprintf(buf, len, "%s.%d", stem, w);
}

static int same_dims(const ttt_st_tensor *t, int ndim, const int64_t *want) {
    if (t->ndim != ndim) return 0;
    for (int i = 0; i < ndim; i++)
        if (t->shape[i] != want[i]) return 0;
    return 1;
}

static const char *shp(int ndim, const int64_t *s, char *buf, size_t len) {
    ttt_st_tensor t = {.ndim = ndim};
    memcpy(t.shape, s, (size_t)ndim * sizeof *s);
    return ttt_st_shape_str(&t, buf, len);
}

/* A tensor name from a file, for a message: at most 40 bytes, control characters as '?'. */
static const char *clean(const char *s, char *buf) {
    size_t i = 0;
    for (; s[i] && i < 40; i++) buf[i] = (unsigned char)s[i] < 0x20 ? '?' : s[i];
    buf[i] = '\0';
    return buf;
}

/* "'q', 'k', 'v'" — the names the file holds, for "missing tensor" messages. */
static void list_names(const ttt_st_file *in, char *buf, size_t len) {
    size_t w = 0;
    char c[48];
    buf[0] = '\0';
    for (int i = 0; i < in->n && w + 8 < len; i++) {
        int m = snprintf(buf + w, len - w, "%s'%s'", i ? ", " : "", clean(in->t[i].name, c));
        w += m > 0 ? (size_t)m : 0;
    }
    if (in->n == 0) snprintf(buf, len, "no tensors");
}

/* The threads that run the sequences: `threads` if positive, else OpenMP's default (the machine's
 * cores, or OMP_NUM_THREADS), never more than there are sequences; 1 without OpenMP. */
static int apply_thread_count(int threads, int n_seq) {
#ifdef _OPENMP
    int n = threads > 0 ? threads : omp_get_max_threads();
#else
    int n = 1;
    (void)threads;
#endif
    if (n > n_seq) n = n_seq;
    if (n > TTT_APPLY_MAX_THREADS) n = TTT_APPLY_MAX_THREADS;
    return n < 1 ? 1 : n;
}

/* Layers whose forward (ttt_layer_forward without a tape) is one closed-form kernel of kernels.h
 * with nothing around it but the query scale, β = θ·η and the constant decay: linear attention and
 * the delta rule in their recurrent, parallel and chunkwise forms, without RoPE or output
 * normalization. apply runs these kernels on the (B, T, H, D) arrays in place, with row strides
 * (kernels.h, ttt_form_ld), instead of gathering each head into (T, D) slices and scattering the
 * output back: those copies, bound by memory bandwidth, took ~40 % of the time of the chunkwise
 * linear attention at H = 8, d = 64, T = 4096. The kernels' arithmetic does not depend on the
 * strides, so the outputs are the same bits either way (tests/test_apply.c compares the two paths
 * on every such layer).
 *
 * Setting the environment variable TTT_APPLY_GATHER to 1 makes every layer take the gathered path
 * (the one all other layers take): a switch for that test and for measuring the copies, which
 * changes no output. */
/* The registry entry that runs L in place (see above: its forward_strided) for these inputs, or
 * NULL for the gathered path. The entry is the one ttt_layer_forward would choose for the same
 * inputs (ttt_form_choose), so both paths run the same form. */
static const ttt_form_entry *apply_strided_entry(const ttt_layer *L, int T, int has_eta,
                                                 int has_la, int alpha_vec, int H, int d_k,
                                                 int d_v) {
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
    const ttt_form_entry *e = ttt_form_choose(L, &in, NULL);
    return e && e->forward_strided ? e : NULL;
}

/* Everything one (batch, head) sequence needs; read-only while the threads run, except the
 * disjoint slices of the outputs each sequence writes. */
typedef struct apply_seq_args {
    const ttt_layer *L;
    const ttt_form_entry *kernel; /* the in-place form (apply_strided_entry), or NULL */
    const ttt_st_tensor *q, *k, *v, *beta, *la; /* beta, la may be NULL */
    int alpha_vec;
    const ttt_st_tensor *const *init; /* (n_w), entries may be NULL */
    const size_t *wnumel;             /* (n_w) */
    int n_w, B, T, H, d_k, d_v;
    size_t arena_bytes; /* the first arena block of each thread: one sequence's temporaries */
    ttt_apply_out *out;
    const char *file;
} apply_seq_args;

/* Large buffers that a call writes once (the output, each thread's slices) are fresh memory
 * in a fresh process, and the first touch of each 4 KiB page is a page fault: 1–2 µs each on the
 * measured machine (a VM), more than writing the page (touching 8 MiB for the first time took
 * 4–8 ms, the second time 0.2 ms). Aligned to 2 MiB and advised as transparent huge pages
 * (THP in "madvise" mode, the common default), the same 8 MiB faulted in 0.3–1.3 ms. Where
 * huge pages are unavailable the advice does nothing. Released with free(). */
#define APPLY_HUGE ((size_t)2 << 20)
static void *apply_alloc(size_t bytes) {
    if (bytes < APPLY_HUGE) return malloc(bytes + 1); /* + 1: never malloc(0) */
    const size_t n = (bytes + APPLY_HUGE - 1) / APPLY_HUGE * APPLY_HUGE;
    void *p = aligned_alloc(APPLY_HUGE, n);
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
#define APPLY_PREFETCH_ROWS 8
static void prefetch_row(const float *p, /* (n) */ int n) {
#if defined(__GNUC__)
    for (int i = 0; i < n; i += 16) __builtin_prefetch(p + i, 0, 0); /* one per 64 bytes */
#else
    (void)p, (void)n;
#endif
}

/* Sequence s = b·H + h of the (B, T, H, D) file layout gathered into (T, D) slices, one pass over
 * the tokens for all inputs: row t of every input of (b, h) is at ((b·T + t)·H + h)·D. NULL
 * beta / la (and their slices) are skipped; la holds gk values per token. The pass is bound by
 * memory bandwidth: gathering all heads of a (b, t) row at once (contiguous reads into H slices)
 * measured no faster (~4 ms for q, k, v at H = 8, d = 64, T = 4096 either way, including the
 * layer's read of the slices) and needs H slices per thread. */
static void apply_gather(float *qs, float *ks, float *vs, /* (T, d_k), (T, d_k), (T, d_v) */
                         float *es, float *ls,            /* (T), (T, gk) or NULL */
                         const apply_seq_args *A, long s, int gk) {
    const int T = A->T, H = A->H, d_k = A->d_k, d_v = A->d_v;
    const float *q = A->q->data, *k = A->k->data, *v = A->v->data;
    const float *beta = es ? A->beta->data : NULL, *la = ls ? A->la->data : NULL;
    const size_t row0 = (size_t)(s / H) * T * H + (size_t)(s % H); /* (b, 0, h) */
    for (size_t t = 0; t < (size_t)T; t++) {
        const size_t r = row0 + t * H; /* (b, t, h) */
        if (t + APPLY_PREFETCH_ROWS < (size_t)T) {
            const size_t rp = r + (size_t)APPLY_PREFETCH_ROWS * H;
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
static void apply_scatter(float *o,        /* (B, T, H, d_v) */
                          const float *os, /* (T, d_v) */
                          long s, int T, int H, int d_v) {
    const size_t row0 = (size_t)(s / H) * T * H + (size_t)(s % H);
    for (size_t t = 0; t < (size_t)T; t++)
        memcpy(o + (row0 + t * H) * d_v, os + t * d_v, (size_t)d_v * sizeof(float));
}

/* Sequence s of A through its in-place form (apply_strided_entry), in place in the (B, T, H, D) arrays:
 * exactly what ttt_layer_forward computes for it on gathered slices. Its prologue is reproduced
 * operation for operation: β_t = θ·η_t (θ·1 without η), the constant decay log(decay) per token
 * when no gates are given, q·scale when scale ≠ 1. Those go into the thread's buffers qs (T, d_k),
 * bs (T), ls (T); θ·η_t = η_t exactly when θ = 1, so then η is read in place, like the gates
 * and, with scale 1, the queries. S (d_k, d_v) is the state, in/out. */
static void apply_kernel_run(const apply_seq_args *A, long s, float *S, float *qs, float *bs,
                             const float *ls, ttt_ctx *ctx) {
    const ttt_layer *L = A->L;
    const int T = A->T, H = A->H, d_k = A->d_k, d_v = A->d_v;
    const int gk = A->alpha_vec ? d_k : 1;
    const size_t row0 = (size_t)(s / H) * T * H + (size_t)(s % H); /* (b, 0, h) */
    ttt_form_ld ld = {.o = H * d_v, .q = H * d_k, .k = H * d_k, .v = H * d_v, .beta = H,
                      .la = H * gk};
    const float *q = A->q->data + row0 * d_k;
    if (L->scale != 1.0f) { /* ttt_scale: one rounding per element */
        for (size_t t = 0; t < (size_t)T; t++)
            for (int c = 0; c < d_k; c++)
                qs[t * d_k + c] = q[t * ld.q + c] * L->scale;
        q = qs;
        ld.q = d_k;
    }
    const float *eta = A->beta ? A->beta->data + row0 : NULL, *beta = eta;
    if (!eta || L->lr != 1.0f) { /* the entries' β (ttt_form_beta_array) */
        for (size_t t = 0; t < (size_t)T; t++) bs[t] = L->lr * (eta ? eta[t * H] : 1.0f);
        beta = bs;
        ld.beta = 1;
    }
    const float *la = A->la ? A->la->data + row0 * gk : NULL;
    if (!la && L->decay != 1.0f) { /* the constant decay, filled in once per thread */
        la = ls;
        ld.la = 1;
    }
    const float *k = A->k->data + row0 * d_k, *v = A->v->data + row0 * d_v;
    float *o = A->out->t[0].data + row0 * d_v;
    const ttt_form_strided a = {.o = o, .q = q, .k = k, .v = v, .beta = beta, .log_alpha = la,
                                .alpha_vec = A->alpha_vec, .T = T, .ld = ld};
    A->kernel->forward_strided(ctx, L, S, &a);
}

/* Run sequences [first, first + count) of the B·H (batch-major) on one thread: gather each
 * one's (T, D) slices, run the layer, which writes its output straight into the output slice
 * (ttt_layer_forward), scatter it — or, for a layer with an in-place kernel (apply_strided_entry),
 * run that kernel on the file's arrays and the output directly. The slices and the arena's first block are allocated once
 * per thread and reused by every sequence (the arena is reset to a mark after each), so only
 * the first sequence touches fresh pages. Each sequence's computation is the same code on one
 * thread with single-threaded BLAS, so its output does not depend on which thread ran it.
 * Returns the index of the first failing sequence (its error in err), or -1. */
static long apply_range(const apply_seq_args *A, long first, long count, ttt_status *st_out,
                        ttt_error *err) {
    const int T = A->T, H = A->H, d_k = A->d_k, d_v = A->d_v;
    const int gk = A->alpha_vec ? d_k : 1; /* gate values per token */
    const int kernel = A->kernel != NULL;
    /* one head: (B, T, 1, D) is already (T, D) per batch element, so the layer reads the file's
     * arrays and writes the output in place (no slices, no copies) */
    const int direct = H == 1 || kernel;
    const size_t n = direct ? 0 : (size_t)T;
    const size_t nq = up16(n * d_k), nv = up16(n * d_v), ne = A->beta ? up16(n) : 0,
                 nl = A->la ? up16(n * gk) : 0;
    /* an in-place kernel's buffers (apply_kernel_run): scaled queries, β, constant gates */
    const size_t kq = kernel && A->L->scale != 1.0f ? up16((size_t)T * d_k) : 0,
                 kb = kernel ? up16((size_t)T) : 0, kl = kernel && !A->la ? up16((size_t)T) : 0;
    float *buf = apply_alloc(sizeof(float) * (2 * nq + 2 * nv + ne + nl + kq + kb + kl));
    float *qs = buf, *ks = qs + nq;          /* (T, d_k) each */
    float *vs = ks + nq, *os = vs + nv;      /* (T, d_v) each */
    float *es = A->beta ? os + nv : NULL;    /* (T) */
    float *ls = A->la ? os + nv + ne : NULL; /* (T, gk) */
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
        *st_out = ttt_error_set(err, TTT_ERR_NOMEM, "%s: out of memory for the sequences' slices",
                                A->file);
        return first;
    }
    if (kl && A->L->decay != 1.0f) /* ttt_layer_forward's constant gates */
        for (size_t t = 0; t < (size_t)T; t++) kls[t] = logf(A->L->decay);
    ttt_rng base;
    ttt_rng_seed(&base, APPLY_SEED);
    long failed = -1;
    for (long s = first; s < first + count; s++) {
        const int b = (int)(s / H), h = (int)(s % H);
        float *q0 = qs, *k0 = ks, *v0 = vs, *o0 = os, *e0 = es, *l0 = ls;
        if (kernel) {
            /* the kernel reads the file's arrays in place (apply_kernel_run) */
        } else if (direct) { /* s = b: the slices are the file's rows */
            q0 = A->q->data + (size_t)s * T * d_k;
            k0 = A->k->data + (size_t)s * T * d_k;
            v0 = A->v->data + (size_t)s * T * d_v;
            o0 = A->out->t[0].data + (size_t)s * T * d_v;
            if (es) e0 = A->beta->data + (size_t)s * T;
            if (ls) l0 = A->la->data + (size_t)s * T * gk;
        } else {
            apply_gather(qs, ks, vs, es, ls, A, s, gk);
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
        ttt_rng rng = ttt_rng_fork(&base, (uint64_t)h);
        ttt_layer_state state;
        ttt_layer_state_init(&ctx, A->L, &state, &rng);
        /* initial_state (B, H, *W): weight w of (b, h) is the block at (b·H + h)·|W| */
        const size_t bh = (size_t)s;
        for (int w = 0; w < A->n_w; w++)
            if (A->init[w])
                memcpy(state.W[w]->data, A->init[w]->data + bh * A->wnumel[w],
                       A->wnumel[w] * sizeof(float));
        if (T > 0 && kernel) {
            apply_kernel_run(A, s, state.W[0]->data, kqs, kbs, kls, &ctx);
        } else if (T > 0) {
            ttt_status st = ttt_layer_forward(&ctx, A->L, &o, &state, &q, &k, &v,
                                              es ? &eta : NULL, ls ? &la : NULL, err);
            if (st != TTT_OK) {
                ttt_error_prefix(err, "%s: batch %d, head %d", A->file, b, h);
                *st_out = st;
                failed = s;
                break;
            }
        }
        for (int w = 0; w < A->n_w; w++)
            memcpy(A->out->t[1 + w].data + bh * A->wnumel[w], state.W[w]->data,
                   A->wnumel[w] * sizeof(float));
        ttt_arena_release(&arena, mark);
        if (!direct) apply_scatter(A->out->t[0].data, os, s, T, H, d_v);
    }
    free(buf);
    ttt_arena_free(&arena);
    return failed;
}

/* MATH.md §0 / DESIGN.md "Performance stance": the (batch, head) pairs are independent, so they
 * are split over OpenMP threads in fixed contiguous ranges (the static schedule, computed here
 * rather than left to the runtime), with single-threaded BLAS inside each. Nothing is reduced
 * across threads, so the outputs are bit-identical for any thread count. The error reported is
 * that of the first failing sequence in (batch, head) order, whichever thread met it. */
static ttt_status apply_sequences(const apply_seq_args *A, int nthreads, ttt_error *err) {
    const long n_seq = (long)A->B * A->H;
    /* BLAS threads would fight the OpenMP ones, and one thread per call keeps each sequence's
     * arithmetic the same whatever the thread count */
    openblas_set_num_threads(1);
    long *failed_at = calloc((size_t)nthreads, sizeof *failed_at);
    ttt_status *failed_st = calloc((size_t)nthreads, sizeof *failed_st);
    ttt_error *errs = calloc((size_t)nthreads, sizeof *errs);
    if (!failed_at || !failed_st || !errs) {
        free(failed_at);
        free(failed_st);
        free(errs);
        return ttt_error_set(err, TTT_ERR_NOMEM, "ttt apply: out of memory");
    }
#ifdef _OPENMP
#pragma omp parallel for schedule(static, 1) num_threads(nthreads)
#endif
    for (int t = 0; t < nthreads; t++) {
        const long first = n_seq * t / nthreads, last = n_seq * (t + 1) / nthreads;
        failed_st[t] = TTT_OK;
        failed_at[t] = apply_range(A, first, last - first, &failed_st[t], &errs[t]);
    }
    ttt_status st = TTT_OK;
    for (int t = 0; t < nthreads; t++)
        if (failed_at[t] >= 0) { /* ranges are in order: the first failure is the earliest */
            st = failed_st[t];
            if (err) *err = errs[t];
            break;
        }
    free(failed_at);
    free(failed_st);
    free(errs);
    return st;
}

ttt_status ttt_apply(ttt_cfg_node *layer_map, const ttt_st_file *in, ttt_apply_out *out,
                     ttt_error *err) {
    return ttt_apply_threads(layer_map, in, out, 0, err);
}

ttt_status ttt_apply_threads(ttt_cfg_node *layer_map, const ttt_st_file *in, ttt_apply_out *out,
                             int threads, ttt_error *err) {
    memset(out, 0, sizeof *out);
    const char *file = in->path ? in->path : "<input>";
    char s1[320], s2[320], s3[320], s4[320];
    if (!layer_map)
        return ttt_error_set(err, TTT_ERR_CONFIG, "ttt apply: no `layer:` mapping was given");

    /* ---- the inputs' shapes ---- */
    const char *req[3] = {"q", "k", "v"};
    const ttt_st_tensor *in_t[3];
    for (int i = 0; i < 3; i++) {
        in_t[i] = ttt_st_find(in, req[i]);
        if (!in_t[i]) {
            char names[512];
            list_names(in, names, sizeof names);
            return ttt_error_set(err, TTT_ERR_SHAPE,
                                 "%s: missing tensor '%s' (inputs: q, k (B, T, H, d_k), v (B, T, "
                                 "H, d_v), optional beta, log_alpha, initial_state); the file "
                                 "holds %s",
                                 file, req[i], names);
        }
    }
    const ttt_st_tensor *q = in_t[0], *k = in_t[1], *v = in_t[2];
    if (q->ndim != 4)
        return ttt_error_set(err, TTT_ERR_SHAPE,
                             "%s: tensor 'q' has shape %s; expected 4 dimensions (B, T, H, d_k)",
                             file, ttt_st_shape_str(q, s1, sizeof s1));
    if (!same_dims(k, 4, q->shape))
        return ttt_error_set(err, TTT_ERR_SHAPE,
                             "%s: tensors 'q' %s and 'k' %s must have the same shape (B, T, H, "
                             "d_k)",
                             file, ttt_st_shape_str(q, s1, sizeof s1),
                             ttt_st_shape_str(k, s2, sizeof s2));
    if (v->ndim != 4 || v->shape[0] != q->shape[0] || v->shape[1] != q->shape[1] || v->shape[2] != q->shape[2])
        return ttt_error_set(err, TTT_ERR_SHAPE,
                             "%s: tensor 'v' %s does not fit 'q' %s: expected (B, T, H, d_v) = "
                             "(%lld, %lld, %lld, d_v)",
                             file, ttt_st_shape_str(v, s1, sizeof s1),
                             ttt_st_shape_str(q, s2, sizeof s2), (long long)q->shape[0],
                             (long long)q->shape[1], (long long)q->shape[2]);
    const int64_t B64 = q->shape[0], T64 = q->shape[1], H64 = q->shape[2], dk64 = q->shape[3],
                  dv64 = v->shape[3];
    if (B64 < 1 || H64 < 1 || dk64 < 1 || dv64 < 1 || B64 > INT_MAX || T64 > INT_MAX ||
        H64 > INT_MAX || dk64 > INT_MAX || dv64 > INT_MAX)
        return ttt_error_set(err, TTT_ERR_SHAPE,
                             "%s: q %s, v %s: B, H, d_k and d_v must be between 1 and %d, T "
                             "between 0 and %d",
                             file, ttt_st_shape_str(q, s1, sizeof s1),
                             ttt_st_shape_str(v, s2, sizeof s2), INT_MAX, INT_MAX);
    const int B = (int)B64, T = (int)T64, H = (int)H64, d_k = (int)dk64, d_v = (int)dv64;

    const ttt_st_tensor *beta = ttt_st_find(in, "beta");
    if (beta && !same_dims(beta, 3, q->shape))
        return ttt_error_set(err, TTT_ERR_SHAPE,
                             "%s: tensor 'beta' %s does not fit 'q' %s: expected (B, T, H) = %s",
                             file, ttt_st_shape_str(beta, s1, sizeof s1),
                             ttt_st_shape_str(q, s2, sizeof s2), shp(3, q->shape, s3, sizeof s3));
    const ttt_st_tensor *la = ttt_st_find(in, "log_alpha");
    const int alpha_vec = la && la->ndim == 4;
    if (la && !same_dims(la, 3, q->shape) && !same_dims(la, 4, q->shape))
        return ttt_error_set(err, TTT_ERR_SHAPE,
                             "%s: tensor 'log_alpha' %s does not fit 'q' %s: expected (B, T, H) "
                             "= %s for a scalar gate or (B, T, H, d_k) = %s for a vector gate",
                             file, ttt_st_shape_str(la, s1, sizeof s1),
                             ttt_st_shape_str(q, s2, sizeof s2), shp(3, q->shape, s3, sizeof s3),
                             ttt_st_shape_str(q, s4, sizeof s4));

    /* ---- the layer (needs d_k, d_v) ---- */
    ttt_layer L;
    TTT_TRY(ttt_layer_parse(layer_map, d_k, d_v, &L, err));
    const int n_w = L.model->n_weights;
    TTT_ASSERT(n_w >= 1 && n_w <= TTT_MAX_WEIGHTS);
    int wshape[TTT_MAX_WEIGHTS][TTT_MAX_DIMS], wnd[TTT_MAX_WEIGHTS];
    size_t wnumel[TTT_MAX_WEIGHTS];
    const ttt_st_tensor *init[TTT_MAX_WEIGHTS];
    int64_t want[TTT_MAX_WEIGHTS][2 + TTT_MAX_DIMS];
    double out_bytes = (double)B * T * H * d_v * sizeof(float);
    for (int w = 0; w < n_w; w++) {
        char nm[32];
        wnd[w] = L.model->shape(w, d_k, d_v, wshape[w]);
        wnumel[w] = 1;
        want[w][0] = B;
        want[w][1] = H;
        for (int d = 0; d < wnd[w]; d++) {
            want[w][2 + d] = wshape[w][d];
            wnumel[w] *= (size_t)wshape[w][d];
        }
        out_bytes += (double)B * H * wnumel[w] * sizeof(float);
        state_name(nm, sizeof nm, "initial_state", w, n_w);
        init[w] = ttt_st_find(in, nm);
        if (init[w] && !same_dims(init[w], 2 + wnd[w], want[w]))
            return ttt_error_set(err, TTT_ERR_SHAPE,
                                 "%s: tensor '%s' %s does not fit: expected (B, H, *W) = %s for "
                                 "weight %d of model %s with d_k = %d, d_v = %d",
                                 file, nm, ttt_st_shape_str(init[w], s1, sizeof s1),
                                 shp(2 + wnd[w], want[w], s2, sizeof s2), w, L.model->name, d_k,
                                 d_v);
    }
    /* Every other name is a mistake worth reporting (a misspelt optional input would otherwise
     * be ignored without a word). */
    for (int i = 0; i < in->n; i++) {
        const char *nm = in->t[i].name;
        int ok = !strcmp(nm, "q") || !strcmp(nm, "k") || !strcmp(nm, "v") ||
                 !strcmp(nm, "beta") || !strcmp(nm, "log_alpha");
        for (int w = 0; w < n_w && !ok; w++) {
            char sn[32];
            state_name(sn, sizeof sn, "initial_state", w, n_w);
            ok = !strcmp(nm, sn);
        }
        if (!ok) {
            char sn[32], c[48];
            state_name(sn, sizeof sn, "initial_state", 0, n_w);
            return ttt_error_set(err, TTT_ERR_SHAPE,
                                 "%s: unknown input tensor '%s' (expected q, k, v, beta, "
                                 "log_alpha, %s%s; gates go in log_alpha, log space)",
                                 file, clean(nm, c), sn, n_w > 1 ? ", ..." : "");
        }
    }
    /* Values last: NaN or Inf in any input is reported with the tensor and index (finite.h). */
    TTT_TRY(ttt_st_check_finite(in, err));

    /* ---- memory: outputs plus, per thread, one sequence's slices and temporaries ---- */
    /* the slices q, k, v, o, β and gates (apply_range) */
    const double slices = (double)T * (2 * d_k + 2 * d_v + 1 + (alpha_vec ? d_k : 1)) *
                          sizeof(float);
    /* the state several times over (weights, optimizer state and the driver's block copies and
     * gradients) and the form's temporaries (T² floats for parallel forms); 1 MiB of slack for
     * tensor headers and alignment. The arena's first block is this size: it is reserved, and
     * only the pages a sequence touches are mapped. */
    double work = ttt_layer_forward_bytes(&L, T) + (1 << 20);
    for (int w = 0; w < n_w; w++) work += (4.0 + TTT_MAX_OPT_STATE) * wnumel[w] * sizeof(float);
    char what[64];
    snprintf(what, sizeof what, "ttt apply on %s", file);
    TTT_TRY(ttt_size_check(out_bytes + (slices + work) * apply_thread_count(threads, B * H), what,
                           err));

    /* ---- every (batch, head) sequence, in parallel over the pairs ---- */
    /* `seconds` is everything the layer's outputs cost from here: allocating them (their pages
     * are faulted in by the first writes), the threads' slices and arenas, the layout copies and
     * the layer itself. Reading and validating the inputs before, and the overflow check and
     * file writing after, are not part of it. */
    const double t_start = ttt_now();
    out->t[0].name = dupstr("o");
    out->t[0].ndim = 4;
    out->t[0].shape[0] = B;
    out->t[0].shape[1] = T;
    out->t[0].shape[2] = H;
    out->t[0].shape[3] = d_v;
    out->t[0].data = apply_alloc((size_t)B * T * H * d_v * sizeof(float));
    out->n = 1;
    for (int w = 0; w < n_w; w++) {
        char nm[32];
        state_name(nm, sizeof nm, "final_state", w, n_w);
        ttt_st_tensor *t = &out->t[out->n++];
        t->name = dupstr(nm);
        t->ndim = 2 + wnd[w];
        memcpy(t->shape, want[w], (size_t)t->ndim * sizeof *t->shape);
        t->data = apply_alloc((size_t)B * H * wnumel[w] * sizeof(float));
    }
    for (int i = 0; i < out->n; i++)
        if (!out->t[i].name || !out->t[i].data) {
            ttt_apply_out_free(out);
            return ttt_error_set(err, TTT_ERR_NOMEM, "ttt apply: out of memory for the outputs");
        }
    const int nthreads = apply_thread_count(threads, B * H);
    apply_seq_args A = {.L = &L,
                        .kernel = apply_strided_entry(&L, T, beta != NULL, la != NULL,
                                                      alpha_vec, H, d_k, d_v),
                        .q = q, .k = k, .v = v, .beta = beta, .la = la,
                        .alpha_vec = alpha_vec, .init = init, .wnumel = wnumel, .n_w = n_w,
                        .B = B, .T = T, .H = H, .d_k = d_k, .d_v = d_v,
                        .arena_bytes = (size_t)work, .out = out, .file = file};
    ttt_status st = apply_sequences(&A, nthreads, err);
    const double seconds = ttt_now() - t_start;
    if (st == TTT_OK) st = ttt_st_check_outputs(out->t, out->n, in, err); /* overflow: say so, no file */
    if (st != TTT_OK) {
        ttt_apply_out_free(out);
        return st;
    }

    /* ---- metadata ---- */
    /* the form that ran (form: auto is chosen for these inputs) */
    const ttt_form_inputs used_in = {.T = T, .eta = beta != NULL,
                                     .gate = alpha_vec ? TTT_FORM_GATE_KEY
                                             : la || L.decay != 1.0f ? TTT_FORM_GATE_TOKEN
                                                                     : TTT_FORM_GATE_NONE};
    const char *form_used = ttt_layer_form_used(&L, &used_in);
    char *flow = ttt_cfg_to_flow(layer_map);
    char nth[16], secs[32];
    snprintf(nth, sizeof nth, "%d", nthreads);
    snprintf(secs, sizeof secs, "%.9g", seconds);
    const char *kv[2 * TTT_APPLY_MAX_META] = {
        "ttt_version", TTT_VERSION, "preset",  L.preset ? L.preset : "none",
        "form",        form_used,
        "layer",       flow ? flow : "",
        "layout",      "BTHD",      "threads", nth,
        "seconds",     secs};
    out->n_meta = TTT_APPLY_MAX_META;
    for (int i = 0; i < 2 * TTT_APPLY_MAX_META; i++) out->meta[i] = dupstr(kv[i]);
    free(flow);
    for (int i = 0; i < 2 * TTT_APPLY_MAX_META; i++)
        if (!out->meta[i]) {
            ttt_apply_out_free(out);
            return ttt_error_set(err, TTT_ERR_NOMEM, "ttt apply: out of memory");
        }
    return TTT_OK;
}

ttt_status ttt_apply_file(ttt_cfg_node *layer_map, const char *in_path, const char *out_path,
                          ttt_error *err) {
    return ttt_apply_file_threads(layer_map, in_path, out_path, 0, err);
}

ttt_status ttt_apply_file_threads(ttt_cfg_node *layer_map, const char *in_path,
                                  const char *out_path, int threads, ttt_error *err) {
    ttt_st_file *in = NULL;
    TTT_TRY(ttt_st_read(in_path, &in, err));
    ttt_apply_out out;
    ttt_status st = ttt_apply_threads(layer_map, in, &out, threads, err);
    ttt_st_free(in);
    if (st != TTT_OK) return st;
    st = ttt_st_write(out_path, out.t, out.n, (const char *const *)out.meta, out.n_meta, err);
    ttt_apply_out_free(&out);
    return st;
}

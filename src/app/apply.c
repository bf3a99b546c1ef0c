/* Tensors in, tensors out (apply.h): the (B, T, H, D) files of PyTorch libraries through any
 * layer, one (batch, head) sequence at a time. */
#define _DEFAULT_SOURCE /* madvise(MADV_HUGEPAGE) next to the build's _POSIX_C_SOURCE */
#include "apply.h"

#include "blas.h"
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "fault.h"
#include "finite.h"
#include "kernels.h"
#include "progress.h"
#include "rng.h"
#include "tensor.h"
#include "layer.h"

#ifndef TTT_VERSION
#define TTT_VERSION "unknown"
#endif

_Static_assert(TTT_APPLY_MAX_OUT >= 1 + TTT_BATCH_MAX_STATE, "room for o and every state tensor");

/* Initial weights for models that draw them at random: one fixed stream per head (the same for
 * every batch element, as a model's per-head initial weights would be). */
#define APPLY_SEED 0

/* CPU time of the whole process (every thread), seconds. */
static double process_cpu_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static char *dupstr(const char *s) {
    size_t n = strlen(s) + 1;
    char *p = ttt_fault_malloc(n);
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

/* The file's name of a state tensor named `nm` by ttt_layer_state_info: "W…" becomes
 * stem + the rest ("initial_state", "initial_state.0", "initial_state.opt0", …), others
 * stem.nm ("initial_state.z"). */
static void state_name(char *buf, size_t len, const char *stem, const char *nm) {
    if (nm[0] == 'W') snprintf(buf, len, "%s%s", stem, nm + 1);
    else snprintf(buf, len, "%s.%s", stem, nm);
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

ttt_status ttt_apply(const ttt_cfg_node *layer_map, const ttt_st_file *in, ttt_apply_out *out,
                     ttt_error *err) {
    return ttt_apply_threads(layer_map, in, out, 0, err);
}

/* ttt_apply_threads on `layer_map`, a copy of the caller's section that the layer's rendering
 * replaces (the metadata records it). */
static ttt_status apply_threads(ttt_cfg_node *layer_map, const ttt_st_file *in,
                                ttt_apply_out *out, int threads, ttt_error *err) {
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

    /* ---- packed sequences (docs/apply.md "Packed sequences"): B = 1 and the offsets ---- */
    const ttt_st_tensor *cu = ttt_st_find(in, "cu_seqlens");
    int n_seqs = B; /* the state tensors' first dimension */
    if (cu) {
        if (cu->ndim != 1 || cu->shape[0] < 2 || cu->shape[0] - 1 > INT_MAX)
            return ttt_error_set(err, TTT_ERR_SHAPE,
                                 "%s: tensor 'cu_seqlens' %s: expected 1 dimension (n_seqs + 1) "
                                 "with n_seqs >= 1",
                                 file, ttt_st_shape_str(cu, s1, sizeof s1));
        if (!cu->ints)
            return ttt_error_set(err, TTT_ERR_SHAPE,
                                 "%s: tensor 'cu_seqlens' is %s; expected integer offsets (I64 "
                                 "or I32)",
                                 file, cu->dtype);
        n_seqs = (int)(cu->shape[0] - 1);
        ttt_status cs = ttt_layer_check_cu_seqlens(cu->ints, n_seqs, B, T,
                                                   "cu_seqlens", err);
        if (cs != TTT_OK) {
            ttt_error_prefix(err, "%s", file);
            return cs;
        }
    }
    /* integers are offsets only: a q or state given as I32/I64 is a mistake, not a value */
    for (int i = 0; i < in->n; i++)
        if (in->t[i].ints && &in->t[i] != cu) {
            char c[48];
            return ttt_error_set(err, TTT_ERR_SHAPE,
                                 "%s: tensor '%s' is %s; only cu_seqlens is integer (the others "
                                 "are F32, F64, F16 or BF16)",
                                 file, clean(in->t[i].name, c), in->t[i].dtype);
        }
    /* ---- the layer (needs d_k, d_v) and its state tensors ---- */
    ttt_layer L;
    TTT_TRY(ttt_layer_parse(layer_map, d_k, d_v, &L, err));
    const int n_state = ttt_layer_state_count(&L);
    TTT_ASSERT(n_state >= 1 && 1 + n_state <= TTT_APPLY_MAX_OUT);
    char snames[TTT_BATCH_MAX_STATE][48]; /* "initial_state…": the state's names in the file */
    int64_t want[TTT_BATCH_MAX_STATE][2 + TTT_MAX_DIMS];
    int wnd[TTT_BATCH_MAX_STATE];
    size_t numel[TTT_BATCH_MAX_STATE];
    const ttt_st_tensor *init[TTT_BATCH_MAX_STATE];
    const float *state_in[TTT_BATCH_MAX_STATE];
    double out_bytes = (double)B * T * H * d_v * sizeof(float);
    for (int i = 0; i < n_state; i++) {
        const char *nm;
        int shape[TTT_MAX_DIMS];
        wnd[i] = ttt_layer_state_info(&L, i, &nm, shape);
        state_name(snames[i], sizeof snames[i], "initial_state", nm);
        numel[i] = 1;
        want[i][0] = n_seqs; /* B, or with cu_seqlens the number of sequences */
        want[i][1] = H;
        for (int d = 0; d < wnd[i]; d++) {
            want[i][2 + d] = shape[d];
            numel[i] *= (size_t)shape[d];
        }
        out_bytes += (double)n_seqs * H * numel[i] * sizeof(float);
        init[i] = ttt_st_find(in, snames[i]);
        state_in[i] = init[i] ? init[i]->data : NULL;
        if (init[i] && !same_dims(init[i], 2 + wnd[i], want[i])) {
            const int n_w = L.model->n_weights;
            char which[96];
            if (i < n_w)
                snprintf(which, sizeof which, "weight %d of model %s", i, L.model->name);
            else
                snprintf(which, sizeof which, "state tensor %s (optimizer %s)", nm,
                         L.optim->name);
            return ttt_error_set(err, TTT_ERR_SHAPE,
                                 "%s: tensor '%s' %s does not fit: expected (%s, H, *W) = %s "
                                 "for %s with d_k = %d, d_v = %d",
                                 file, snames[i], ttt_st_shape_str(init[i], s1, sizeof s1),
                                 cu ? "n_seqs" : "B", shp(2 + wnd[i], want[i], s2, sizeof s2),
                                 which, d_k, d_v);
        }
    }
    /* Every other name is a mistake worth reporting (a misspelt optional input would otherwise
     * be ignored without a word). */
    for (int i = 0; i < in->n; i++) {
        const char *nm = in->t[i].name;
        int ok = !strcmp(nm, "q") || !strcmp(nm, "k") || !strcmp(nm, "v") ||
                 !strcmp(nm, "beta") || !strcmp(nm, "log_alpha") || !strcmp(nm, "cu_seqlens");
        for (int j = 0; j < n_state && !ok; j++) ok = !strcmp(nm, snames[j]);
        if (!ok) {
            char c[48];
            return ttt_error_set(err, TTT_ERR_SHAPE,
                                 "%s: unknown input tensor '%s' (expected q, k, v, beta, "
                                 "log_alpha, cu_seqlens, %s%s; gates go in log_alpha, log space)",
                                 file, clean(nm, c), snames[0], n_state > 1 ? ", ..." : "");
        }
    }
    /* Values last: NaN or Inf in any input is reported with the tensor and index (finite.h). */
    TTT_TRY(ttt_st_check_finite(in, err));

    /* ---- memory: outputs plus, per thread, one sequence's slices and temporaries ---- */
    const double work = ttt_layer_batch_work_bytes(&L, T);
    char what[64];
    snprintf(what, sizeof what, "ttt apply on %s", file);
    TTT_TRY(ttt_size_check(out_bytes + work * ttt_layer_batch_threads(threads, (long)B * H), what,
                           err));

    /* ---- every (batch, head) sequence (layers/batch.c) ---- */
    /* `seconds` is everything the layer's outputs cost from here: allocating them (their pages
     * are faulted in by the first writes), the threads' slices and arenas, the layout copies and
     * the layer itself. Reading and validating the inputs before, and the overflow check and
     * file writing after, are not part of it. `cpu_seconds` is the process CPU time over the
     * same span (all threads): on a shared machine preemption inflates the wall time, not it. */
    const double t_start = ttt_now(), cpu_start = process_cpu_seconds();
    out->t[0].name = dupstr("o");
    out->t[0].ndim = 4;
    out->t[0].shape[0] = B;
    out->t[0].shape[1] = T;
    out->t[0].shape[2] = H;
    out->t[0].shape[3] = d_v;
    out->t[0].data = ttt_batch_alloc((size_t)B * T * H * d_v * sizeof(float));
    out->n = 1;
    float *state_out[TTT_BATCH_MAX_STATE];
    for (int i = 0; i < n_state; i++) {
        char nm[48];
        const char *sn;
        int shape[TTT_MAX_DIMS];
        ttt_layer_state_info(&L, i, &sn, shape);
        state_name(nm, sizeof nm, "final_state", sn);
        ttt_st_tensor *t = &out->t[out->n++];
        t->name = dupstr(nm);
        t->ndim = 2 + wnd[i];
        memcpy(t->shape, want[i], (size_t)t->ndim * sizeof *t->shape);
        t->data = ttt_batch_alloc((size_t)n_seqs * H * numel[i] * sizeof(float));
        state_out[i] = t->data;
    }
    for (int i = 0; i < out->n; i++)
        if (!out->t[i].name || !out->t[i].data) {
            ttt_apply_out_free(out);
            return ttt_error_set(err, TTT_ERR_NOMEM, "ttt apply: out of memory for the outputs");
        }
    const int nthreads = ttt_layer_batch_threads(threads, (long)B * H);
    /* A tensor of T = 0 has no data in the file (NULL): the runner must still see which inputs
     * are given (a gate given empty is still a gate), and offsets into NULL are undefined. */
    static float no_floats[1];
#define APPLY_DATA(t) ((t)->data ? (t)->data : no_floats)
    const ttt_layer_io io = {.B = B, .T = T, .H = H, .o = out->t[0].data, .q = APPLY_DATA(q),
                             .k = APPLY_DATA(k), .v = APPLY_DATA(v),
                             .eta = beta ? APPLY_DATA(beta) : NULL,
                             .log_alpha = la ? APPLY_DATA(la) : NULL, .alpha_vec = alpha_vec,
                             .state_in = state_in, .state_out = state_out, .seed = APPLY_SEED};
#undef APPLY_DATA
    ttt_status st = cu ? ttt_layer_forward_packed(&L, &io, cu->ints, n_seqs, nthreads, err)
                       : ttt_layer_forward_batch(&L, &io, nthreads, err);
    if (st != TTT_OK) ttt_error_prefix(err, "%s", file);
    const double seconds = ttt_now() - t_start, cpu_seconds = process_cpu_seconds() - cpu_start;
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
    char *flow = ttt_cfg_to_flow(layer_map); /* NULL: out of memory (never written as "") */
    if (!flow) {
        ttt_apply_out_free(out);
        return ttt_error_set(err, TTT_ERR_NOMEM,
                             "ttt apply: out of memory for the layer's metadata");
    }
    char nth[16], secs[32], cpus[32];
    snprintf(nth, sizeof nth, "%d", nthreads);
    snprintf(secs, sizeof secs, "%.9g", seconds);
    snprintf(cpus, sizeof cpus, "%.9g", cpu_seconds);
    const char *kv[2 * TTT_APPLY_MAX_META] = {
        "ttt_version", TTT_VERSION, "preset",  L.preset ? L.preset : "none",
        "form",        form_used,
        "layer",       flow,
        "layout",      "BTHD",      "threads", nth,
        "seconds",     secs,        "cpu_seconds", cpus};
    out->n_meta = TTT_APPLY_MAX_META;
    for (int i = 0; i < 2 * TTT_APPLY_MAX_META; i++) out->meta[i] = dupstr(kv[i]);
    free(flow);
    for (int i = 0; i < 2 * TTT_APPLY_MAX_META; i++)
        if (!out->meta[i]) {
            ttt_apply_out_free(out);
            return ttt_error_set(err, TTT_ERR_NOMEM,
                                 "ttt apply: out of memory for the metadata");
        }
    return TTT_OK;
}

ttt_status ttt_apply_threads(const ttt_cfg_node *layer_map, const ttt_st_file *in,
                             ttt_apply_out *out, int threads, ttt_error *err) {
    memset(out, 0, sizeof *out);
    if (!layer_map)
        return ttt_error_set(err, TTT_ERR_CONFIG, "ttt apply: no `layer:` mapping was given");
    ttt_cfg_node *copy = ttt_cfg_clone(layer_map);
    if (!copy) return ttt_cfg_out_of_memory(err, "layer");
    const ttt_status s = apply_threads(copy, in, out, threads, err);
    ttt_cfg_free(copy);
    return s;
}

ttt_status ttt_apply_file(const ttt_cfg_node *layer_map, const char *in_path,
                          const char *out_path, ttt_error *err) {
    return ttt_apply_file_threads(layer_map, in_path, out_path, 0, err);
}

ttt_status ttt_apply_file_threads(const ttt_cfg_node *layer_map, const char *in_path,
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

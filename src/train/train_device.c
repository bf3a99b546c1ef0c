/* The training step on a CUDA device (train_device.h; docs/training.md "Device and precision"). */
#include "train_device.h"

#include <math.h>
#include <setjmp.h>
#include <stdlib.h>
#include <string.h>

#include "adamw_device.h"
#include "cuda_kernels.h"
#include "fault.h"
#include "ops.h"
#include "train.h"

/* Every parameter starts at a multiple of 64 floats (256 bytes), the alignment cudaMalloc gives,
 * so that a kernel that reads a parameter in wide words finds it aligned. The padding holds zeros
 * in every buffer and adds nothing to the gradient norm. */
static size_t pad64(size_t n) { return (n + 63) & ~(size_t)63; }

void ttt_train_dev_free(ttt_train_dev *D) {
    if (!D) return;
    ttt_tape_free(&D->tape);
    ttt_arena_free(&D->arena);
    ttt_device_free(&D->mem);
    free(D->pt);
    free(D->off);
    if (D->entered) ttt_device_leave(&D->scope);
    memset(D, 0, sizeof *D);
}

/* The bf16 twin of the master weights (train_device.h), after they changed; queued on the
 * step's stream, so that every later product reads it current. */
static ttt_status refresh_twin(ttt_train_dev *D, ttt_error *err) {
    if (!D->twin) return TTT_OK;
    return ttt_cuda_to_bf16(D->twin, D->data, D->numel, D->stream, err);
}

static ttt_status copy_params(ttt_train_dev *D, int up, ttt_params *ps, const ttt_adamw *opt,
                              ttt_error *err) {
    const ttt_device h = ttt_device_host();
    for (int i = 0; i < D->m->params.n; i++) {
        ttt_param *p = D->m->params.p[i];
        ttt_param *hp = ps ? ps->p[i] : p;
        const size_t bytes = p->n * sizeof(float), o = D->off[i];
        if (up) {
            TTT_TRY(ttt_device_copy(D->data + o, D->device, p->data, h, bytes, D->stream, err));
            if (opt) {
                TTT_TRY(ttt_device_copy(D->m1 + o, D->device, opt->m[i], h, bytes, D->stream,
                                        err));
                TTT_TRY(ttt_device_copy(D->m2 + o, D->device, opt->v[i], h, bytes, D->stream,
                                        err));
            }
        } else {
            TTT_TRY(ttt_device_copy(hp->data, h, D->data + o, D->device, bytes, D->stream, err));
            if (opt) {
                TTT_TRY(ttt_device_copy(((ttt_adamw *)opt)->m[i], h, D->m1 + o, D->device,
                                        bytes, D->stream, err));
                TTT_TRY(ttt_device_copy(((ttt_adamw *)opt)->v[i], h, D->m2 + o, D->device,
                                        bytes, D->stream, err));
            }
        }
    }
    if (up) TTT_TRY(refresh_twin(D, err));
    /* a copy to the host is read at once; a copy up reads host memory the caller may change */
    return ttt_device_sync(D->device, D->stream, err);
}

ttt_status ttt_train_dev_init(ttt_train_dev *D, const ttt_seq_model *m, ttt_device d,
                              ttt_error *err) {
    return ttt_train_dev_init_dtype(D, m, d, TTT_DTYPE_F32, err);
}

ttt_status ttt_train_dev_init_dtype(ttt_train_dev *D, const ttt_seq_model *m, ttt_device d,
                                    ttt_dtype dtype, ttt_error *err) {
    memset(D, 0, sizeof *D);
    D->device = d;
    D->dtype = dtype;
    D->m = m;
    ttt_tape_init(&D->tape);
    ttt_arena_init(&D->arena, 0);
    const ttt_status es = ttt_device_enter(d, &D->scope, err);
    if (es != TTT_OK) {
        ttt_train_dev_free(D);
        return es;
    }
    D->entered = 1;
    const int np = m->params.n;
    D->pt = ttt_fault_calloc(np ? (size_t)np : 1, sizeof *D->pt);
    D->off = ttt_fault_calloc(np ? (size_t)np : 1, sizeof *D->off);
    if (!D->pt || !D->off) {
        ttt_train_dev_free(D);
        return ttt_error_set(err, TTT_ERR_NOMEM, "train: out of memory for the device state");
    }
    size_t n = 0;
    for (int i = 0; i < np; i++) {
        D->off[i] = n;
        n += pad64(m->params.p[i]->n);
    }
    D->numel = n ? n : 64;
    /* the twin after the moments: numel is a multiple of 64, so it and every parameter's
     * place in it start on 128 bytes */
    const int bf16 = dtype == TTT_DTYPE_BF16;
    const size_t twin_bytes = bf16 ? D->numel * sizeof(uint16_t) : 0;
    const size_t bytes = 4 * D->numel * sizeof(float) + twin_bytes +
                         TTT_CUDA_SUMSQ_SCRATCH * sizeof(double) + sizeof(double);
    ttt_status s = ttt_device_alloc(&D->mem, d, bytes, D->stream,
                                    bf16 ? "the parameters, their bf16 copy, gradients and AdamW "
                                           "moments"
                                         : "the parameters, gradients and AdamW moments",
                                    err);
    if (s == TTT_OK) {
        D->data = D->mem.ptr;
        D->grad = D->data + D->numel;
        D->m1 = D->grad + D->numel;
        D->m2 = D->m1 + D->numel;
        D->twin = bf16 ? (uint16_t *)(D->m2 + D->numel) : NULL;
        D->norm_scratch = (double *)((char *)(D->m2 + D->numel) + twin_bytes);
        D->bad = (unsigned *)(D->norm_scratch + TTT_CUDA_SUMSQ_SCRATCH);
        s = ttt_device_zero(D->mem.ptr, d, bytes, D->stream, err);
    }
    if (s == TTT_OK) {
        ttt_arena_free(&D->arena);
        s = ttt_arena_init_device(&D->arena, TTT_TRAIN_ARENA_BLOCK, d, D->stream, err);
    }
    if (s == TTT_OK) s = copy_params(D, 1, NULL, NULL, err);
    if (s != TTT_OK) {
        char dn[32];
        ttt_error_prefix(err, "train on %s", ttt_device_name(d, dn, sizeof dn));
        ttt_train_dev_free(D);
        return s;
    }
    for (int i = 0; i < np; i++) {
        const ttt_param *p = m->params.p[i];
        D->pt[i] = ttt_tensor_view_on(d, D->data + D->off[i], p->ndim, p->shape);
        ttt_tensor_set_param(&D->pt[i], D->grad + D->off[i]);
    }
    D->tape.recycle = 1; /* only parameter gradients are read after backward (autograd.h) */
    D->ctx = (ttt_ctx){.arena = &D->arena, .grad = 0, .tape = &D->tape};
    if (bf16) {
        D->mixed = (ttt_mixed){.master = D->data, .n = D->numel, .twin = D->twin};
        D->ctx.mixed = &D->mixed;
    }
    return TTT_OK;
}

ttt_status ttt_train_dev_upload(ttt_train_dev *D, const ttt_adamw *opt, ttt_error *err) {
    return copy_params(D, 1, NULL, opt, err);
}

ttt_status ttt_train_dev_download(ttt_train_dev *D, ttt_params *ps, ttt_adamw *opt,
                                  ttt_error *err) {
    return copy_params(D, 0, ps, opt, err);
}

void ttt_train_dev_reset(ttt_train_dev *D) {
    D->pred = NULL;
    ttt_arena_reset(&D->arena);
}

/* The step's arena could not grow (tensor.h "Out of memory inside ops"): what was asked, the
 * block the arena asked the device's pool for (a tensor larger than the arena's blocks gets a
 * block of its own size), what the step's tensors held, and what the pool and the device had
 * (docs/hardening.md "Faults on the GPU"). */
static ttt_status oom_message(const ttt_train_dev *D, ttt_error *err) {
    const ttt_arena *meta = D->arena.meta;
    if (meta && meta->failed_bytes && !D->arena.failed_bytes) /* the host's records */
        return ttt_error_set(err, TTT_ERR_NOMEM,
                             "train: out of host memory for %zu bytes of a step's tensor "
                             "headers and tape (the host arena held %.1f MiB)",
                             meta->failed_bytes, (double)ttt_arena_footprint(meta) / 1048576.0);
    const size_t want = D->arena.failed_bytes;
    const size_t block = want > D->arena.block_size ? want : D->arena.block_size;
    char dn[32], w[32], bl[32], held[32], used[32], lim[32], fr[32], tot[32];
    ttt_device_pool_stats ps;
    ttt_error ignore = {0};
    if (ttt_device_pool_stats_get(D->device, &ps, &ignore) != TTT_OK) memset(&ps, 0, sizeof ps);
    size_t free_b = 0, total_b = 0;
    const int info = ttt_device_mem_info(D->device, &free_b, &total_b, &ignore) == TTT_OK;
    char limit[96] = "", dev[96] = "";
    if (ps.limit)
        snprintf(limit, sizeof limit, ", capped at %s by TTT_CUDA_POOL_LIMIT",
                 ttt_device_bytes_text(ps.limit, lim, sizeof lim));
    if (info)
        snprintf(dev, sizeof dev, "; the device has %s free of %s",
                 ttt_device_bytes_text(free_b, fr, sizeof fr),
                 ttt_device_bytes_text(total_b, tot, sizeof tot));
    return ttt_error_set(
        err, TTT_ERR_NOMEM,
        "train on %s: out of device memory: a step's tensor of %s (a block of %s from the "
        "device pool) could not be allocated; the step's tensors held %s, the pool had handed "
        "out %s%s%s. Lower train.batch or the sequence length, or use a smaller model",
        ttt_device_name(D->device, dn, sizeof dn), ttt_device_bytes_text(want, w, sizeof w),
        ttt_device_bytes_text(block, bl, sizeof bl),
        ttt_device_bytes_text(ttt_arena_footprint(&D->arena), held, sizeof held),
        ttt_device_bytes_text(ps.used, used, sizeof used), limit, dev);
}

ttt_status ttt_train_dev_step(ttt_train_dev *D, const ttt_seq_batch *b, int grad, double denom,
                              double *loss, ttt_seq_stats *st, ttt_error *err) {
    const int np = D->m->params.n;
    D->ctx.grad = grad;
    D->arena.peak = ttt_arena_footprint(&D->arena);
    D->act_bytes = D->grad_bytes = 0;
    D->pred = NULL;
    *loss = NAN;
    memset(st, 0, sizeof *st);
    /* the first op to write a gradient assigns it (autograd.h "First writer assigns") */
    if (grad)
        for (int i = 0; i < np; i++) ttt_tensor_grad_overwrite(&D->pt[i]);
    ttt_device_ops_status(NULL); /* a failure of an earlier, unrelated call is not this step's */
    ttt_status s = TTT_OK;
    float lf = NAN;
    ttt_arena_escape esc;
    ttt_arena_arm(&D->arena, &esc);
    if (setjmp(esc.jump) == 0) {
        ttt_tensor *l = NULL;
        /* predictions are read by evaluations only: a training step lets the loss consume
         * the logits (ttt_cross_entropy_consume) */
        s = ttt_seq_model_loss(&D->ctx, D->m, D->pt, b, denom > 0 ? denom : 1.0, &l, st,
                               grad ? NULL : &D->pred, err);
        if (s == TTT_OK) s = ttt_tensor_read(l, &lf, D->stream, err);
        if (s == TTT_OK) {
            D->act_bytes = ttt_arena_footprint(&D->arena);
            if (grad && isfinite(lf)) ttt_backward(&D->ctx, l);
            D->grad_bytes = grad ? D->tape.grad_bytes : 0;
        }
    } else {
        D->pred = NULL;
        s = oom_message(D, err);
        ttt_arena_reset(&D->arena);
    }
    ttt_arena_disarm(&D->arena);
    ttt_tape_reset(&D->tape);
    if (grad)
        for (int i = 0; i < np; i++) ttt_tensor_grad_settle(&D->pt[i]);
    /* a CUDA failure inside an op (kept by the ops, ops.h ttt_device_ops_status) */
    ttt_error dev_err = {0};
    if (ttt_device_ops_status(&dev_err) != TTT_OK && s == TTT_OK) {
        *err = dev_err;
        s = dev_err.status;
    }
    if (s != TTT_OK) {
        D->pred = NULL;
        return s;
    }
    *loss = lf;
    return TTT_OK;
}

ttt_status ttt_train_dev_adamw(ttt_train_dev *D, ttt_adamw *opt, ttt_params *ps,
                               ttt_adamw_stats *stats, ttt_error *err) {
    /* ps NULL: another rank's replica (train_replicas.c), with no host weights of its own;
     * the layout is the model's, and a failure is reported without naming the element (rank
     * 0 holds the same values and names it) */
    const ttt_params *layout = ps ? ps : &D->m->params;
    TTT_ASSERT(layout->n == opt->n_params);
    const ttt_adamw_config *c = &opt->cfg;
    double ss = 0.0;
    TTT_TRY(ttt_cuda_sumsq(D->grad, D->numel, D->norm_scratch, &ss, D->stream, err));
    const double norm = sqrt(ss);
    if (!isfinite(norm) && !ps)
        return ttt_error_set(err, TTT_ERR_NUMERIC, "the gradient norm is %s", isnan(norm) ? "nan" : "inf");
    if (!isfinite(norm)) {
        /* the host's message: copy the gradients down and let the host find the first one */
        for (int i = 0; i < ps->n; i++)
            TTT_TRY(ttt_device_copy(ps->p[i]->grad, ttt_device_host(), D->grad + D->off[i],
                                    D->device, ps->p[i]->n * sizeof(float), D->stream, err));
        TTT_TRY(ttt_device_sync(D->device, D->stream, err));
        ttt_status s = ttt_params_check_finite(ps, TTT_PARAMS_CHECK_GRAD, err);
        if (s == TTT_OK) /* the sum of squares overflowed although every gradient is finite */
            s = ttt_error_set(err, TTT_ERR_NUMERIC, "the gradient norm overflowed (> 1e308)");
        return s;
    }
    int clipped = 0;
    if (c->clip_norm > 0 && norm > c->clip_norm) { /* ttt_params_clip_grad_norm's scale */
        const float scale = (float)(c->clip_norm / norm);
        TTT_TRY(ttt_cuda_scale_f32(D->grad, D->grad, scale, D->numel, D->stream, err));
        clipped = 1;
    }
    /* the factors of ttt_adamw_step, formed the same way */
    const double lr = ttt_lr_schedule(c, (long)opt->step);
    const double t = (double)(opt->step + 1);
    const double bc1 = 1.0 - pow(c->beta1, t);
    const double bc2_sqrt = sqrt(1.0 - pow(c->beta2, t));
    const ttt_adamw_factors f = {
        .b1 = (float)c->beta1,
        .b2 = (float)c->beta2,
        .one_m_b1 = (float)(1.0 - c->beta1),
        .one_m_b2 = (float)(1.0 - c->beta2),
        .step_size = (float)(lr / bc1),
        .inv_bc2_sqrt = (float)(1.0 / bc2_sqrt),
        .eps = (float)c->eps,
        .shrink = (float)(1.0 - lr * c->weight_decay),
    };
    TTT_TRY(ttt_device_zero(D->bad, D->device, sizeof *D->bad, D->stream, err));
    for (int i = 0; i < layout->n; i++) {
        const size_t o = D->off[i];
        const int decay = layout->p[i]->decay && c->weight_decay > 0;
        TTT_TRY(ttt_cuda_adamw_update(D->data + o, D->grad + o, D->m1 + o, D->m2 + o,
                                      layout->p[i]->n, decay, &f, D->bad, D->stream, err));
    }
    TTT_TRY(refresh_twin(D, err)); /* the next step's products read the updated weights */
    unsigned bad = 0;
    TTT_TRY(ttt_device_copy(&bad, ttt_device_host(), D->bad, D->device, sizeof bad, D->stream,
                            err));
    TTT_TRY(ttt_device_sync(D->device, D->stream, err));
    opt->step++;
    if (stats) {
        stats->lr = lr;
        stats->grad_norm = norm;
        stats->clipped = clipped;
    }
    if (bad && !ps)
        return ttt_error_set(err, TTT_ERR_NUMERIC, "%u updated weights are not finite", bad);
    if (bad) { /* the host's message names the first weight that is not finite */
        TTT_TRY(copy_params(D, 0, ps, NULL, err));
        ttt_status s = ttt_params_check_finite(ps, TTT_PARAMS_CHECK_DATA, err);
        if (s == TTT_OK)
            s = ttt_error_set(err, TTT_ERR_NUMERIC, "%u updated weights are not finite", bad);
        return s;
    }
    return TTT_OK;
}

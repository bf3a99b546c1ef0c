/* RoPE as a recorded op (composed.h; docs/math.md §4 "RoPE", convention in rope.h).
 *
 * y = x R_p row by row, R_p block diagonal with 2×2 rotations [[cos, sin], [−sin, cos]] of angle
 * p·ω_i. R_p is orthogonal, so the backward is dx = dy R_pᵀ = dy R_{−p}: the same rotation with
 * the angle negated (an odd last dimension passes through unchanged both ways). The forward is
 * ttt_rope_apply itself, so a recorded and an unrecorded forward agree bit for bit. */
#include <math.h>
#include <stddef.h>

#include "ops.h"
#include "ops_device.h"
#include "rope.h"

static void rope_backward(ttt_ctx *ctx, const ttt_tape_entry *e, const float *dy) {
    const ttt_tensor *x = e->in[0];
    float *gx = ttt_grad(ctx, x);
    if (!gx) return;
    const int d = TTT_COLS(x), T = (int)(x->n / (size_t)(d ? d : 1));
    ttt_rope_inverse_add(gx, dy, T, d, e->iarg[0], e->farg[0]);
}

ttt_tensor *ttt_rope(ttt_ctx *ctx, const ttt_tensor *x, int pos0, float base) {
    TTT_ASSERT(x->ndim >= 1);
    if (TTT_OPS_ON_DEVICE(ctx, x, NULL)) return ttt_dev_rope(ctx, x, pos0, base);
    const int d = TTT_COLS(x), T = d ? (int)(x->n / (size_t)d) : 0;
    ttt_tensor *y = ttt_tensor_new(ctx, x->ndim, x->shape);
    if (T > 0 && d > 0) ttt_rope_apply(y->data, x->data, T, d, pos0, base);
    ttt_tape_entry *e = ttt_tape_record(ctx, rope_backward, y, (const ttt_tensor *const[]){x}, 1);
    if (e) {
        e->name = "rope";
        e->iarg[0] = pos0;
        e->farg[0] = base;
    }
    return y;
}

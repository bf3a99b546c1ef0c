/* Memory estimates of a layer run (see layer.h), so that sizes the machine cannot hold are refused
 * before anything is allocated. */
#include "layer.h"

#include <string.h>

/* ---- memory estimates ---- */

double ttt_layer_state_bytes(const ttt_layer *L) {
    double gram;
    double floats = ttt_layer_weight_floats(L, &gram) + ttt_layer_opt_state_floats(L);
    if (L->normalize == TTT_NORMALIZE_RATIO) floats += L->d_k;
    return floats * sizeof(float);
}

/* The largest scratch among the entries a call of L may run: which one runs depends on the
 * call's inputs, so every entry the tuple admits counts. */
static double form_scratch_bytes(const ttt_layer *L, long T) {
    const int any = !L->form || strcmp(L->form, "auto") == 0;
    double most = 0;
    for (int i = 0; i < ttt_form_count(); i++) {
        const ttt_form_entry *e = ttt_form_at(i);
        if (any ? e->auto_rank <= 0 : strcmp(e->form, L->form) != 0) continue;
        if (e->available(L, NULL)) continue;
        const double b = e->scratch_bytes ? e->scratch_bytes(L, T) : 0;
        if (b > most) most = b;
    }
    return most;
}

double ttt_layer_forward_bytes(const ttt_layer *L, long T) {
    const double dk = L->d_k, dv = L->d_v, t = (double)T;
    /* β, a constant log α (T); scaled, rotated and feature-mapped q and k (T, d_k) each; the
     * form's result, the normalized result and the ratio denominator (T, d_v) or (T) */
    const double floats = t * (5 * dk + 3 * dv + 8);
    /* normalize: ratio runs the form a second time for the denominator (d_v = 1) */
    const int runs = L->normalize == TTT_NORMALIZE_RATIO ? 2 : 1;
    return floats * sizeof(float) + runs * form_scratch_bytes(L, T);
}

/* Memory estimates of a layer run (see layer.h), so that sizes the machine cannot hold are refused
 * before anything is allocated. */
#include "layer.h"

#include <string.h>

/* ---- memory estimates ---- */

double ttt_layer_state_bytes(const ttt_layer *L) {
    double gram;
    double floats = ttt_layer_weight_floats(L, &gram) + ttt_layer_opt_state_floats(L);
    if (L->normalize == TTT_NORMALIZE_RATIO) floats += L->d_phi; /* z */
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
        if (ttt_form_entry_available(e, L, NULL) || !e->scratch_bytes) continue;
        double b = e->scratch_bytes(L, T);
        /* form: auto may run an entry at any chunk it was measured with (ttt_form_plan) */
        for (const ttt_form_rate *r = any ? e->rates : NULL; r && r->d > 0; r++) {
            ttt_layer Lc = *L;
            if (r->chunk > 0) Lc.chunk = r->chunk;
            const double bc = e->scratch_bytes(&Lc, T);
            if (bc > b) b = bc;
        }
        if (b > most) most = b;
    }
    return most;
}

double ttt_layer_forward_bytes(const ttt_layer *L, long T) {
    const double dk = L->d_k, dv = L->d_v, t = (double)T, dp = L->d_phi;
    /* β, a constant log α (T); scaled, rotated and feature-mapped q and k (T, d_k) and
     * (T, d_phi) each; the form's result, the normalized result and the ratio denominator
     * (T, d_v) or (T); the gate's write weights (T); a random feature map's matrix (rows, d_k)
     * (16 floats per allocation for the arena's alignment) */
    const double rows = L->fmap && L->normalize == TTT_NORMALIZE_RATIO ? L->features : 0;
    /* levels Λ (docs/math.md §4.8): the scaled q holds Λ·d_k columns */
    const double lq = L->levels > 1 ? (L->levels - 1) * dk : 0;
    const double floats = t * (5 * dk + 2 * dp + 3 * dv + 12 + lq) + rows * dk + 16 * 16;
    /* normalize: ratio runs the form a second time for the denominator (d_v = 1) */
    const int runs = L->normalize == TTT_NORMALIZE_RATIO ? 2 : 1;
    const ttt_layer inner = ttt_layer_inner(L);
    return floats * sizeof(float) + runs * form_scratch_bytes(&inner, T);
}

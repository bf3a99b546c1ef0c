/* The registry of computation forms (form.h), generated from layers/forms/form_list.h, and the
 * choice among its entries. */
#include "form.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define TTT_FORM_ENTRY(fam, form) extern const ttt_form_entry ttt_form_##fam##_##form;
#include "form_list.h"
#undef TTT_FORM_ENTRY

static const ttt_form_entry *const registry[] = {
#define TTT_FORM_ENTRY(fam, form) &ttt_form_##fam##_##form,
#include "form_list.h"
#undef TTT_FORM_ENTRY
};

#define N_FORMS ((int)(sizeof registry / sizeof registry[0]))

int ttt_form_count(void) { return N_FORMS; }
const ttt_form_entry *ttt_form_at(int i) { return (i >= 0 && i < N_FORMS) ? registry[i] : NULL; }

int ttt_form_known(const char *form) {
    for (int i = 0; form && i < N_FORMS; i++)
        if (strcmp(registry[i]->form, form) == 0) return 1;
    return 0;
}

const char *ttt_form_choices(void) {
    static char buf[256];
    if (buf[0]) return buf;
    size_t w = (size_t)snprintf(buf, sizeof buf, "auto");
    for (int i = 0; i < N_FORMS; i++) {
        int seen = 0;
        for (int j = 0; j < i && !seen; j++)
            seen = strcmp(registry[j]->form, registry[i]->form) == 0;
        if (!seen && w < sizeof buf)
            w += (size_t)snprintf(buf + w, sizeof buf - w, "|%s", registry[i]->form);
    }
    return buf;
}

ttt_optim_traits ttt_layer_optim_traits(const ttt_layer *L) {
    return L->optim->traits ? L->optim->traits(L->optim_cfg) : (ttt_optim_traits){0};
}

ttt_form_inputs ttt_form_inputs_plain(const ttt_layer *L, long T, int tape) {
    return (ttt_form_inputs){.T = T, .eta = 0,
                             .gate = L->decay != 1.0f ? TTT_FORM_GATE_TOKEN : TTT_FORM_GATE_NONE,
                             .tape = tape};
}

const char *ttt_form_entry_available(const ttt_form_entry *e, const ttt_layer *L,
                                     const ttt_form_inputs *in) {
    if (L->levels > 1 && !e->levels)
        return "it computes one state; levels > 1 (log-linear attention) runs form: recurrent "
               "(the loglinear entry)";
    return e->available(L, in);
}

static int is_auto(const ttt_layer *L) { return !L->form || strcmp(L->form, "auto") == 0; }

/* Why entry e does not compute L for `in`, or NULL when it does: an entry of another device
 * than the call's buffers never does (docs/design.md "How forms declare devices"), otherwise the
 * entry's own test. in == NULL asks about the tuple alone, on any device. */
static const char *unavailable_for(const ttt_form_entry *e, const ttt_layer *L,
                                   const ttt_form_inputs *in) {
    if (in && e->device != in->device)
        return e->device == TTT_DEVICE_HOST
                   ? "this form computes on the host, and the call's buffers are on a CUDA device"
                   : "this form computes on a CUDA device, and the call's buffers are on the host";
    return ttt_form_entry_available(e, L, in);
}

static int of_device(const ttt_form_entry *e, const ttt_form_inputs *in) {
    return !in || e->device == in->device;
}

/* Why no entry of form L->form computes L for `in` (in == NULL: for any inputs). An entry of the
 * call's device whose tuple test passes explains best (its reason is about the inputs); else
 * the reasons of the form's families on that device, joined. */
static void why_not(const ttt_layer *L, const ttt_form_inputs *in, char *buf, size_t len) {
    for (int i = 0; i < N_FORMS; i++) {
        const ttt_form_entry *e = registry[i];
        if (strcmp(e->form, L->form) != 0 || !of_device(e, in) ||
            ttt_form_entry_available(e, L, NULL))
            continue;
        const char *w = in ? ttt_form_entry_available(e, L, in) : NULL;
        if (w) {
            snprintf(buf, len, "%s", w);
            return;
        }
    }
    size_t w = 0;
    buf[0] = '\0';
    for (int i = 0; i < N_FORMS && w < len; i++) {
        const ttt_form_entry *e = registry[i];
        if (strcmp(e->form, L->form) != 0 || !of_device(e, in)) continue;
        w += (size_t)snprintf(buf + w, len - w, "%s%s: %s", w ? "; " : "", e->family,
                              ttt_form_entry_available(e, L, NULL));
    }
    if (!w && in && in->device != TTT_DEVICE_HOST)
        snprintf(buf, len, "no %s form computes on a CUDA device; pass host buffers "
                 "(io->device = TTT_DEVICE_HOST) or choose form: auto", L->form);
    else if (!w)
        snprintf(buf, len, "no form is named %s", L->form);
}

const char *ttt_form_unavailable(const ttt_layer *L) {
    static _Thread_local char buf[1024];
    if (is_auto(L)) return NULL;
    for (int i = 0; i < N_FORMS; i++)
        if (strcmp(registry[i]->form, L->form) == 0 &&
            !ttt_form_entry_available(registry[i], L, NULL))
            return NULL;
    why_not(L, NULL, buf, sizeof buf);
    return buf;
}

/* ---- form: auto's cost model (docs/forms.md "How `auto` chooses") ---- */

/* The rows for one gate shape; a gate shape an entry was not measured with falls back to its
 * ungated rows (the gate's elementwise work is a small part of the time). */
static int rows_for(const ttt_form_rate *rows, ttt_gate_shape gate) {
    for (const ttt_form_rate *r = rows; r && r->d > 0; r++)
        if (r->gate == gate) return 1;
    return 0;
}

double ttt_form_rate_of(const ttt_form_rate *rows, const ttt_layer *L, ttt_gate_shape gate,
                        int chunk) {
    if (!rows) return 0.0;
    if (!rows_for(rows, gate)) gate = TTT_FORM_GATE_NONE;
    /* the head size: the larger of d_k, d_v (the state is d_k × d_v); interpolated in log d
     * between the nearest measured sizes below and above, held constant outside them */
    const double d = L->d_k > L->d_v ? L->d_k : L->d_v;
    const ttt_form_rate *lo = NULL, *hi = NULL;
    for (const ttt_form_rate *r = rows; r->d > 0; r++) {
        if (r->gate != gate || r->chunk != chunk) continue;
        if (r->d <= d && (!lo || r->d > lo->d)) lo = r;
        if (r->d >= d && (!hi || r->d < hi->d)) hi = r;
    }
    if (!lo && !hi) return 0.0;
    if (!lo) return hi->gflops;
    if (!hi || hi->d == lo->d) return lo->gflops;
    const double x = (log(d) - log(lo->d)) / (log(hi->d) - log(lo->d));
    return lo->gflops + x * (hi->gflops - lo->gflops);
}

/* Estimated seconds of entry e over in->T tokens at `chunk` (0: e does not read it), or 0 when
 * it cannot be estimated. */
static double estimate(const ttt_form_rate *rows, const ttt_form_entry *e, const ttt_layer *L,
                       const ttt_form_inputs *in, int chunk) {
    if (!e->flops || in->T <= 0) return 0.0;
    const double rate = ttt_form_rate_of(rows, L, in->gate, chunk);
    if (!(rate > 0.0)) return 0.0;
    ttt_layer Lc = *L;
    if (chunk > 0) Lc.chunk = chunk;
    const double f = e->flops(&Lc, in->T);
    return isfinite(f) && f > 0.0 ? f / (rate * 1e9) : 0.0;
}

static const ttt_form_rate *own_rates(const ttt_form_entry *e) { return e->rates; }

/* The entries form: auto may run for `in`, highest auto_rank first (registry order on ties). */
static int auto_candidates(const ttt_layer *L, const ttt_form_inputs *in,
                           const ttt_form_entry **out) {
    int n = 0;
    for (int i = 0; i < N_FORMS; i++) {
        const ttt_form_entry *e = registry[i];
        if (e->auto_rank <= 0 || unavailable_for(e, L, in)) continue;
        int j = n++;
        for (; j > 0 && out[j - 1]->auto_rank < e->auto_rank; j--) out[j] = out[j - 1];
        out[j] = e;
    }
    return n;
}

const ttt_form_entry *ttt_form_plan_with(ttt_form_rates_fn rates, const ttt_layer *L,
                                         const ttt_form_inputs *in, ttt_form_plan *plan,
                                         ttt_error *err) {
    if (!rates) rates = own_rates;
    *plan = (ttt_form_plan){.entry = NULL, .chunk = L->chunk};
    if (!is_auto(L)) {
        for (int i = 0; i < N_FORMS; i++) {
            const ttt_form_entry *e = registry[i];
            if (strcmp(e->form, L->form) == 0 && !unavailable_for(e, L, in)) {
                plan->entry = e;
                plan->why = "named by layer.form";
                return e;
            }
        }
        char why[1024];
        why_not(L, in, why, sizeof why);
        ttt_error_set(err, TTT_ERR_UNSUPPORTED,
                      "layer form %s is not available for these inputs: %s", L->form, why);
        return NULL;
    }
    const ttt_form_entry *cand[N_FORMS];
    const int n = auto_candidates(L, in, cand);
    if (n == 0 && in->device != TTT_DEVICE_HOST) {
        /* the reasons of the device's entries: which tuples they take */
        char why[1024];
        size_t w = 0;
        why[0] = '\0';
        for (int i = 0; i < N_FORMS && w < sizeof why; i++) {
            const ttt_form_entry *e = registry[i];
            if (e->device != in->device || !ttt_form_entry_available(e, L, in)) continue;
            w += (size_t)snprintf(why + w, sizeof why - w, "%s%s/%s: %s", w ? "; " : "",
                                  e->family, e->form, ttt_form_entry_available(e, L, in));
        }
        ttt_error_set(err, TTT_ERR_UNSUPPORTED,
                      "no CUDA form computes this layer for these inputs (%s); run it on host "
                      "buffers (io->device = TTT_DEVICE_HOST), where every layer runs",
                      w ? why : "this build has no CUDA forms");
        return NULL;
    }
    if (n == 0) {
        ttt_error_set(err, TTT_ERR_UNSUPPORTED,
                      "layer form auto is not available for these inputs: no registered form "
                      "computes this layer");
        return NULL;
    }
    plan->entry = cand[0];
    plan->why = in->tape ? "the highest auto_rank: a tape records, and the rates are forward's"
                         : "the highest auto_rank, which has no measured rates";
    /* The rates are forward's; under a tape forward_diff runs (other costs): rank only. So
     * does a call whose highest-ranked entry was never measured (a form of its own family,
     * e.g. LaCT, whose only rival is the generic driver). */
    const ttt_form_rate *top = rates(cand[0]);
    if (in->tape || !top || top->d <= 0) return plan->entry;
    /* every measured candidate at every chunk it was measured with */
    double best = 0.0;
    for (int i = 0; i < n; i++) {
        /* not past the length the entry stays precise for (precise_t, docs/forms.md
         * "Precision on hard inputs"): the recurrent linear attention beyond 8K tokens */
        if (cand[i]->precise_t > 0 && in->T > cand[i]->precise_t) continue;
        const ttt_form_rate *rows = rates(cand[i]);
        double best_e = 0.0;
        int chunk_e = L->chunk;
        for (const ttt_form_rate *r = rows; r && r->d > 0; r++) {
            int seen = 0; /* each chunk once */
            for (const ttt_form_rate *q = rows; q < r && !seen; q++) seen = q->chunk == r->chunk;
            if (seen) continue;
            const double t = estimate(rows, cand[i], L, in, r->chunk);
            if (t > 0.0 && (best_e == 0.0 || t < best_e)) {
                best_e = t;
                chunk_e = r->chunk > 0 ? r->chunk : L->chunk;
            }
        }
        if (best_e == 0.0) continue;
        const double tok_s = (double)in->T / best_e;
        if (best == 0.0 || best_e < best) {
            if (plan->costed) {
                plan->other = plan->entry;
                plan->other_chunk = plan->chunk;
                plan->other_tok_s = plan->tok_s;
            }
            best = best_e;
            plan->entry = cand[i];
            plan->chunk = chunk_e;
            plan->tok_s = tok_s;
            plan->costed = 1;
        } else if (!plan->other || tok_s > plan->other_tok_s) {
            plan->other = cand[i];
            plan->other_chunk = chunk_e;
            plan->other_tok_s = tok_s;
        }
    }
    if (!plan->costed) plan->entry = cand[0];
    return plan->entry;
}

static int reads_chunk(const ttt_form_entry *e) {
    for (const ttt_form_rate *r = e ? e->rates : NULL; r && r->d > 0; r++)
        if (r->chunk > 0) return 1;
    return 0;
}

static void tok_text(char *buf, size_t len, double tok_s) {
    if (tok_s >= 1e6)
        snprintf(buf, len, "%.2fM", tok_s / 1e6);
    else
        snprintf(buf, len, "%.0fk", tok_s / 1e3);
}

void ttt_form_plan_describe(const ttt_form_plan *plan, char *buf, size_t len) {
    const ttt_form_entry *e = plan->entry;
    if (!e) {
        snprintf(buf, len, "none");
        return;
    }
    if (!plan->costed) {
        snprintf(buf, len, "%s, layer.chunk %d (%s)", e->form, plan->chunk,
                 plan->why ? plan->why : "the highest auto_rank");
        return;
    }
    char c1[32] = "", c2[32] = "", t1[32], t2[32];
    if (reads_chunk(e)) snprintf(c1, sizeof c1, " C=%d", plan->chunk);
    tok_text(t1, sizeof t1, plan->tok_s);
    if (!plan->other) {
        snprintf(buf, len, "%s%s (est. %s tok/s; the only measured form)", e->form, c1, t1);
        return;
    }
    if (reads_chunk(plan->other)) snprintf(c2, sizeof c2, " C=%d", plan->other_chunk);
    tok_text(t2, sizeof t2, plan->other_tok_s);
    snprintf(buf, len, "%s%s (est. %s tok/s vs %s%s %s)", e->form, c1, t1, plan->other->form, c2,
             t2);
}

const ttt_form_entry *ttt_form_choose(const ttt_layer *L, const ttt_form_inputs *in,
                                      ttt_error *err) {
    ttt_form_plan plan;
    return ttt_form_plan_with(NULL, L, in, &plan, err);
}

const char *ttt_form_one_step(const ttt_layer *L) {
    return L->substeps > 1 ? "it takes one delta step per token; steps_per_token > 1 (Gated "
                             "DeltaProduct) runs form: recurrent or chunkwise (the "
                             "delta_product entries) or generic"
                           : NULL;
}

ttt_status ttt_form_rows_out_of_memory(ttt_error *err, const char *form, int d_k, int d_v) {
    return ttt_error_set(err, TTT_ERR_NOMEM,
                         "%s: out of memory for the recurrent kernel's rows (d_k = %d, d_v = %d)",
                         form, d_k, d_v);
}

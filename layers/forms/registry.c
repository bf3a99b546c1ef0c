/* The registry of computation forms (form.h), generated from layers/forms/form_list.h, and the
 * choice among its entries. */
#include "form.h"

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

static int is_auto(const ttt_layer *L) { return !L->form || strcmp(L->form, "auto") == 0; }

/* Why no entry of form L->form computes L for `in` (in == NULL: for any inputs). An entry whose
 * tuple test passes explains best (its reason is about the inputs); else the reasons of the
 * form's families, joined. */
static void why_not(const ttt_layer *L, const ttt_form_inputs *in, char *buf, size_t len) {
    for (int i = 0; i < N_FORMS; i++) {
        const ttt_form_entry *e = registry[i];
        if (strcmp(e->form, L->form) != 0 || e->available(L, NULL)) continue;
        const char *w = in ? e->available(L, in) : NULL;
        if (w) {
            snprintf(buf, len, "%s", w);
            return;
        }
    }
    size_t w = 0;
    buf[0] = '\0';
    for (int i = 0; i < N_FORMS && w < len; i++) {
        const ttt_form_entry *e = registry[i];
        if (strcmp(e->form, L->form) != 0) continue;
        w += (size_t)snprintf(buf + w, len - w, "%s%s: %s", w ? "; " : "", e->family,
                              e->available(L, NULL));
    }
    if (!w) snprintf(buf, len, "no form is named %s", L->form);
}

const char *ttt_form_unavailable(const ttt_layer *L) {
    static _Thread_local char buf[1024];
    if (is_auto(L)) return NULL;
    for (int i = 0; i < N_FORMS; i++)
        if (strcmp(registry[i]->form, L->form) == 0 && !registry[i]->available(L, NULL))
            return NULL;
    why_not(L, NULL, buf, sizeof buf);
    return buf;
}

const ttt_form_entry *ttt_form_choose(const ttt_layer *L, const ttt_form_inputs *in,
                                      ttt_error *err) {
    const ttt_form_entry *best = NULL;
    const int any = is_auto(L);
    for (int i = 0; i < N_FORMS; i++) {
        const ttt_form_entry *e = registry[i];
        if (any ? e->auto_rank <= 0 : strcmp(e->form, L->form) != 0) continue;
        if (e->available(L, in)) continue;
        if (!any) return e;
        if (!best || e->auto_rank > best->auto_rank) best = e;
    }
    if (best) return best;
    char why[1024];
    if (any)
        snprintf(why, sizeof why, "no registered form computes this layer");
    else
        why_not(L, in, why, sizeof why);
    ttt_error_set(err, TTT_ERR_UNSUPPORTED, "layer form %s is not available for these inputs: %s",
                  any ? "auto" : L->form, why);
    return NULL;
}

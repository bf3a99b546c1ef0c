/* Replicates: one summary row per configuration over its seeds (docs/results.md "Seeds"). */
#define _GNU_SOURCE /* fopencookie */
#include "results.h"
#include "fault.h"

#include <assert.h>
#include <dirent.h>
#include <fcntl.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include "results_internal.h"

/* ------------------------------------------------------------------------------------------ */
/* replicates: one row per configuration (docs/results.md "Seeds")                            */

void ttt_rows_free(ttt_rows *r) {
    free(r->rows);
    free(r->agg);
    free(r->best);
    free(r->best_rows);
    free(r->none);
    r->rows = NULL;
    r->agg = NULL;
    r->best = NULL;
    r->best_rows = NULL;
    r->none = NULL;
    r->n = r->n_best = 0;
}


int ttt_results_by_replicate(const void *a, const void *b) {
    const ttt_results_slot *p = a, *q = b;
    if (p->group != q->group) return p->group < q->group ? -1 : 1;
    if (p->member != q->member) return p->member < q->member ? -1 : 1;
    return (p->i > q->i) - (p->i < q->i);
}

/* cells: (group, k), records outside every group alone; members in record order */
int ttt_results_by_cell(const void *a, const void *b) {
    const ttt_results_slot *p = a, *q = b;
    const int pg = p->group < 0, qg = q->group < 0;
    if (pg != qg) return pg < qg ? -1 : 1;
    if (pg) return (p->i > q->i) - (p->i < q->i);
    if (p->group != q->group) return p->group < q->group ? -1 : 1;
    if (p->k != q->k) return p->k < q->k ? -1 : 1;
    return (p->i > q->i) - (p->i < q->i);
}

int ttt_results_same_cell(const ttt_results_slot *p, const ttt_results_slot *q) {
    return p->group >= 0 && p->group == q->group && p->k == q->k;
}

/* The key list `keys` (n of them) holds key? */
int ttt_results_key_in(char (*keys)[48], int n, const char *key) {
    for (int i = 0; i < n; i++)
        if (strcmp(keys[i], key) == 0) return 1;
    return 0;
}


int ttt_results_by_first(const void *a, const void *b) {
    const ttt_results_cell_span *p = a, *q = b;
    return (p->first > q->first) - (p->first < q->first);
}

/* One aggregated record from the records of slots [from, to). */
void ttt_results_aggregate(const ttt_results *res, const ttt_results_slot *sl, int from, int to,
                      char (*vary)[48], int nvary, ttt_record *o) {
    ttt_record_clear(o);
    for (int a = from; a < to; a++) {
        const ttt_record *r = &res->recs[sl[a].i];
        for (int f = 0; f < r->n; f++) {
            const ttt_field *fl = &r->f[f];
            if (!strcmp(fl->key, "seed") || !strcmp(fl->key, "point")) continue;
            if (ttt_record_get(o, fl->key)) continue;
            const int agg = fl->is_num && ttt_results_key_in(vary, nvary, fl->key);
            if (o->n + (agg ? 4 : 1) > TTT_RECORD_MAX_FIELDS - 1) continue; /* room for seeds */
            if (!fl->is_num) {
                ttt_record_str(o, fl->key, fl->str);
                continue;
            }
            if (!agg) {
                ttt_record_num(o, fl->key, fl->num);
                continue;
            }
            /* over the finite values of the cell's members */
            double sum = 0, lo = INFINITY, hi = -INFINITY;
            int n = 0;
            for (int b = from; b < to; b++) {
                const ttt_field *v = ttt_record_get(&res->recs[sl[b].i], fl->key);
                if (!v || !v->is_num || !isfinite(v->num)) continue;
                sum += v->num;
                lo = fmin(lo, v->num);
                hi = fmax(hi, v->num);
                n++;
            }
            const double mean = n ? sum / n : NAN;
            double ss = 0;
            for (int b = from; b < to; b++) {
                const ttt_field *v = ttt_record_get(&res->recs[sl[b].i], fl->key);
                if (v && v->is_num && isfinite(v->num)) ss += (v->num - mean) * (v->num - mean);
            }
            char key[64];
            ttt_record_num(o, fl->key, mean);
            snprintf(key, sizeof key, "%s_std", fl->key);
            ttt_record_num(o, key, n > 1 ? sqrt(ss / (n - 1)) : NAN);
            snprintf(key, sizeof key, "%s_min", fl->key);
            ttt_record_num(o, key, n ? lo : NAN);
            snprintf(key, sizeof key, "%s_max", fl->key);
            ttt_record_num(o, key, n ? hi : NAN);
        }
    }
    ttt_record_num(o, "seeds", to - from);
}

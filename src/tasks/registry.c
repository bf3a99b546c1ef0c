#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "task.h"
#include "fault.h"

#define TTT_TASK(id) extern const ttt_task ttt_task_##id;
#include "task_list.h"
#undef TTT_TASK

static const ttt_task *const tasks[] = {
#define TTT_TASK(id) &ttt_task_##id,
#include "task_list.h"
#undef TTT_TASK
};
static const char *const task_names[] = {
#define TTT_TASK(id) #id,
#include "task_list.h"
#undef TTT_TASK
};
#define N_TASKS ((int)(sizeof tasks / sizeof tasks[0]))

const ttt_task *ttt_task_find(const char *name) {
    for (int i = 0; i < N_TASKS; i++)
        if (name && strcmp(tasks[i]->name, name) == 0) return tasks[i];
    return NULL;
}
int ttt_task_count(void) { return N_TASKS; }
const ttt_task *ttt_task_at(int i) { return (i >= 0 && i < N_TASKS) ? tasks[i] : NULL; }
const char *const *ttt_task_names(void) { return task_names; }

ttt_status ttt_task_read_ints(const ttt_cfg_node *map, const char *key, long **out, int *n,
                              ttt_error *err) {
    const ttt_cfg_node *list = ttt_cfg_get(map, key);
    *out = NULL;
    *n = 0;
    /* the schema accepts a single int as a list of one */
    const int len = list && list->kind == TTT_CFG_SEQ ? list->n : 1;
    long *v = ttt_fault_malloc(sizeof *v * (size_t)(len > 0 ? len : 1)); /* an empty list is valid */
    if (!v) return ttt_error_set(err, TTT_ERR_NOMEM, "out of memory");
    for (int i = 0; i < len; i++) {
        const ttt_cfg_node *item = list && list->kind == TTT_CFG_SEQ ? list->items[i] : list;
        ttt_status s = ttt_cfg_as_int(item, &v[i], err);
        if (s != TTT_OK) {
            free(v);
            return s;
        }
    }
    *out = v;
    *n = len;
    return TTT_OK;
}

/* A number as the text config.resolved.yaml shows: the table's own spelling when it is the
 * option's default at the precision the task holds it, else the shortest text that reads back
 * the same number (docs/design.md "The plan pass"). */
static const char *number_text(const ttt_option *o, const ttt_task_value *v, char *buf,
                               size_t len) {
    if (o->type == TTT_OPT_BOOL) return v->number != 0.0 ? "true" : "false";
    if (o->type == TTT_OPT_INT) {
        snprintf(buf, len, "%.0f", v->number);
        return buf;
    }
    const double def = o->def ? strtod(o->def, NULL) : NAN;
    if (v->single ? (float)v->number == (float)def : v->number == def) return o->def;
    for (int digits = v->single ? 6 : 15; digits <= 17; digits++) {
        snprintf(buf, len, "%.*g", digits, v->number);
        const double back = strtod(buf, NULL);
        if (v->single ? (float)back == (float)v->number : back == v->number) break;
    }
    return buf;
}

/* The value of option o as nodes located at `where`; NULL (counted) when memory runs out. */
static ttt_cfg_node *value_node(const ttt_option *o, const ttt_task_value *v,
                                const ttt_cfg_node *where) {
    char buf[64];
    switch (o->type) {
    case TTT_OPT_INT:
    case TTT_OPT_FLOAT:
    case TTT_OPT_BOOL: return ttt_cfg_new_scalar(number_text(o, v, buf, sizeof buf), where);
    case TTT_OPT_STRING:
    case TTT_OPT_CHOICE:
        return ttt_cfg_new_scalar(v->text && v->text[0] ? v->text : NULL, where);
    case TTT_OPT_INT_LIST: {
        ttt_cfg_node *seq = ttt_cfg_new_seq(where);
        for (int i = 0; seq && i < v->n; i++) {
            snprintf(buf, sizeof buf, "%ld", v->list[i]);
            ttt_cfg_seq_push(seq, ttt_cfg_new_scalar(buf, where));
        }
        return seq;
    }
    case TTT_OPT_FLOAT_LIST:
    case TTT_OPT_MAP: break; /* no task option is one (a task adding one writes its rendering) */
    }
    return NULL;
}

ttt_status ttt_task_section(const ttt_option *options, const ttt_cfg_node *given,
                            const ttt_task_value *values, int n_values, ttt_cfg_node **out,
                            ttt_error *err) {
    *out = NULL;
    const unsigned long oom_mark = ttt_cfg_alloc_failures();
    ttt_cfg_node *sec = ttt_cfg_new_map(given);
    for (int i = 0; sec && i < given->n; i++)
        ttt_cfg_map_set(sec, given->keys[i], ttt_cfg_clone(given->items[i]));
    for (const ttt_option *o = options; sec && o->name; o++) {
        if (ttt_cfg_get(given, o->name)) continue;
        const ttt_task_value *v = NULL;
        for (int i = 0; i < n_values && !v; i++)
            if (strcmp(values[i].key, o->name) == 0) v = &values[i];
        ttt_cfg_node *n = v ? value_node(o, v, given) : NULL;
        if (!v || (!n && (o->type == TTT_OPT_FLOAT_LIST || o->type == TTT_OPT_MAP))) {
            ttt_cfg_free(n);
            ttt_cfg_free(sec);
            return ttt_error_set(err, TTT_ERR_ARG,
                                 "task.%s: the task gives no value of it for "
                                 "config.resolved.yaml",
                                 o->name);
        }
        ttt_cfg_map_set(sec, o->name, n);
    }
    if (!sec || ttt_cfg_alloc_failures() != oom_mark) {
        ttt_cfg_free(sec);
        return ttt_cfg_out_of_memory(err, "the task section");
    }
    *out = sec;
    return TTT_OK;
}

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

#include <string.h>

#include "task.h"

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

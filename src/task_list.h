/* The registry of tasks: one line each (src/task_NAME.c defines `const ttt_task ttt_task_NAME`). */
TTT_TASK(memory)
TTT_TASK(equivalence)

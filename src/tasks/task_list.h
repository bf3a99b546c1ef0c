/* The registry of tasks: one line each (src/tasks/NAME.c defines `const ttt_task ttt_task_NAME`,
 * with a `tiny` experiment that tests/test_plan.c runs). */
TTT_TASK(memory)
TTT_TASK(equivalence)
TTT_TASK(mqar)
TTT_TASK(regression)
TTT_TASK(lm)
TTT_TASK(benchmark)
TTT_TASK(softmax_approx)

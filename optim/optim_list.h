/* The registry of inner optimizers: one line each. To add an optimizer, write optim/NAME.c
 * defining `const ttt_optim ttt_optim_NAME = {...};` and add TTT_OPTIM(NAME) below. */
TTT_OPTIM(sgd)
TTT_OPTIM(momentum)
TTT_OPTIM(muon)
TTT_OPTIM(large_batch)
TTT_OPTIM(adam)
TTT_OPTIM(lion)
TTT_OPTIM(learned)
TTT_OPTIM(rls)
TTT_OPTIM(mesa)

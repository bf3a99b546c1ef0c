/* The registry of computation forms: one line per (family, form). To add a form, write a C file
 * in its family's folder defining `const ttt_form_entry ttt_form_FAMILY_FORM = {...};` (form.h)
 * and add TTT_FORM_ENTRY(FAMILY, FORM) below (docs/forms.md). Order breaks ties of auto_rank.
 * A device entry is named by its device instead (TTT_FORM_ENTRY(delta_rule, cuda) defines
 * ttt_form_delta_rule_cuda, whose form name is "chunkwise"; docs/forms.md "Device entries"). */
TTT_FORM_ENTRY(generic, generic)
TTT_FORM_ENTRY(linear_attention, recurrent)
TTT_FORM_ENTRY(linear_attention, parallel)
TTT_FORM_ENTRY(linear_attention, chunkwise)
TTT_FORM_ENTRY(delta_rule, recurrent)
TTT_FORM_ENTRY(delta_rule, parallel)
TTT_FORM_ENTRY(delta_rule, chunkwise)
TTT_FORM_ENTRY(ttt_linear, dual)
TTT_FORM_ENTRY(titans, chunkwise)
TTT_FORM_ENTRY(lact, chunkwise)
TTT_FORM_ENTRY(linear_attention, scan)
TTT_FORM_ENTRY(delta_product, recurrent)
TTT_FORM_ENTRY(delta_product, chunkwise)
TTT_FORM_ENTRY(kda, chunkwise)
TTT_FORM_ENTRY(loglinear, recurrent)
TTT_FORM_ENTRY(loglinear, chunkwise)
TTT_FORM_ENTRY(mesa_net, recurrent)
TTT_FORM_ENTRY(mesa_net, cg)
TTT_FORM_ENTRY(mesa_net, chunkwise)
#ifdef TTT_HAVE_CUDA
TTT_FORM_ENTRY(linear_attention, cuda)
TTT_FORM_ENTRY(delta_rule, cuda)
#endif

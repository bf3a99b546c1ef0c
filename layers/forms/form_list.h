/* The registry of computation forms: one line per (family, form). To add a form, write a C file
 * in its family's folder defining `const ttt_form_entry ttt_form_FAMILY_FORM = {...};` (form.h)
 * and add TTT_FORM_ENTRY(FAMILY, FORM) below (docs/forms.md). Order breaks ties of auto_rank. */
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

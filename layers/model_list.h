/* Registries of fast-weight models and inner losses: one line each. */
#ifdef TTT_MODEL
TTT_MODEL(linear)
#endif
#ifdef TTT_LOSS
TTT_LOSS(dot)
TTT_LOSS(squared)
#endif

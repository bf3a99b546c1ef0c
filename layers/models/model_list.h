/* Registries of fast-weight models and inner losses: one line each. */
#ifdef TTT_MODEL
TTT_MODEL(linear)
TTT_MODEL(ttt_linear)
TTT_MODEL(ttt_mlp)
TTT_MODEL(swiglu)
#endif
#ifdef TTT_LOSS
TTT_LOSS(dot)
TTT_LOSS(squared)
TTT_LOSS(recon)
#endif

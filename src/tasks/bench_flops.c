/* The benchmark's FLOP counts (the header comment of benchmark.c) and the form a training step
 * runs. */
#include <cblas.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "autograd.h"
#include "blas.h"
#include "fault.h"
#include "data.h"
#include "mixer.h"
#include "seqmodel.h"
#include "rng.h"
#include "safetensors.h"
#include "task.h"
#include "trained.h"
#include "layer.h"
#include "diagonal.h"
#include "scan.h"
#include "bench_internal.h"

/* ---- FLOP counts (see the header comment of benchmark.c) ---- */

/* The form a sequence model's TTT layers run in a training step: tape recorded, with the gates
 * and learning rates the model feeds them. */
const ttt_form_entry *ttt_bench_train_form_entry(const ttt_seq_model_config *mc) {
    ttt_form_inputs in = ttt_form_inputs_plain(&mc->layer, 0, 1);
    in.eta = mc->eta != TTT_ETA_NONE;
    in.gate = mc->gate == TTT_GATE_VECTOR ? TTT_FORM_GATE_KEY
              : mc->gate == TTT_GATE_NONE ? TTT_FORM_GATE_NONE
                                          : TTT_FORM_GATE_TOKEN;
    return ttt_form_choose(&mc->layer, &in, NULL);
}

const char *ttt_bench_train_form_used(const ttt_seq_model_config *mc) {
    const ttt_form_entry *e = ttt_bench_train_form_entry(mc);
    return e ? e->form : "none";
}

/* The mixer is a TTT layer built from the `layer:` section (its registry entry's answer). */
int ttt_bench_uses_layer(const ttt_seq_model_config *mc) {
    return ttt_mixer_at(mc->mixer)->uses_layer;
}

/* The FLOPs of the form that runs L for inputs `in` (the registry entry's count), or NAN. */
double ttt_bench_form_flops(const ttt_layer *L, const ttt_form_inputs *in) {
    const ttt_form_entry *e = ttt_form_choose(L, in, NULL);
    return e && e->flops ? e->flops(L, in->T) : NAN;
}

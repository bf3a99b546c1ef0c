/* Every private header of libttt, for white-box tests. Programs use the public API,
 * include/ttt/ttt.h. */
#ifndef TTT_INTERNAL_H
#define TTT_INTERNAL_H

#include "adamw.h"
#include "apply.h"
#include "autograd.h"
#include "checkpoint.h"
#include "config.h"
#include "data.h"
#include "finite.h"
#include "trained.h"
#include "train.h"
#include "experiment.h"
#include "kernels.h"
#include "seqmodel.h"
#include "normalized.h"
#include "ops.h"
#include "optim.h"
#include "params.h"
#include "progress.h"
#include "results.h"
#include "results_internal.h"
#include "rng.h"
#include "rope.h"
#include "safetensors.h"
#include "softmax_attention.h"
#include "status.h"
#include "strbuf.h"
#include "task.h"
#include "tensor.h"
#include "ttt_dual.h"
#include "layer.h"

#endif

/* libttt: linear attention and its descendants as online optimization of a fast-weight state.
 * The one include for users of the library. */
#ifndef TTT_H
#define TTT_H

#include "adamw.h"
#include "apply.h"
#include "autograd.h"
#include "checkpoint.h"
#include "config.h"
#include "data.h"
#include "experiment.h"
#include "forms.h"
#include "model.h"
#include "normalized.h"
#include "ops.h"
#include "optim.h"
#include "params.h"
#include "progress.h"
#include "results.h"
#include "rng.h"
#include "rope.h"
#include "safetensors.h"
#include "softmax_attention.h"
#include "status.h"
#include "task.h"
#include "tensor.h"
#include "ttt_dual.h"
#include "ttt_layer.h"

#endif

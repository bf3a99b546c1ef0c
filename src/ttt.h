/* libttt: linear attention and its descendants as online optimization of a fast-weight state.
 * The one include for users of the library. */
#ifndef TTT_H
#define TTT_H

#include "config.h"
#include "experiment.h"
#include "forms.h"
#include "model.h"
#include "ops.h"
#include "optim.h"
#include "progress.h"
#include "results.h"
#include "rng.h"
#include "status.h"
#include "task.h"
#include "tensor.h"
#include "ttt_layer.h"

#endif

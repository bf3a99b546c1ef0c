/* Registries of models and losses, generated from layers/models/model_list.h. */
#include <string.h>

#include "model.h"

#define TTT_MODEL(id) extern const ttt_model ttt_model_##id;
#define TTT_LOSS(id) extern const ttt_loss ttt_loss_##id;
#include "model_list.h"
#undef TTT_MODEL
#undef TTT_LOSS

static const ttt_model *const models[] = {
#define TTT_MODEL(id) &ttt_model_##id,
#include "model_list.h"
#undef TTT_MODEL
};
static const char *const model_names[] = {
#define TTT_MODEL(id) #id,
#include "model_list.h"
#undef TTT_MODEL
};
static const ttt_loss *const losses[] = {
#define TTT_LOSS(id) &ttt_loss_##id,
#include "model_list.h"
#undef TTT_LOSS
};
static const char *const loss_names[] = {
#define TTT_LOSS(id) #id,
#include "model_list.h"
#undef TTT_LOSS
};

#define N_MODELS ((int)(sizeof models / sizeof models[0]))
#define N_LOSSES ((int)(sizeof losses / sizeof losses[0]))

const ttt_model *ttt_model_find(const char *name) {
    for (int i = 0; i < N_MODELS; i++)
        if (name && strcmp(models[i]->name, name) == 0) return models[i];
    return NULL;
}
int ttt_model_count(void) { return N_MODELS; }
const ttt_model *ttt_model_at(int i) { return (i >= 0 && i < N_MODELS) ? models[i] : NULL; }
const char *const *ttt_model_names(void) { return model_names; }

const ttt_loss *ttt_loss_find(const char *name) {
    for (int i = 0; i < N_LOSSES; i++)
        if (name && strcmp(losses[i]->name, name) == 0) return losses[i];
    return NULL;
}
int ttt_loss_count(void) { return N_LOSSES; }
const ttt_loss *ttt_loss_at(int i) { return (i >= 0 && i < N_LOSSES) ? losses[i] : NULL; }
const char *const *ttt_loss_names(void) { return loss_names; }

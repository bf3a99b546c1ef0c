/* The registry of token mixers (mixer.h), generated from mixer_list.h. */
#include "mixer.h"

#include <string.h>

#define TTT_MIXER(name, ID) extern const ttt_mixer ttt_mixer_##name;
#include "mixer_list.h"
#undef TTT_MIXER

static const ttt_mixer *const registry[] = {
#define TTT_MIXER(name, ID) &ttt_mixer_##name,
#include "mixer_list.h"
#undef TTT_MIXER
};

#define N_MIXERS ((int)(sizeof registry / sizeof registry[0]))
_Static_assert(N_MIXERS == TTT_MIXER_COUNT, "the enum and the registry come from one list");

int ttt_mixer_count(void) { return N_MIXERS; }
const ttt_mixer *ttt_mixer_at(int i) { return (i >= 0 && i < N_MIXERS) ? registry[i] : NULL; }

const ttt_mixer *ttt_mixer_find(const char *name) {
    for (int i = 0; name && i < N_MIXERS; i++)
        if (strcmp(registry[i]->name, name) == 0) return registry[i];
    return NULL;
}

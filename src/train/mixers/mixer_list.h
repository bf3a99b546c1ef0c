/* The registry of token mixers: one line per mixer. To add one, write src/train/mixers/NAME.c
 * defining `const ttt_mixer ttt_mixer_NAME = {...};` (mixer.h) and add TTT_MIXER(NAME, ID)
 * below; NAME is the value of model.mixer, TTT_MIXER_ID its ttt_mixer_kind
 * (docs/extending.md "Adding a mixer"). The first line is the default. */
TTT_MIXER(ttt, TTT)
TTT_MIXER(softmax, SOFTMAX)
TTT_MIXER(fox, FOX)
TTT_MIXER(lru, LRU)
TTT_MIXER(mamba, MAMBA)
TTT_MIXER(rwkv7, RWKV7)
TTT_MIXER(path, PATH)

/* libFuzzer target: the .safetensors reader on arbitrary bytes, then `ttt apply`'s validation and
 * run on what it accepts. The body and its properties are in harness.h, shared with
 * tests/test_fuzz_regressions.c. Build and run: .ci/fuzz. */
#include "harness.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_report r;
    if (fuzz_safetensors_one(data, size, &r)) {
        fprintf(stderr, "fuzz_safetensors: property violated: %s\n", r.msg);
        abort();
    }
    return 0;
}

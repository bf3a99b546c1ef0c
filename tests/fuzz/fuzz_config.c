/* libFuzzer target: the YAML configuration path (load, --set overrides from "#set" comment lines,
 * sweep expansion, writing, experiment validation). The body and its properties are in
 * harness.h, shared with tests/test_fuzz_regressions.c. Build and run: .ci/fuzz. */
#include "harness.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_report r;
    if (fuzz_config_one(data, size, &r)) {
        fprintf(stderr, "fuzz_config: property violated: %s\n", r.msg);
        abort();
    }
    return 0;
}

// libFuzzer entry for the index harness (built with -DSTRATA_FUZZ=ON and clang).
#include "../fuzz_targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) { return strata::fuzz::checkpoint_index(data, size); }

/* libFuzzer's entry for one target, chosen when it is built
 * (-DFUZZ_FN=fuzz_hw): `make fuzz` links one binary per target. */
#include "tests/fuzz/fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    return FUZZ_FN(data, size);
}

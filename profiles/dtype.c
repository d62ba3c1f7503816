/* Precisions: names and storage sizes. */
#include "profiles/profiles.h"

static const char *const names[PROF_DT_COUNT] = {"fp32", "tf32", "fp16",
                                                 "bf16"};

const char *prof_dtype_name(prof_dtype d)
{
    return d >= 0 && d < PROF_DT_COUNT ? names[d] : "?";
}

int prof_dtype_bytes(prof_dtype d)
{
    return d == PROF_DT_FP16 || d == PROF_DT_BF16 ? 2 : 4;
}

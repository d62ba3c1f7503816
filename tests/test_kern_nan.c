/* The element-wise math on NaN and infinities: NaN in, NaN out, with no
 * undefined behaviour on the way (the ASan+UBSan run of `make test` checks
 * float-to-int conversions too). The row kernels, built with finite math,
 * promise no particular values for NaN inputs, only a defined run. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>

#include "kernels/kern_math.h"
#include "kernels/kernels.h"

Test(kern_nan, elementwise_math_propagates_nan)
{
    const float nan = NAN;
    cr_assert(isnan(kern_expf(nan)));
    cr_assert(isnan(kern_expf(-nan)));
    cr_assert(isnan(kern_tanhf(nan)));
    cr_assert(isnan(kern_gelu(nan)));
    cr_assert(isnan(kern_gelu_grad(nan)));
    cr_assert(isnan(kern_erff(nan)));
    cr_assert(isnan(kern_gelu_erf(nan)));
    cr_assert(isnan(kern_gelu_erf_grad(nan)));
    cr_assert_float_eq(kern_erff(INFINITY), 1.0f, 0);
    cr_assert_float_eq(kern_erff(-INFINITY), -1.0f, 0);
    /* infinities are clamped like any large value */
    cr_assert_float_eq(kern_expf(INFINITY), kern_expf(88.0f), 0);
    cr_assert_float_eq(kern_expf(-INFINITY), kern_expf(-87.0f), 0);
    cr_assert(isfinite(kern_expf(INFINITY)) && kern_expf(-INFINITY) >= 0);
    cr_assert_float_eq(kern_tanhf(INFINITY), 1.0f, 0);
    cr_assert_float_eq(kern_tanhf(-INFINITY), -1.0f, 0);
    float p = 1, m = 0, v = 0;
    kern_adamw_one(&p, &m, &v, nan, 1e-3f, 0.9f, 0.999f, 0.1f, 0.001f, 1e-8f,
                   0.0f);
    cr_assert(isnan(p) && isnan(m) && isnan(v));
}

/* NaN, infinities and ordinary values through the row kernels of every
 * instruction set. */
Test(kern_nan, row_kernels_take_nan)
{
    enum { N = 5, V = 37, B = 1, T = 5, C = 8, NH = 2 };
    const char *isas[] = {"base", "avx2"};
    for (int k = 0; k < 2; k++) {
        if (kern_set_isa(isas[k])) continue;
        float x[N * V], out[N * V], dx[N * V], probs[N * V], losses[N];
        int tgt[N] = {0, 5, 36, 7, 2};
        for (int i = 0; i < N * V; i++) {
            x[i] = (float)(i % 7) - 3.0f;
            dx[i] = 0;
        }
        x[3] = NAN;
        x[V + 1] = INFINITY;
        x[2 * V + 2] = -INFINITY;
        x[3 * V + 4] = -NAN;
        kern_gelu_forward(out, x, N * V);
        kern_gelu_backward(dx, x, x, N * V);
        kern_softmax_xent_forward(losses, probs, x, tgt, N, V);
        kern_softmax_xent_backward(dx, probs, tgt, 0.25f, N, V);
        float qkv[B * T * 3 * C], att[B * NH * T * T], o[B * T * C];
        for (int i = 0; i < B * T * 3 * C; i++) qkv[i] = x[i % (N * V)];
        kern_attention_forward(o, att, qkv, B, T, C, NH, 1);
        float p[N * V], m[N * V], v2[N * V];
        for (int i = 0; i < N * V; i++) p[i] = m[i] = v2[i] = 0.5f;
        kern_adamw_update(p, m, v2, x, N * V, 1e-3f, 0.9f, 0.999f, 1e-8f,
                          0.01f, 1.0f, 3);
        /* the last row holds ordinary values: untouched by the others */
        double sum = 0;
        for (int j = 0; j < V; j++) {
            int i = (N - 1) * V + j;
            sum += probs[i];
            cr_assert_float_eq(out[i], kern_gelu(x[i]), 1e-6, "%s", isas[k]);
        }
        cr_assert_float_eq(sum, 1.0, 1e-5, "%s: %g", isas[k], sum);
        cr_assert(isfinite(losses[N - 1]), "%s", isas[k]);
    }
    kern_set_isa("avx2");
}

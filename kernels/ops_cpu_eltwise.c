/* The element-wise ops whose cost shows in a step, GELU (a tanh per
 * element, forward and backward) and AdamW (a square root and a division
 * per parameter), in their own file: compiled at O3 with finite math so
 * the clamps of kern_tanhf become min/max and the loops vectorise (GELU
 * about 4x faster than the scalar loop).
 * Finite math assumes finite inputs; a NaN in gives an unspecified finite
 * or NaN out, and the trainer stops on a non-finite loss anyway. */
#pragma GCC optimize("O3", "finite-math-only", "no-signed-zeros", "no-math-errno", "no-trapping-math")

#include "kernels/kernels.h"

#include <math.h>

#include "kernels/kern_math.h"

void kern_gelu_forward(float *out, const float *inp, size_t n)
{
    for (size_t i = 0; i < n; i++) out[i] = kern_gelu(inp[i]);
}

void kern_gelu_backward(float *dinp, const float *inp, const float *dout,
                        size_t n)
{
    for (size_t i = 0; i < n; i++) dinp[i] += kern_gelu_grad(inp[i]) * dout[i];
}


/* restrict (compatible with the list's prototype: top-level qualifiers of
 * parameters do not count) lets the loop vectorise without alias checks. */
void kern_adamw_update(float *restrict p, float *restrict m,
                       float *restrict v, const float *restrict g, size_t n,
                       float lr, float beta1, float beta2, float eps, float wd,
                       float grad_scale, int t)
{
    float bc1 = (float)(1.0 - pow(beta1, t));
    float bc2 = (float)(1.0 - pow(beta2, t));
    for (size_t i = 0; i < n; i++)
        kern_adamw_one(&p[i], &m[i], &v[i], g[i] * grad_scale, lr, beta1,
                       beta2, bc1, bc2, eps, wd);
}

/* Element-wise math shared by the CPU kernels and the CUDA kernels: one
 * definition, compiled for the host by cc and for host and device by nvcc.
 * Everything here is a pure function of its arguments (no state, no I/O).
 * fp32 throughout; the error bounds quoted are against float64. */
#ifndef SLUICE_KERN_MATH_H
#define SLUICE_KERN_MATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define KERN_HD __host__ __device__ __forceinline__
#else
#define KERN_HD static inline
#endif

/* sqrt(2/pi), the constant of GPT-2's tanh approximation of GELU. */
#define KERN_GELU_SCALE 0.7978845608028654f
#define KERN_GELU_CUBIC 0.044715f

/* exp(x) for x in any range, relative error below 3e-7 on [-87, 88]
 * (values outside are clamped: exp(-87) ~ 1.6e-38 stands in for 0; NaN
 * gives NaN). Host code calls no libm here, so the loops that use it stay
 * cheap: x = k ln2 + r with |r| <= ln2/2, e^r by its degree-6 Taylor
 * polynomial (remainder r^7/7! < 1.3e-7), 2^k assembled from the exponent
 * bits. k is read from the bits of the rounded float, never converted
 * from float to int: a NaN (which the clamps let through) would make that
 * conversion undefined; here it only makes r, and so the result, NaN. */
KERN_HD float kern_expf(float x)
{
#ifdef __CUDA_ARCH__
    return expf(x);
#else
    x = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
    /* Adding 1.5*2^23 rounds to the nearest integer in float arithmetic. */
    float t = x * 1.4426950408889634f + 12582912.0f;
    float k = t - 12582912.0f;
    /* ln2 split in a part exact in float and the rest (Cody-Waite). */
    float r = x - k * 0.693145751953125f - k * 1.4286068203094172e-06f;
    float p = 1.0f + r * (1.0f + r * (0.5f + r * (1.6666667e-1f +
              r * (4.1666668e-2f + r * (8.3333338e-3f + r * 1.3888889e-3f)))));
    /* t = 1.5*2^23 + k exactly (|k| <= 127): its low mantissa bits
     * are 2^22 + k. Unsigned arithmetic: wraps, never overflows. */
    uint32_t tb;
    memcpy(&tb, &t, sizeof tb);
    uint32_t bits = (tb - 0x4B400000u + 127u) << 23;
    float s;
    memcpy(&s, &bits, sizeof s);
    return p * s;
#endif
}

/* tanh(x) as 1 - 2/(e^{2x}+1): absolute error below 2e-7 everywhere
 * (relative error grows near 0, which GELU does not mind: it multiplies
 * by x/2). Clamped at |x| = 10 where tanh is 1 in float. */
KERN_HD float kern_tanhf(float x)
{
#ifdef __CUDA_ARCH__
    return tanhf(x);
#else
    x = x < -10.0f ? -10.0f : (x > 10.0f ? 10.0f : x);
    return 1.0f - 2.0f / (kern_expf(2.0f * x) + 1.0f);
#endif
}

/* GELU, tanh form (GPT-2): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). */
KERN_HD float kern_gelu(float x)
{
    float u = KERN_GELU_SCALE * (x + KERN_GELU_CUBIC * x * x * x);
    return 0.5f * x * (1.0f + kern_tanhf(u));
}

/* d gelu / dx. */
KERN_HD float kern_gelu_grad(float x)
{
    float u = KERN_GELU_SCALE * (x + KERN_GELU_CUBIC * x * x * x);
    float th = kern_tanhf(u);
    float sech2 = 1.0f - th * th;
    return 0.5f * (1.0f + th) +
           0.5f * x * sech2 * KERN_GELU_SCALE *
               (1.0f + 3.0f * KERN_GELU_CUBIC * x * x);
}

/* erf(x) by Abramowitz and Stegun 7.1.26 (absolute error below 1.5e-7
 * in exact arithmetic): 1 - (a1 t + ... + a5 t^5) e^{-x^2} with
 * t = 1/(1 + p|x|), odd. The C library's erff is a call per element, which
 * made BERT's GELU take 15% of a step on the CPU; this one vectorizes. */
KERN_HD float kern_erff(float x)
{
#ifdef __CUDA_ARCH__
    return erff(x);
#else
    float a = x < 0.0f ? -x : x;
    a = a > 10.0f ? 10.0f : a;
    float t = 1.0f / (1.0f + 0.3275911f * a);
    float poly = t * (0.254829592f + t * (-0.284496736f + t * (1.421413741f +
                 t * (-1.453152027f + t * 1.061405429f))));
    float y = 1.0f - poly * kern_expf(-a * a);
    return x < 0.0f ? -y : y;
#endif
}

/* GELU's exact form, x Phi(x) = x (1 + erf(x / sqrt 2)) / 2 (Hugging
 * Face's "gelu", BERT's), and its derivative Phi(x) + x phi(x). */
KERN_HD float kern_gelu_erf(float x)
{
    return 0.5f * x * (1.0f + kern_erff(x * 0.70710678118654752f));
}

KERN_HD float kern_gelu_erf_grad(float x)
{
    return 0.5f * (1.0f + kern_erff(x * 0.70710678118654752f)) +
           x * 0.39894228040143268f * kern_expf(-0.5f * x * x);
}

/* One AdamW step for one parameter (decoupled weight decay, bias
 * correction by the step count t >= 1; bc1 = 1 - beta1^t, bc2 = 1 -
 * beta2^t precomputed by the caller). g is already scaled (clipping). */
KERN_HD void kern_adamw_one(float *p, float *m, float *v, float g, float lr,
                            float beta1, float beta2, float bc1, float bc2,
                            float eps, float wd)
{
    float mm = beta1 * *m + (1.0f - beta1) * g;
    float vv = beta2 * *v + (1.0f - beta2) * g * g;
    *m = mm;
    *v = vv;
    float mhat = mm / bc1;
    /* vhat >= 0 already; fabsf tells the compiler so, which lets the CPU
     * loop vectorise (no errno path for sqrt of a negative). */
    float vhat = fabsf(vv / bc2);
    *p -= lr * (mhat / (sqrtf(vhat) + eps) + wd * *p);
}

/* The logistic sigmoid; SiLU (swish) x sigmoid(x) and its derivative
 * s (1 + x (1 - s)). */
KERN_HD float kern_sigmoid(float x)
{
    return 1.0f / (1.0f + kern_expf(-x));
}

KERN_HD float kern_silu(float x)
{
    return x * kern_sigmoid(x);
}

KERN_HD float kern_silu_grad(float x)
{
    float s = kern_sigmoid(x);
    return s * (1.0f + x * (1.0f - s));
}

/* RoPE's frequency of pair i of a head of hs channels: base^(-2i/hs)
 * (Llama 2's base 10000, Llama 3's 500000), in double. */
KERN_HD double kern_rope_freq(int i, int hs, float base)
{
    return pow((double)base, -2.0 * i / hs);
}

/* cos and sin of RoPE's angle for position t and pair i: t times the
 * pair's frequency, in double so that the angle of a long sequence's
 * last positions keeps its digits, then rounded. */
KERN_HD void kern_rope_cs(int t, int i, int hs, float base, float *c,
                          float *s)
{
    double a = (double)t * kern_rope_freq(i, hs, base);
    *c = (float)cos(a);
    *s = (float)sin(a);
}

#endif

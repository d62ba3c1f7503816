/* QLoRA's 4-bit base in the executor (exec.h): a frozen weight slice
 * stored as NF4 codes with double-quantized block absmaxes, quantized
 * from the whole tensor so that every layout (pipeline cuts, tensor-
 * parallel rows or columns) rounds each weight the same way. The kernels
 * dequantize (kern nf4_dequantize); this file quantizes, on the host. */
#include <math.h>
#include <string.h>

#include "exec/exec.h"

static const float levels[16] = {KERN_NF4_LEVELS};

exec_nf4 exec_nf4_geom(size_t flat0, size_t rows, size_t cols, size_t ld)
{
    exec_nf4 q;
    memset(&q, 0, sizeof q);
    q.flat0 = (long long)flat0;
    q.rows = (int)rows;
    q.cols = (int)cols;
    q.ld = (int)ld;
    size_t n = rows * cols;
    if (!n) return q;
    size_t last = flat0 + (rows - 1) * ld + cols - 1;
    q.b0 = (long long)(flat0 / KERN_NF4_BLOCK);
    size_t b1 = last / KERN_NF4_BLOCK;
    q.nb = b1 - (size_t)q.b0 + 1;
    q.ng = b1 / KERN_NF4_GROUP - (size_t)q.b0 / KERN_NF4_GROUP + 1;
    q.floats = 2 * q.ng + (q.nb + (n + 1) / 2 + sizeof(float) - 1) /
                              sizeof(float);
    return q;
}

void exec_nf4_view(const exec_nf4 *q, const float *st, const float **gstat,
                   const signed char **bcode, const unsigned char **codes)
{
    *gstat = st;
    *bcode = (const signed char *)(st + 2 * q->ng);
    *codes = (const unsigned char *)(*bcode + q->nb);
}

/* The absmax of block b of a tensor of tn elements. */
static float absmax(const float *t, size_t tn, size_t b)
{
    size_t lo = b * KERN_NF4_BLOCK, hi = lo + KERN_NF4_BLOCK;
    if (hi > tn) hi = tn;
    float m = 0;
    for (size_t i = lo; i < hi; i++) m = fmaxf(m, fabsf(t[i]));
    return m;
}

void exec_nf4_pack(const exec_nf4 *q, float *st, const float *t, size_t tn)
{
    float *gstat = st;
    signed char *bcode = (signed char *)(st + 2 * q->ng);
    unsigned char *codes = (unsigned char *)(bcode + q->nb);
    size_t n = (size_t)q->rows * (size_t)q->cols;
    memset(st, 0, q->floats * sizeof *st);
    if (!n) return;
    size_t nblocks = (tn + KERN_NF4_BLOCK - 1) / KERN_NF4_BLOCK;
    long long g0 = q->b0 / KERN_NF4_GROUP;
    /* each group's absmaxes: their mean and largest distance from it,
     * the 8-bit codes of the slice's blocks (QLoRA centres them before
     * quantizing; linear codes here, where bitsandbytes has dynamic
     * 8-bit floats) */
    for (size_t g = 0; g < q->ng; g++) {
        size_t lo = ((size_t)g0 + g) * KERN_NF4_GROUP,
               hi = lo + KERN_NF4_GROUP;
        if (hi > nblocks) hi = nblocks;
        double mean = 0;
        for (size_t b = lo; b < hi; b++) mean += absmax(t, tn, b);
        mean /= (double)(hi - lo);
        double s = 0;
        for (size_t b = lo; b < hi; b++)
            s = fmax(s, fabs(absmax(t, tn, b) - mean));
        gstat[2 * g] = (float)mean;
        gstat[2 * g + 1] = (float)s;
    }
    for (size_t k = 0; k < q->nb; k++) {
        size_t b = (size_t)q->b0 + k;
        size_t g = b / KERN_NF4_GROUP - (size_t)g0;
        float s = gstat[2 * g + 1];
        double c = s > 0 ? nearbyint(127.0 * (absmax(t, tn, b) -
                                              gstat[2 * g]) / s)
                         : 0;
        bcode[k] = (signed char)(c > 127 ? 127 : c < -127 ? -127 : c);
    }
    /* each weight: the nearest level of w / absmax (its block's exact
     * absmax, as QLoRA codes; dequantization has the 8-bit one) */
    size_t at = (size_t)-1;
    float a = 0;
    for (size_t i = 0, e = 0; i < (size_t)q->rows; i++)
        for (size_t j = 0; j < (size_t)q->cols; j++, e++) {
            size_t f = (size_t)q->flat0 + i * (size_t)q->ld + j;
            if (f / KERN_NF4_BLOCK != at)
                a = absmax(t, tn, at = f / KERN_NF4_BLOCK);
            float x = a > 0 ? t[f] / a : 0;
            int best = 0;
            for (int c = 1; c < 16; c++)
                if (fabsf(levels[c] - x) < fabsf(levels[best] - x)) best = c;
            codes[e / 2] |= (unsigned char)(best << (4 * (e & 1)));
        }
}

/* LoRA adapters of the executor's models (exec.h): which weight
 * matrices carry them, where they sit in their arena, how they start
 * and how they are merged into the model they adapt. The arena's layout is the model's,
 * not a run's: every pipeline, data- and tensor-parallel layout slices
 * the same adapters from it (exec_slices_build). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec/exec.h"

/* The matrices LoRA may adapt in a block, in arena order: the self-
 * attention's, a T5 decoder layer's cross-attention's (EXEC_LORA_CROSS),
 * the MLP's. GPT-2's MLP is not gated, so there a gate target adapts
 * nothing (as the model graph counts it: prof_model_finetune). */
static const unsigned gpt_targets[] = {
    PROF_LORA_Q, PROF_LORA_K, PROF_LORA_V, PROF_LORA_OUT,
    PROF_LORA_Q | EXEC_LORA_CROSS, PROF_LORA_K | EXEC_LORA_CROSS,
    PROF_LORA_V | EXEC_LORA_CROSS, PROF_LORA_OUT | EXEC_LORA_CROSS,
    PROF_LORA_GATE, PROF_LORA_UP, PROF_LORA_DOWN,
};
#define N_GPT_TARGETS (int)(sizeof gpt_targets / sizeof gpt_targets[0])

static int is_lora(const prof_finetune *f)
{
    return f && (f->kind == PROF_FT_LORA || f->kind == PROF_FT_QLORA);
}

/* Whether block l of c has matrix `bit` and f adapts it: a cross-
 * attention's in a T5's decoder layers only (they follow the encoder's
 * in the stack). */
static int adapts(const exec_gpt_config *c, const prof_finetune *f, int l,
                  unsigned bit)
{
    unsigned t = bit & ~EXEC_LORA_CROSS;
    if (!is_lora(f) || !(f->targets & t)) return 0;
    if (t == PROF_LORA_GATE && !c->swiglu) return 0;
    return !(bit & EXEC_LORA_CROSS) || (c->t5 && l >= c->layers);
}

void exec_lora_dims(const exec_gpt_config *c, unsigned bit, size_t *k,
                    size_t *n)
{
    size_t C = c->hidden, F = c->ffn, D = exec_inner(c),
           KV = (size_t)exec_kv_heads(c) * (size_t)exec_hs(c);
    unsigned t = bit & ~EXEC_LORA_CROSS;
    *k = t == PROF_LORA_DOWN ? F : t == PROF_LORA_OUT ? D : C;
    *n = t == PROF_LORA_UP || t == PROF_LORA_GATE ? F
       : t == PROF_LORA_K || t == PROF_LORA_V ? KV
       : t == PROF_LORA_Q ? D : C;
}

size_t exec_lora_table(const exec_gpt_config *c, const prof_finetune *f,
                       exec_tensor *t, int *n)
{
    size_t off = 0, R = is_lora(f) ? (size_t)f->rank : 0;
    int nt = 0;
    for (int l = 0; R && l < exec_stack_layers(c); l++)
        for (int i = 0; i < N_GPT_TARGETS; i++) {
            unsigned bit = gpt_targets[i];
            if (!adapts(c, f, l, bit)) continue;
            size_t k, nn;
            exec_lora_dims(c, bit, &k, &nn);
            for (int part = 0; part < 2; part++, nt++) {
                size_t sz = R * (part ? nn : k);
                if (t) {
                    snprintf(t[nt].name, sizeof t[nt].name, "l%d.%s%s.%c", l,
                             bit & EXEC_LORA_CROSS ? "x" : "",
                             prof_lora_target_name(bit & ~EXEC_LORA_CROSS),
                             part ? 'B' : 'A');
                    t[nt].off = off;
                    t[nt].n = sz;
                    /* matrices: decayed as the model's are */
                    t[nt].decay = 1;
                }
                off += sz;
            }
        }
    *n = nt;
    return off;
}

int exec_lora_index(const exec_gpt_config *c, const prof_finetune *f,
                    int layer, unsigned target)
{
    if (layer < 0 || layer >= exec_stack_layers(c) ||
        !adapts(c, f, layer, target))
        return -1;
    int k = 0;
    for (int l = 0; l <= layer; l++)
        for (int i = 0; i < N_GPT_TARGETS; i++) {
            if (l == layer && gpt_targets[i] == target) return k;
            k += adapts(c, f, l, gpt_targets[i]);
        }
    return -1;
}

void exec_lora_init(const exec_gpt_config *c, const prof_finetune *f,
                    uint64_t seed, float *lora)
{
    int n;
    size_t total = exec_lora_table(c, f, NULL, &n);
    if (!total) return;
    exec_tensor *t = util_malloc(sizeof *t * (size_t)n);
    exec_lora_table(c, f, t, &n);
    /* a stream of its own, apart from the base's initialisation; A as
     * LoRA's reference implementation starts it (Kaiming-uniform with
     * a = sqrt(5): bound 1/sqrt(fan_in), fan_in = k), B zero */
    uint64_t s = seed ^ 0x4c6f5241u;
    for (int i = 0; i < n; i += 2) {
        size_t k = t[i].n / (size_t)f->rank;
        double bound = 1.0 / sqrt((double)k);
        for (size_t j = 0; j < t[i].n; j++) {
            double u = (double)(exec_splitmix(&s) >> 11) / 9007199254740992.0;
            lora[t[i].off + j] = (float)((2 * u - 1) * bound);
        }
        memset(lora + t[i + 1].off, 0, t[i + 1].n * sizeof *lora);
    }
    free(t);
}

/* Where target's W of block l sits in the model's arena: its tensor and
 * first row (the kernels store W as n rows of k). A T5 decoder layer's
 * cross-attention's are its layer's rows of the cross tensors. */
static size_t target_at(const exec_gpt_config *c, const exec_tensor *tt,
                        int l, unsigned bit)
{
    size_t C = c->hidden, F = c->ffn, L = (size_t)l, D = exec_inner(c),
           QKV = exec_qkv_rows(c), FC = exec_fc_rows(c),
           KV = (QKV - D) / 2, X = L - (size_t)c->layers;
    switch (bit) {
    case PROF_LORA_Q: return tt[EXEC_P_QKVW].off + (L * QKV) * C;
    case PROF_LORA_K: return tt[EXEC_P_QKVW].off + (L * QKV + D) * C;
    case PROF_LORA_V: return tt[EXEC_P_QKVW].off + (L * QKV + D + KV) * C;
    case PROF_LORA_OUT: return tt[EXEC_P_ATTPROJW].off + L * C * D;
    case PROF_LORA_Q | EXEC_LORA_CROSS: return tt[EXEC_P_XQW].off + X * D * C;
    case PROF_LORA_K | EXEC_LORA_CROSS:
        return tt[EXEC_P_XKVW].off + X * 2 * D * C;
    case PROF_LORA_V | EXEC_LORA_CROSS:
        return tt[EXEC_P_XKVW].off + (X * 2 * D + D) * C;
    case PROF_LORA_OUT | EXEC_LORA_CROSS:
        return tt[EXEC_P_XOW].off + X * C * D;
    case PROF_LORA_GATE: return tt[EXEC_P_FCW].off + L * FC * C;
    case PROF_LORA_UP:
        return tt[EXEC_P_FCW].off + (L * FC + (c->swiglu ? F : 0)) * C;
    default: return tt[EXEC_P_FCPROJW].off + L * C * F;
    }
}

void exec_lora_merge(const exec_gpt_config *c, const prof_finetune *f,
                     const float *lora, float *params)
{
    int nt;
    if (!exec_lora_table(c, f, NULL, &nt)) return;
    exec_tensor *lt = util_malloc(sizeof *lt * (size_t)nt);
    exec_lora_table(c, f, lt, &nt);
    exec_tensor tt[EXEC_P_COUNT];
    exec_gpt_param_table(c, tt);
    size_t R = (size_t)f->rank;
    for (int l = 0; l < exec_stack_layers(c); l++)
        for (int i = 0; i < N_GPT_TARGETS; i++) {
            unsigned bit = gpt_targets[i];
            int a = exec_lora_index(c, f, l, bit);
            if (a < 0) continue;
            size_t k, n;
            exec_lora_dims(c, bit, &k, &n);
            const float *A = lora + lt[2 * a].off;
            const float *B = lora + lt[2 * a + 1].off;
            float *W = params + target_at(c, tt, l, bit);
            /* W as stored is x W's transpose: row o, column j gets
             * sum_r A[j][r] B[r][o], with A stored transposed (R x k) */
            for (size_t o = 0; o < n; o++)
                for (size_t j = 0; j < k; j++) {
                    double d = 0;
                    for (size_t r = 0; r < R; r++)
                        d += (double)A[r * k + j] * B[r * n + o];
                    W[o * k + j] = (float)((double)W[o * k + j] + d);
                }
        }
    free(lt);
}

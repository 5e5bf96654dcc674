// The CUDA kernels of the layer, fp32, on device pointers, each launched on `stream` (a
// cudaStream_t; void* here so that this header needs no CUDA headers). They mirror
// kernels/cpu op for op, with the same layouts and the same semantics, and are tested against
// them: on a GPU for real (tests/test_cuda.cpp), and everywhere through the CPU emulation of
// kernels/cuda/compat.h (tests/test_cuda_emulated.cpp). Launchers return at once; errors of
// the launch itself surface at the stream's next synchronisation.
//
// Shapes: n rows, h columns; b batch, s local tokens, heads, d per head; positions are
// *device* arrays of s global token positions (int64).
#pragma once
#include <cstdint>

#include "kernels/attention_params.h"

namespace ringside::kernels::cuda {

using AttentionParams = kernels::AttentionParams;
using Stream = void*;

/// x[i] = value for i < n.
void fill(float* x, int64_t n, float value, Stream stream);
/// out = a + b, n elements (out may alias a or b).
void add(const float* a, const float* b, float* out, int64_t n, Stream stream);
/// y [n, h] += bias [h] on every row.
void add_bias(float* y, const float* bias, int64_t n, int64_t h, Stream stream);
/// dbias [h] += column sums of dy [n, h].
void bias_grad(const float* dy, int64_t n, int64_t h, float* dbias, Stream stream);

/// LayerNorm over rows of x [n, h] (two-pass mean and variance, as the CPU): y, mean, rstd [n].
void layernorm_forward(const float* x, const float* gamma, const float* beta, int64_t n, int64_t h, double eps,
                       float* y, float* mean, float* rstd, Stream stream);
/// dx written; dgamma and dbeta [h] accumulate.
void layernorm_backward(const float* dy, const float* x, const float* gamma, const float* mean, const float* rstd,
                        int64_t n, int64_t h, float* dx, float* dgamma, float* dbeta, Stream stream);

/// RMSNorm over rows of x [n, h] (the root mean square alone, as the CPU): y, rstd [n].
void rmsnorm_forward(const float* x, const float* gamma, int64_t n, int64_t h, double eps, float* y, float* rstd,
                     Stream stream);
/// dx written; dgamma [h] accumulates.
void rmsnorm_backward(const float* dy, const float* x, const float* gamma, const float* rstd, int64_t n, int64_t h,
                      float* dx, float* dgamma, Stream stream);

/// SwiGLU's product g [n, F] = SiLU(gate) * up from u [n, 2F] (gate | up), and its backward
/// du [n, 2F] from dg [n, F] (kernels/cpu/ops.h's formulas).
void swiglu_forward(const float* u, int64_t n, int64_t F, float* g, Stream stream);
void swiglu_backward(const float* dg, const float* u, int64_t n, int64_t F, float* du, Stream stream);

/// Exact-erf GeLU and its derivative, n elements.
void gelu_forward(const float* x, int64_t n, float* y, Stream stream);
void gelu_backward(const float* dy, const float* x, int64_t n, float* dx, Stream stream);

/// RoPE in place on x [b, s, heads, d] by +angle (sign 1) or -angle (sign -1, the backward).
/// Angles in double, as the CPU kernel computes them, so both rotate by the same cos and sin.
void rope(float* x, int64_t b, int64_t s, int64_t heads, int64_t d, const int64_t* positions, double theta, double sign,
          Stream stream);

/// Dropout of x [b, s, h] into y (may alias x), or, with mask_only, the 0/1 keep mask into y.
/// The same Philox4x32-10 draw as kernels/cpu (kernels/philox.h, keyed by seed, site, global
/// token b * s_global + position, feature), so masks equal the CPU's bit for bit.
void dropout(const float* x, float* y, int64_t b, int64_t s, int64_t h, const int64_t* positions, int64_t s_global,
             double p, uint64_t seed, uint32_t site, bool mask_only, Stream stream);

/// qkv [rows, wq + 2 wk] <-> q [rows, wq], k and v [rows, wk] (widths in elements).
void split_qkv(const float* qkv, float* q, float* k, float* v, int64_t rows, int64_t wq, int64_t wk, Stream stream);
void merge_qkv(const float* dq, const float* dk, const float* dv, float* dqkv, int64_t rows, int64_t wq, int64_t wk,
               Stream stream);

/// Dynamic shared memory (bytes) one block of the forward or backward needs at head dim d.
int64_t attention_smem_bytes(int64_t d, bool backward);
/// FlashAttention-2 forward (Dao 2023, Algorithm 1): a block per (64 query rows, head, batch),
/// a thread per query row, K/V tiles of 32 keys in shared memory, online softmax in base 2,
/// fp32 accumulation. Layouts and the causal mask on global positions: kernels/attention_params.h.
void attention_forward(const AttentionParams& p, const float* q, const float* k, const float* v, float* out, float* lse,
                       Stream stream);
/// FlashAttention-2 backward (Algorithm 2): D = rowsum(dout * out) into `D` ([b, H, sq]
/// scratch), then a block per (64 keys, or 32 when d > 128, head, batch), a thread per key, holding dK and dV in
/// shared memory over the query tiles; dQ is added with atomics, and dK, dV at the end (GQA:
/// the heads of a group add into one kv head). Accumulates into dq, dk, dv.
void attention_backward(const AttentionParams& p, const float* q, const float* k, const float* v, const float* out,
                        const float* dout, const float* lse, float* dq, float* dk, float* dv, float* D, Stream stream);
/// lse_merge of kernels/cpu: out [b, sq, H, d], lse [b, H, sq] merged with (out_b, lse_b).
void lse_merge(int64_t b, int64_t sq, int64_t H, int64_t d, float* out, float* lse, const float* out_b,
               const float* lse_b, Stream stream);

}  // namespace ringside::kernels::cuda

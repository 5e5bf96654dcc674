// The CUDA kernels (kernels/cuda/kernels.h). Written for clarity first: one thread per row
// or element, shared-memory tiles where data is reused, reductions through shared memory.
// Also compiled as C++ for the CPU emulation (compat.h), so only what it provides is used.
#include <cmath>

#include "kernels/cuda/compat.h"
#include "kernels/cuda/kernels.h"
#include "kernels/philox.h"

namespace ringside::kernels::cuda {

namespace {

constexpr int kThreads = 256;  // elementwise and row kernels (a power of two: block_sum)
constexpr float kNegInf = -INFINITY;
constexpr double kLog2e = 1.4426950408889634, kLn2 = 0.6931471805599453;

// Blocks for a grid-stride loop over n items: enough to fill the GPU, no more.
unsigned blocks_for(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 1 ? 1 : (b > 4096 ? 4096 : b));
}

#define RS_GRID_STRIDE(i, n)                                                                          \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n);             \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

// Sum of v over the block's threads (blockDim.x a power of two); buf holds blockDim.x floats.
// Every thread gets the sum; buf is free again when it returns.
__device__ float block_sum(float v, float* buf) {
  const unsigned t = threadIdx.x;
  buf[t] = v;
  __syncthreads();
  for (unsigned half = blockDim.x / 2; half > 0; half /= 2) {
    if (t < half) buf[t] += buf[t + half];
    __syncthreads();
  }
  const float s = buf[0];
  __syncthreads();
  return s;
}

// ---------------------------------------------------------------- elementwise

__global__ void fill_kernel(float* x, int64_t n, float value) {
  RS_GRID_STRIDE(i, n) x[i] = value;
}

__global__ void add_kernel(const float* a, const float* b, float* out, int64_t n) {
  RS_GRID_STRIDE(i, n) out[i] = a[i] + b[i];
}

__global__ void add_bias_kernel(float* y, const float* bias, int64_t n, int64_t h) {
  RS_GRID_STRIDE(i, n * h) y[i] += bias[i % h];
}

// A thread per column walks down the rows: neighbouring threads read neighbouring addresses.
__global__ void bias_grad_kernel(const float* dy, int64_t n, int64_t h, float* dbias) {
  RS_GRID_STRIDE(j, h) {
    float s = 0;
    for (int64_t r = 0; r < n; ++r) s += dy[r * h + j];
    dbias[j] += s;
  }
}

__global__ void gelu_forward_kernel(const float* x, int64_t n, float* y) {
  RS_GRID_STRIDE(i, n) y[i] = 0.5f * x[i] * (1.0f + erff(x[i] * 0.70710678118654752440f));
}

__global__ void gelu_backward_kernel(const float* dy, const float* x, int64_t n, float* dx) {
  RS_GRID_STRIDE(i, n) {
    const float cdf = 0.5f * (1.0f + erff(x[i] * 0.70710678118654752440f));
    const float pdf = 0.39894228040143267794f * expf(-0.5f * x[i] * x[i]);
    dx[i] = dy[i] * (cdf + x[i] * pdf);
  }
}

// SwiGLU: a thread per (row, column j < F) of g; u's row holds the gate, then up.
__global__ void swiglu_forward_kernel(const float* u, int64_t n, int64_t F, float* g) {
  RS_GRID_STRIDE(i, n * F) {
    const int64_t r = i / F, j = i % F;
    const float a = u[r * 2 * F + j], b = u[r * 2 * F + F + j];
    g[i] = a / (1.0f + expf(-a)) * b;
  }
}

__global__ void swiglu_backward_kernel(const float* dg, const float* u, int64_t n, int64_t F, float* du) {
  RS_GRID_STRIDE(i, n * F) {
    const int64_t r = i / F, j = i % F;
    const float a = u[r * 2 * F + j], b = u[r * 2 * F + F + j];
    const float sigma = 1.0f / (1.0f + expf(-a));
    du[r * 2 * F + j] = dg[i] * b * sigma * (1.0f + a * (1.0f - sigma));
    du[r * 2 * F + F + j] = dg[i] * a * sigma;
  }
}

// ---------------------------------------------------------------- LayerNorm and RMSNorm

// A block per row.
__global__ void layernorm_forward_kernel(const float* x, const float* gamma, const float* beta, int64_t h, float eps,
                                         float* y, float* mean, float* rstd) {
  __shared__ float buf[kThreads];
  const int64_t r = blockIdx.x;
  const float* xr = x + r * h;
  float s = 0;
  for (int64_t j = threadIdx.x; j < h; j += blockDim.x) s += xr[j];
  const float mu = block_sum(s, buf) / static_cast<float>(h);
  float v = 0;
  for (int64_t j = threadIdx.x; j < h; j += blockDim.x) v += (xr[j] - mu) * (xr[j] - mu);
  const float var = block_sum(v, buf) / static_cast<float>(h);
  const float rs = 1.0f / sqrtf(var + eps);
  for (int64_t j = threadIdx.x; j < h; j += blockDim.x) y[r * h + j] = (xr[j] - mu) * rs * gamma[j] + beta[j];
  if (threadIdx.x == 0) mean[r] = mu, rstd[r] = rs;
}

// dx: a block per row.
__global__ void layernorm_dx_kernel(const float* dy, const float* x, const float* gamma, const float* mean,
                                    const float* rstd, int64_t h, float* dx) {
  __shared__ float buf[kThreads];
  const int64_t r = blockIdx.x;
  const float mu = mean[r], rs = rstd[r];
  float sg = 0, sgx = 0;
  for (int64_t j = threadIdx.x; j < h; j += blockDim.x) {
    const float g = dy[r * h + j] * gamma[j];
    sg += g;
    sgx += g * (x[r * h + j] - mu) * rs;
  }
  const float mean_g = block_sum(sg, buf) / static_cast<float>(h);
  const float mean_gx = block_sum(sgx, buf) / static_cast<float>(h);
  for (int64_t j = threadIdx.x; j < h; j += blockDim.x) {
    const float xhat = (x[r * h + j] - mu) * rs;
    dx[r * h + j] = rs * (dy[r * h + j] * gamma[j] - mean_g - xhat * mean_gx);
  }
}

// dgamma, dbeta: a thread per column, down the rows.
__global__ void layernorm_dparams_kernel(const float* dy, const float* x, const float* mean, const float* rstd,
                                         int64_t n, int64_t h, float* dgamma, float* dbeta) {
  RS_GRID_STRIDE(j, h) {
    float sgam = 0, sbeta = 0;
    for (int64_t r = 0; r < n; ++r) {
      const float g = dy[r * h + j];
      sgam += g * (x[r * h + j] - mean[r]) * rstd[r];
      sbeta += g;
    }
    dgamma[j] += sgam;
    dbeta[j] += sbeta;
  }
}

// RMSNorm: a block per row.
__global__ void rmsnorm_forward_kernel(const float* x, const float* gamma, int64_t h, float eps, float* y, float* rstd) {
  __shared__ float buf[kThreads];
  const int64_t r = blockIdx.x;
  const float* xr = x + r * h;
  float s = 0;
  for (int64_t j = threadIdx.x; j < h; j += blockDim.x) s += xr[j] * xr[j];
  const float rs = 1.0f / sqrtf(block_sum(s, buf) / static_cast<float>(h) + eps);
  for (int64_t j = threadIdx.x; j < h; j += blockDim.x) y[r * h + j] = xr[j] * rs * gamma[j];
  if (threadIdx.x == 0) rstd[r] = rs;
}

// dx: a block per row.
__global__ void rmsnorm_dx_kernel(const float* dy, const float* x, const float* gamma, const float* rstd, int64_t h,
                                  float* dx) {
  __shared__ float buf[kThreads];
  const int64_t r = blockIdx.x;
  const float rs = rstd[r];
  float sgx = 0;
  for (int64_t j = threadIdx.x; j < h; j += blockDim.x) sgx += dy[r * h + j] * gamma[j] * x[r * h + j] * rs;
  const float mean_gx = block_sum(sgx, buf) / static_cast<float>(h);
  for (int64_t j = threadIdx.x; j < h; j += blockDim.x)
    dx[r * h + j] = rs * (dy[r * h + j] * gamma[j] - x[r * h + j] * rs * mean_gx);
}

// dgamma: a thread per column, down the rows.
__global__ void rmsnorm_dgamma_kernel(const float* dy, const float* x, const float* rstd, int64_t n, int64_t h,
                                      float* dgamma) {
  RS_GRID_STRIDE(j, h) {
    float sgam = 0;
    for (int64_t r = 0; r < n; ++r) sgam += dy[r * h + j] * x[r * h + j] * rstd[r];
    dgamma[j] += sgam;
  }
}

// ---------------------------------------------------------------- RoPE and dropout

// A thread per (token, head, pair i): rotates (x[i], x[i + d/2]) by sign * position * theta^(-2i/d).
__global__ void rope_kernel(float* x, int64_t b, int64_t s, int64_t heads, int64_t d, const int64_t* positions,
                            double theta, double sign) {
  const int64_t half = d / 2;
  RS_GRID_STRIDE(e, b * s * heads * half) {
    const int64_t i = e % half, row = e / half;  // row = (bi * s + t) * heads + hh
    const int64_t t = (row / heads) % s;
    const double a = static_cast<double>(positions[t]) * pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(d));
    const float cs = static_cast<float>(cos(a)), sn = static_cast<float>(sign * sin(a));
    float* v = x + row * d;
    const float x1 = v[i], x2 = v[i + half];
    v[i] = x1 * cs - x2 * sn;
    v[i + half] = x2 * cs + x1 * sn;
  }
}

// A thread per (token, group of four features): one Philox call serves four, as on the CPU.
__global__ void dropout_kernel(const float* x, float* y, int64_t b, int64_t s, int64_t h, const int64_t* positions,
                               int64_t s_global, uint32_t threshold, float scale, uint64_t seed, uint32_t site,
                               bool mask_only) {
  const int64_t groups = (h + 3) / 4;
  RS_GRID_STRIDE(e, b * s * groups) {
    const int64_t g = e % groups, row = e / groups;  // row = bi * s + t
    const int64_t bi = row / s, t = row % s;
    const uint64_t token = static_cast<uint64_t>(bi * s_global + positions[t]);
    const auto words = dropout_bits4(seed, site, token, static_cast<uint64_t>(g));
    for (int64_t j = g * 4; j < g * 4 + 4 && j < h; ++j) {
      const bool keep = (words[j & 3] >> 8) >= threshold;
      const int64_t i = row * h + j;
      y[i] = mask_only ? (keep ? 1.0f : 0.0f) : (keep ? x[i] * scale : 0.0f);
    }
  }
}

// ---------------------------------------------------------------- fused QKV

__global__ void split_qkv_kernel(const float* qkv, float* q, float* k, float* v, int64_t rows, int64_t wq, int64_t wk,
                                 bool merge) {
  const int64_t w = wq + 2 * wk;
  RS_GRID_STRIDE(e, rows * w) {
    const int64_t r = e / w, c = e % w;
    float* part = c < wq ? q + r * wq + c : (c < wq + wk ? k + r * wk + (c - wq) : v + r * wk + (c - wq - wk));
    if (merge) const_cast<float*>(qkv)[e] = *part;
    else *part = qkv[e];
  }
}

// ---------------------------------------------------------------- attention

constexpr int kFwdRows = 64;  // query rows per forward block (a thread each)
constexpr int kFwdKeys = 32;  // keys per shared-memory tile
// Keys per backward block (a thread each): 64, or 32 past d = 128, where 64 keys' K, V, dK and
// dV rows would not fit in shared memory.
int bwd_keys(int64_t d) { return d > 128 ? 32 : 64; }
constexpr int kBwdRows = 16;  // query rows per backward tile

struct Pos {  // global positions of a block's rows and keys (kernels/attention_params.h)
  int64_t q_offset, q_stride, k_offset, k_stride;
  __device__ int64_t q(int64_t i) const { return q_offset + i * q_stride; }
  __device__ int64_t k(int64_t j) const { return k_offset + j * k_stride; }
};

__global__ void attention_forward_kernel(AttentionParams p, const float* q, const float* k, const float* v, float* out,
                                         float* lse) {
  RS_DYNAMIC_SMEM(float, smem);
  const int64_t d = p.d, dp = d + 1;  // padded rows: thread t's row starts in bank (t * dp) % 32
  float* s_q = smem;                  // [kFwdRows][d + 1]
  float* s_acc = s_q + kFwdRows * dp;  // [kFwdRows][d + 1]: the running output, unnormalised
  float* s_k = s_acc + kFwdRows * dp;  // [kFwdKeys][d]
  float* s_v = s_k + kFwdKeys * d;     // [kFwdKeys][d]
  const Pos pos{p.q_offset, p.q_stride, p.k_offset, p.k_stride};
  const int t = threadIdx.x;
  const int64_t i0 = static_cast<int64_t>(blockIdx.x) * kFwdRows, h = blockIdx.y, bi = blockIdx.z;
  const int64_t ldq = p.H * d, ldk = p.Hkv * d, kvh = h / (p.H / p.Hkv);
  const float* qh = q + bi * p.sq * ldq + h * d;
  const float* kh = k + bi * p.sk * ldk + kvh * d;
  const float* vh = v + bi * p.sk * ldk + kvh * d;
  const int64_t i = i0 + t, last = (i0 + kFwdRows < p.sq ? i0 + kFwdRows : p.sq) - 1;
  const bool active = i < p.sq;
  // Scores in base 2, as the CPU kernel: S2 = (scale log2 e) q.k, exp(S - m) = 2^(S2 - m2).
  const float scale2 = static_cast<float>(p.softmax_scale * kLog2e);

  for (int64_t e = t; e < kFwdRows * d; e += blockDim.x) {
    const int64_t r = e / d, c = e % d;
    s_q[r * dp + c] = i0 + r < p.sq ? qh[(i0 + r) * ldq + c] : 0.0f;
    s_acc[r * dp + c] = 0.0f;
  }
  float m = kNegInf, l = 0;
  for (int64_t j0 = 0; j0 < p.sk; j0 += kFwdKeys) {
    if (p.causal && pos.k(j0) > pos.q(last)) break;  // this tile and every later one hidden
    const int64_t bk = p.sk - j0 < kFwdKeys ? p.sk - j0 : kFwdKeys;
    __syncthreads();  // everyone is done with the previous tile
    for (int64_t e = t; e < bk * d; e += blockDim.x) {
      const int64_t r = e / d, c = e % d;
      s_k[r * d + c] = kh[(j0 + r) * ldk + c];
      s_v[r * d + c] = vh[(j0 + r) * ldk + c];
    }
    __syncthreads();
    if (!active) continue;
    float s[kFwdKeys];
    float tile_max = kNegInf;
    RS_UNROLL
    for (int j = 0; j < kFwdKeys; ++j) {
      s[j] = kNegInf;
      if (j >= bk || (p.causal && pos.k(j0 + j) > pos.q(i))) continue;
      float dot = 0;
      for (int64_t c = 0; c < d; ++c) dot += s_q[t * dp + c] * s_k[j * d + c];
      s[j] = dot * scale2;
      tile_max = fmaxf(tile_max, s[j]);
    }
    const float m_new = fmaxf(m, tile_max);
    if (m_new == kNegInf) continue;  // nothing visible to this row yet
    // Online softmax: rescale what was accumulated under the old max, add this tile.
    const float alpha = exp2f(m - m_new);  // 0 on the first visible tile
    float tile_sum = 0;
    RS_UNROLL
    for (int j = 0; j < kFwdKeys; ++j) {
      s[j] = exp2f(s[j] - m_new);  // 2^-inf = 0 for masked keys
      tile_sum += s[j];
    }
    l = l * alpha + tile_sum;
    m = m_new;
    for (int64_t c = 0; c < d; ++c) {
      float o = s_acc[t * dp + c] * alpha;
      RS_UNROLL
      for (int j = 0; j < kFwdKeys; ++j) o += s[j] * s_v[j * d + c];
      s_acc[t * dp + c] = o;
    }
  }
  if (!active) return;
  float* o = out + bi * p.sq * ldq + h * d + i * ldq;
  float* lse_row = lse + (bi * p.H + h) * p.sq + i;
  if (l == 0) {  // no visible key: out 0, lse -inf, never 0/0
    for (int64_t c = 0; c < d; ++c) o[c] = 0.0f;
    *lse_row = kNegInf;
    return;
  }
  const float inv = 1.0f / l;
  for (int64_t c = 0; c < d; ++c) o[c] = s_acc[t * dp + c] * inv;
  *lse_row = static_cast<float>(kLn2 * (static_cast<double>(m) + log2(static_cast<double>(l))));
}

// D = rowsum(dout * out) per (batch, head, query row), [b, H, sq].
__global__ void attention_rowdot_kernel(AttentionParams p, const float* out, const float* dout, float* D) {
  RS_GRID_STRIDE(e, p.b * p.H * p.sq) {
    const int64_t i = e % p.sq, h = (e / p.sq) % p.H, bi = e / (p.sq * p.H);
    const int64_t base = ((bi * p.sq + i) * p.H + h) * p.d;
    float s = 0;
    for (int64_t c = 0; c < p.d; ++c) s += dout[base + c] * out[base + c];
    D[e] = s;
  }
}

__global__ void attention_backward_kernel(AttentionParams p, const float* q, const float* k, const float* v,
                                          const float* dout, const float* lse, const float* D, float* dq, float* dk,
                                          float* dv) {
  RS_DYNAMIC_SMEM(float, smem);
  const int64_t keys = blockDim.x;  // bwd_keys(d)
  const int64_t d = p.d, dp = d + 1, ldsds = keys + 1;
  float* s_k = smem;                  // [keys][d + 1]: this block's keys, a row per thread
  float* s_v = s_k + keys * dp;       // [keys][d + 1]
  float* s_dk = s_v + keys * dp;      // [keys][d + 1]: dK and dV accumulators
  float* s_dv = s_dk + keys * dp;     // [keys][d + 1]
  float* s_q = s_dv + keys * dp;      // [kBwdRows][d]
  float* s_do = s_q + kBwdRows * d;   // [kBwdRows][d]
  float* s_ds = s_do + kBwdRows * d;  // [kBwdRows][keys + 1]: dS of the tile
  float* s_lse2 = s_ds + kBwdRows * ldsds;  // [kBwdRows]
  float* s_D = s_lse2 + kBwdRows;           // [kBwdRows]
  const Pos pos{p.q_offset, p.q_stride, p.k_offset, p.k_stride};
  const int t = threadIdx.x;
  const int64_t j0 = static_cast<int64_t>(blockIdx.x) * keys, h = blockIdx.y, bi = blockIdx.z;
  const int64_t ldq = p.H * d, ldk = p.Hkv * d, kvh = h / (p.H / p.Hkv);
  const int64_t qbase = bi * p.sq * ldq + h * d, kbase = bi * p.sk * ldk + kvh * d;
  const int64_t j = j0 + t, bk = p.sk - j0 < keys ? p.sk - j0 : keys;
  const bool active = j < p.sk;
  const float scale = static_cast<float>(p.softmax_scale), scale2 = static_cast<float>(p.softmax_scale * kLog2e);

  for (int64_t e = t; e < keys * d; e += blockDim.x) {
    const int64_t r = e / d, c = e % d;
    s_k[r * dp + c] = r < bk ? k[kbase + (j0 + r) * ldk + c] : 0.0f;
    s_v[r * dp + c] = r < bk ? v[kbase + (j0 + r) * ldk + c] : 0.0f;
    s_dk[r * dp + c] = 0.0f;
    s_dv[r * dp + c] = 0.0f;
  }
  for (int64_t i0 = 0; i0 < p.sq; i0 += kBwdRows) {
    const int64_t bq = p.sq - i0 < kBwdRows ? p.sq - i0 : kBwdRows;
    // Hidden tile (first key after the last query): skip it; later query tiles may see it.
    if (p.causal && pos.k(j0) > pos.q(i0 + bq - 1)) continue;
    __syncthreads();  // the previous tile's dS and rows are consumed
    for (int64_t e = t; e < kBwdRows * d; e += blockDim.x) {
      const int64_t r = e / d, c = e % d;
      s_q[e] = r < bq ? q[qbase + (i0 + r) * ldq + c] : 0.0f;
      s_do[e] = r < bq ? dout[qbase + (i0 + r) * ldq + c] : 0.0f;
    }
    for (int64_t r = t; r < kBwdRows; r += blockDim.x) {
      const float l = r < bq ? lse[(bi * p.H + h) * p.sq + i0 + r] : kNegInf;
      s_lse2[r] = l == kNegInf ? kNegInf : static_cast<float>(static_cast<double>(l) * kLog2e);
      s_D[r] = r < bq ? D[(bi * p.H + h) * p.sq + i0 + r] : 0.0f;
    }
    __syncthreads();
    // Thread t, key j: P = 2^(S2 - lse2) recomputed, dV_j += P dO, dS = P (dO.v_j - D),
    // dK_j += scale dS q.
    for (int64_t r = 0; r < bq; ++r) {
      float pr = 0, ds = 0;
      if (active && s_lse2[r] != kNegInf && !(p.causal && pos.k(j) > pos.q(i0 + r))) {
        float s2 = 0, dpv = 0;
        for (int64_t c = 0; c < d; ++c) {
          s2 += s_q[r * d + c] * s_k[t * dp + c];
          dpv += s_do[r * d + c] * s_v[t * dp + c];
        }
        pr = exp2f(s2 * scale2 - s_lse2[r]);
        ds = pr * (dpv - s_D[r]);
        for (int64_t c = 0; c < d; ++c) {
          s_dv[t * dp + c] += pr * s_do[r * d + c];
          s_dk[t * dp + c] += scale * ds * s_q[r * d + c];
        }
      }
      s_ds[r * ldsds + t] = ds;
    }
    __syncthreads();
    // dQ_i += scale dS K over this block's keys: threads split the tile's (row, column) pairs.
    for (int64_t e = t; e < bq * d; e += blockDim.x) {
      const int64_t r = e / d, c = e % d;
      float acc = 0;
      for (int64_t jj = 0; jj < bk; ++jj) acc += s_ds[r * ldsds + jj] * s_k[jj * dp + c];
      if (acc != 0.0f) atomicAdd(&dq[qbase + (i0 + r) * ldq + c], scale * acc);
    }
  }
  __syncthreads();
  // Several query heads may share this kv head (GQA): add, do not store.
  for (int64_t e = t; e < bk * d; e += blockDim.x) {
    const int64_t r = e / d, c = e % d;
    atomicAdd(&dk[kbase + (j0 + r) * ldk + c], s_dk[r * dp + c]);
    atomicAdd(&dv[kbase + (j0 + r) * ldk + c], s_dv[r * dp + c]);
  }
}

// lse_merge in two passes, so that no thread reads an lse another has already updated.
__global__ void lse_merge_out_kernel(int64_t b, int64_t sq, int64_t H, int64_t d, float* out, const float* lse,
                                     const float* out_b, const float* lse_b) {
  RS_GRID_STRIDE(e, b * sq * H * d) {
    const int64_t row = e / d;  // (bi * sq + i) * H + h
    const int64_t h = row % H, i = (row / H) % sq, bi = row / (H * sq);
    const float la = lse[(bi * H + h) * sq + i], lb = lse_b[(bi * H + h) * sq + i];
    const float hi = fmaxf(la, lb), lo = fminf(la, lb);
    if (hi == kNegInf) {  // neither part saw a key
      out[e] = 0.0f;
      continue;
    }
    const float l = hi + log1pf(expf(lo - hi));
    out[e] = expf(la - l) * out[e] + expf(lb - l) * out_b[e];
  }
}

__global__ void lse_merge_lse_kernel(int64_t n, float* lse, const float* lse_b) {
  RS_GRID_STRIDE(e, n) {
    const float hi = fmaxf(lse[e], lse_b[e]), lo = fminf(lse[e], lse_b[e]);
    lse[e] = hi == kNegInf ? kNegInf : hi + log1pf(expf(lo - hi));
  }
}

}  // namespace

void fill(float* x, int64_t n, float value, Stream stream) {
  if (n > 0) RS_LAUNCH(fill_kernel, blocks_for(n), kThreads, 0, stream, x, n, value);
}
void add(const float* a, const float* b, float* out, int64_t n, Stream stream) {
  if (n > 0) RS_LAUNCH(add_kernel, blocks_for(n), kThreads, 0, stream, a, b, out, n);
}
void add_bias(float* y, const float* bias, int64_t n, int64_t h, Stream stream) {
  if (n * h > 0) RS_LAUNCH(add_bias_kernel, blocks_for(n * h), kThreads, 0, stream, y, bias, n, h);
}
void bias_grad(const float* dy, int64_t n, int64_t h, float* dbias, Stream stream) {
  if (h > 0) RS_LAUNCH(bias_grad_kernel, blocks_for(h), kThreads, 0, stream, dy, n, h, dbias);
}

void layernorm_forward(const float* x, const float* gamma, const float* beta, int64_t n, int64_t h, double eps,
                       float* y, float* mean, float* rstd, Stream stream) {
  if (n > 0)
    RS_LAUNCH(layernorm_forward_kernel, static_cast<unsigned>(n), kThreads, 0, stream, x, gamma, beta, h,
              static_cast<float>(eps), y, mean, rstd);
}

void layernorm_backward(const float* dy, const float* x, const float* gamma, const float* mean, const float* rstd,
                        int64_t n, int64_t h, float* dx, float* dgamma, float* dbeta, Stream stream) {
  if (n == 0) return;
  RS_LAUNCH(layernorm_dx_kernel, static_cast<unsigned>(n), kThreads, 0, stream, dy, x, gamma, mean, rstd, h, dx);
  RS_LAUNCH(layernorm_dparams_kernel, blocks_for(h), kThreads, 0, stream, dy, x, mean, rstd, n, h, dgamma, dbeta);
}

void rmsnorm_forward(const float* x, const float* gamma, int64_t n, int64_t h, double eps, float* y, float* rstd,
                     Stream stream) {
  if (n > 0)
    RS_LAUNCH(rmsnorm_forward_kernel, static_cast<unsigned>(n), kThreads, 0, stream, x, gamma, h,
              static_cast<float>(eps), y, rstd);
}

void rmsnorm_backward(const float* dy, const float* x, const float* gamma, const float* rstd, int64_t n, int64_t h,
                      float* dx, float* dgamma, Stream stream) {
  if (n == 0) return;
  RS_LAUNCH(rmsnorm_dx_kernel, static_cast<unsigned>(n), kThreads, 0, stream, dy, x, gamma, rstd, h, dx);
  RS_LAUNCH(rmsnorm_dgamma_kernel, blocks_for(h), kThreads, 0, stream, dy, x, rstd, n, h, dgamma);
}

void swiglu_forward(const float* u, int64_t n, int64_t F, float* g, Stream stream) {
  if (n * F > 0) RS_LAUNCH(swiglu_forward_kernel, blocks_for(n * F), kThreads, 0, stream, u, n, F, g);
}
void swiglu_backward(const float* dg, const float* u, int64_t n, int64_t F, float* du, Stream stream) {
  if (n * F > 0) RS_LAUNCH(swiglu_backward_kernel, blocks_for(n * F), kThreads, 0, stream, dg, u, n, F, du);
}

void gelu_forward(const float* x, int64_t n, float* y, Stream stream) {
  if (n > 0) RS_LAUNCH(gelu_forward_kernel, blocks_for(n), kThreads, 0, stream, x, n, y);
}
void gelu_backward(const float* dy, const float* x, int64_t n, float* dx, Stream stream) {
  if (n > 0) RS_LAUNCH(gelu_backward_kernel, blocks_for(n), kThreads, 0, stream, dy, x, n, dx);
}

void rope(float* x, int64_t b, int64_t s, int64_t heads, int64_t d, const int64_t* positions, double theta, double sign,
          Stream stream) {
  const int64_t n = b * s * heads * (d / 2);
  if (n > 0) RS_LAUNCH(rope_kernel, blocks_for(n), kThreads, 0, stream, x, b, s, heads, d, positions, theta, sign);
}

void dropout(const float* x, float* y, int64_t b, int64_t s, int64_t h, const int64_t* positions, int64_t s_global,
             double p, uint64_t seed, uint32_t site, bool mask_only, Stream stream) {
  const int64_t n = b * s * ((h + 3) / 4);
  // Exactly the CPU's threshold and scale (kernels/cpu/ops.cpp), so both make the same floats.
  const float scale = static_cast<float>(1.0 / (1.0 - p));
  if (n > 0)
    RS_LAUNCH(dropout_kernel, blocks_for(n), kThreads, 0, stream, x, y, b, s, h, positions, s_global,
              dropout_threshold(p), scale, seed, site, mask_only);
}

void split_qkv(const float* qkv, float* q, float* k, float* v, int64_t rows, int64_t wq, int64_t wk, Stream stream) {
  const int64_t n = rows * (wq + 2 * wk);
  if (n > 0) RS_LAUNCH(split_qkv_kernel, blocks_for(n), kThreads, 0, stream, qkv, q, k, v, rows, wq, wk, false);
}
void merge_qkv(const float* dq, const float* dk, const float* dv, float* dqkv, int64_t rows, int64_t wq, int64_t wk,
               Stream stream) {
  const int64_t n = rows * (wq + 2 * wk);
  if (n > 0)
    RS_LAUNCH(split_qkv_kernel, blocks_for(n), kThreads, 0, stream, dqkv, const_cast<float*>(dq),
              const_cast<float*>(dk), const_cast<float*>(dv), rows, wq, wk, true);
}

int64_t attention_smem_bytes(int64_t d, bool backward) {
  const int64_t keys = bwd_keys(d);
  const int64_t floats = backward ? 4 * keys * (d + 1) + 2 * kBwdRows * d + kBwdRows * (keys + 1) + 2 * kBwdRows
                                  : 2 * kFwdRows * (d + 1) + 2 * kFwdKeys * d;
  return floats * static_cast<int64_t>(sizeof(float));
}

void attention_forward(const AttentionParams& p, const float* q, const float* k, const float* v, float* out, float* lse,
                       Stream stream) {
  const int64_t smem = attention_smem_bytes(p.d, false);
  RS_ALLOW_SMEM(attention_forward_kernel, smem);
  const dim3 grid(static_cast<unsigned>((p.sq + kFwdRows - 1) / kFwdRows), static_cast<unsigned>(p.H),
                  static_cast<unsigned>(p.b));
  RS_LAUNCH(attention_forward_kernel, grid, kFwdRows, static_cast<size_t>(smem), stream, p, q, k, v, out, lse);
}

void attention_backward(const AttentionParams& p, const float* q, const float* k, const float* v, const float* out,
                        const float* dout, const float* lse, float* dq, float* dk, float* dv, float* D, Stream stream) {
  RS_LAUNCH(attention_rowdot_kernel, blocks_for(p.b * p.H * p.sq), kThreads, 0, stream, p, out, dout, D);
  const int64_t smem = attention_smem_bytes(p.d, true);
  RS_ALLOW_SMEM(attention_backward_kernel, smem);
  const int keys = bwd_keys(p.d);
  const dim3 grid(static_cast<unsigned>((p.sk + keys - 1) / keys), static_cast<unsigned>(p.H), static_cast<unsigned>(p.b));
  RS_LAUNCH(attention_backward_kernel, grid, keys, static_cast<size_t>(smem), stream, p, q, k, v, dout, lse, D, dq, dk,
            dv);
}

void lse_merge(int64_t b, int64_t sq, int64_t H, int64_t d, float* out, float* lse, const float* out_b,
               const float* lse_b, Stream stream) {
  const int64_t n = b * sq * H * d;
  if (n == 0) return;
  RS_LAUNCH(lse_merge_out_kernel, blocks_for(n), kThreads, 0, stream, b, sq, H, d, out, lse, out_b, lse_b);
  RS_LAUNCH(lse_merge_lse_kernel, blocks_for(b * H * sq), kThreads, 0, stream, b * H * sq, lse, lse_b);
}

}  // namespace ringside::kernels::cuda

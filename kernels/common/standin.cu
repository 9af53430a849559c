// The stand-in model's own elementwise work on CUDA, in fewer passes than torch's eager chain and
// byte-identical to it (issue 12 part 5; tests/test_standin_cuda.py compares every output with the
// torch path on the GPU). Launched by h3gates/nvfp4/cuda/standin.py.
//
// block_values: the emulated GEMM's dequantized operand, code value x E4M3 block scale as bf16, in one
//   pass (torch: eight kernels, 1.6-4.1 ms per canonical activation on the H200). Each product has at most 6
//   significant bits, so the bf16 rounding is exact; a NaN scale gives the fp32 multiply's canonical
//   NaN rounded by cvt.rn.bf16.f32, as block_values_reference's fp32 multiply and bf16 copy do on a GPU.
// qk_square / qk_norm_rope: the attention's RMSNorm + RoPE of q or k (torch: 16 kernels, ~8.7 ms each
//   at canonical size). The row mean stays torch's own reduction (the launcher runs sq.mean(-1) and
//   the rsqrt in torch on the squares this file writes), so its summation order is torch's; every
//   other step is one IEEE operation per element, spelled with __fmul_rn / __fadd_rn so that nothing
//   is contracted into an FMA, in torch's order:
//     y  = bf16(x * r)            rms_norm: xf * rsqrt(mean(xf^2) + eps), .to(bf16)
//     y2 = bf16(y * w)            * weight (bf16 x bf16 computed in fp32, one rounding)
//     out = bf16(y2[j] * cos + rot[j] * sin), rot = (-y2[j + half] | y2[j - half])   for j < rope_dims
//     out = y2[j]                                                                   otherwise
// Compiled without fast-math.
#include <cuda_bf16.h>
#include <cuda_fp8.h>

namespace {

// the E2M1 value of a 4-bit code as fp32 bits (0, 0.5, 1, 1.5, 2, 3, 4, 6; bit 3 the sign, -0 kept),
// computed rather than looked up: a table indexed per thread serializes in constant memory
__device__ __forceinline__ float e2m1_value(unsigned code) {
  unsigned m = code & 7u;
  unsigned bits = m >= 2u ? ((((m >> 1) + 126u) << 23) | ((m & 1u) << 22)) : (m ? (126u << 23) : 0u);
  return __uint_as_float(bits | ((code & 8u) << 28));
}

__device__ __forceinline__ unsigned pack_bf16(float a, float b) {  // a in the low half (the lower address)
  return (unsigned)__bfloat16_as_ushort(__float2bfloat16_rn(a)) | ((unsigned)__bfloat16_as_ushort(__float2bfloat16_rn(b)) << 16);
}

__device__ __forceinline__ float lo_f(unsigned w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float hi_f(unsigned w) { return __uint_as_float(w & 0xffff0000u); }

}  // namespace

// One thread per 16-value block: 8 QDATA bytes (even element in the high nibble), one scale byte of
// the 128x4-swizzled buffer (groups = padded scale columns / 4), 16 bf16 out. rows * nb < 2^31.
extern "C" __global__ void block_values_kernel(const unsigned char* __restrict__ qdata, const unsigned char* __restrict__ scales,
                                               __nv_bfloat16* __restrict__ out, int rows, int nb, int groups) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= rows * nb) return;
  unsigned r = (unsigned)(i / nb), c = (unsigned)(i % nb);
  uint2 q = *reinterpret_cast<const uint2*>(qdata + (size_t)r * (nb * 8) + c * 8);
  unsigned off = (((r >> 7) * groups + (c >> 2)) * 32u + (r & 31u)) * 16u + ((r >> 5) & 3u) * 4u + (c & 3u);
  __nv_fp8_e4m3 sb;
  sb.__x = scales[off];
  float s = float(sb);
  unsigned w[8];
  unsigned words[2] = {q.x, q.y};
#pragma unroll
  for (int h = 0; h < 2; ++h) {
#pragma unroll
    for (int b = 0; b < 4; ++b) {
      unsigned byte = (words[h] >> (8 * b)) & 0xffu;
      w[h * 4 + b] = pack_bf16(__fmul_rn(e2m1_value(byte >> 4), s), __fmul_rn(e2m1_value(byte & 15u), s));
    }
  }
  uint4* dst = reinterpret_cast<uint4*>(out + (size_t)r * (nb * 16) + c * 16);
  dst[0] = make_uint4(w[0], w[1], w[2], w[3]);
  dst[1] = make_uint4(w[4], w[5], w[6], w[7]);
}

// x: [S, width] bf16 rows `stride` elements apart (q or k of the qkv output); sq: [S, width] fp32
// contiguous, x*x (torch's pow(2) of the fp32 copy). One thread per 8 values; width % 8 == 0.
extern "C" __global__ void qk_square(const __nv_bfloat16* __restrict__ x, long long stride, float* __restrict__ sq, int rows, int width) {
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  int per_row = width / 8;
  if (i >= (long long)rows * per_row) return;
  long long s = i / per_row;
  int j = (int)(i % per_row) * 8;
  uint4 v = *reinterpret_cast<const uint4*>(x + s * stride + j);
  unsigned u[4] = {v.x, v.y, v.z, v.w};
  float4* dst = reinterpret_cast<float4*>(sq + s * width + j);
  float a[8];
#pragma unroll
  for (int t = 0; t < 4; ++t) {
    a[2 * t] = lo_f(u[t]);
    a[2 * t + 1] = hi_f(u[t]);
  }
  dst[0] = make_float4(__fmul_rn(a[0], a[0]), __fmul_rn(a[1], a[1]), __fmul_rn(a[2], a[2]), __fmul_rn(a[3], a[3]));
  dst[1] = make_float4(__fmul_rn(a[4], a[4]), __fmul_rn(a[5], a[5]), __fmul_rn(a[6], a[6]), __fmul_rn(a[7], a[7]));
}

namespace {

// the 8 normed, weighted values y2 of x's 8 channels at [row, head, j0..j0+7]
__device__ __forceinline__ void norm8(const __nv_bfloat16* xp, float r, const __nv_bfloat16* w, float y2[8]) {
  uint4 v = *reinterpret_cast<const uint4*>(xp);
  uint4 wv = *reinterpret_cast<const uint4*>(w);
  unsigned u[4] = {v.x, v.y, v.z, v.w}, ww[4] = {wv.x, wv.y, wv.z, wv.w};
#pragma unroll
  for (int t = 0; t < 4; ++t) {
    float y0 = __bfloat162float(__float2bfloat16_rn(__fmul_rn(lo_f(u[t]), r)));
    float y1 = __bfloat162float(__float2bfloat16_rn(__fmul_rn(hi_f(u[t]), r)));
    y2[2 * t] = __bfloat162float(__float2bfloat16_rn(__fmul_rn(y0, lo_f(ww[t]))));
    y2[2 * t + 1] = __bfloat162float(__float2bfloat16_rn(__fmul_rn(y1, hi_f(ww[t]))));
  }
}

}  // namespace

// x as in qk_square, viewed [S, heads, head_dim]; rinv: [S, heads] fp32, rsqrt(mean(x^2) + eps);
// w: [head_dim] bf16; cos, sin: [S, rope_dims] fp32; out: [S, heads, head_dim] bf16 contiguous.
// One thread per 8 channels of one head; head_dim % 8 == 0 and rope_dims % 16 == 0 (half % 8 == 0).
extern "C" __global__ void qk_norm_rope(const __nv_bfloat16* __restrict__ x, long long stride, const float* __restrict__ rinv,
                                        const __nv_bfloat16* __restrict__ w, const float* __restrict__ cosv, const float* __restrict__ sinv,
                                        __nv_bfloat16* __restrict__ out, int rows, int heads, int head_dim, int rope_dims) {
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  int per_head = head_dim / 8;
  long long total = (long long)rows * heads * per_head;
  if (i >= total) return;
  int j0 = (int)(i % per_head) * 8;
  long long sh = i / per_head;  // row * heads + head
  long long s = sh / heads;
  int h = (int)(sh % heads);
  const __nv_bfloat16* xh = x + s * stride + (long long)h * head_dim;
  float r = rinv[sh];
  float y2[8];
  norm8(xh + j0, r, w + j0, y2);
  float o[8];
  if (j0 < rope_dims) {
    int half = rope_dims / 2;
    bool first = j0 < half;
    int p0 = first ? j0 + half : j0 - half;
    float pv[8];
    norm8(xh + p0, r, w + p0, pv);
    const float* cs = cosv + s * rope_dims + j0;
    const float* sn = sinv + s * rope_dims + j0;
#pragma unroll
    for (int t = 0; t < 8; ++t) {
      float rot = first ? -pv[t] : pv[t];
      o[t] = __fadd_rn(__fmul_rn(y2[t], cs[t]), __fmul_rn(rot, sn[t]));
    }
  } else {
#pragma unroll
    for (int t = 0; t < 8; ++t) o[t] = y2[t];
  }
  *reinterpret_cast<uint4*>(out + sh * head_dim + j0) = make_uint4(pack_bf16(o[0], o[1]), pack_bf16(o[2], o[3]), pack_bf16(o[4], o[5]), pack_bf16(o[6], o[7]));
}

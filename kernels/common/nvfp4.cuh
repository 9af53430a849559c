// Shared device code of the exact NVFP4 producers for sm_90 (H100/H200), byte-identical to
// comfy-kitchen 0.2.40's CUDA quantize_nvfp4 (shared/spec/nvfp4.md, "CUDA semantics"): the
// encode of one 16-value block (E4M3 scale, FMA-pipe E2M1, hi_first packing), the 128x4 swizzle,
// packed bf16x2/f16x2 pairs, the NaN-propagating block max and the global-scale kernel every
// two-pass producer ends its pass 1 with. Included by kernels/common/quantize.cu and each CUDA
// candidate's own .cu; editing it reruns every CUDA candidate (it is in each one's fingerprint).
//
// Numerics:  compiled WITHOUT fast-math; the fast-math steps of comfy's kernel are spelled out in
//            PTX (mul.rn.ftz, rcp.approx.ftz) so the bf16 modulation and SwiGLU stay IEEE, as torch's.
// Cost model (why the code looks like this): sm_90 has no E2M1 conversion, and the first version's
//            integer E2M1 (~20 ALU-pipe ops per element) made every producer ALU-bound at about
//            twice the memory floor (git show a2bdff9:evidence/h200/ncu.csv). Here the E2M1 rounding runs on the FMA
//            pipe (three magic-number roundings, e2m1_code), signs and bytes are gathered by byte
//            permutes (encode_word), pairs are packed, index math is 32-bit.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

namespace h3 {

__device__ __forceinline__ float mul_ftz(float a, float b) {
  float r;
  asm("mul.rn.ftz.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
}

__device__ __forceinline__ float rcp_approx(float a) {
  float r;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(a));
  return r;
}

__device__ __forceinline__ float to_f(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_f(__half v) { return __half2float(v); }
template <typename T> __device__ __forceinline__ T from_f(float v);
template <> __device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
template <> __device__ __forceinline__ __half from_f<__half>(float v) { return __float2half_rn(v); }

// Two values of T in one 32-bit word (element 0 in the low half), as they sit in memory.
template <typename T> struct Pair;
template <> struct Pair<__nv_bfloat16> {
  static __device__ __forceinline__ float lo(unsigned w) { return __uint_as_float(w << 16); }
  static __device__ __forceinline__ float hi(unsigned w) { return __uint_as_float(w & 0xffff0000u); }
  static __device__ __forceinline__ unsigned pack(float a, float b) {  // RN to bf16 each
    unsigned r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(b), "f"(a));
    return r;
  }
  static __device__ __forceinline__ unsigned add(unsigned a, unsigned b) {  // RN(a + b) each, IEEE
    unsigned r;
    asm("add.rn.bf16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
    return r;
  }
  static __device__ __forceinline__ unsigned mul(unsigned a, unsigned b) {  // RN(a * b) each (one rounding)
    unsigned r;
    asm("mul.rn.bf16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
    return r;
  }
  // mul equals torch's fp32 multiply then RN wherever a * s is exact in fp32: for every bf16 a when
  // s == 0 or |s| >= 2^-8 (the product's lowest bit is then >= 2^-133 * 2^-15 = 2^-148). Every
  // s1 = RN(scale + 1) of a bf16 scale is such an s: no bf16 lies strictly between -1 and -1 + 2^-8.
  static __device__ __forceinline__ unsigned absmax_nan(unsigned acc, unsigned w) {  // acc = max(acc, |w|), NaN wins
    unsigned r;
    asm("max.NaN.bf16x2 %0, %1, %2;" : "=r"(r) : "r"(acc), "r"(w & 0x7fff7fffu));
    return r;
  }
};
template <> struct Pair<__half> {
  static __device__ __forceinline__ float lo(unsigned w) { return __half2float(__ushort_as_half((unsigned short)(w & 0xffffu))); }
  static __device__ __forceinline__ float hi(unsigned w) { return __half2float(__ushort_as_half((unsigned short)(w >> 16))); }
  static __device__ __forceinline__ unsigned pack(float a, float b) {
    unsigned r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(b), "f"(a));
    return r;
  }
  static __device__ __forceinline__ unsigned add(unsigned a, unsigned b) {
    unsigned r;
    asm("add.rn.f16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
    return r;
  }
  static __device__ __forceinline__ unsigned mul(unsigned a, unsigned b) {
    unsigned r;
    asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
    return r;
  }
  // fp16 x fp16 has at most 22 significant bits and exponent >= -48: always exact in fp32, so mul
  // equals torch's fp32 multiply then RN for every pair.
  static __device__ __forceinline__ unsigned absmax_nan(unsigned acc, unsigned w) {
    unsigned r;
    asm("max.NaN.f16x2 %0, %1, %2;" : "=r"(r) : "r"(acc), "r"(w & 0x7fff7fffu));
    return r;
  }
};

// NaN-propagating max of non-negative values (torch.amax semantics for the global scale): a NaN in
// either operand wins (a NaN already in `a` survives because no comparison with it is true).
__device__ __forceinline__ float max_nan(float a, float b) { return (b != b || b > a) ? b : a; }

// The NaN-propagating abs-max of a packed accumulator's two halves.
template <typename T>
__device__ __forceinline__ float pair_max(unsigned acc) { return max_nan(Pair<T>::lo(acc), Pair<T>::hi(acc)); }

// E2M1 code of |v| (CUDA's software conversion on sm_90: RNE on the grid {0,.5,1,1.5,2,3,4,6},
// saturating at 6, NaN -> 7) as the float 2^23 + code; the sign bit is v's (encode_word puts it in).
// For a = min(|v|, 6) the code is min(RNE(2a), RNE(a) + 2, RNE(a/2) + 4): the grid is the lower
// envelope of three uniform grids (spacing 1/2, 1, 2) and RNE commutes with min. Each RNE is one
// FMA against 2^23 (+ an even offset, so ties still go to even codes), which rounds at unit spacing.
// NaN: fminf returns 6 (code 7) and the multiply that produced v made it the positive canonical NaN.
// With v's sign bit as bit 3, equal to formats.e2m1_encode on all 2^32 fp32 patterns:
// tests/test_kernels_compile.py (a sample in CI, H3_E2M1_EXHAUSTIVE=1 for all; run: studies/producers/evidence/e2m1_exhaustive_cpu_2026-12-01/e2m1_exhaustive.log).
__device__ __forceinline__ float e2m1_code(float v) {
  float a = fminf(fabsf(v), 6.0f);
  float t1 = __fmaf_rn(a, 2.0f, 8388608.0f);  // 2^23 + RNE(2a)
  float t2 = __fadd_rn(a, 8388610.0f);        // 2^23 + RNE(a) + 2
  float t3 = __fmaf_rn(a, 0.5f, 8388612.0f);  // 2^23 + RNE(a/2) + 4
  return fminf(fminf(t1, t2), t3);
}

// PTX prmt.b32 (generic mode): result byte k is source byte sel[4k..4k+2] of {b, a} (a = bytes 0-3),
// or, where sel[4k+3] is set, that byte's top bit repeated over all 8 bits.
__device__ __forceinline__ unsigned prmt(unsigned a, unsigned b, unsigned sel) {
  unsigned r;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(sel));
  return r;
}

// One QDATA word (hi_first): byte j holds the nibble of v[2j] high, of v[2j+1] low, each nibble
// code(|v|) + 8 * signbit(v). Cost model: the codes' low bytes are paired with one shift-add and
// gathered by byte permutes; the signs come from the floats' top bytes, repeated by prmt, two masks
// for 8 values (a per-value copysign and subtract cost two instructions each).
__device__ __forceinline__ unsigned encode_word(const float v[8]) {
  unsigned p[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) p[j] = __float_as_uint(e2m1_code(v[2 * j])) * 16u + __float_as_uint(e2m1_code(v[2 * j + 1]));  // low byte: the pair
  unsigned w[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) w[i] = __float_as_uint(v[i]);
  const unsigned codes = prmt(prmt(p[0], p[1], 0x0040u), prmt(p[2], p[3], 0x0040u), 0x5410u);
  const unsigned hi_signs = prmt(prmt(w[0], w[2], 0x00FBu), prmt(w[4], w[6], 0x00FBu), 0x5410u);  // byte j: 0xFF where v[2j] < 0
  const unsigned lo_signs = prmt(prmt(w[1], w[3], 0x00FBu), prmt(w[5], w[7], 0x00FBu), 0x5410u);  // byte j: 0xFF where v[2j+1] < 0
  return codes | (hi_signs & 0x80808080u) | (lo_signs & 0x08080808u);
}

// cuBLAS 128x4 swizzled offset of the scale of row r, 16-block c (groups = ceil(nb / 4) per row);
// 32-bit: the launcher keeps every scale buffer under 2^31 bytes.
__device__ __forceinline__ unsigned sf_offset(unsigned r, unsigned c, unsigned groups) {
  return (((r >> 7) * groups + (c >> 2)) * 32u + (r & 31u)) * 16u + ((r >> 5) & 3u) * 4u + (c & 3u);
}

// One 16-value block, comfy's CUDA steps: amax (NaN-ignoring) -> d = amax*RN(1/6)*rcp(g) ->
// min 448 -> E4M3 -> enc = min(rcp(g*s), FLT_MAX) -> codes of x*enc, hi_first. rg = rcp(g).
// The abs-max is a tree (fmaxf of non-negative values is associative: the max of the non-NaN ones,
// NaN only when all are), so its dependency chain is 4 deep, not 15.
__device__ __forceinline__ void encode_block(const float x[16], float g, float rg, uint2* q, unsigned char* s) {
  float m[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) m[i] = fmaxf(fabsf(x[2 * i]), fabsf(x[2 * i + 1]));
#pragma unroll
  for (int n = 4; n > 0; n >>= 1)
#pragma unroll
    for (int i = 0; i < n; ++i) m[i] = fmaxf(m[i], m[i + n]);
  float d = mul_ftz(mul_ftz(m[0], __uint_as_float(0x3E2AAAABu)), rg);
  d = fminf(d, 448.0f);
  __nv_fp8_storage_t sb = __nv_cvt_float_to_fp8(d, __NV_SATFINITE, __NV_E4M3);
  float sf = __half2float(__half(__nv_cvt_fp8_to_halfraw(sb, __NV_E4M3)));
  float enc = fminf(rcp_approx(mul_ftz(g, sf)), 3.402823466e+38f);
  float v[16];
#pragma unroll
  for (int i = 0; i < 16; ++i) v[i] = mul_ftz(x[i], enc);
  *q = make_uint2(encode_word(v), encode_word(v + 8));
  *s = sb;
}

// comfy-kitchen 0.2.40's CUDA quantizer runs 16 blocks past the last real one when (rows_pad / 16) * nb
// is odd (linear block index rows_pad * nb .. + 15, row-major over nb blocks): it reads past the input,
// writes their codes past QDATA and their scale bytes into the scale padding (measured on the H200:
// studies/producers/comfy_padding_probe.py, studies/producers/evidence/comfy_padding_probe/). Where rcp(g) is infinite or NaN
// (g zero, subnormal or NaN) those scale bytes are 0x7E whatever the memory read; otherwise they come
// from whatever follows the input (0 when it encodes zero, the value these kernels write). Scale row r
// >= rows_pad, block c < nb of such a tail:
__device__ __forceinline__ bool comfy_tail(unsigned r, unsigned c, unsigned rows_pad, unsigned nb) {
  return r >= rows_pad && c < nb && (((rows_pad >> 4) * nb) & 1u) && (r - rows_pad) * nb + c < 16u;
}

// The scale byte of an all-zero block (the tail's): d = 0 * RN(1/6) * rcp(g), NaN-ignoring min 448.
__device__ __forceinline__ unsigned char zero_block_scale(float rg) {
  float d = fminf(mul_ftz(mul_ftz(0.0f, __uint_as_float(0x3E2AAAABu)), rg), 448.0f);
  return __nv_cvt_float_to_fp8(d, __NV_SATFINITE, __NV_E4M3);
}

// 16 values from two 16-byte vectors of T.
template <typename T>
__device__ __forceinline__ void unpack16(const uint4 v[2], float out[16]) {
  const unsigned* w = reinterpret_cast<const unsigned*>(v);
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    out[2 * i] = Pair<T>::lo(w[i]);
    out[2 * i + 1] = Pair<T>::hi(w[i]);
  }
}

__device__ __forceinline__ void load32(const void* p, uint4 v[2]) {
  const uint4* q = reinterpret_cast<const uint4*>(p);
  v[0] = q[0];
  v[1] = q[1];
}

// The block's NaN-propagating max of m, written (as bits) to partial[block] by thread 0: pass 1
// leaves one partial per block and its consumer reduces them (no atomics, no zeroed accumulator).
__device__ __forceinline__ void block_max(float m, unsigned* partial) {
  __shared__ float warp_max[32];
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) m = max_nan(m, __shfl_xor_sync(0xffffffffu, m, o));
  if ((threadIdx.x & 31) == 0) warp_max[threadIdx.x >> 5] = m;
  __syncthreads();
  if (threadIdx.x < 32) {
    m = threadIdx.x < (blockDim.x >> 5) ? warp_max[threadIdx.x] : 0.0f;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) m = max_nan(m, __shfl_xor_sync(0xffffffffu, m, o));
    if (threadIdx.x == 0) partial[blockIdx.x + blockIdx.y * gridDim.x] = __float_as_uint(m);
  }
}

// The global scale from the abs-max, as torch/comfy compute it on CUDA: T(amax * RN(1/2688)), fp32.
template <typename T>
__device__ __forceinline__ float scale_from_amax(float amax) { return to_f(from_f<T>(amax * (1.0f / 2688.0f))); }

}  // namespace h3

// g = amax(|x|) / 2688 in T, as torch computes it on CUDA (a * RN(1/2688), rounded to T), then fp32,
// from a pass 1's n partial maxima (NaN wins). One block.
template <typename T>
__global__ void finalize_scale(const unsigned* __restrict__ partials, long long n, float* __restrict__ g) {
  __shared__ float warp_max[32];
  float m = 0.0f;
  for (long long i = threadIdx.x; i < n; i += blockDim.x) m = h3::max_nan(m, __uint_as_float(partials[i]));
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) m = h3::max_nan(m, __shfl_xor_sync(0xffffffffu, m, o));
  if ((threadIdx.x & 31) == 0) warp_max[threadIdx.x >> 5] = m;
  __syncthreads();
  if (threadIdx.x < 32) {
    m = threadIdx.x < (blockDim.x >> 5) ? warp_max[threadIdx.x] : 0.0f;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) m = h3::max_nan(m, __shfl_xor_sync(0xffffffffu, m, o));
    if (threadIdx.x == 0) *g = h3::scale_from_amax<T>(m);
  }
}

// Exact NVFP4 producers for sm_90 (H100/H200), byte-identical to comfy-kitchen 0.2.40's CUDA
// quantize_nvfp4 (shared/spec/nvfp4.md, "CUDA semantics").
//
// Run:       compiled at run time by h3gates/cudakernels.py (cuda.core / NVRTC, arch sm_90a);
//            compile-only check: nvcc -std=c++17 -arch=sm_90a -cubin kernels/cuda/nvfp4_producers.cu
// Kernels:   amax_reduce        one pass, |x| max (NaN propagates, as torch.amax) into a uint32
//            finalize_scale     g = T(amax * RN(1/2688)) as fp32, the value torch/comfy computes on CUDA
//            quantize_into      exact QDATA + swizzled SFA for a row range into caller-owned buffers
//            modulate_amax / modulate_quantize   two-pass modulate-fused producer (seed 000)
//            swiglu_amax / swiglu_quantize       two-pass SwiGLU-fused producer
// Constraints: bf16 or fp16 input, any rows and cols (padded to 16 as comfy does); vector loads
//            when rows are 16-byte aligned, a scalar path otherwise.
//            One thread per 16-element block (one E4M3 scale).
// Numerics:  compiled WITHOUT fast-math; the fast-math steps of comfy's kernel are spelled out in
//            PTX (mul.rn.ftz, rcp.approx.ftz) so the bf16 modulation and SwiGLU stay IEEE, as torch's.
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

// NaN-propagating max of non-negative values (torch.amax semantics for the global scale): a NaN in
// either operand wins (a NaN already in `a` survives because no comparison with it is true).
__device__ __forceinline__ float max_nan(float a, float b) { return (b != b || b > a) ? b : a; }

// E2M1 code as CUDA's software conversion on sm_90: RNE on the grid, saturating at 6, sign kept
// (also for values that round to 0), NaN -> 0x7.
// For |v| >= 1 the code is the top two significand bits after round-to-nearest-even (exponent
// rebias + half-ulp bias + odd bit, the classic integer rounding); below 1 two compares suffice.
__device__ __forceinline__ unsigned e2m1(float v) {
  unsigned bits = __float_as_uint(v);
  unsigned a = bits & 0x7fffffffu;
  unsigned normal = min((a - (126u << 23) + 0x1fffffu + ((a >> 22) & 1u)) >> 22, 7u);
  unsigned small = (a > 0x3e800000u) + (a >= 0x3f400000u);  // |v| > 0.25, |v| >= 0.75
  unsigned c = (a >= 0x3f800000u ? normal : small) | ((bits >> 28) & 8u);
  return a > 0x7f800000u ? 7u : c;  // NaN -> positive max
}

// cuBLAS 128x4 swizzled offset of the scale of row r, 16-block c (nb blocks per row).
__device__ __forceinline__ long long sf_offset(long long r, long long c, long long nb) {
  long long groups = (nb + 3) / 4;
  return ((r / 128 * groups + c / 4) * 32 + r % 32) * 16 + (r % 128) / 32 * 4 + c % 4;
}

// One 16-value block, comfy's CUDA steps: amax (NaN-ignoring) -> d = amax*RN(1/6)*rcp(g) ->
// min 448 -> E4M3 -> enc = min(rcp(g*s), FLT_MAX) -> codes of x*enc, hi_first.
__device__ __forceinline__ void encode_block(const float x[16], float g, uint2* q, unsigned char* s) {
  float amax = fabsf(x[0]);
#pragma unroll
  for (int i = 1; i < 16; ++i) amax = fmaxf(amax, fabsf(x[i]));
  float d = mul_ftz(mul_ftz(amax, __uint_as_float(0x3E2AAAABu)), rcp_approx(g));
  d = fminf(d, 448.0f);
  __nv_fp8_storage_t sb = __nv_cvt_float_to_fp8(d, __NV_SATFINITE, __NV_E4M3);
  float sf = __half2float(__half(__nv_cvt_fp8_to_halfraw(sb, __NV_E4M3)));
  float enc = fminf(rcp_approx(mul_ftz(g, sf)), 3.402823466e+38f);
  unsigned w[2] = {0u, 0u};
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    unsigned byte = (e2m1(mul_ftz(x[2 * j], enc)) << 4) | e2m1(mul_ftz(x[2 * j + 1], enc));
    w[j / 4] |= byte << (8 * (j % 4));
  }
  *q = make_uint2(w[0], w[1]);
  *s = sb;
}

// Load 16 consecutive values of row r starting at column c0 (zero outside rows x cols).
template <typename T>
__device__ __forceinline__ void load16(const T* x, long long ld, long long rows, long long cols, long long r, long long c0, float out[16], bool vec) {
  if (vec && r < rows && c0 + 16 <= cols) {
    const uint4* p = reinterpret_cast<const uint4*>(x + r * ld + c0);
    uint4 v[2] = {p[0], p[1]};
    const T* e = reinterpret_cast<const T*>(v);
#pragma unroll
    for (int i = 0; i < 16; ++i) out[i] = to_f(e[i]);
  } else {
#pragma unroll
    for (int i = 0; i < 16; ++i) out[i] = (r < rows && c0 + i < cols) ? to_f(x[r * ld + c0 + i]) : 0.0f;
  }
}

template <typename T>
__device__ __forceinline__ void block_max(float m, unsigned* amax_bits) {
  __shared__ float warp_max[32];
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) m = max_nan(m, __shfl_xor_sync(0xffffffffu, m, o));
  if ((threadIdx.x & 31) == 0) warp_max[threadIdx.x >> 5] = m;
  __syncthreads();
  if (threadIdx.x < 32) {
    m = threadIdx.x < (blockDim.x >> 5) ? warp_max[threadIdx.x] : 0.0f;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) m = max_nan(m, __shfl_xor_sync(0xffffffffu, m, o));
    if (threadIdx.x == 0) atomicMax(amax_bits, __float_as_uint(m));  // |x| >= 0 and NaN bits order as uints
  }
}

// bf16/fp16 modulation exactly as torch: (h * (scale + 1)) + shift, rounding after each op;
// s1 = (scale + 1) is precomputed once per segment by torch itself (the reference op).
template <typename T>
__device__ __forceinline__ float modulate(T h, T s1, T shift) {
  T hm = from_f<T>(to_f(h) * to_f(s1));
  return to_f(from_f<T>(to_f(hm) + to_f(shift)));
}

// silu(gate) rounded to T, times value, rounded to T (torch's silu then mul).
template <typename T>
__device__ __forceinline__ float swiglu(T gate, T value) {
  float g = to_f(gate);
  T sl = from_f<T>(g / (1.0f + expf(-g)));
  return to_f(from_f<T>(to_f(sl) * to_f(value)));
}

// Packed rows [text | audio | video]: segment 0 below b1, 1 below b2, else 2.
__device__ __forceinline__ int segment_of(long long r, long long b1, long long b2) { return (r >= b1) + (r >= b2); }

// The global scale from the abs-max bits, as finalize_scale computes it.
template <typename T>
__device__ __forceinline__ float scale_from_amax(const unsigned* amax_bits) {
  return to_f(from_f<T>(__uint_as_float(*amax_bits) * (1.0f / 2688.0f)));
}

// Pass 2's common start: the global scale the launch encodes with (derived from pass 1's abs-max and
// published to g by thread 0, or the static g) and this thread's (row, 16-block); false past the end.
template <typename T>
__device__ __forceinline__ bool pass_two_block(const unsigned* amax_bits, float* g, long long rows_pad, long long nb, float& gs,
                                               long long& r, long long& c) {
  unsigned b = blockIdx.x * blockDim.x + threadIdx.x;  // rows_pad * nb < 2^31 (checked by the launcher)
  gs = amax_bits ? scale_from_amax<T>(amax_bits) : *g;
  if (amax_bits && b == 0) *g = gs;
  if (b >= rows_pad * nb) return false;
  r = b / (unsigned)nb;
  c = b % (unsigned)nb;
  return true;
}

}  // namespace h3

// ------------------------------------------------------------------ global scale
template <typename T>
__global__ void amax_reduce(const T* __restrict__ x, long long n, unsigned* amax_bits) {
  float m = 0.0f;
  long long n8 = n / 8;
  const uint4* v = reinterpret_cast<const uint4*>(x);
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n8; i += (long long)gridDim.x * blockDim.x) {
    uint4 w = v[i];
    const T* e = reinterpret_cast<const T*>(&w);
#pragma unroll
    for (int k = 0; k < 8; ++k) m = h3::max_nan(m, fabsf(h3::to_f(e[k])));
  }
  for (long long i = n8 * 8 + blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
    m = h3::max_nan(m, fabsf(h3::to_f(x[i])));
  h3::block_max<T>(m, amax_bits);
}

// g = amax(|x|) / 2688 in T, as torch computes it on CUDA (a * RN(1/2688), rounded to T), then fp32.
template <typename T>
__global__ void finalize_scale(const unsigned* amax_bits, float* g) {
  float amax = __uint_as_float(*amax_bits);
  *g = h3::to_f(h3::from_f<T>(amax * (1.0f / 2688.0f)));
}

// ------------------------------------------------------------------ quantize a row range
// x: rows x cols (row stride ld) -> q rows [dest_row, dest_row + rows_pad) of a [*, cols_pad/2]
// buffer and their scales in the swizzled buffer s (nb = cols_pad / 16 blocks per row).
template <typename T>
__global__ void quantize_into(const T* __restrict__ x, long long ld, long long rows, long long cols, long long rows_pad,
                              long long nb, const float* __restrict__ g, unsigned char* __restrict__ q,
                              unsigned char* __restrict__ s, long long dest_row, int vec) {
  unsigned b = blockIdx.x * blockDim.x + threadIdx.x;  // rows_pad * nb < 2^31 (checked by the launcher)
  if (b >= rows_pad * nb) return;
  long long r = b / (unsigned)nb, c = b % (unsigned)nb;
  float v[16];
  h3::load16(x, ld, rows, cols, r, c * 16, v, vec != 0);
  h3::encode_block(v, *g, reinterpret_cast<uint2*>(q + (dest_row + r) * nb * 8 + c * 8), s + h3::sf_offset(dest_row + r, c, nb));
}

// ------------------------------------------------------------------ modulate-fused producer
// h: rows x cols; s1 = scale + 1 and shift: 3 x cols, one row per segment (rows < b1, < b2, rest).
template <typename T>
__global__ void modulate_amax(const T* __restrict__ h, long long rows, long long cols, const T* __restrict__ scale,
                              const T* __restrict__ shift, long long b1, long long b2, unsigned* amax_bits, int vec) {
  float m = 0.0f;
  if (!vec) {  // rows not 16-byte aligned: one element at a time
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < rows * cols; i += (long long)gridDim.x * blockDim.x) {
      long long r = i / cols, c = i % cols;
      int sg = h3::segment_of(r, b1, b2);
      m = h3::max_nan(m, fabsf(h3::modulate(h[i], scale[sg * cols + c], shift[sg * cols + c])));
    }
    h3::block_max<T>(m, amax_bits);
    return;
  }
  long long per_row = cols / 8;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < rows * per_row; i += (long long)gridDim.x * blockDim.x) {
    long long r = i / per_row, c0 = (i % per_row) * 8;
    int sg = h3::segment_of(r, b1, b2);
    uint4 hv = *reinterpret_cast<const uint4*>(h + r * cols + c0);
    uint4 sv = *reinterpret_cast<const uint4*>(scale + sg * cols + c0);
    uint4 tv = *reinterpret_cast<const uint4*>(shift + sg * cols + c0);
    const T *he = reinterpret_cast<const T*>(&hv), *se = reinterpret_cast<const T*>(&sv), *te = reinterpret_cast<const T*>(&tv);
#pragma unroll
    for (int k = 0; k < 8; ++k) m = h3::max_nan(m, fabsf(h3::modulate(he[k], se[k], te[k])));
  }
  h3::block_max<T>(m, amax_bits);
}

// g: either the global scale (static) or, when amax_bits is given, derived from pass 1's abs-max
// (written to g by thread 0 for the caller).
template <typename T>
__global__ void modulate_quantize(const T* __restrict__ h, long long rows, long long cols, long long rows_pad,
                                  const T* __restrict__ scale, const T* __restrict__ shift, long long b1, long long b2,
                                  const unsigned* __restrict__ amax_bits, float* __restrict__ g, unsigned char* __restrict__ q,
                                  unsigned char* __restrict__ s, long long nb, int vec) {
  float gs;
  long long r, c;
  if (!h3::pass_two_block<T>(amax_bits, g, rows_pad, nb, gs, r, c)) return;
  float v[16];
  if (r < rows && (!vec || (c + 1) * 16 > cols)) {  // unaligned rows or the partial last block
    int sg = h3::segment_of(r, b1, b2);
#pragma unroll
    for (int k = 0; k < 16; ++k) {
      long long col = c * 16 + k;
      v[k] = col < cols ? h3::modulate(h[r * cols + col], scale[sg * cols + col], shift[sg * cols + col]) : 0.0f;
    }
  } else if (r < rows) {
    int sg = h3::segment_of(r, b1, b2);
    const uint4* hp = reinterpret_cast<const uint4*>(h + r * cols + c * 16);
    const uint4* sp = reinterpret_cast<const uint4*>(scale + sg * cols + c * 16);
    const uint4* tp = reinterpret_cast<const uint4*>(shift + sg * cols + c * 16);
    uint4 hv[2] = {hp[0], hp[1]}, sv[2] = {sp[0], sp[1]}, tv[2] = {tp[0], tp[1]};
    const T *he = reinterpret_cast<const T*>(hv), *se = reinterpret_cast<const T*>(sv), *te = reinterpret_cast<const T*>(tv);
#pragma unroll
    for (int k = 0; k < 16; ++k) v[k] = h3::modulate(he[k], se[k], te[k]);
  } else {
#pragma unroll
    for (int k = 0; k < 16; ++k) v[k] = 0.0f;
  }
  h3::encode_block(v, gs, reinterpret_cast<uint2*>(q + r * nb * 8 + c * 8), s + h3::sf_offset(r, c, nb));
}

// ------------------------------------------------------------------ SwiGLU-fused producer
// u: rows x 2f, halves [gate; value] -> the producer of silu(gate) * value (rows x f).
template <typename T>
__global__ void swiglu_amax(const T* __restrict__ u, long long rows, long long f, unsigned* amax_bits, int vec) {
  float m = 0.0f;
  if (!vec) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < rows * f; i += (long long)gridDim.x * blockDim.x) {
      long long r = i / f, c = i % f;
      m = h3::max_nan(m, fabsf(h3::swiglu(u[r * 2 * f + c], u[r * 2 * f + f + c])));
    }
    h3::block_max<T>(m, amax_bits);
    return;
  }
  long long per_row = f / 8;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < rows * per_row; i += (long long)gridDim.x * blockDim.x) {
    long long r = i / per_row, c0 = (i % per_row) * 8;
    uint4 gv = *reinterpret_cast<const uint4*>(u + r * 2 * f + c0);
    uint4 vv = *reinterpret_cast<const uint4*>(u + r * 2 * f + f + c0);
    const T *ge = reinterpret_cast<const T*>(&gv), *ve = reinterpret_cast<const T*>(&vv);
#pragma unroll
    for (int k = 0; k < 8; ++k) m = h3::max_nan(m, fabsf(h3::swiglu(ge[k], ve[k])));
  }
  h3::block_max<T>(m, amax_bits);
}

template <typename T>
__global__ void swiglu_quantize(const T* __restrict__ u, long long rows, long long f, long long rows_pad, const unsigned* __restrict__ amax_bits,
                                float* __restrict__ g, unsigned char* __restrict__ q, unsigned char* __restrict__ s, long long nb, int vec) {
  float gs;
  long long r, c;
  if (!h3::pass_two_block<T>(amax_bits, g, rows_pad, nb, gs, r, c)) return;
  float v[16];
  if (r < rows && (!vec || (c + 1) * 16 > f)) {  // unaligned rows or the partial last block
#pragma unroll
    for (int k = 0; k < 16; ++k) {
      long long col = c * 16 + k;
      v[k] = col < f ? h3::swiglu(u[r * 2 * f + col], u[r * 2 * f + f + col]) : 0.0f;
    }
  } else if (r < rows) {
    const uint4* gp = reinterpret_cast<const uint4*>(u + r * 2 * f + c * 16);
    const uint4* vp = reinterpret_cast<const uint4*>(u + r * 2 * f + f + c * 16);
    uint4 gv[2] = {gp[0], gp[1]}, vv[2] = {vp[0], vp[1]};
    const T *ge = reinterpret_cast<const T*>(gv), *ve = reinterpret_cast<const T*>(vv);
#pragma unroll
    for (int k = 0; k < 16; ++k) v[k] = h3::swiglu(ge[k], ve[k]);
  } else {
#pragma unroll
    for (int k = 0; k < 16; ++k) v[k] = 0.0f;
  }
  h3::encode_block(v, gs, reinterpret_cast<uint2*>(q + r * nb * 8 + c * 8), s + h3::sf_offset(r, c, nb));
}

// PTX rcp.approx.ftz.f32 of each input (to check the measured sm_90 table on fresh inputs).
__global__ void rcp_approx_kernel(const float* __restrict__ x, float* __restrict__ y, long long n) {
  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i < n) y[i] = h3::rcp_approx(x[i]);
}

// Every kernel for both input types (the names cudakernels.py asks NVRTC for).
#define H3_INSTANTIATE(T)                                                                                                        \
  template __global__ void amax_reduce<T>(const T*, long long, unsigned*);                                                       \
  template __global__ void finalize_scale<T>(const unsigned*, float*);                                                           \
  template __global__ void quantize_into<T>(const T*, long long, long long, long long, long long, long long, const float*,       \
                                            unsigned char*, unsigned char*, long long, int);                                     \
  template __global__ void modulate_amax<T>(const T*, long long, long long, const T*, const T*, long long, long long, unsigned*, int); \
  template __global__ void modulate_quantize<T>(const T*, long long, long long, long long, const T*, const T*, long long, long long, \
                                                const unsigned*, float*, unsigned char*, unsigned char*, long long, int);        \
  template __global__ void swiglu_amax<T>(const T*, long long, long long, unsigned*, int);                                       \
  template __global__ void swiglu_quantize<T>(const T*, long long, long long, long long, const unsigned*, float*, unsigned char*, \
                                              unsigned char*, long long, int);

H3_INSTANTIATE(__nv_bfloat16)
H3_INSTANTIATE(__half)

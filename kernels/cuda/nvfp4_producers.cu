// Exact NVFP4 producers for sm_90 (H100/H200), byte-identical to comfy-kitchen 0.2.40's CUDA
// quantize_nvfp4 (shared/spec/nvfp4.md, "CUDA semantics").
//
// Run:       compiled at run time by h3gates/cudakernels.py (cuda.core / NVRTC, arch sm_90a);
//            compile-only check: nvcc -std=c++17 -arch=sm_90a -cubin kernels/cuda/nvfp4_producers.cu
// Kernels:   amax_reduce        one pass, |x| max (NaN propagates, as torch.amax), one partial per block
//            finalize_scale     g = T(amax * RN(1/2688)) as fp32 from a pass 1's partials, as torch/comfy
//            quantize_into      exact QDATA + swizzled SFA for a row range into caller-owned buffers
//            modulate_amax / modulate_quantize   two-pass modulate-fused producer (seed 000)
//            silu_table         silu of all 65,536 bit patterns of T (torch's formula), built once
//            swiglu_amax / swiglu_quantize       two-pass SwiGLU-fused producer (table in shared memory)
//            swiglu_probe       the SwiGLU element function of the producer, for exhaustive tests
// Constraints: bf16 or fp16 input, any rows and cols (padded to 16 as comfy does); vector loads
//            when rows are 16-byte aligned, a scalar path otherwise. The quantizing kernels write
//            every scale byte of their tiles, padding included (zero), so buffers need no memset.
// Cost model (why the code looks like this): sm_90 has no E2M1 conversion, and the first version's
//            integer E2M1 (~20 ALU-pipe ops per element) made every producer ALU-bound at about
//            twice the memory floor (git show a2bdff9:evidence/h200/ncu.csv). Here the E2M1 rounding runs on the FMA
//            pipe (three magic-number roundings, e2m1_nibble), the modulation and abs-max work on
//            packed bf16x2/f16x2 pairs, silu is a branch-free lookup in a 128 KB shared-memory table
//            of the exact formula, and index math is 32-bit.
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
  // Is a * s exact in fp32 for every bf16 a (so torch's fp32 multiply then RN equals mul above)?
  // Yes when s == 0 or |s| >= 2^-8: the product's lowest bit is then >= 2^-133 * 2^-15 = 2^-148.
  static __device__ __forceinline__ bool fp32_product_exact(unsigned s) {
    unsigned a = s & 0x7fffu, b = (s >> 16) & 0x7fffu;
    return (a == 0u || a >= 0x3B80u) && (b == 0u || b >= 0x3B80u);
  }
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
  // fp16 x fp16 has at most 22 significant bits and exponent >= -48: always exact in fp32.
  static __device__ __forceinline__ bool fp32_product_exact(unsigned) { return true; }
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

// E2M1 nibble of v (CUDA's software conversion on sm_90: RNE on the grid {0,.5,1,1.5,2,3,4,6},
// saturating at 6, sign kept also for values that round to 0, NaN -> 0x7) as the float 2^23 + nibble.
// For a = min(|v|, 6) the code is min(RNE(2a), RNE(a) + 2, RNE(a/2) + 4): the grid is the lower
// envelope of three uniform grids (spacing 1/2, 1, 2) and RNE commutes with min. Each RNE is one
// FMA against 2^23 (+ an even offset, so ties still go to even codes), which rounds at unit spacing.
// NaN: fminf returns 6 (code 7) and the multiply that produced v made it the positive canonical NaN.
// Equal to formats.e2m1_encode on all 2^32 fp32 patterns: tests/test_kernels_compile.py (a sample in CI,
// H3_E2M1_EXHAUSTIVE=1 for all; run: evidence/cpu/e2m1_exhaustive.log).
__device__ __forceinline__ float e2m1_nibble(float v) {
  float a = fminf(fabsf(v), 6.0f);
  float t1 = __fmaf_rn(a, 2.0f, 8388612.0f);  // 2^23 + 4 + RNE(2a)
  float t2 = __fadd_rn(a, 8388614.0f);        // 2^23 + 4 + RNE(a) + 2
  float t3 = __fmaf_rn(a, 0.5f, 8388616.0f);  // 2^23 + 4 + RNE(a/2) + 4
  return __fsub_rn(fminf(fminf(t1, t2), t3), copysignf(4.0f, v));  // 2^23 + code + 8 * sign
}

// cuBLAS 128x4 swizzled offset of the scale of row r, 16-block c (groups = ceil(nb / 4) per row);
// 32-bit: the launcher keeps every scale buffer under 2^31 bytes.
__device__ __forceinline__ unsigned sf_offset(unsigned r, unsigned c, unsigned groups) {
  return (((r >> 7) * groups + (c >> 2)) * 32u + (r & 31u)) * 16u + ((r >> 5) & 3u) * 4u + (c & 3u);
}

// One 16-value block, comfy's CUDA steps: amax (NaN-ignoring) -> d = amax*RN(1/6)*rcp(g) ->
// min 448 -> E4M3 -> enc = min(rcp(g*s), FLT_MAX) -> codes of x*enc, hi_first. rg = rcp(g).
__device__ __forceinline__ void encode_block(const float x[16], float g, float rg, uint2* q, unsigned char* s) {
  float amax = fabsf(x[0]);
#pragma unroll
  for (int i = 1; i < 16; ++i) amax = fmaxf(amax, fabsf(x[i]));
  float d = mul_ftz(mul_ftz(amax, __uint_as_float(0x3E2AAAABu)), rg);
  d = fminf(d, 448.0f);
  __nv_fp8_storage_t sb = __nv_cvt_float_to_fp8(d, __NV_SATFINITE, __NV_E4M3);
  float sf = __half2float(__half(__nv_cvt_fp8_to_halfraw(sb, __NV_E4M3)));
  float enc = fminf(rcp_approx(mul_ftz(g, sf)), 3.402823466e+38f);
  constexpr unsigned BIAS = 0x4B000000u * 0x11111111u;  // the 2^23 exponent bits of the 8 nibble floats
  unsigned w[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    unsigned acc = 0u;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      unsigned hi = __float_as_uint(e2m1_nibble(mul_ftz(x[8 * h + 2 * j], enc)));
      unsigned lo = __float_as_uint(e2m1_nibble(mul_ftz(x[8 * h + 2 * j + 1], enc)));
      acc += (hi * 16u + lo) << (8 * j);
    }
    w[h] = acc - BIAS;
  }
  *q = make_uint2(w[0], w[1]);
  *s = sb;
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

// bf16/fp16 modulation exactly as torch: (h * (scale + 1)) + shift, rounding after each op.
template <typename T>
__device__ __forceinline__ float modulate(T h, T scale, T shift) {
  T s1 = from_f<T>(to_f(scale) + 1.0f);
  T hm = from_f<T>(to_f(h) * to_f(s1));
  return to_f(from_f<T>(to_f(hm) + to_f(shift)));
}

// The same on a pair: s1w = RN(scale + 1) packed; the product is exact in fp32 or rounded there as
// torch's is (fp32 subnormals), then RN to T; the sum of two T values is exact in fp32, so one RN.
// `exact`: the caller checked Pair<T>::fp32_product_exact for s1w, so one packed multiply suffices.
template <typename T>
__device__ __forceinline__ unsigned modulate2(unsigned h, unsigned s1w, unsigned shw, bool exact) {
  unsigned hm = exact ? Pair<T>::mul(h, s1w) : Pair<T>::pack(Pair<T>::lo(h) * Pair<T>::lo(s1w), Pair<T>::hi(h) * Pair<T>::hi(s1w));
  return Pair<T>::add(hm, shw);
}

// silu(gate) rounded to T: torch's formula x / (1 + exp(-x)) in fp32 (IEEE expf and division).
template <typename T>
__device__ __forceinline__ float silu_exact(float g) { return to_f(from_f<T>(g / (1.0f + expf(-g)))); }

// silu as a table of all 65,536 bit patterns of T (128 KB, built once by silu_table from silu_exact,
// copied into each block's shared memory): the element function is then a branch-free lookup.
constexpr unsigned SILU_ENTRIES = 65536;

__device__ __forceinline__ void silu_load(const unsigned short* __restrict__ gtab, unsigned short* tab) {
  const uint4* src = reinterpret_cast<const uint4*>(gtab);
  uint4* dst = reinterpret_cast<uint4*>(tab);
  for (unsigned i = threadIdx.x; i < SILU_ENTRIES / 8; i += blockDim.x) dst[i] = src[i];
  __syncthreads();
}

// silu of the T with bits `b` (low 16 bits), rounded to T, as fp32.
template <typename T>
__device__ __forceinline__ float silu_of(unsigned b, const unsigned short* tab) { return Pair<T>::lo((unsigned)tab[b & 0xffffu]); }

// RN(silu(gate) * value) for a pair of gates and values, packed.
template <typename T>
__device__ __forceinline__ unsigned swiglu2(unsigned gw, unsigned vw, const unsigned short* tab) {
  return Pair<T>::pack(silu_of<T>(gw, tab) * Pair<T>::lo(vw), silu_of<T>(gw >> 16, tab) * Pair<T>::hi(vw));
}

template <typename T>
__device__ __forceinline__ float swiglu1(T gate, T value, const unsigned short* tab) {
  unsigned gb = *reinterpret_cast<const unsigned short*>(&gate);
  return to_f(from_f<T>(silu_of<T>(gb, tab) * to_f(value)));
}

// Packed rows [text | audio | video]: segment 0 below b1, 1 below b2, else 2.
__device__ __forceinline__ int segment_of(unsigned r, unsigned b1, unsigned b2) { return (r >= b1) + (r >= b2); }

// The global scale from the abs-max, as torch/comfy compute it on CUDA: T(amax * RN(1/2688)), fp32.
template <typename T>
__device__ __forceinline__ float scale_from_amax(float amax) { return to_f(from_f<T>(amax * (1.0f / 2688.0f))); }



// A persistent launch's walk over (row, column-block) items of a rows x nbw grid: item
// blockIdx.x * blockDim.x + threadIdx.x, then strides of the whole launch (one division per thread).
struct Walk {
  unsigned r, c, dr, dc, nbw;
  __device__ __forceinline__ Walk(unsigned nbw_) : nbw(nbw_) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x, s = gridDim.x * blockDim.x;
    r = i / nbw, c = i % nbw, dr = s / nbw, dc = s % nbw;
  }
  __device__ __forceinline__ void next() {
    c += dc;
    r += dr;
    if (c >= nbw) c -= nbw, ++r;
  }
};

}  // namespace h3

// ------------------------------------------------------------------ global scale
template <typename T>
__global__ void amax_reduce(const T* __restrict__ x, long long n, unsigned* partials) {
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
  h3::block_max(m, partials);
}

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

// ------------------------------------------------------------------ quantize a row range
// x: rows x cols (row stride ld) -> q rows [dest_row, dest_row + rows_pad) of a [*, nb*8] buffer and
// the scales of rows [dest_row, dest_row + srows) x 4-padded blocks in the swizzled buffer s (zero
// past rows_pad / nb). Grid: x over 128-thread column-block groups, y over 4-row groups (strided).
// Index math is 32-bit (the launcher checks rows, columns and scale bytes stay below 2^31).
// QR rows per thread are loaded before any is encoded (memory-level parallelism against registers).
template <typename T, unsigned QR>
__global__ void __launch_bounds__(128, QR == 2 ? 8 : 6) quantize_into(const T* __restrict__ x, long long ld, long long rows_, long long cols_, long long rows_pad_,
                                                        long long nb_, const float* __restrict__ g, unsigned char* __restrict__ q,
                                                        unsigned char* __restrict__ s, long long dest_row, long long srows_, int vec) {
  const unsigned rows = rows_, cols = cols_, rows_pad = rows_pad_, nb = nb_, srows = srows_, dest = dest_row;
  const unsigned groups = (nb + 3) >> 2, c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= groups * 4) return;
  const float gs = *g, rg = h3::rcp_approx(gs);
  const bool fast = vec && (c + 1) * 16 <= cols;
  const T* xc = x + c * 16;
  unsigned char* qc = q + (size_t)dest * nb * 8 + c * 8;
  for (unsigned r0 = blockIdx.y * QR; r0 < srows; r0 += gridDim.y * QR) {
    uint4 raw[QR][2];
#pragma unroll
    for (unsigned k = 0; k < QR; ++k)
      if (fast && r0 + k < rows) h3::load32(xc + (size_t)(r0 + k) * ld, raw[k]);
#pragma unroll
    for (unsigned k = 0; k < QR; ++k) {
      const unsigned r = r0 + k;
      if (r >= srows) break;
      unsigned char* sp = s + h3::sf_offset(dest + r, c, groups);
      if (c >= nb || r >= rows_pad) {
        *sp = 0;
        continue;
      }
      float v[16];
      if (r >= rows) {
#pragma unroll
        for (int i = 0; i < 16; ++i) v[i] = 0.0f;
      } else if (fast) {
        h3::unpack16<T>(raw[k], v);
      } else {
#pragma unroll
        for (unsigned i = 0; i < 16; ++i) v[i] = c * 16 + i < cols ? h3::to_f(xc[(size_t)r * ld + i]) : 0.0f;
      }
      h3::encode_block(v, gs, rg, reinterpret_cast<uint2*>(qc + (size_t)r * nb * 8), sp);
    }
  }
}

// ------------------------------------------------------------------ modulate-fused producer
// h: rows x cols; scale and shift: 3 x cols, one row per segment (rows < b1, < b2, rest); the
// reference's s1 = scale + 1 is rounded to T as torch's op does. Grid: x over 128-thread column-block
// groups, y over MROWS-row groups (strided); each thread keeps its block's s1/shift per segment.
constexpr unsigned MROWS = 16;

// Loads a segment's s1 = RN(scale + 1) and shift for block c; -> whether every s1 makes the packed
// multiply exact (Pair<T>::fp32_product_exact).
template <typename T>
__device__ __forceinline__ bool segment_params(const T* scale, const T* shift, unsigned cols, int sg, unsigned c, unsigned s1w[8], unsigned shw[8]) {
  uint4 sv[2], tv[2];
  h3::load32(scale + (size_t)sg * cols + c * 16, sv);
  h3::load32(shift + (size_t)sg * cols + c * 16, tv);
  const unsigned *sw = reinterpret_cast<const unsigned*>(sv), *tw = reinterpret_cast<const unsigned*>(tv);
  bool exact = true;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    s1w[i] = h3::Pair<T>::pack(h3::Pair<T>::lo(sw[i]) + 1.0f, h3::Pair<T>::hi(sw[i]) + 1.0f);
    shw[i] = tw[i];
    exact = exact && h3::Pair<T>::fp32_product_exact(s1w[i]);
  }
  return exact;
}

// One scalar block (unaligned rows or the partial last block): the modulated values, 0 past cols.
template <typename T>
__device__ __forceinline__ void modulate_scalar(const T* h, const T* scale, const T* shift, unsigned cols, unsigned r, unsigned c, int sg, float v[16]) {
#pragma unroll
  for (unsigned k = 0; k < 16; ++k) {
    unsigned col = c * 16 + k;
    v[k] = col < cols ? h3::modulate(h[(size_t)r * cols + col], scale[(size_t)sg * cols + col], shift[(size_t)sg * cols + col]) : 0.0f;
  }
}

template <typename T>
__global__ void __launch_bounds__(128) modulate_amax(const T* __restrict__ h, long long rows_, long long cols_, const T* __restrict__ scale,
                                                     const T* __restrict__ shift, long long b1, long long b2, unsigned* partials, int vec) {
  const unsigned rows = rows_, cols = cols_, c = blockIdx.x * blockDim.x + threadIdx.x;
  float m = 0.0f;
  unsigned acc = 0u;
  if (c * 16 < cols) {
    const bool fast = vec && (c + 1) * 16 <= cols;
    int cur = -1;
    bool exact = false;
    unsigned s1w[8], shw[8];
    for (unsigned r0 = blockIdx.y * MROWS; r0 < rows; r0 += gridDim.y * MROWS) {
      const unsigned r1 = min(r0 + MROWS, rows);
      for (unsigned r = r0; r < r1; ++r) {
        const int sg = h3::segment_of(r, b1, b2);
        if (fast) {
          if (sg != cur) exact = segment_params(scale, shift, cols, sg, c, s1w, shw), cur = sg;
          uint4 hv[2];
          h3::load32(h + (size_t)r * cols + c * 16, hv);
          const unsigned* hw = reinterpret_cast<const unsigned*>(hv);
          if (exact) {  // a real branch (uniform per thread), so each loop computes one multiply form
#pragma unroll
            for (int i = 0; i < 8; ++i) acc = h3::Pair<T>::absmax_nan(acc, h3::modulate2<T>(hw[i], s1w[i], shw[i], true));
          } else {
#pragma unroll
            for (int i = 0; i < 8; ++i) acc = h3::Pair<T>::absmax_nan(acc, h3::modulate2<T>(hw[i], s1w[i], shw[i], false));
          }
        } else {
          float v[16];
          modulate_scalar(h, scale, shift, cols, r, c, sg, v);
#pragma unroll
          for (int k = 0; k < 16; ++k) m = h3::max_nan(m, fabsf(v[k]));
        }
      }
    }
  }
  h3::block_max(h3::max_nan(m, h3::pair_max<T>(acc)), partials);
}

// g: the global scale (static, or finalize_scale's from pass 1). Scales of rows [rows_pad, srows) and
// blocks [nb, 4-padded) are written as zero.
template <typename T, unsigned QR>
__global__ void __launch_bounds__(128, QR == 2 ? 7 : 5) modulate_quantize(const T* __restrict__ h, long long rows_, long long cols_, long long rows_pad_,
                                                            const T* __restrict__ scale, const T* __restrict__ shift, long long b1, long long b2,
                                                            const float* __restrict__ g, unsigned char* __restrict__ q, unsigned char* __restrict__ s,
                                                            long long nb_, long long srows_, int vec) {
  const float gs = *g, rg = h3::rcp_approx(gs);
  const unsigned rows = rows_, cols = cols_, rows_pad = rows_pad_, nb = nb_, srows = srows_;
  const unsigned groups = (nb + 3) >> 2, c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= groups * 4) return;
  const bool fast = vec && (c + 1) * 16 <= cols;
  const T* hc = h + c * 16;
  unsigned char* qc = q + c * 8;
  int cur = -1;
  bool exact = false;
  unsigned s1w[8], shw[8];
  const unsigned groups_r = (srows + MROWS - 1) / MROWS;
  for (unsigned k = blockIdx.y; k < groups_r; k += gridDim.y) {
    const unsigned r0 = (groups_r - 1 - k) * MROWS;  // last rows first: pass 1 just left them in L2
#pragma unroll 1
    for (unsigned rq = r0; rq < r0 + MROWS && rq < srows; rq += QR) {
      uint4 raw[QR][2];
#pragma unroll
      for (unsigned k = 0; k < QR; ++k)
        if (fast && rq + k < rows) h3::load32(hc + (size_t)(rq + k) * cols, raw[k]);
#pragma unroll
      for (unsigned k = 0; k < QR; ++k) {
        const unsigned r = rq + k;
        if (r >= srows) break;
        unsigned char* sp = s + h3::sf_offset(r, c, groups);
        if (c >= nb || r >= rows_pad) {
          *sp = 0;
          continue;
        }
        float v[16];
        if (r >= rows) {
#pragma unroll
          for (int i = 0; i < 16; ++i) v[i] = 0.0f;
        } else if (fast) {
          const int sg = h3::segment_of(r, b1, b2);
          if (sg != cur) exact = segment_params(scale, shift, cols, sg, c, s1w, shw), cur = sg;
          const unsigned* hw = reinterpret_cast<const unsigned*>(raw[k]);
          unsigned m[8];
          if (exact) {  // a real branch (uniform per thread), so each loop computes one multiply form
#pragma unroll
            for (int i = 0; i < 8; ++i) m[i] = h3::modulate2<T>(hw[i], s1w[i], shw[i], true);
          } else {
#pragma unroll
            for (int i = 0; i < 8; ++i) m[i] = h3::modulate2<T>(hw[i], s1w[i], shw[i], false);
          }
#pragma unroll
          for (int i = 0; i < 8; ++i) {
            v[2 * i] = h3::Pair<T>::lo(m[i]);
            v[2 * i + 1] = h3::Pair<T>::hi(m[i]);
          }
        } else {
          modulate_scalar(h, scale, shift, cols, r, c, h3::segment_of(r, b1, b2), v);
        }
        h3::encode_block(v, gs, rg, reinterpret_cast<uint2*>(qc + (size_t)r * nb * 8), sp);
      }
    }
  }
}

// ------------------------------------------------------------------ SwiGLU-fused producer
// u: rows x 2f, halves [gate; value] -> the producer of silu(gate) * value (rows x f). Persistent
// launches (one 1024-thread block per SM: the 128 KB silu table fills shared memory) walking
// (row, 16-column block) items; gtab is silu_table's output.
template <typename T>
__global__ void silu_table(unsigned short* __restrict__ out) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < h3::SILU_ENTRIES) {
    T v = h3::from_f<T>(h3::silu_exact<T>(h3::Pair<T>::lo(i)));
    out[i] = *reinterpret_cast<unsigned short*>(&v);
  }
}

template <typename T>
__device__ __forceinline__ void swiglu_scalar(const T* u, unsigned f, unsigned r, unsigned c, const unsigned short* tab, float v[16]) {
  const T* row = u + (size_t)r * 2 * f;
#pragma unroll
  for (unsigned k = 0; k < 16; ++k) {
    unsigned col = c * 16 + k;
    v[k] = col < f ? h3::swiglu1(row[col], row[f + col], tab) : 0.0f;
  }
}

template <typename T>
__global__ void __launch_bounds__(1024, 1) swiglu_amax(const T* __restrict__ u, long long rows_, long long f_, const unsigned short* __restrict__ gtab,
                                                       unsigned* partials, int vec) {
  extern __shared__ uint4 smem[];
  unsigned short* tab = reinterpret_cast<unsigned short*>(smem);
  h3::silu_load(gtab, tab);
  const unsigned rows = rows_, f = f_, nbd = (f + 15) / 16;
  float m = 0.0f;
  unsigned acc = 0u;
  for (h3::Walk w(nbd); w.r < rows; w.next()) {
    const T* row = u + (size_t)w.r * 2 * f + w.c * 16;
    if (vec && (w.c + 1) * 16 <= f) {
      uint4 gv[2], vv[2];
      h3::load32(row, gv);
      h3::load32(row + f, vv);
      const unsigned *gw = reinterpret_cast<const unsigned*>(gv), *vw = reinterpret_cast<const unsigned*>(vv);
#pragma unroll
      for (int i = 0; i < 8; ++i) acc = h3::Pair<T>::absmax_nan(acc, h3::swiglu2<T>(gw[i], vw[i], tab));
    } else {
      float v[16];
      swiglu_scalar(u, f, w.r, w.c, tab, v);
#pragma unroll
      for (int k = 0; k < 16; ++k) m = h3::max_nan(m, fabsf(v[k]));
    }
  }
  h3::block_max(h3::max_nan(m, h3::pair_max<T>(acc)), partials);
}

template <typename T>
__global__ void __launch_bounds__(1024, 1) swiglu_quantize(const T* __restrict__ u, long long rows_, long long f_, long long rows_pad_,
                                                           const unsigned short* __restrict__ gtab, const float* __restrict__ g,
                                                           unsigned char* __restrict__ q, unsigned char* __restrict__ s, long long nb_, long long srows_,
                                                           int vec) {
  extern __shared__ uint4 smem[];
  unsigned short* tab = reinterpret_cast<unsigned short*>(smem);
  h3::silu_load(gtab, tab);
  const float gs = *g, rg = h3::rcp_approx(gs);
  const unsigned rows = rows_, f = f_, rows_pad = rows_pad_, nb = nb_, srows = srows_, groups = (nb + 3) >> 2;
  for (h3::Walk w(groups * 4); w.r < srows; w.next()) {
    const unsigned r = srows - 1 - w.r, c = w.c;  // last rows first: pass 1 just left them in L2
    unsigned char* sp = s + h3::sf_offset(r, c, groups);
    if (c >= nb || r >= rows_pad) {
      *sp = 0;
      continue;
    }
    float v[16];
    if (r >= rows) {
#pragma unroll
      for (int k = 0; k < 16; ++k) v[k] = 0.0f;
    } else if (vec && (c + 1) * 16 <= f) {
      const T* row = u + (size_t)r * 2 * f + c * 16;
      uint4 gv[2], vv[2];
      h3::load32(row, gv);
      h3::load32(row + f, vv);
      const unsigned *gw = reinterpret_cast<const unsigned*>(gv), *vw = reinterpret_cast<const unsigned*>(vv);
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        unsigned p = h3::swiglu2<T>(gw[i], vw[i], tab);
        v[2 * i] = h3::Pair<T>::lo(p);
        v[2 * i + 1] = h3::Pair<T>::hi(p);
      }
    } else {
      swiglu_scalar(u, f, r, c, tab, v);
    }
    h3::encode_block(v, gs, rg, reinterpret_cast<uint2*>(q + (size_t)r * nb * 8 + c * 8), sp);
  }
}

// The producer's element function RN(silu(gate) * value) on n values (n even), paired (vector)
// and single (scalar path) forms: out2 from swiglu2 on (gate[2i], gate[2i+1]), out1 from swiglu1.
template <typename T>
__global__ void __launch_bounds__(1024, 1) swiglu_probe(const T* __restrict__ gate, const T* __restrict__ value, const unsigned short* __restrict__ gtab,
                                                        T* __restrict__ out2, T* __restrict__ out1, long long n) {
  extern __shared__ uint4 smem[];
  unsigned short* tab = reinterpret_cast<unsigned short*>(smem);
  h3::silu_load(gtab, tab);
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n / 2; i += (long long)gridDim.x * blockDim.x) {
    unsigned gw = reinterpret_cast<const unsigned*>(gate)[i], vw = reinterpret_cast<const unsigned*>(value)[i];
    reinterpret_cast<unsigned*>(out2)[i] = h3::swiglu2<T>(gw, vw, tab);
    out1[2 * i] = h3::from_f<T>(h3::swiglu1(gate[2 * i], value[2 * i], tab));
    out1[2 * i + 1] = h3::from_f<T>(h3::swiglu1(gate[2 * i + 1], value[2 * i + 1], tab));
  }
}

// PTX rcp.approx.ftz.f32 of each input (to check the measured sm_90 table on fresh inputs).
__global__ void rcp_approx_kernel(const float* __restrict__ x, float* __restrict__ y, long long n) {
  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i < n) y[i] = h3::rcp_approx(x[i]);
}

// Every kernel for both input types (the names cudakernels.py asks NVRTC for).
#define H3_INSTANTIATE(T)                                                                                                        \
  template __global__ void amax_reduce<T>(const T*, long long, unsigned*);                                                       \
  template __global__ void finalize_scale<T>(const unsigned*, long long, float*);                                                \
  template __global__ void quantize_into<T, 2>(const T*, long long, long long, long long, long long, long long, const float*,    \
                                               unsigned char*, unsigned char*, long long, long long, int);                       \
  template __global__ void quantize_into<T, 4>(const T*, long long, long long, long long, long long, long long, const float*,    \
                                               unsigned char*, unsigned char*, long long, long long, int);                       \
  template __global__ void modulate_amax<T>(const T*, long long, long long, const T*, const T*, long long, long long, unsigned*, int); \
  template __global__ void modulate_quantize<T, 2>(const T*, long long, long long, long long, const T*, const T*, long long, long long, \
                                                   const float*, unsigned char*, unsigned char*, long long, long long, int);     \
  template __global__ void modulate_quantize<T, 4>(const T*, long long, long long, long long, const T*, const T*, long long, long long, \
                                                   const float*, unsigned char*, unsigned char*, long long, long long, int);     \
  template __global__ void silu_table<T>(unsigned short*);                                                                       \
  template __global__ void swiglu_amax<T>(const T*, long long, long long, const unsigned short*, unsigned*, int);                \
  template __global__ void swiglu_quantize<T>(const T*, long long, long long, long long, const unsigned short*, const float*,     \
                                              unsigned char*, unsigned char*, long long, long long, int);                        \
  template __global__ void swiglu_probe<T>(const T*, const T*, const unsigned short*, T*, T*, long long);

H3_INSTANTIATE(__nv_bfloat16)
H3_INSTANTIATE(__half)

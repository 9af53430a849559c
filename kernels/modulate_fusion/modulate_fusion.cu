// modulate_fusion (seed 000) for sm_90a: the two-pass modulate-fused NVFP4 producer of qkv and fc1.
// Pass 1 (modulate_amax) reproduces the bf16 modulation (h * (scale + 1)) + shift of every row with its
// segment's vectors and reduces its abs-max without writing it (one partial per block; finalize_scale
// turns the partials into g); pass 2 (modulate_quantize) reproduces it again and writes QDATA/SFA.
// Launched by kernels/modulate_fusion/cuda.py (cuda.core / NVRTC).
// Constraints: bf16/fp16 h [rows, cols], 1 to 3 contiguous segments (b1, b2 = starts of segments 1, 2);
//            vector loads for 16-byte aligned rows, a scalar path otherwise. The packed multiply is
//            exact for every s1 a bf16/fp16 scale gives (see Pair<T>::mul in nvfp4.cuh), so there is
//            no fp32 fallback; kernels/modulate_fusion/cuda.py (PATHS) lists the branches.
// Compile-only check: nvcc -std=c++17 -arch=sm_90a -cubin -I kernels/common kernels/modulate_fusion/modulate_fusion.cu
#include "nvfp4.cuh"

namespace h3 {

// bf16/fp16 modulation exactly as torch: (h * (scale + 1)) + shift, rounding after each op.
template <typename T>
__device__ __forceinline__ float modulate(T h, T scale, T shift) {
  T s1 = from_f<T>(to_f(scale) + 1.0f);
  T hm = from_f<T>(to_f(h) * to_f(s1));
  return to_f(from_f<T>(to_f(hm) + to_f(shift)));
}

// The same on a pair: s1w = RN(scale + 1) packed; the product of h and s1 is exact in fp32 (see the
// header), so one packed multiply rounds it to T as torch's does; the sum of two T values is exact
// in fp32, so one RN.
template <typename T>
__device__ __forceinline__ unsigned modulate2(unsigned h, unsigned s1w, unsigned shw) {
  return Pair<T>::add(Pair<T>::mul(h, s1w), shw);
}

// Packed rows [text | audio | video]: segment 0 below b1, 1 below b2, else 2.
__device__ __forceinline__ int segment_of(unsigned r, unsigned b1, unsigned b2) { return (r >= b1) + (r >= b2); }

}  // namespace h3

// ------------------------------------------------------------------ modulate-fused producer
// h: rows x cols; scale and shift: 3 x cols, one row per segment (rows < b1, < b2, rest); the
// reference's s1 = scale + 1 is rounded to T as torch's op does. Grid: x over 128-thread column-block
// groups, y over MROWS-row groups (strided); each thread keeps its block's s1/shift per segment.
constexpr unsigned MROWS = 16;

// Loads a segment's s1 = RN(scale + 1) and shift for block c.
template <typename T>
__device__ __forceinline__ void segment_params(const T* scale, const T* shift, unsigned cols, int sg, unsigned c, unsigned s1w[8], unsigned shw[8]) {
  uint4 sv[2], tv[2];
  h3::load32(scale + (size_t)sg * cols + c * 16, sv);
  h3::load32(shift + (size_t)sg * cols + c * 16, tv);
  const unsigned *sw = reinterpret_cast<const unsigned*>(sv), *tw = reinterpret_cast<const unsigned*>(tv);
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    s1w[i] = h3::Pair<T>::pack(h3::Pair<T>::lo(sw[i]) + 1.0f, h3::Pair<T>::hi(sw[i]) + 1.0f);
    shw[i] = tw[i];
  }
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
    unsigned s1w[8], shw[8];
    for (unsigned r0 = blockIdx.y * MROWS; r0 < rows; r0 += gridDim.y * MROWS) {
      const unsigned r1 = min(r0 + MROWS, rows);
      for (unsigned r = r0; r < r1; ++r) {
        const int sg = h3::segment_of(r, b1, b2);
        if (fast) {
          if (sg != cur) segment_params(scale, shift, cols, sg, c, s1w, shw), cur = sg;
          uint4 hv[2];
          h3::load32(h + (size_t)r * cols + c * 16, hv);
          const unsigned* hw = reinterpret_cast<const unsigned*>(hv);
#pragma unroll
          for (int i = 0; i < 8; ++i) acc = h3::Pair<T>::absmax_nan(acc, h3::modulate2<T>(hw[i], s1w[i], shw[i]));
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
  static_assert(MROWS % QR == 0 && 32 % QR == 0, "a thread's QR rows share one 32-row group of the scale tile");
  const float gs = *g, rg = h3::rcp_approx(gs);
  const unsigned rows = rows_, cols = cols_, rows_pad = rows_pad_, nb = nb_, srows = srows_;
  const unsigned groups = (nb + 3) >> 2, c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= groups * 4) return;
  const bool fast = vec && (c + 1) * 16 <= cols;
  const T* hc = h + c * 16;
  unsigned char* qc = q + c * 8;
  int cur = -1;
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
      // Rows rq .. rq + QR - 1 lie in one 32-row group of the scale tile (QR divides 32, rq % QR == 0),
      // so their scale bytes are 16 apart; their QDATA rows nb words apart.
      unsigned char* const sq = s + h3::sf_offset(rq, c, groups);
      uint2* const qq = reinterpret_cast<uint2*>(qc + (size_t)rq * nb * 8);
#pragma unroll
      for (unsigned k = 0; k < QR; ++k) {
        const unsigned r = rq + k;
        if (r >= srows) break;
        float v[16];
        if (fast && r < rows) {  // the vector block (c < nb and r < rows_pad follow): straight-line
          const int sg = h3::segment_of(r, b1, b2);
          if (sg != cur) segment_params(scale, shift, cols, sg, c, s1w, shw), cur = sg;
          const unsigned* hw = reinterpret_cast<const unsigned*>(raw[k]);
#pragma unroll
          for (int i = 0; i < 8; ++i) {
            const unsigned m = h3::modulate2<T>(hw[i], s1w[i], shw[i]);
            v[2 * i] = h3::Pair<T>::lo(m);
            v[2 * i + 1] = h3::Pair<T>::hi(m);
          }
          h3::encode_block(v, gs, rg, qq + k * nb, sq + 16 * k);
          continue;
        }
        if (c >= nb || r >= rows_pad) {
          sq[16 * k] = h3::comfy_tail(r, c, rows_pad, nb) ? h3::zero_block_scale(rg) : 0;
          continue;
        }
        if (r >= rows) {
#pragma unroll
          for (int i = 0; i < 16; ++i) v[i] = 0.0f;
        } else {
          modulate_scalar(h, scale, shift, cols, r, c, h3::segment_of(r, b1, b2), v);
        }
        h3::encode_block(v, gs, rg, qq + k * nb, sq + 16 * k);
      }
    }
  }
}

#define H3_INSTANTIATE(T)                                                                                                        \
  template __global__ void finalize_scale<T>(const unsigned*, long long, float*);                                                \
  template __global__ void modulate_amax<T>(const T*, long long, long long, const T*, const T*, long long, long long, unsigned*, int); \
  template __global__ void modulate_quantize<T, 2>(const T*, long long, long long, long long, const T*, const T*, long long, long long, \
                                                   const float*, unsigned char*, unsigned char*, long long, long long, int);     \
  template __global__ void modulate_quantize<T, 4>(const T*, long long, long long, long long, const T*, const T*, long long, long long, \
                                                   const float*, unsigned char*, unsigned char*, long long, long long, int);

H3_INSTANTIATE(__nv_bfloat16)
H3_INSTANTIATE(__half)

// swiglu_fusion for sm_90a: the exact bf16 SwiGLU of the fc1 output folded into the NVFP4 producer of fc2.
// Two passes over u = [gate; value]: swiglu_amax reduces the abs-max of RN(silu(gate) * value) without
// writing it, finalize_scale makes g, swiglu_quantize recomputes it and writes QDATA/SFA. silu is a
// branch-free lookup in a 128 KB shared-memory table of torch's formula for all 65,536 bit patterns
// (silu_table, built once per device and dtype). swiglu_probe exposes the element function to tests.
// Launched by kernels/swiglu_fusion/cuda.py (cuda.core / NVRTC).
// Constraints: bf16/fp16 u [rows, 2f]; persistent launches of 1024 threads (the table fills shared
//            memory); vector loads for 16-byte aligned rows, a scalar path otherwise.
// Compile-only check: nvcc -std=c++17 -arch=sm_90a -cubin -I kernels/common kernels/swiglu_fusion/swiglu_fusion.cu
#include "nvfp4.cuh"

namespace h3 {

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
      *sp = h3::comfy_tail(r, c, rows_pad, nb) ? h3::zero_block_scale(rg) : 0;
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

#define H3_INSTANTIATE(T)                                                                                                        \
  template __global__ void finalize_scale<T>(const unsigned*, long long, float*);                                                \
  template __global__ void silu_table<T>(unsigned short*);                                                                       \
  template __global__ void swiglu_amax<T>(const T*, long long, long long, const unsigned short*, unsigned*, int);                \
  template __global__ void swiglu_quantize<T>(const T*, long long, long long, long long, const unsigned short*, const float*,     \
                                              unsigned char*, unsigned char*, long long, long long, int);                        \
  template __global__ void swiglu_probe<T>(const T*, const T*, const unsigned short*, T*, T*, long long);

H3_INSTANTIATE(__nv_bfloat16)
H3_INSTANTIATE(__half)

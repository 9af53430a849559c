// The h3gates CUDA quantizer (sm_90a): global scale and exact QDATA/SFA of a materialized activation,
// byte-identical to comfy-kitchen 0.2.40's CUDA quantize_nvfp4. Launched by h3gates/nvfp4/cuda/producers.py;
// the QKV ring quantizes its chunks with quantize_into, and the GPU tests probe rcp.approx with it.
//
// Kernels:   amax_reduce        one pass, |x| max (NaN propagates, as torch.amax), one partial per block
//            finalize_scale     g = T(amax * RN(1/2688)) as fp32 from the partials (nvfp4.cuh)
//            quantize_into      exact QDATA + swizzled SFA for a row range into caller-owned buffers
//            rcp_approx_kernel  PTX rcp.approx.ftz.f32, to check the measured sm_90 table
// Constraints: bf16 or fp16 input, any rows and cols (padded to 16 as comfy does); vector loads
//            when rows are 16-byte aligned, a scalar path otherwise; every scale byte of the written
//            tiles is written (padding zero), so buffers need no memset.
// Compile-only check: nvcc -std=c++17 -arch=sm_90a -cubin -I kernels/common kernels/common/quantize.cu
#include "nvfp4.cuh"

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
        *sp = h3::comfy_tail(r, c, rows_pad, nb) ? h3::zero_block_scale(rg) : 0;
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

// PTX rcp.approx.ftz.f32 of each input (to check the measured sm_90 table on fresh inputs).
__global__ void rcp_approx_kernel(const float* __restrict__ x, float* __restrict__ y, long long n) {
  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i < n) y[i] = h3::rcp_approx(x[i]);
}

#define H3_INSTANTIATE(T)                                                                                                        \
  template __global__ void amax_reduce<T>(const T*, long long, unsigned*);                                                       \
  template __global__ void finalize_scale<T>(const unsigned*, long long, float*);                                                \
  template __global__ void quantize_into<T, 2>(const T*, long long, long long, long long, long long, long long, const float*,    \
                                               unsigned char*, unsigned char*, long long, long long, int);                       \
  template __global__ void quantize_into<T, 4>(const T*, long long, long long, long long, long long, long long, const float*,    \
                                               unsigned char*, unsigned char*, long long, long long, int);

H3_INSTANTIATE(__nv_bfloat16)
H3_INSTANTIATE(__half)

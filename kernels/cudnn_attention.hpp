#pragma once
// cuDNN's fused attention (its SDPA graph through cudnn-frontend, NVIDIA's header-only C++ API)
// on packed (THD) blocks of contiguous positions: lib/ops/attention_blocks.hpp turns the
// attention contract into such blocks, this runs one call over them. Built only where CMake
// found cuDNN and the cudnn-frontend headers (DYNCP_HAVE_CUDNN; tools/install-deps.sh unpacks
// the pinned headers), never in the emulated backend.
//
// A call holds `batch` blocks. Block b has q_rows[b] query rows starting at row offset
// q_offsets[b] / (q_heads·head_dim) of q / o and kv_rows[b] key rows in k / v, the same rows
// for every head (THD: rows of [T, H, d], row-major). Masks are cuDNN's diagonal band aligned
// to each block's bottom-right corner: causal (right bound 0) or none, and a left bound L > 0
// (d(i) − j < L). bf16 operands and outputs, fp32 softmax statistics (natural-log lse,
// [T, Hq] rows like ours) and accumulation. Graphs are built once per (dims, mask, batch and
// row buckets) and cached; the first call of a shape pays cuDNN's plan build.

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

namespace dyncp::kernels {

using bf16 = __nv_bfloat16;

struct CudnnAttentionDims {
  int q_heads = 0, kv_heads = 0, head_dim = 0;
  float scale = 1.0f;
};

struct CudnnAttentionCall {
  bool causal = true;
  int left_bound = 0;                   // 0: none
  int batch = 0;                        // blocks, padded to a bucket with empty ones (zero rows)
  int max_q_rows = 0, max_kv_rows = 0;  // the graph's sequence lengths (bucketed)
  int total_q_rows = 0, total_kv_rows = 0;      // bounds on all blocks' rows (bucketed)
  const std::int32_t* q_rows = nullptr;         // device [batch]
  const std::int32_t* kv_rows = nullptr;        // device [batch]
  const std::int32_t* q_offsets = nullptr;      // device [batch + 1], elements of q / o
  const std::int32_t* kv_offsets = nullptr;     // device [batch + 1], elements of k / v
  const std::int32_t* stats_offsets = nullptr;  // device [batch + 1], elements of stats
};

// "cuDNN 9.19.0 (cudnn-frontend 1.32.0)", the library versions in use.
std::string cudnn_attention_library();

// Empty when cuDNN builds forward and backward plans for these dims on the current device
// (a causal and a full call, with the window as a left bound when it is set); else cuDNN's
// reason.
std::string cudnn_attention_unsupported(const CudnnAttentionDims& dims, int sliding_window);

// o [Tq, Hq, d] and stats [Tq, Hq]: written for the blocks' rows only.
void cudnn_attention_forward(const CudnnAttentionDims& dims, const CudnnAttentionCall& call,
                             const bf16* q, const bf16* k, const bf16* v, bf16* o, float* stats,
                             cudaStream_t stream);

// o / stats: the final (merged) output and lse of these rows; dq / dk / dv written for the
// blocks' rows only (a call's blocks share no key row).
void cudnn_attention_backward(const CudnnAttentionDims& dims, const CudnnAttentionCall& call,
                              const bf16* q, const bf16* k, const bf16* v, const bf16* o,
                              const bf16* dout, const float* stats, bf16* dq, bf16* dk, bf16* dv,
                              cudaStream_t stream);

// The glue around the calls (cudnn_attention_rows.cu): x[i] = value; dst[i] += src[i].
void fill_f32(float* x, std::int64_t n, float value, cudaStream_t stream);
void add_bf16_to_f32(const bf16* src, float* dst, std::int64_t n, cudaStream_t stream);

}  // namespace dyncp::kernels

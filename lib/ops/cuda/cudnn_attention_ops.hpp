#pragma once
// ops::attention_forward / backward on cuDNN's fused attention (internal to lib/ops/cuda): the
// layout planned into blocks of contiguous positions (ops/attention_blocks.hpp), one cuDNN
// call per block call (kernels/cudnn_attention.hpp), partial results merged by lse where a
// query sees several calls. Runs when model.attention_backend selected it
// (ops::fused_attention_selected) and the products are bf16.

#include <cuda_runtime_api.h>

#include "core/arena.hpp"
#include "ops/attention.hpp"

namespace dyncp::ops::cuda {

// Offers cuDNN's fused attention to the trainer (ops::install_fused_attention) where this
// build has it, else records why not (the emulated backend, a build without cudnn-frontend).
void install_cudnn_attention();

void cudnn_attention_forward(core::Arena& scratch, cudaStream_t stream, const Tensor& q,
                             const Tensor& k, const Tensor& v, const VarlenAttentionLayout& layout,
                             double scale, const Tensor& out, const Tensor& lse);

// dq / dk / dv accumulate (the caller zeroes them for overwrite).
void cudnn_attention_backward(core::Arena& scratch, cudaStream_t stream, const Tensor& dout,
                              const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                              const Tensor& lse, const VarlenAttentionLayout& layout, double scale,
                              const Tensor& dq, const Tensor& dk, const Tensor& dv);

}  // namespace dyncp::ops::cuda

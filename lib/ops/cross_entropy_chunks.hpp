#pragma once
// The chunk loops the fused cross-entropy and its vocabulary-shard form share (internal to
// lib/ops): counted rows gathered a chunk at a time, the online log-sum-exp over one logits
// tile, and a dlogits tile's two backward products. One definition keeps a single shard {0, V}
// bit for bit the whole-vocabulary op.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "core/tensor.hpp"
#include "ops/bf16_operands.hpp"
#include "ops/blas.hpp"
#include "ops/row_math.hpp"

namespace dyncp::ops::detail {

// The rows that carry loss, `chunk` at a time in token order, gathered into a compact [n, h]
// buffer: rows without loss (prompt tokens, padding, ignored labels) never enter the vocab
// products, so the LM head costs follow the loss tokens, not all tokens.
template <typename T>
class CountedRows {
 public:
  CountedRows(const core::Tensor& hidden, const core::Tensor& labels, const core::Tensor& loss_mask)
      : hidden_(hidden.data<T>()),
        labels_(labels.data<std::int32_t>()),
        mask_(loss_mask.defined() ? loss_mask.data<std::uint8_t>() : nullptr),
        tokens_(hidden.size(0)),
        width_(hidden.size(1)) {}

  // Fills row_token[0, n) and h_rows [n, h] with the next n <= chunk counted rows; 0 at the end.
  std::int64_t next(std::int64_t chunk, std::int64_t* row_token, T* h_rows) {
    std::int64_t n = 0;
    for (; next_ < tokens_ && n < chunk; ++next_) {
      if (labels_[next_] < 0 || (mask_ != nullptr && mask_[next_] == 0)) continue;
      row_token[n] = next_;
      std::copy(hidden_ + next_ * width_, hidden_ + (next_ + 1) * width_, h_rows + n * width_);
      ++n;
    }
    return n;
  }

 private:
  const T* hidden_;
  const std::int32_t* labels_;
  const std::uint8_t* mask_;
  std::int64_t tokens_, width_, next_ = 0;
};

// Folds the [nt, nv] logits tile of columns [v0, v0 + nv) into each row's running max and sum
// (online log-sum-exp) and picks the label's logit when it falls in the tile; `label_offset` is
// the vocabulary id of column 0 (a shard's first row). The tile is left holding
// exp(logit - the new running max).
template <typename T>
void fold_logits_tile(T* tile, std::int64_t nt, std::int64_t nv, std::int64_t v0,
                      const std::int32_t* labels, const std::int64_t* row_token,
                      std::int64_t label_offset, T* running_max, T* running_sum, T* target) {
  for (std::int64_t i = 0; i < nt; ++i) {
    T* row = tile + i * nv;
    const std::int64_t label = labels[row_token[i]] - label_offset;
    if (label >= v0 && label < v0 + nv) target[i] = row[label - v0];
    const T m = row_max(row, nv, running_max[i]);
    exp_shifted(row, nv, m);
    running_sum[i] = running_sum[i] * std::exp(running_max[i] - m) + row_sum(row, nv);
    running_max[i] = m;
  }
}

// A dlogits tile [nt, nv] (bf16-rounded first under bf16 products) into the two backward
// products: dh_rows (=, on the first vocab chunk, then +=) dlogits · W_chunk and
// dW_chunk += dlogitsᵀ · h_rows.
template <typename T>
void backpropagate_logits_tile(T* tile, std::int64_t nt, std::int64_t nv, std::int64_t hd,
                               const T* w_chunk, const T* h_rows, bool first_chunk,
                               bool bf16_products, T* dh_rows, T* dw_chunk) {
  if constexpr (std::is_same_v<T, float>) {
    if (bf16_products) round_to_bf16(tile, nt * nv);
  }
  blas_gemm<T>(false, false, nt, hd, nv, T(1), tile, nv, w_chunk, hd, first_chunk ? T(0) : T(1),
               dh_rows, hd);
  blas_gemm<T>(true, false, nv, hd, nt, T(1), tile, nv, h_rows, hd, T(1), dw_chunk, hd);
}

// Row i of dh_rows [nt, hd] to row row_token[i] of dh.
template <typename T>
void scatter_rows(const T* dh_rows, std::int64_t nt, std::int64_t hd, const std::int64_t* row_token,
                  T* dh) {
  for (std::int64_t i = 0; i < nt; ++i) {
    std::copy(dh_rows + i * hd, dh_rows + (i + 1) * hd, dh + row_token[i] * hd);
  }
}

}  // namespace dyncp::ops::detail

#pragma once
// Which implementation runs attention on the device (config model.attention_backend): this
// program's own kernel, or a fused library kernel (cuDNN's, through cudnn-frontend) that a
// CUDA backend offers where it was built with one. The CUDA backend offers its fused kernel
// by one registration (install_fused_attention); the trainer asks whether it supports the
// model's shapes before anything runs and selects it once (train/attention_backend_choice).
// The CPU path always runs its own op.

#include <string>

namespace dyncp::ops {

// The model's attention as the fused kernel sees it (bf16 operands, fp32 statistics).
struct AttentionProblem {
  int q_heads = 0, kv_heads = 0, head_dim = 0;
  int sliding_window = 0;
};

class FusedAttention {
 public:
  virtual ~FusedAttention() = default;
  // "cuDNN 9.19.0 (cudnn-frontend 1.32.0)": what the log names.
  virtual std::string name() const = 0;
  // Empty when forward and backward run for these shapes on this device; else why not (the
  // library's own support check, e.g. building its plans for a sample of the shapes).
  virtual std::string unsupported_reason(const AttentionProblem& problem) const = 0;
};

// Installed by a CUDA backend built with a fused kernel; lives for the process.
void install_fused_attention(const FusedAttention* fused);
// Null when none is installed (CPU-only binaries, the emulated backend, builds without cuDNN).
const FusedAttention* installed_fused_attention();
// Why no fused kernel is installed, as the CUDA backend states it (empty: one is installed or
// nothing said).
void set_fused_attention_absence(const std::string& why);
std::string fused_attention_absence();

// The selection for this process: device attention with bf16 operands runs the fused kernel
// when selected, else the own kernel. Off by default.
void select_fused_attention(bool on);
bool fused_attention_selected();

}  // namespace dyncp::ops

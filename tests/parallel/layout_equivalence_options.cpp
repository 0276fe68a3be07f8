// The layout equivalence tool's command line (the options are described in
// layout_equivalence_support.hpp).

#include <stdexcept>
#include <string>

#include "layout_equivalence_support.hpp"

namespace dyncp::equivalence {

Options parse_options(int argc, char** argv) {
  Options options;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string key = argv[i];
    const std::string value = argv[i + 1];
    if (key == "--cp")
      options.cp = std::stoi(value);
    else if (key == "--tp")
      options.tp = std::stoi(value);
    else if (key == "--sp")
      options.sequence_parallel = value == "1";
    else if (key == "--etp")
      options.etp = std::stoi(value);
    else if (key == "--ep")
      options.ep = std::stoi(value);
    else if (key == "--dynamic")
      options.dynamic = value == "1";
    else if (key == "--min-cp")
      options.min_cp = std::stoi(value);
    else if (key == "--aux")
      options.aux = value == "1";
    else if (key == "--recompute")
      options.recompute = value == "1";
    else if (key == "--selective")
      options.selective = value == "1";
    else if (key == "--moe-kernels")
      options.moe_kernels = value == "1";
    else if (key == "--force-balance")
      options.force_balance = value == "1";
    else if (key == "--pp")
      options.pp = std::stoi(value);
    else if (key == "--vpp")
      options.vpp = std::stoi(value);
    else if (key == "--layers")
      options.layers = std::stoi(value);
    else if (key == "--step-tolerance")
      options.step_tolerance = std::stod(value);
    else if (key == "--tie")
      options.tie = value == "1";
    else if (key == "--optimizer-steps")
      options.optimizer_steps = std::stoi(value);
    else if (key == "--lr")
      options.lr = std::stod(value);
    else if (key == "--overlap-steps")
      options.overlap_steps = std::stoi(value);
    else if (key == "--bucket-size")
      options.bucket_size = std::stoll(value);
    else if (key == "--overlap-keys")
      options.overlap_keys = value;
    else if (key == "--overlap-expect-mismatch")
      options.overlap_expect_mismatch = value == "1";
    else if (key == "--distributed-optimizer")
      options.distributed_optimizer = value == "1";
    else if (key == "--model") {
      if (value != "qwen3_moe" && value != "qwen3_5_moe")
        throw std::runtime_error("--model: qwen3_moe or qwen3_5_moe");
      options.hybrid = value == "qwen3_5_moe";
    } else if (key == "--alignment") {
      if (value != "per_group" && value != "pool")
        throw std::runtime_error("--alignment: per_group or pool");
      options.alignment =
          value == "pool" ? config::PackingAlignment::pool : config::PackingAlignment::per_group;
    } else if (key == "--fold") {
      options.fold_alignment_padding = value == "1";
    } else if (key == "--cp-comm-type") {
      const auto type = config::parse_enum<config::CpCommType>(value);
      if (!type) throw std::runtime_error("--cp-comm-type: all_gather, p2p, a2a or a2a+p2p");
      options.cp_comm_type = *type;
    } else if (key == "--window") {
      options.sliding_window = std::stoi(value);
      if (options.sliding_window < 1) throw std::runtime_error("--window: >= 1");
    } else if (key == "--rope-dynamic") {
      options.rope_dynamic_context = std::stoi(value);
      if (options.rope_dynamic_context < 1) throw std::runtime_error("--rope-dynamic: >= 1");
    } else if (key == "--hierarchical") {
      options.hierarchical_inner = std::stoi(value);
    } else if (key == "--heads") {
      const auto comma = value.find(',');
      if (comma == std::string::npos) throw std::runtime_error("--heads Q,KV");
      options.query_heads = std::stoi(value.substr(0, comma));
      options.kv_heads = std::stoi(value.substr(comma + 1));
    } else if (key == "--mix") {
      if (value != "1248") throw std::runtime_error("--mix: 1248");
      options.mix_group_sizes = true;
    } else if (key == "--device") {
      if (value != "cpu" && value != "cuda") throw std::runtime_error("--device: cpu or cuda");
      options.device = value == "cuda" ? core::Device::cuda : core::Device::cpu;
#ifndef DYNCP_EQUIVALENCE_ON_CUDA
      if (options.device == core::Device::cuda)
        throw std::runtime_error("--device cuda: use layout_equivalence_emulated");
#endif
    } else if (key == "--scheduler") {
      options.scheduler = value == "cost_aware" ? config::PackingScheduler::cost_aware
                          : value == "default_dynamic_cp"
                              ? config::PackingScheduler::default_dynamic_cp
                              : config::PackingScheduler::dp_balanced;
    } else {
      throw std::runtime_error("unknown option " + key);
    }
  }
  return options;
}

}  // namespace dyncp::equivalence

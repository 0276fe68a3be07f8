// Where each CP exchange wins in the cost model (packing/cost_model.hpp), at Qwen3-30B-A3B's
// shapes: per-rank CP communication seconds of one bin on a group of c ranks, for every
// exchange, in one NVLink domain of any size ("nvlink") and on nodes of 8 GPUs joined by
// InfiniBand ("ib_8_per_node": a group of more than 8 ranks is priced at the network rate),
// and the bin size above which each exchange beats all_gather (each is latency + bytes x N).
// a2a+p2p uses an all-to-all group of one node's 8 GPUs (inner 8) and rings across nodes.
// One JSON line per (link, c); no ranks needed.
//
//   bench_cp_exchange [--link-bytes 4e11] [--network-bytes 5e10] [--latency 15e-6]

#include <cstdio>
#include <cstdlib>
#include <string>

#include "config/head_sharding.hpp"
#include "packing/cost_model.hpp"

using namespace dyncp;

int main(int argc, char** argv) {
  packing::CostModelParameters base;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string key = argv[i];
    const double value = std::atof(argv[i + 1]);
    if (key == "--link-bytes")
      base.link_bytes_per_second = value;
    else if (key == "--network-bytes")
      base.network_bytes_per_second = value;
    else if (key == "--latency")
      base.collective_latency_seconds = value;
    else {
      std::fprintf(stderr, "unknown option %s\n", key.c_str());
      return 2;
    }
  }
  const config::ModelArchitecture architecture = packing::qwen3_30b_a3b_architecture();
  const packing::ModelCost model = packing::model_cost_from_architecture(architecture);
  const config::CpCommType types[] = {config::CpCommType::all_gather, config::CpCommType::p2p,
                                      config::CpCommType::a2a, config::CpCommType::a2a_p2p};
  constexpr std::int64_t bin_tokens[] = {16384, 131072, 1048576};
  for (const bool network : {false, true}) {
    for (const std::int64_t c : {2, 4, 8, 16, 32, 64}) {
      packing::CostModelParameters parameters = base;
      // One NVLink domain, or nodes of 8 where a group of more than 8 crosses the network.
      parameters.ranks_per_node = network ? 8 : 1 << 20;
      parameters.hierarchical_inner_size = 8;
      std::string line = std::string("{\"link\":\"") + (network ? "ib_8_per_node" : "nvlink") +
                         "\",\"group\":" + std::to_string(c);
      double cost[4][3] = {};
      double latency[4] = {}, per_token[4] = {};
      bool valid[4] = {};
      for (int t = 0; t < 4; ++t) {
        parameters.cp_comm_type = types[t];
        const std::int64_t a2a_group = types[t] == config::CpCommType::a2a ? c
                                       : types[t] == config::CpCommType::a2a_p2p
                                           ? std::min<std::int64_t>(c, 8)
                                           : 1;
        valid[t] = config::head_sharding_problem(architecture.num_attention_heads,
                                                 architecture.num_key_value_heads, a2a_group)
                       .empty();
        const packing::CostModel cost_model(model, parameters);
        latency[t] = cost_model.communication_seconds(0, c, /*sequences=*/0);
        per_token[t] = cost_model.transfer_seconds(1 << 20, c) / static_cast<double>(1 << 20);
        for (int b = 0; b < 3; ++b) cost[t][b] = cost_model.communication_seconds(bin_tokens[b], c);
      }
      for (int b = 0; b < 3; ++b) {
        int best = -1;
        for (int t = 0; t < 4; ++t)
          if (valid[t] && (best < 0 || cost[t][b] < cost[best][b])) best = t;
        line += ",\"best_at_" + std::to_string(bin_tokens[b]) + "\":\"" +
                std::string(config::to_string(types[best])) + "\"";
      }
      for (int t = 0; t < 4; ++t) {
        line += ",\"" + std::string(config::to_string(types[t])) + "\":";
        if (!valid[t]) {
          line += "null";
          continue;
        }
        char numbers[160];
        std::snprintf(numbers, sizeof numbers,
                      "{\"latency_ms\":%.3f,\"ns_per_token\":%.3f,\"ms_at_131072\":%.2f}",
                      1e3 * latency[t], 1e9 * per_token[t], 1e3 * cost[t][1]);
        line += numbers;
      }
      // Where X beats all_gather: above N = Δlatency / Δ(seconds per token) when X is cheaper
      // per token (0: at every size), never (null) when it is not.
      for (int t = 1; t < 4; ++t) {
        line +=
            ",\"" + std::string(config::to_string(types[t])) + "_beats_all_gather_above_tokens\":";
        const double saving = per_token[0] - per_token[t];
        if (!valid[t] || saving <= 0) {
          line += "null";
          continue;
        }
        char crossover[32];
        std::snprintf(crossover, sizeof crossover, "%.0f",
                      std::max(0.0, (latency[t] - latency[0]) / saving));
        line += crossover;
      }
      std::printf("%s}\n", line.c_str());
    }
  }
  return 0;
}

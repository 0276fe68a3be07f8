// Checkpoint save time and bytes per rank, sharded (every rank writes its own file,
// train/sharded_checkpoint.hpp) against the single writer (rank 0 writes everything, its EP
// group gathering experts layer by layer, train/training_checkpoint.hpp), on one model for any
// number of ranks (EP = ranks up to --max-ep). Each save ends fsynced and published. Rank 0
// also reports how much its peak resident memory rose during the save (VmHWM, reset before
// each save through /proc/self/clear_refs). One JSON line per writer: median and min seconds
// over --repeats saves, bytes of the largest and smallest rank. A third line does the same for
// the bf16 HF export written by the ranks holding its tensors (train/hf_export_writer.hpp).
// With --tp T the ranks hold tensor-parallel pieces (experts split over etp = T, EP = ranks / T
// up to --max-ep): the single writer's TP group sums each split tensor for it and the HF
// export's groups rebuild its pieces (parallel/whole_model_gathers.hpp).
//
//   mpirun -np N bench_checkpoint_save --out DIR [--hidden 512] [--layers 4] [--experts 16]
//          [--moe-intermediate 256] [--vocab 8192] [--max-ep 4] [--tp 1] [--repeats 3]

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "config/config_loader.hpp"
#include "config/resolve.hpp"
#include "core/log.hpp"
#include "dist/mpi_comm.hpp"
#include "dist/parallel_layout.hpp"
#include "dist/parallel_state.hpp"
#include "parallel/expert_gather.hpp"
#include "parallel/whole_model_gathers.hpp"
#include "train/hf_export.hpp"
#include "train/hf_export_writer.hpp"
#include "train/sharded_checkpoint_saver.hpp"
#include "train/training_checkpoint.hpp"

using namespace dyncp;
namespace fs = std::filesystem;

namespace {

std::int64_t proc_status_kib(const char* field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(field, 0) == 0) return std::atoll(line.c_str() + std::string(field).size());
  return 0;
}

void reset_peak_rss() {
  std::ofstream("/proc/self/clear_refs") << "5";
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::string out, hidden = "512", layers = "4", experts = "16", moe = "256", vocab = "8192";
  int max_ep = 4, repeats = 3, tp = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string key = argv[i], value = argv[i + 1];
    if (key == "--out")
      out = value;
    else if (key == "--hidden")
      hidden = value;
    else if (key == "--layers")
      layers = value;
    else if (key == "--experts")
      experts = value;
    else if (key == "--moe-intermediate")
      moe = value;
    else if (key == "--vocab")
      vocab = value;
    else if (key == "--max-ep")
      max_ep = std::atoi(value.c_str());
    else if (key == "--tp")
      tp = std::atoi(value.c_str());
    else if (key == "--repeats")
      repeats = std::atoi(value.c_str());
    else {
      std::fprintf(stderr, "unknown option %s\n", key.c_str());
      return 2;
    }
  }
  if (out.empty()) {
    std::fprintf(stderr, "--out DIR is required\n");
    return 2;
  }
  dist::MpiRuntime runtime(&argc, &argv);
  core::setup_logging({runtime.world_rank(), runtime.world_size(), false});
  const auto world = runtime.world();
  const int ranks = world->size();
  const int ep = std::min(max_ep, ranks / std::max(tp, 1));
  auto config = config::load_config_file(
      std::string(DYNCP_SOURCE_DIR) + "/configs/smoke/tiny_mock.yaml",
      {"model.hidden_size=" + hidden, "model.num_hidden_layers=" + layers,
       "model.num_experts=" + experts, "model.moe_intermediate_size=" + moe,
       "model.vocab_size=" + vocab, "model.expert_model_parallel_size=" + std::to_string(ep),
       "model.context_parallel_size=1", "model.dynamic_context_parallel=false",
       "model.sequence_packing_scheduler=dp_balanced", "model.max_seqlen_per_dp_cp_rank=256",
       "model.tensor_model_parallel_size=" + std::to_string(tp)});
  config::resolve_config(config, ranks);
  auto architecture = config.model.architecture;
  architecture.resolve();
  dist::ParallelState state(*world, dist::layout_for_world(ranks, 1, ep, false, 1, {}, {tp, tp}));
  const model::Qwen3MoeParameters parameters(
      architecture, parallel::local_expert_range(architecture.num_experts, state.expert_parallel()),
      core::DType::f32, core::Device::cpu,
      model::TensorParallelShape{tp, state.tensor_parallel().rank(), tp,
                                 state.expert_tensor_parallel().rank()});
  parameters.init_random(1);
  std::int64_t model_elements = 0;  // the whole model's, every expert
  for (const model::WholeModelTensor& tensor : model::whole_model_tensors(parameters)) {
    std::int64_t count = 1;
    for (const std::int64_t dim : tensor.shape) count *= dim;
    model_elements += count;
  }
  const core::Tensor exp_avg =
      core::Tensor::empty(parameters.all_values().shape(), core::DType::f32);
  const core::Tensor exp_avg_sq =
      core::Tensor::empty(parameters.all_values().shape(), core::DType::f32);
  exp_avg.copy_from(parameters.all_values());
  exp_avg_sq.copy_from(parameters.all_values());
  train::LoopState loop;
  loop.lr_schedule.max_lr = 1e-3;
  loop.lr_schedule.decay_iters = 1000;

  const fs::path sharded_dir = fs::path(out) / ("sharded_np" + std::to_string(ranks));
  const fs::path single_dir = fs::path(out) / ("single_np" + std::to_string(ranks));
  if (world->rank() == 0) {
    fs::remove_all(sharded_dir);
    fs::remove_all(single_dir);
  }
  world->barrier();
  train::ShardedCheckpointSaver saver(
      *world, sharded_dir, 1, parameters,
      train::checkpoint_shards(parameters, state.pool(), state.expert_data_parallel()),
      train::SavingLayout{ranks, ranks / tp, 1, ep, false, false, tp, tp}, false);
  train::CheckpointStore single_store(single_dir, 1);
  const parallel::WriterGathers gathers(state);  // how this rank helps rank 0 write
  const train::ExportGroups groups{&state.tensor_parallel(), &state.expert_tensor_parallel()};

  const fs::path hf_dir = fs::path(out) / ("hf_np" + std::to_string(ranks));
  for (const char* writer : {"sharded", "single", "hf_export"}) {
    const bool sharded = writer == std::string("sharded");
    const bool hf = writer == std::string("hf_export");
    std::vector<double> seconds;
    std::int64_t bytes = 0;  // what this rank wrote
    std::int64_t peak_rise_kib = 0;
    for (int repeat = 0; repeat < repeats; ++repeat) {
      loop.iteration = repeat + 1;
      world->barrier();
      reset_peak_rss();
      const std::int64_t before = proc_status_kib("VmRSS:");
      const auto start = std::chrono::steady_clock::now();
      if (hf) {
        bytes = static_cast<std::int64_t>(train::write_hf_weights_in_parallel(
            *world, hf_dir, parameters, model::StoredDType::bf16, train::hf_export_shard_bytes,
            groups));
      } else if (sharded) {
        if (!saver.save(parameters, {exp_avg, exp_avg_sq, false}, loop)) return 1;
      } else if (world->rank() == 0) {
        const fs::path folder = single_store.begin(loop.iteration);
        train::write_training_checkpoint(folder, parameters, exp_avg, exp_avg_sq, loop,
                                         gathers.gathers(), true);
        single_store.commit(loop.iteration);
      } else if (gathers.takes_part()) {
        train::write_training_checkpoint({}, parameters, exp_avg, exp_avg_sq, loop,
                                         gathers.gathers(), false);
      }
      world->barrier();
      seconds.push_back(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      peak_rise_kib = std::max(peak_rise_kib, proc_status_kib("VmHWM:") - before);
    }
    // Bytes each rank wrote into its checkpoint folder.
    const fs::path folder =
        (sharded ? sharded_dir : single_dir) / train::CheckpointStore::folder_name(repeats);
    if (hf) {
      // counted by the writer
    } else if (sharded) {
      bytes =
          static_cast<std::int64_t>(fs::file_size(folder / train::rank_shard_path(world->rank())));
    } else if (world->rank() == 0) {
      for (const auto& entry : fs::recursive_directory_iterator(folder))
        if (entry.is_regular_file()) bytes += static_cast<std::int64_t>(entry.file_size());
    }
    std::vector<std::int64_t> all(static_cast<std::size_t>(ranks));
    world->all_gather(std::span<const std::int64_t>(&bytes, 1), std::span<std::int64_t>(all));
    if (!sharded && !hf) all.resize(1);  // only rank 0 writes
    const std::int64_t largest = *std::max_element(all.begin(), all.end());
    const std::int64_t smallest = *std::min_element(all.begin(), all.end());
    if (world->rank() == 0) {
      std::printf(
          "{\"writer\": \"%s\", \"ranks\": %d, \"tp\": %d, \"ep\": %d, \"model_parameters\": %lld, "
          "\"median_s\": %.3f, \"min_s\": %.3f, \"largest_rank_bytes\": %lld, "
          "\"smallest_rank_bytes\": %lld, \"rank0_peak_rss_rise_mib\": %.1f}\n",
          writer, ranks, tp, ep, static_cast<long long>(model_elements), median(seconds),
          *std::min_element(seconds.begin(), seconds.end()), static_cast<long long>(largest),
          static_cast<long long>(smallest), static_cast<double>(peak_rise_kib) / 1024.0);
      std::fflush(stdout);
    }
  }
  world->barrier();
  if (world->rank() == 0) {
    fs::remove_all(sharded_dir);
    fs::remove_all(single_dir);
    fs::remove_all(hf_dir);
  }
  return 0;
}

// Scheduler benchmark (results and commands: docs/benchmarks/packing.md).
//   modelled: step time of dp_balanced, default_dynamic_cp (as dyncp-train runs it: with the
//     static fallback under per_group; Megatron's greedy alone as megatron_greedy_*) and
//     cost_aware, and the lower bound, under the Qwen3-30B-A3B cost model with H200 defaults, on
//     the setups (mean over --steps global batches; cost_aware checked against the
//     contract);
//   host: time of each scheduler (default_dynamic_cp alone, and default_dynamic_cp_or_static
//     with the fallback), median and min of --repeats in-process runs, at 1,024
//     samples on 64 ranks, 4,096 on 1,024 and 30,720 on 1,024 (each schedule checked first).
//   bench_scheduler [--repeats N] [--steps N] [--seeds N] [--only-host | --only-modelled]
//                   [--scheduler NAME] [--samples N] [--alignment per_group|pool]
// Lengths are real; each scheduler pads them for its groups (per_group by default; static CP
// always to 2 x cp).
// One JSON line per case on stdout.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <string>
#include <vector>

#include "config/length_distribution.hpp"
#include "packing/alignment.hpp"
#include "packing/cost_aware.hpp"
#include "packing/cost_model.hpp"
#include "packing/default_dynamic_cp.hpp"
#include "packing/dp_balanced.hpp"
#include "packing/static_fallback.hpp"

using namespace dyncp::packing;
using dyncp::config::LengthDistribution;
using dyncp::config::parse_length_distribution;
using dyncp::config::sample_lengths;

namespace {

struct HostCase {
  std::int64_t samples, dp, cp, cap;
};

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

const CostModel& benchmark_cost_model() {
  static const CostModel cost(model_cost_from_architecture(qwen3_30b_a3b_architecture()), {});
  return cost;
}

void time_host(const HostCase& c, const std::string& name,
               const std::function<Schedule(const SchedulerInput&)>& scheduler, int repeats,
               dyncp::config::PackingAlignment mode) {
  const auto distribution =
      parse_length_distribution("lognormal:mean=1024,sigma=1.5,min=128,max=8192");
  std::vector<std::int64_t> lengths =
      sample_lengths(distribution, static_cast<std::size_t>(c.samples), 1234, 0);
  const bool dynamic = name != "dp_balanced";
  for (auto& length : lengths) length = std::min(length, c.cp * c.cap);
  SchedulerInput input{lengths, c.dp, c.cp, c.cap, 1};
  input.alignment = alignment_rule({c.dp, c.cp, dynamic}, mode);
  const Schedule first = scheduler(input);
  const std::string problem =
      check_schedule(first, lengths, c.cap, {dynamic ? 0 : c.cp, 1, input.alignment});
  if (!problem.empty()) {
    std::fprintf(stderr, "%s: invalid schedule: %s\n", name.c_str(), problem.c_str());
    std::exit(1);
  }
  // Wall time, and this thread's CPU time, which leaves out the time other processes hold the
  // core (the development machine is shared).
  auto cpu_now = [] {
    timespec t{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return static_cast<double>(t.tv_sec) * 1e3 + static_cast<double>(t.tv_nsec) * 1e-6;
  };
  std::vector<double> ms;
  std::vector<double> cpu_ms;
  for (int i = 0; i < repeats; ++i) {
    const double cpu_start = cpu_now();
    const auto start = std::chrono::steady_clock::now();
    const Schedule schedule = scheduler(input);
    const auto stop = std::chrono::steady_clock::now();
    cpu_ms.push_back(cpu_now() - cpu_start);
    ms.push_back(std::chrono::duration<double, std::milli>(stop - start).count());
  }
  std::printf(
      "{\"bench\":\"scheduler_host\",\"scheduler\":\"%s\",\"samples\":%lld,\"pool\":%lld,"
      "\"dp\":%lld,\"cp\":%lld,\"cap\":%lld,\"microbatches\":%lld,\"repeats\":%d,"
      "\"median_ms\":%.3f,\"min_ms\":%.3f,\"median_cpu_ms\":%.3f,\"min_cpu_ms\":%.3f}\n",
      name.c_str(), static_cast<long long>(c.samples), static_cast<long long>(c.dp * c.cp),
      static_cast<long long>(c.dp), static_cast<long long>(c.cp), static_cast<long long>(c.cap),
      static_cast<long long>(first.num_microbatches()), repeats, median(ms),
      *std::min_element(ms.begin(), ms.end()), median(cpu_ms),
      *std::min_element(cpu_ms.begin(), cpu_ms.end()));
  std::fflush(stdout);
}

struct ModelledSetup {
  const char* distribution;
  std::int64_t cap, cp, dp, global_batch_size;
  bool skewed;
};

// The distribution's real lengths for one step, clamped to cp x cap rounded down to a multiple
// of 2 x dp x cp, so the static layout can run every one of them under any padding rule.
std::vector<std::int64_t> setup_lengths(const ModelledSetup& s, std::uint64_t seed,
                                        std::uint64_t step) {
  const auto distribution = parse_length_distribution(s.distribution);
  std::vector<std::int64_t> lengths =
      sample_lengths(distribution, static_cast<std::size_t>(s.global_batch_size), seed, step);
  const std::int64_t multiple = alignment_multiple({s.dp, s.cp, true});
  const std::int64_t longest = s.cp * s.cap / multiple * multiple;
  for (auto& length : lengths) length = std::min(length, longest);
  return lengths;
}

struct RatioStats {
  double log_sum = 0.0;
  double worst = 0.0;
  int count = 0;
  void add(double ratio) {
    log_sum += std::log(ratio);
    worst = std::max(worst, ratio);
    ++count;
  }
  double geomean() const { return std::exp(log_sum / count); }
};

// Every scheduler on the same real lengths: the dynamic ones padded by `mode`, static CP
// (dp_balanced) by its own 2 x cp; bounds with the dynamic padding.
void model_setups(int steps, int seeds, dyncp::config::PackingAlignment mode) {
  const CostModel& cost = benchmark_cost_model();
  const char* lognormal = "lognormal:mean=1024,sigma=1.5,min=128,max=8192";
  std::vector<ModelledSetup> setups;
  for (auto [dp, gbs] : {std::pair{2, 128}, {16, 1024}, {256, 4096}})
    setups.push_back({lognormal, 2048, 4, dp, gbs, true});
  for (auto [dp, gbs] : {std::pair{1, 128}, {8, 1024}, {128, 4096}})
    setups.push_back({"llama3_long", 8192, 8, dp, gbs, true});
  for (auto [dp, gbs] : {std::pair{1, 128}, {8, 1024}, {128, 4096}})
    setups.push_back({"lmsys", 8192, 8, dp, gbs, true});
  for (auto [dp, gbs] : {std::pair{2, 64}, {16, 512}, {256, 4096}})
    setups.push_back({"trajectory:seq_length=32768", 8192, 4, dp, gbs, false});
  for (const auto& s : setups) {
    const AlignmentRule dynamic_rule = alignment_rule({s.dp, s.cp, true}, mode);
    const AlignmentRule static_rule = alignment_rule({s.dp, s.cp, false}, mode);
    double sums[5] = {0, 0, 0, 0, 0};  // static, default_dynamic_cp, cost_aware, bound, tight
    RatioStats ours_vs_static, dynamic_vs_static, ours_vs_dynamic, ours_vs_bound, ours_vs_tight;
    RatioStats greedy_vs_static;
    int static_fallbacks = 0;  // batches where default_dynamic_cp ran the static layout
    double host_ms = 0;
    std::int64_t real_tokens = 0, padded_tokens = 0;
    for (int seed = 0; seed < seeds; ++seed) {
      for (int step = 0; step < steps; ++step) {
        const auto lengths = setup_lengths(s, 1234 + static_cast<std::uint64_t>(seed),
                                           static_cast<std::uint64_t>(step));
        SchedulerInput input{lengths, s.dp, s.cp, s.cap, 1};
        input.alignment = dynamic_rule;
        SchedulerInput static_input = input;
        static_input.alignment = static_rule;
        const double t_static =
            cost.step_time(schedule_dp_balanced(static_input), lengths, static_rule).step_seconds;
        // default_dynamic_cp as the trainer runs it (static fallback under per_group), and
        // Megatron's greedy alone.
        bool used_static = false;
        const double t_dynamic =
            cost.step_time(schedule_default_dynamic_cp_or_static(input, cost, &used_static),
                           lengths, dynamic_rule)
                .step_seconds;
        const double t_greedy =
            cost.step_time(schedule_default_dynamic_cp(input), lengths, dynamic_rule).step_seconds;
        greedy_vs_static.add(t_greedy / t_static);
        static_fallbacks += used_static;
        const auto start = std::chrono::steady_clock::now();
        const Schedule ours = schedule_cost_aware(input, cost);
        host_ms +=
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                .count();
        const std::string problem = check_schedule(ours, lengths, s.cap, {0, 1, dynamic_rule});
        if (!problem.empty()) {
          std::fprintf(stderr, "cost_aware: invalid schedule: %s\n", problem.c_str());
          std::exit(1);
        }
        for (const auto& group : ours.groups) {
          for (const auto id : ours.ids_of(group)) {
            real_tokens += lengths[static_cast<std::size_t>(id)];
            padded_tokens += dynamic_rule.padded(lengths[static_cast<std::size_t>(id)], group.size);
          }
        }
        const double t_ours = cost.step_time(ours, lengths, dynamic_rule).step_seconds;
        const double bound = cost.lower_bound_seconds(lengths, s.dp * s.cp, s.cap, 1, dynamic_rule);
        const double tight =
            cost.tight_lower_bound_seconds(lengths, s.dp * s.cp, s.cap, 1, dynamic_rule);
        sums[0] += t_static, sums[1] += t_dynamic, sums[2] += t_ours, sums[3] += bound;
        sums[4] += tight;
        ours_vs_static.add(t_ours / t_static);
        dynamic_vs_static.add(t_dynamic / t_static);
        ours_vs_dynamic.add(t_ours / t_dynamic);
        ours_vs_bound.add(t_ours / bound);
        ours_vs_tight.add(t_ours / tight);
      }
    }
    const double n = steps * seeds;
    std::printf(
        "{\"bench\":\"scheduler_modelled\",\"alignment\":\"%s\",\"distribution\":\"%s\","
        "\"skewed\":%s,\"cap\":%lld,\"cp\":%lld,\"dp\":%lld,\"pool\":%lld,"
        "\"global_batch_size\":%lld,\"seeds\":%d,\"steps\":%d,"
        "\"dp_balanced_ms\":%.2f,\"default_dynamic_cp_ms\":%.2f,\"cost_aware_ms\":%.2f,"
        "\"lower_bound_ms\":%.2f,\"tight_lower_bound_ms\":%.2f,"
        "\"cost_aware_vs_static_worst\":%.4f,\"default_dynamic_cp_vs_static_worst\":%.4f,"
        "\"cost_aware_vs_dynamic_geomean\":%.4f,\"cost_aware_vs_dynamic_worst\":%.4f,"
        "\"cost_aware_vs_bound_geomean\":%.4f,"
        "\"cost_aware_vs_tight_geomean\":%.4f,\"cost_aware_vs_tight_worst\":%.4f,"
        "\"cost_aware_padding_fraction\":%.4f,\"cost_aware_host_ms\":%.2f,"
        "\"megatron_greedy_vs_static_worst\":%.4f,\"default_dynamic_cp_static_fallbacks\":%d}\n",
        mode == dyncp::config::PackingAlignment::pool ? "pool" : "per_group", s.distribution,
        s.skewed ? "true" : "false", static_cast<long long>(s.cap), static_cast<long long>(s.cp),
        static_cast<long long>(s.dp), static_cast<long long>(s.dp * s.cp),
        static_cast<long long>(s.global_batch_size), seeds, steps, 1e3 * sums[0] / n,
        1e3 * sums[1] / n, 1e3 * sums[2] / n, 1e3 * sums[3] / n, 1e3 * sums[4] / n,
        ours_vs_static.worst, dynamic_vs_static.worst, ours_vs_dynamic.geomean(),
        ours_vs_dynamic.worst, ours_vs_bound.geomean(), ours_vs_tight.geomean(),
        ours_vs_tight.worst,
        static_cast<double>(padded_tokens - real_tokens) / static_cast<double>(padded_tokens),
        host_ms / n, greedy_vs_static.worst, static_fallbacks);
    std::fflush(stdout);
  }
}

}  // namespace

int main(int argc, char** argv) {
  int repeats = 21;
  int steps = 5;
  bool host = true;
  bool modelled = true;
  std::string only_scheduler;     // --scheduler NAME: time just this one
  std::int64_t only_samples = 0;  // --samples N: just the host case with N samples
  int seeds = 3;                  // --seeds N: modelled setups over seeds 1234 .. 1234+N-1
  auto mode = dyncp::config::PackingAlignment::per_group;  // --alignment pool: Megatron's
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--repeats") == 0 && i + 1 < argc) repeats = std::atoi(argv[++i]);
    if (std::strcmp(argv[i], "--steps") == 0 && i + 1 < argc) steps = std::atoi(argv[++i]);
    if (std::strcmp(argv[i], "--only-host") == 0) modelled = false;
    if (std::strcmp(argv[i], "--only-modelled") == 0) host = false;
    if (std::strcmp(argv[i], "--scheduler") == 0 && i + 1 < argc) only_scheduler = argv[++i];
    if (std::strcmp(argv[i], "--seeds") == 0 && i + 1 < argc) seeds = std::atoi(argv[++i]);
    if (std::strcmp(argv[i], "--alignment") == 0 && i + 1 < argc)
      mode = std::strcmp(argv[++i], "pool") == 0 ? dyncp::config::PackingAlignment::pool
                                                 : dyncp::config::PackingAlignment::per_group;
    if (std::strcmp(argv[i], "--samples") == 0 && i + 1 < argc)
      only_samples = std::atoll(argv[++i]);
  }
  if (modelled) model_setups(steps, seeds, mode);
  if (!host) return 0;
  const std::vector<HostCase> cases = {
      {1024, 16, 4, 2048}, {4096, 256, 4, 2048}, {30720, 256, 4, 2048}};
  auto wanted = [&](const char* name) { return only_scheduler.empty() || only_scheduler == name; };
  for (const auto& c : cases) {
    if (only_samples != 0 && c.samples != only_samples) continue;
    if (wanted("dp_balanced")) time_host(c, "dp_balanced", schedule_dp_balanced, repeats, mode);
    if (wanted("default_dynamic_cp")) {
      time_host(c, "default_dynamic_cp", schedule_default_dynamic_cp, repeats, mode);
    }
    if (wanted("default_dynamic_cp_or_static")) {
      time_host(
          c, "default_dynamic_cp_or_static",
          [](const SchedulerInput& input) {
            return schedule_default_dynamic_cp_or_static(input, benchmark_cost_model());
          },
          repeats, mode);
    }
    if (wanted("cost_aware")) {
      time_host(
          c, "cost_aware",
          [](const SchedulerInput& input) {
            return schedule_cost_aware(input, benchmark_cost_model());
          },
          repeats, mode);
    }
  }
  return 0;
}

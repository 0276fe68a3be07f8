#include "inspect_report.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

namespace dyncp::apps {

namespace {

struct LengthSummary {
  std::vector<std::int64_t> sorted_lengths;
  std::int64_t percentile(double fraction) const {
    if (sorted_lengths.empty()) return 0;
    const auto rank =
        static_cast<std::size_t>(std::ceil(fraction * static_cast<double>(sorted_lengths.size())));
    return sorted_lengths[std::min(sorted_lengths.size() - 1, rank == 0 ? 0 : rank - 1)];
  }
};

LengthSummary summarize(const data::PreparedDataset& dataset) {
  LengthSummary summary;
  summary.sorted_lengths.reserve(static_cast<std::size_t>(dataset.size()));
  for (std::int64_t i = 0; i < dataset.size(); ++i)
    summary.sorted_lengths.push_back(dataset.length(i));
  std::sort(summary.sorted_lengths.begin(), summary.sorted_lengths.end());
  return summary;
}

constexpr double percentiles[] = {0.5, 0.9, 0.99, 1.0};

// Entropy (nats) of the unigram distribution of the tokens the loss falls on (the targets at
// positions 1..n-1 of every sample): the loss of a model that only learned token frequencies.
// A trained model's held-out loss below it has learned more than frequencies.
double loss_token_unigram_entropy(const data::PreparedDataset& dataset) {
  std::vector<std::int64_t> counts;
  std::int64_t total = 0;
  for (std::int64_t i = 0; i < dataset.size(); ++i) {
    const auto tokens = dataset.tokens(i);
    const auto targets = dataset.target_mask(i);
    for (std::size_t t = 1; t < tokens.size(); ++t) {
      if (targets[t] == 0) continue;
      const auto id = static_cast<std::size_t>(tokens[t]);
      if (id >= counts.size()) counts.resize(id + 1, 0);
      ++counts[id];
      ++total;
    }
  }
  double entropy = 0.0;
  for (const std::int64_t count : counts) {
    if (count == 0) continue;
    const double p = static_cast<double>(count) / static_cast<double>(total);
    entropy -= p * std::log(p);
  }
  return entropy;
}

}  // namespace

std::string format_inspect_report(const data::PreparedDataset& dataset) {
  const auto& stats = dataset.stats();
  const LengthSummary summary = summarize(dataset);
  std::ostringstream out;
  out << fmt::format("cache            {}\n", dataset.path().string());
  out << fmt::format("samples          {}\n", dataset.size());
  out << fmt::format("tokens           {}\n", stats.total_tokens);
  out << fmt::format("loss tokens      {} ({:.1f}% of tokens)\n", stats.total_loss_tokens,
                     stats.total_tokens ? 100.0 * static_cast<double>(stats.total_loss_tokens) /
                                              static_cast<double>(stats.total_tokens)
                                        : 0.0);
  out << fmt::format("loss-token unigram entropy {:.4f} nats\n",
                     loss_token_unigram_entropy(dataset));
  out << fmt::format("records read     {}\n", stats.records_read);
  out << fmt::format(
      "filtered         {} too long (dropped), {} truncated, {} without loss tokens, {} bad "
      "records skipped\n",
      stats.dropped_too_long, stats.truncated, stats.dropped_no_loss, stats.skipped_bad);
  if (summary.sorted_lengths.empty()) return out.str();
  out << fmt::format("length           min {}  p50 {}  p90 {}  p99 {}  max {}\n",
                     summary.sorted_lengths.front(), summary.percentile(0.5),
                     summary.percentile(0.9), summary.percentile(0.99),
                     summary.sorted_lengths.back());
  // Power-of-two buckets: [1,2), [2,4), ... so a long tail stays readable.
  std::vector<std::int64_t> bucket_counts(64, 0);
  int last_bucket = 0;
  int first_bucket = 63;
  for (const std::int64_t length : summary.sorted_lengths) {
    const int bucket = static_cast<int>(
        std::floor(std::log2(static_cast<double>(std::max<std::int64_t>(length, 1)))));
    ++bucket_counts[static_cast<std::size_t>(bucket)];
    last_bucket = std::max(last_bucket, bucket);
    first_bucket = std::min(first_bucket, bucket);
  }
  const std::int64_t largest = *std::max_element(bucket_counts.begin(), bucket_counts.end());
  out << "length histogram (tokens)\n";
  for (int bucket = first_bucket; bucket <= last_bucket; ++bucket) {
    const std::int64_t count = bucket_counts[static_cast<std::size_t>(bucket)];
    const auto bar = static_cast<std::size_t>(
        std::ceil(50.0 * static_cast<double>(count) / static_cast<double>(largest)));
    out << fmt::format("  [{:>7}, {:>7})  {:>9}  {}\n", std::int64_t{1} << bucket,
                       std::int64_t{1} << (bucket + 1), count, std::string(count ? bar : 0, '#'));
  }
  return out.str();
}

std::string format_inspect_json(const data::PreparedDataset& dataset) {
  const auto& stats = dataset.stats();
  const LengthSummary summary = summarize(dataset);
  nlohmann::json report = {{"cache", dataset.path().string()},
                           {"samples", dataset.size()},
                           {"tokens", stats.total_tokens},
                           {"loss_tokens", stats.total_loss_tokens},
                           {"records_read", stats.records_read},
                           {"dropped_too_long", stats.dropped_too_long},
                           {"truncated", stats.truncated},
                           {"dropped_no_loss", stats.dropped_no_loss},
                           {"skipped_bad", stats.skipped_bad},
                           {"loss_token_unigram_entropy", loss_token_unigram_entropy(dataset)}};
  for (const double fraction : percentiles) {
    report["length_p" + std::to_string(static_cast<int>(fraction * 100))] =
        summary.percentile(fraction);
  }
  return report.dump();
}

}  // namespace dyncp::apps

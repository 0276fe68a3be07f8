#pragma once
// `dyncp-data inspect`: what a prepared cache holds (counts, token totals, length percentiles,
// an ASCII length histogram, and what preparation filtered out).

#include <string>

#include "data/prepared_dataset.hpp"

namespace dyncp::apps {

std::string format_inspect_report(const data::PreparedDataset& dataset);
std::string format_inspect_json(const data::PreparedDataset& dataset);

}  // namespace dyncp::apps

#include "train/loop_state.hpp"

#include <algorithm>
#include <climits>
#include <cmath>
#include <initializer_list>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/json_text_check.hpp"

namespace dyncp::train {

namespace {

// 2: the LR schedule and the manifest were added; format-1 folders have no manifest.
// 3: the same state.json beside a sharded checkpoint (train/sharded_checkpoint.hpp).
constexpr int first_manifest_format = 2;
constexpr int last_format = 3;

}  // namespace

std::string loop_state_json(const LoopState& state) {
  const LrSchedule& lr = state.lr_schedule;
  DYNCP_CHECK(state.format >= first_manifest_format && state.format <= last_format,
              "state.json is written in format 2 or 3");
  const nlohmann::json json = {{"format", state.format},
                               {"iteration", state.iteration},
                               {"consumed_samples", state.consumed_samples},
                               {"epoch", state.epoch},
                               {"index_in_epoch", state.index_in_epoch},
                               {"skipped_steps", state.skipped_steps},
                               {"seed", state.seed},
                               {"lr_scheduler",
                                {{"max_lr", lr.max_lr},
                                 {"min_lr", lr.min_lr},
                                 {"lr_warmup_steps", lr.warmup_iters},
                                 {"lr_decay_steps", lr.decay_iters},
                                 {"lr_decay_style", config::to_string(lr.style)},
                                 {"num_steps", state.iteration}}}};
  return json.dump(2) + "\n";
}

namespace {

// Exactly `names`, no other key (`context` prefixes the messages: "lr_scheduler: ").
void require_keys(const nlohmann::json& object, const std::string& where,
                  const std::string& context, std::initializer_list<const char*> names) {
  for (const char* name : names) {
    if (!object.contains(name))
      core::throw_data_error(where, context + "no \"" + std::string(name) + "\"");
  }
  for (const auto& item : object.items()) {
    const std::string& key = item.key();
    if (std::find_if(names.begin(), names.end(), [&](const char* n) { return key == n; }) ==
        names.end())
      core::throw_data_error(where, context + "unknown key \"" + key + "\"");
  }
}

// A count is a JSON integer >= 0: 20.5, "20" and -1 are refused, never converted.
std::int64_t count(const nlohmann::json& object, const char* name, const std::string& where,
                   const std::string& context) {
  const nlohmann::json& value = object[name];
  if (!value.is_number_integer() || value.get<std::int64_t>() < 0 ||
      (value.is_number_unsigned() &&
       value.get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX)))
    core::throw_data_error(
        where, context + "\"" + name + "\" = " + value.dump() + " is not an integer >= 0");
  return value.get<std::int64_t>();
}

nlohmann::json parse_object(const std::string& text, const std::string& where) {
  core::check_json_text(text, where);
  nlohmann::json json = nlohmann::json::parse(text, nullptr, false);
  if (json.is_discarded() || !json.is_object())
    core::throw_data_error(where, "not a JSON object: the loop state is damaged");
  return json;
}

// The counters both formats hold, checked against the folder's iteration.
LoopState parse_counters(const nlohmann::json& json, const std::string& where,
                         std::int64_t expected_iteration) {
  LoopState state;
  state.iteration = count(json, "iteration", where, "");
  state.consumed_samples = count(json, "consumed_samples", where, "");
  state.epoch = count(json, "epoch", where, "");
  state.index_in_epoch = count(json, "index_in_epoch", where, "");
  state.skipped_steps = count(json, "skipped_steps", where, "");
  state.seed = count(json, "seed", where, "");
  if (state.iteration != expected_iteration) {
    core::throw_data_error(where, "\"iteration\" " + std::to_string(state.iteration) +
                                      " is not the folder's iteration " +
                                      std::to_string(expected_iteration));
  }
  if (state.skipped_steps > state.iteration) {
    core::throw_data_error(where, "\"skipped_steps\" " + std::to_string(state.skipped_steps) +
                                      " exceeds the iteration " + std::to_string(state.iteration));
  }
  return state;
}

// The format, one of [first, last].
int require_format(const nlohmann::json& json, const std::string& where, int first, int last) {
  for (int format = first; format <= last; ++format) {
    if (json.contains("format") && json["format"] == format) return format;
  }
  core::throw_data_error(where, "checkpoint format " +
                                    (json.contains("format") ? json["format"].dump() : "missing") +
                                    " is not a supported format (" + std::to_string(first) +
                                    (first == last ? "" : " to " + std::to_string(last)) + ")");
}

}  // namespace

LoopState parse_loop_state(const std::string& text, const std::string& where,
                           std::int64_t expected_iteration) {
  const nlohmann::json json = parse_object(text, where);
  require_keys(json, where, "",
               {"format", "iteration", "consumed_samples", "epoch", "index_in_epoch",
                "skipped_steps", "seed", "lr_scheduler"});
  const int format = require_format(json, where, first_manifest_format, last_format);
  LoopState state = parse_counters(json, where, expected_iteration);
  state.format = format;
  const nlohmann::json& lr = json["lr_scheduler"];
  if (!lr.is_object()) core::throw_data_error(where, "\"lr_scheduler\" is not an object");
  const std::string lr_context = "lr_scheduler: ";
  require_keys(
      lr, where, lr_context,
      {"max_lr", "min_lr", "lr_warmup_steps", "lr_decay_steps", "lr_decay_style", "num_steps"});
  const auto rate = [&](const char* name) {
    const nlohmann::json& value = lr[name];
    if (!value.is_number() || !std::isfinite(value.get<double>()) || value.get<double>() < 0)
      core::throw_data_error(where, lr_context + "\"" + name + "\" = " + value.dump() +
                                        " is not a finite number >= 0");
    return value.get<double>();
  };
  state.lr_schedule.max_lr = rate("max_lr");
  state.lr_schedule.min_lr = rate("min_lr");
  state.lr_schedule.warmup_iters = count(lr, "lr_warmup_steps", where, lr_context);
  state.lr_schedule.decay_iters = count(lr, "lr_decay_steps", where, lr_context);
  if (count(lr, "num_steps", where, lr_context) != state.iteration) {
    core::throw_data_error(where, lr_context + "\"num_steps\" " + lr["num_steps"].dump() +
                                      " differs from the iteration " +
                                      std::to_string(state.iteration));
  }
  const nlohmann::json& style = lr["lr_decay_style"];
  const auto parsed_style =
      style.is_string() ? config::parse_enum<LrDecayStyle>(style.get<std::string>()) : std::nullopt;
  if (!parsed_style) {
    core::throw_data_error(where, lr_context + "\"lr_decay_style\" = " + style.dump() +
                                      ": expected one of [constant, linear, cosine]");
  }
  state.lr_schedule.style = *parsed_style;
  return state;
}

LoopState parse_format1_loop_state(const std::string& text, const std::string& where,
                                   std::int64_t expected_iteration) {
  const nlohmann::json json = parse_object(text, where);
  require_keys(json, where, "",
               {"format", "iteration", "consumed_samples", "epoch", "index_in_epoch",
                "skipped_steps", "seed"});
  require_format(json, where, 1, 1);
  LoopState state = parse_counters(json, where, expected_iteration);
  state.format = 1;
  state.lr_schedule_saved = false;
  return state;
}

}  // namespace dyncp::train

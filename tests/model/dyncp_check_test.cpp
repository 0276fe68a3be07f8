// End to end: the dyncp-check executable on a golden fixture, and its exit codes on bad input.
#include <sys/wait.h>

#include <array>
#include <catch2/catch.hpp>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "model_test_support.hpp"

#ifdef DYNCP_CHECK_BINARY
namespace dyncp::model {
namespace {

struct Outcome {
  int exit_code = -1;
  std::string output;
};

Outcome run_command(const std::string& arguments) {
  const std::string command = std::string(DYNCP_CHECK_BINARY) + " " + arguments + " 2>&1";
  Outcome outcome;
  FILE* pipe = popen(command.c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::array<char, 4096> buffer{};
  while (std::fgets(buffer.data(), buffer.size(), pipe) != nullptr) outcome.output += buffer.data();
  const int status = pclose(pipe);
  outcome.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return outcome;
}

TEST_CASE("dyncp-check --json reports the HF loss and gradient norms of a fixture",
          "[model][cli]") {
  // Qwen3-MoE, and the hybrid Qwen3.5 checkpoint in its released layout.
  const auto fixture =
      testing::fixture_dir(GENERATE(as<std::string>{}, "qwen3_moe_a", "qwen3_5_moe_b"));
  INFO(fixture);
  const auto outcome =
      run_command("--hf " + fixture + " --batch " + fixture + "/batch.json --json");
  REQUIRE(outcome.exit_code == 0);
  const auto start = outcome.output.find('{');
  REQUIRE(start != std::string::npos);
  const auto report = nlohmann::json::parse(outcome.output.substr(start));
  std::ifstream in(fixture + "/expected.json");
  const auto expected = nlohmann::json::parse(in);
  CHECK(report["loss_tokens"] == expected["loss_tokens"]);
  CHECK(report["loss"].get<double>() == Approx(expected["loss"].get<double>()).epsilon(1e-5));
  CHECK(report["loss_sum"].get<double>() ==
        Approx(expected["loss_sum"].get<double>()).epsilon(1e-5));
  REQUIRE(report["per_sequence_loss"].size() == expected["per_sequence_loss"].size());
  for (std::size_t s = 0; s < report["per_sequence_loss"].size(); ++s)
    CHECK(report["per_sequence_loss"][s].get<double>() ==
          Approx(expected["per_sequence_loss"][s].get<double>()).epsilon(1e-5));
  CHECK(report["grad_norm"].get<double>() ==
        Approx(expected["grad_norm"].get<double>()).epsilon(1e-4));
  REQUIRE(report["grad_norms"].size() == expected["grad_norms"].size());
  for (const auto& [name, value] : expected["grad_norms"].items()) {
    INFO(name);
    CHECK(report["grad_norms"][name].get<double>() ==
          Approx(value.get<double>()).epsilon(1e-4).margin(1e-9));
  }
}

TEST_CASE("dyncp-check --aux adds the load-balancing loss", "[model][cli]") {
  const auto fixture = testing::fixture_dir("qwen3_moe_a");
  const auto plain = run_command("--hf " + fixture + " --batch " + fixture + "/batch.json --json");
  const auto aux =
      run_command("--hf " + fixture + " --batch " + fixture + "/batch.json --json --aux");
  REQUIRE(aux.exit_code == 0);
  const auto plain_report = nlohmann::json::parse(plain.output.substr(plain.output.find('{')));
  const auto aux_report = nlohmann::json::parse(aux.output.substr(aux.output.find('{')));
  CHECK(aux_report["aux_loss"].get<double>() > 0.0);
  CHECK(aux_report["loss"].get<double>() ==
        Approx(plain_report["loss"].get<double>() + aux_report["aux_loss"].get<double>()));
  CHECK(aux_report["grad_norms"]["model.layers.1.mlp.gate.weight"] !=
        plain_report["grad_norms"]["model.layers.1.mlp.gate.weight"]);
}

TEST_CASE("dyncp-check exits 2 with a clear message on bad input", "[model][cli]") {
  const auto fixture = testing::fixture_dir("qwen3_moe_a");
  const auto temp = std::filesystem::temp_directory_path() / "dyncp_model_check_bad";
  std::filesystem::create_directories(temp);
  std::ofstream(temp / "out_of_vocab.json") << R"({"sequences": [[1, 2], [3, 512]]})";
  std::ofstream(temp / "broken.json") << R"({"sequences": [[1, 2)";
  std::ofstream(temp / "wrong_shape.json") << R"({"tokens": [1, 2]})";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--hf " + fixture + " --batch " + (temp / "out_of_vocab.json").string(), "sequences[1][1]"},
      {"--hf " + fixture + " --batch " + (temp / "broken.json").string(), "invalid JSON"},
      {"--hf " + fixture + " --batch " + (temp / "wrong_shape.json").string(), "\"sequences\""},
      {"--hf " + fixture + " --batch " + (temp / "missing.json").string(), "cannot open"},
      {"--hf " + (temp / "no_such_model").string() + " --batch " + fixture + "/batch.json",
       "config.json"},
      {"--batch " + fixture + "/batch.json", "--hf is required"},
  };
  for (const auto& [arguments, message] : cases) {
    INFO(arguments);
    const auto outcome = run_command(arguments);
    CHECK(outcome.exit_code == 2);
    CHECK_THAT(outcome.output, Catch::Contains(message));
  }
}

}  // namespace
}  // namespace dyncp::model
#endif  // DYNCP_CHECK_BINARY

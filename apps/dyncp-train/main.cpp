#include <CLI/CLI.hpp>

#include "core/error.hpp"
#include "core/log.hpp"
#include "core/version.hpp"

int main(int argc, char** argv) {
  CLI::App app{"dyncp-train: MoE SFT with dynamic context parallelism"};
  app.set_version_flag("--version", dyncp::core::version_string);
  CLI11_PARSE(app, argc, argv);
  return 0;
}

#pragma once
// The one way every executable turns failures into messages and exit codes
// (docs/architecture.md §6): 0 success, 2 bad usage / invalid config / invalid data (a CLI
// parse error or a core::Error of a user-fixable kind), 1 runtime failure. Never a stack trace.

#include <CLI/CLI.hpp>
#include <exception>
#include <iostream>
#include <string>

#include "core/error.hpp"

namespace dyncp::apps {

// Parses the command line, then calls `run()` (returning the exit code) with the mapping above.
template <typename Run>
int parse_and_run(CLI::App& app, int argc, char** argv, const std::string& program, Run&& run) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    if (error.get_exit_code() == 0) return app.exit(error);  // --help, --version
    std::cerr << program << ": error: " << error.what() << " (see " << program << " --help)\n";
    return 2;
  }
  try {
    return run();
  } catch (const core::Error& error) {
    std::cerr << program << ": error: " << error.what() << "\n";
    return error.exit_code();
  } catch (const std::exception& error) {
    std::cerr << program << ": internal error: " << error.what() << "\n";
    return 1;
  }
}

}  // namespace dyncp::apps

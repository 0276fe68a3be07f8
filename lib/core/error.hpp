#pragma once
// One exception type for the whole project. It carries where the problem is (a config key
// path, a file:line, a sample id) and which kind of failure it is, which decides the exit code:
// usage / config / data errors exit 2, runtime failures exit 1 (docs/architecture.md §6).

#include <stdexcept>
#include <string>
#include <utility>

namespace dyncp::core {

enum class ErrorKind {
  usage,    // bad command line
  config,   // invalid configuration (key path in `where`)
  data,     // invalid input data or checkpoint (file:line or sample id in `where`)
  runtime,  // a failure while running (rank in the message)
};

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, std::string where, const std::string& message)
      : std::runtime_error(where.empty() ? message : where + ": " + message),
        kind_(kind),
        where_(std::move(where)) {}

  ErrorKind kind() const { return kind_; }
  const std::string& where() const { return where_; }
  // Exit code contract: 2 for anything the user can fix in their input, 1 otherwise.
  int exit_code() const { return kind_ == ErrorKind::runtime ? 1 : 2; }

 private:
  ErrorKind kind_;
  std::string where_;
};

[[noreturn]] inline void throw_config_error(std::string key_path, const std::string& message) {
  throw Error(ErrorKind::config, std::move(key_path), message);
}
[[noreturn]] inline void throw_data_error(std::string where, const std::string& message) {
  throw Error(ErrorKind::data, std::move(where), message);
}
[[noreturn]] inline void throw_usage_error(const std::string& message) {
  throw Error(ErrorKind::usage, "", message);
}
[[noreturn]] inline void throw_runtime_error(const std::string& message) {
  throw Error(ErrorKind::runtime, "", message);
}

}  // namespace dyncp::core

// Internal invariant check: a failure is a bug in this program, never bad user input.
#define DYNCP_CHECK(condition, message)                                            \
  do {                                                                             \
    if (!(condition)) {                                                            \
      throw ::dyncp::core::Error(                                                  \
          ::dyncp::core::ErrorKind::runtime,                                       \
          std::string(__FILE__) + ":" + std::to_string(__LINE__),                  \
          std::string("internal check failed: ") + #condition + ": " + (message)); \
    }                                                                              \
  } while (false)

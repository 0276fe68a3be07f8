// libFuzzer target: a checkpoint's state.json (both formats) and manifest.json texts through
// their schema checks. Any input must be accepted or refused with a data error, never a crash
// or another exception; an accepted state holds no negative counter.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.hpp"
#include "train/checkpoint_manifest.hpp"
#include "train/loop_state.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  // Both state formats: 2 (with the LR schedule) and 1 (from before manifests).
  for (const auto parse :
       {&dyncp::train::parse_loop_state, &dyncp::train::parse_format1_loop_state}) {
    try {
      const auto state = parse(text, "state.json", 20);
      if (state.iteration != 20 || state.consumed_samples < 0 || state.epoch < 0 ||
          state.index_in_epoch < 0 || state.skipped_steps < 0 || state.skipped_steps > 20)
        __builtin_trap();
    } catch (const dyncp::core::Error& error) {
      if (error.kind() != dyncp::core::ErrorKind::data) __builtin_trap();
    }
  }
  try {
    const auto manifest = dyncp::train::parse_checkpoint_manifest(text, "manifest.json");
    for (const auto& file : manifest.files) {
      // A listed path stays inside the folder: relative, and no part is "." or ".." (an empty
      // part, as in "a//b", names no directory and is harmless).
      if (file.path.empty() || file.path.front() == '/') __builtin_trap();
      std::size_t begin = 0;
      while (begin <= file.path.size()) {
        const std::size_t end = std::min(file.path.find('/', begin), file.path.size());
        const std::string part = file.path.substr(begin, end - begin);
        if (part == "." || part == "..") __builtin_trap();
        begin = end + 1;
      }
    }
  } catch (const dyncp::core::Error& error) {
    if (error.kind() != dyncp::core::ErrorKind::data) __builtin_trap();
  }
  return 0;
}

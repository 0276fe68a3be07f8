#pragma once
// Writing an output file so that no failure goes unseen. std::ofstream reports a full disk only
// through a stream state nobody reads at destruction, so a truncated file can be published as
// complete; every checkpoint, safetensors and export file is written through OutputFile instead:
// each write is checked, close() flushes, fsyncs and closes and throws on any failure, naming
// the file and the system's reason (No space left on device, File too large, ...).
//
// Fault injection for tests: when DYNCP_FAULT_ENOSPC_AFTER_BYTES=N is set, writes through
// OutputFile fail with ENOSPC once N bytes have been written by this process (0: the first
// write fails); DYNCP_FAULT_ENOSPC_FILE=<file name> (e.g. state.json) limits both the failure
// and the count to files of that name.

#include <cstddef>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <string_view>

namespace dyncp::core {

class OutputFile {
 public:
  // Creates or truncates `path`; a runtime error naming it when that fails.
  explicit OutputFile(const std::filesystem::path& path);
  // Closes without checking: a file not close()d was abandoned by an error already thrown.
  ~OutputFile();
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  void write(const void* data, std::size_t bytes);
  void write(std::string_view text) { write(text.data(), text.size()); }
  // Flush, fsync and close; throws on any failure.
  void close();

  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  std::FILE* file_ = nullptr;
};

// Writes `path` through the temporary `path` + `temporary_suffix` beside it, renamed over `path`
// once `write` returned and the file closed cleanly: a reader never sees a partial file under
// the final name, and any failure (thrown by `write`, a failed write or close, the rename)
// removes the temporary and propagates.
void write_file_replacing(const std::filesystem::path& path,
                          const std::function<void(OutputFile&)>& write,
                          std::string_view temporary_suffix = ".partial");

// For writers that do not go through OutputFile (positioned writes of several processes into
// one file): throws the ENOSPC error of the fault injection above when `bytes` more written to
// `path` pass its limit, else counts them.
void check_injected_write_fault(const std::filesystem::path& path, std::size_t bytes);

// A write past the file-size limit (RLIMIT_FSIZE, `ulimit -f`) kills the process with SIGXFSZ
// before it can say anything. Called first in main: with the signal ignored such a write fails
// with EFBIG and is reported like a full disk.
void ignore_file_size_limit_signal();

}  // namespace dyncp::core

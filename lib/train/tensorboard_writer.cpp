#include "train/tensorboard_writer.hpp"

#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>

#include "core/error.hpp"
#include "train/tfrecord.hpp"

namespace dyncp::train {

namespace tensorboard {

namespace {

// Protobuf wire format: a field key is (number << 3 | wire type); 0 varint, 1 64-bit,
// 2 length-delimited, 5 32-bit. Integers little-endian.
void put_varint(std::string& out, std::uint64_t value) {
  while (value >= 0x80) {
    out += static_cast<char>((value & 0x7F) | 0x80);
    value >>= 7;
  }
  out += static_cast<char>(value);
}

void put_key(std::string& out, int field, int wire_type) {
  put_varint(out, static_cast<std::uint64_t>(field) << 3 | static_cast<std::uint64_t>(wire_type));
}

template <typename T>
void put_fixed(std::string& out, T value) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));  // little-endian host (x86-64, aarch64)
  out.append(bytes, sizeof(T));
}

void put_double(std::string& out, int field, double value) {
  put_key(out, field, 1);
  put_fixed(out, value);
}

void put_bytes(std::string& out, int field, const std::string& bytes) {
  put_key(out, field, 2);
  put_varint(out, bytes.size());
  out += bytes;
}

}  // namespace

// Summary.Value: tag = 1, simple_value = 2 (float), histo = 5 (HistogramProto).
std::string scalar_value(const std::string& tag, float value) {
  std::string message;
  put_bytes(message, 1, tag);
  put_key(message, 2, 5);
  put_fixed(message, value);
  std::string field;
  put_bytes(field, 1, message);  // Summary.value = 1 (repeated)
  return field;
}

// HistogramProto: min 1, max 2, num 3, sum 4, sum_squares 5, bucket_limit 6, bucket 7 (packed
// doubles). Bucket i counts values in (bucket_limit[i-1], bucket_limit[i]], so each distinct
// value is its own bucket's upper edge.
std::string histogram_value(const std::string& tag, const std::map<int, int>& counts_by_value) {
  double num = 0, sum = 0, sum_squares = 0;
  std::string limits, buckets;
  for (const auto& [value, count] : counts_by_value) {
    num += count;
    sum += static_cast<double>(value) * count;
    sum_squares += static_cast<double>(value) * value * count;
    put_fixed(limits, static_cast<double>(value));
    put_fixed(buckets, static_cast<double>(count));
  }
  std::string histogram;
  put_double(histogram, 1, counts_by_value.empty() ? 0.0 : counts_by_value.begin()->first);
  put_double(histogram, 2, counts_by_value.empty() ? 0.0 : counts_by_value.rbegin()->first);
  put_double(histogram, 3, num);
  put_double(histogram, 4, sum);
  put_double(histogram, 5, sum_squares);
  put_bytes(histogram, 6, limits);
  put_bytes(histogram, 7, buckets);
  std::string message;
  put_bytes(message, 1, tag);
  put_bytes(message, 5, histogram);
  std::string field;
  put_bytes(field, 1, message);
  return field;
}

// Event: wall_time 1 (double), step 2 (int64), file_version 3, summary 5.
std::string summary_event(double wall_time, std::int64_t step, const std::string& values) {
  std::string event;
  put_double(event, 1, wall_time);
  put_key(event, 2, 0);
  put_varint(event, static_cast<std::uint64_t>(step));
  put_bytes(event, 5, values);
  return event;
}

std::string file_version_event(double wall_time) {
  std::string event;
  put_double(event, 1, wall_time);
  put_bytes(event, 3, "brain.Event:2");
  return event;
}

}  // namespace tensorboard

namespace {

double wall_time_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

TensorBoardWriter::TensorBoardWriter(const std::string& directory) {
  if (directory.empty()) return;
  std::error_code error;
  std::filesystem::create_directories(directory, error);
  char host[256] = "localhost";
  gethostname(host, sizeof(host) - 1);
  const double now = wall_time_now();
  path_ = (std::filesystem::path(directory) /
           ("events.out.tfevents." + std::to_string(static_cast<std::int64_t>(now)) + "." + host +
            "." + std::to_string(getpid()) + ".dyncp"))
              .string();
  out_.open(path_, std::ios::binary | std::ios::app);
  if (!out_) {
    core::throw_config_error("logger.tensorboard_dir",
                             "cannot create '" + path_ + "' (check the folder is writable)");
  }
  append(tensorboard::file_version_event(now));
}

void TensorBoardWriter::append(const std::string& event) {
  out_ << tfrecord_frame(event);
  out_.flush();
}

void TensorBoardWriter::write(const StepMetrics& m) {
  if (!out_.is_open()) return;
  using tensorboard::scalar_value;
  std::string values =
      scalar_value("lm loss", static_cast<float>(m.loss)) +
      scalar_value("learning-rate", static_cast<float>(m.lr)) +
      scalar_value("grad-norm", static_cast<float>(m.grad_norm)) +
      scalar_value("batch-size", static_cast<float>(m.global_batch_size)) +
      scalar_value("throughput/tokens_per_s", static_cast<float>(m.tokens_per_s)) +
      scalar_value("throughput/tflops_per_device", static_cast<float>(m.tflops_per_device)) +
      scalar_value("memory/peak_mib", static_cast<float>(static_cast<double>(m.peak_memory_bytes) /
                                                         (1024.0 * 1024.0))) +
      scalar_value("time/step_ms", static_cast<float>(m.elapsed_ms)) +
      scalar_value("time/straggler_wait_ms", static_cast<float>(m.time.straggler_wait_ms)) +
      tensorboard::histogram_value("cp-group-size", m.group_sizes);
  if (m.validation_loss)
    values += scalar_value("lm loss validation", static_cast<float>(*m.validation_loss));
  append(tensorboard::summary_event(wall_time_now(), m.iteration, values));
}

}  // namespace dyncp::train

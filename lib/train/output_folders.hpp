#pragma once
// Start-up check that every folder the run will write to can be written, so a read-only or
// mistyped path fails in the first second (exit 2 naming the key) instead of at the first
// save, after the training time is spent. Checked: checkpoint.save, checkpoint.export_hf,
// the folder of logger.metrics_path, logger.tensorboard_dir and dataset.cache_dir (each when
// set).

#include "config/config_container.hpp"

namespace dyncp::train {

// Creates each folder if needed and writes, fsyncs and removes a probe file in it. Throws a
// config error naming the key, the path and the system's reason.
void require_writable_outputs(const config::ConfigContainer& config);

}  // namespace dyncp::train

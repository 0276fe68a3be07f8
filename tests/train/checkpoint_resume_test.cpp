// Resume and overwrite rules (train/checkpoint_resume.hpp), the loop-state schema
// (train/training_checkpoint.hpp), the resumed LR schedule and the start-up writability check.
#include "train/checkpoint_resume.hpp"

#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/error.hpp"
#include "core/output_file.hpp"
#include "train/checkpoint_store.hpp"
#include "train/lr_schedule.hpp"
#include "train/output_folders.hpp"
#include "train/training_checkpoint.hpp"

namespace fs = std::filesystem;
using dyncp::core::Error;
using dyncp::core::OutputFile;
using dyncp::train::CheckpointStore;

namespace {

fs::path fresh_dir(const std::string& name) {
  const fs::path dir =
      fs::temp_directory_path() / ("dyncp_resume_test_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  return dir;
}

void save(const fs::path& dir, std::int64_t iteration) {
  CheckpointStore store(dir, -1);
  const fs::path folder = store.begin(iteration);
  OutputFile file(folder / "state.json");
  file.write("{}", 2);
  file.close();
  store.commit(iteration);
}

std::string state_text(const std::string& iteration = "20", const std::string& skipped = "0",
                       const std::string& extra = "") {
  return R"({"format": 2, "iteration": )" + iteration +
         R"(, "consumed_samples": 160, "epoch": 1, "index_in_epoch": 4, "skipped_steps": )" +
         skipped + R"(, "seed": 1234, )" + extra +
         R"("lr_scheduler": {"max_lr": 0.001, "min_lr": 0.0, "lr_warmup_steps": 2,
            "lr_decay_steps": 40, "lr_decay_style": "cosine", "num_steps": )" +
         iteration + "}}";
}

}  // namespace

TEST_CASE("a run with checkpoints in checkpoint.save and no load resumes from save",
          "[train][ckpt][resume]") {
  const fs::path dir = fresh_dir("auto");
  save(dir, 10);
  save(dir, 20);
  dyncp::config::CheckpointConfig checkpoint;
  checkpoint.save = dir.string();
  SECTION("load unset") {}
  SECTION("load equal to save (another spelling)") {
    checkpoint.load = (dir / "." / "").string();
  }
  const auto choice = dyncp::train::choose_resume_checkpoint(checkpoint);
  REQUIRE(choice.has_value());
  CHECK(choice->iteration == 20);
  checkpoint.ckpt_step = 10;
  CHECK(dyncp::train::choose_resume_checkpoint(checkpoint)->iteration == 10);
  fs::remove_all(dir);
}

TEST_CASE("a run that would write over another run's checkpoints is refused unless overwrite",
          "[train][ckpt][resume]") {
  const fs::path dir = fresh_dir("refuse");
  const fs::path other = fresh_dir("refuse_other");
  save(dir, 10);
  save(other, 3);
  dyncp::config::CheckpointConfig checkpoint;
  checkpoint.save = dir.string();
  checkpoint.load = other.string();
  try {
    dyncp::train::choose_resume_checkpoint(checkpoint);
    FAIL("not refused");
  } catch (const Error& error) {
    CHECK(error.exit_code() == 2);
    CHECK(error.where() == "checkpoint.save");
    CHECK_THAT(error.what(),
               Catch::Contains("iter_0000010") && Catch::Contains("checkpoint.overwrite=true"));
  }
  checkpoint.overwrite = true;
  CHECK(dyncp::train::choose_resume_checkpoint(checkpoint)->iteration == 3);
  checkpoint.load.clear();  // overwrite without load: a fresh start
  CHECK_FALSE(dyncp::train::choose_resume_checkpoint(checkpoint).has_value());
  fs::remove_all(dir);
  fs::remove_all(other);
}

TEST_CASE("an empty save folder and an unset load start fresh", "[train][ckpt][resume]") {
  dyncp::config::CheckpointConfig checkpoint;
  checkpoint.save = fresh_dir("fresh").string();
  CHECK_FALSE(dyncp::train::choose_resume_checkpoint(checkpoint).has_value());
  checkpoint.ckpt_step = 4;
  REQUIRE_THROWS_WITH(dyncp::train::choose_resume_checkpoint(checkpoint),
                      Catch::Contains("checkpoint.ckpt_step"));
}

TEST_CASE("state.json is schema-checked", "[train][ckpt][state]") {
  using dyncp::train::parse_loop_state;
  const auto state = parse_loop_state(state_text(), "state.json", 20);
  CHECK(state.iteration == 20);
  CHECK(state.consumed_samples == 160);
  CHECK(state.lr_schedule.decay_iters == 40);
  CHECK(state.lr_schedule.style == dyncp::config::LrDecayStyle::cosine);

  const auto refused = [&](const std::string& text, const std::string& why) {
    INFO(text);
    try {
      parse_loop_state(text, "ckpt/state.json", 20);
      FAIL("accepted");
    } catch (const Error& error) {
      CHECK(error.exit_code() == 2);
      CHECK_THAT(error.what(), Catch::Contains("ckpt/state.json") && Catch::Contains(why));
    }
  };
  refused(state_text("20.5"), "\"iteration\" = 20.5");
  refused(state_text("20", "-1"), "\"skipped_steps\" = -1");
  refused(state_text("20", "21"), "exceeds the iteration");
  refused(state_text("19"), "not the folder's iteration 20");
  refused(state_text("20", "0", R"("extra": 1, )"), "unknown key \"extra\"");
  refused(R"({"format": 2})", "no \"iteration\"");
  refused(std::string(state_text()).replace(state_text().find("cosine"), 6, "cosin"),
          "lr_decay_style");
  refused(std::string(state_text()).replace(state_text().find("0.001"), 5, "-1e30"), "\"max_lr\"");
  refused(state_text() + std::string(1, '\0') + "junk", "NUL byte");
  refused(std::string(10000, '[') + std::string(10000, ']'), "nested deeper");
}

TEST_CASE("a resumed run keeps the checkpoint's LR schedule unless overridden",
          "[train][lr][resume]") {
  dyncp::train::LrSchedule saved;
  saved.max_lr = 1e-3;
  saved.decay_iters = 3;
  saved.style = dyncp::config::LrDecayStyle::linear;
  dyncp::train::LrSchedule configured = saved;
  configured.decay_iters = 6;  // train.train_iters changed on the resubmission
  const auto kept = dyncp::train::resumed_lr_schedule(saved, configured, false);
  CHECK(kept == saved);
  CHECK(kept.lr_at(3) == saved.lr_at(3));
  CHECK(kept.lr_at(3) != configured.lr_at(3));
  CHECK(dyncp::train::resumed_lr_schedule(saved, configured, true) == configured);
}

TEST_CASE("unwritable output folders are refused at start-up naming the key", "[train][outputs]") {
  const fs::path dir = fresh_dir("outputs");
  fs::create_directories(dir);
  std::ofstream(dir / "a_file") << "x";
  dyncp::config::ConfigContainer config;
  config.dataset.type = dyncp::config::DatasetType::mock_varlen;
  dyncp::train::require_writable_outputs(config);  // nothing set: nothing to check

  const auto refused = [&](const std::string& key) {
    try {
      dyncp::train::require_writable_outputs(config);
      FAIL("accepted");
    } catch (const Error& error) {
      CHECK(error.exit_code() == 2);
      CHECK(error.where() == key);
    }
  };
  config.checkpoint.save = (dir / "a_file" / "ckpt").string();  // under a regular file
  refused("checkpoint.save");
  config.checkpoint.save = "/proc/dyncp_ckpt";  // a read-only filesystem, even for root
  refused("checkpoint.save");
  config.checkpoint.save = (dir / "ckpt").string();
  dyncp::train::require_writable_outputs(config);
  CHECK(fs::is_directory(dir / "ckpt"));
  CHECK(fs::is_empty(dir / "ckpt"));  // the probe is removed
  config.checkpoint.export_hf = "/proc/dyncp_export";
  refused("checkpoint.export_hf");
  config.checkpoint.export_hf.clear();
  config.logger.metrics_path = "/proc/dyncp/metrics.jsonl";
  refused("logger.metrics_path");
  config.logger.metrics_path.clear();
  config.logger.tensorboard_dir = (dir / "a_file" / "tb").string();
  refused("logger.tensorboard_dir");
  fs::remove_all(dir);
}

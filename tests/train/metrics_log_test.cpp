// The metrics log writes one JSON object per line and appends when asked.
#include "train/metrics_log.h"

#include "base/error.h"
#include "common/temp_dir.h"

#include <gtest/gtest.h>

#include <fstream>
#include <limits>

namespace fp8kit::train {
namespace {

std::vector<nlohmann::json> read_lines(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::vector<nlohmann::json> events;
  for (std::string line; std::getline(in, line);) events.push_back(nlohmann::json::parse(line));
  return events;
}

TEST(MetricsLog, WritesJsonLinesAndAppends) {
  const testing::TempDir dir("metrics_log");
  const auto path = dir / "sub" / "metrics.jsonl";
  {
    MetricsLog log(path, false);
    log.write({{"event", "epoch"}, {"epoch", 1}, {"loss", 0.5}});
    log.write({{"event", "epoch"}, {"epoch", 2}, {"loss", std::numeric_limits<double>::quiet_NaN()}});
    EXPECT_THROW(log.write(nlohmann::json::array()), Error);
  }
  {
    MetricsLog log(path, true);
    log.write({{"event", "test"}, {"accuracy", 0.8}});
  }
  auto events = read_lines(path);
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0]["loss"], 0.5);
  EXPECT_TRUE(events[1]["loss"].is_null());
  EXPECT_EQ(events[2]["event"], "test");
  {
    MetricsLog log(path, false);
  }
  EXPECT_TRUE(read_lines(path).empty());
}

// A held event goes in with the next write, before it; with none it never goes in.
TEST(MetricsLog, HoldsAnEventUntilTheNextWrite) {
  const testing::TempDir dir("metrics_log");
  const auto path = dir / "metrics.jsonl";
  {
    MetricsLog log(path, false);
    log.write_with_next({{"event", "run"}});
  }
  EXPECT_TRUE(read_lines(path).empty());
  {
    MetricsLog log(path, true);
    log.write_with_next({{"event", "run"}});
    EXPECT_TRUE(read_lines(path).empty());
    log.write({{"event", "epoch"}, {"epoch", 1}});
    log.write({{"event", "epoch"}, {"epoch", 2}});
  }
  const auto events = read_lines(path);
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0]["event"], "run");
  EXPECT_EQ(events[2]["epoch"], 2);
}

TEST(MetricsLog, SaysWhetherItHoldsAnEventOfAPrecision) {
  const testing::TempDir dir("metrics_log");
  MetricsLog log(dir / "metrics.jsonl", false);
  log.write({{"event", "test"}, {"precision", "bf16"}, {"accuracy", 0.8}});
  EXPECT_TRUE(log.holds("test", "bf16"));
  EXPECT_FALSE(log.holds("test", "fp8"));
  EXPECT_FALSE(log.holds("epoch", "bf16"));
}

// A kill can cut the last line short; reopening to append drops it, so the next event starts a line.
TEST(MetricsLog, AppendingDropsALastLineCutShort) {
  const testing::TempDir dir("metrics_log");
  const auto path = dir / "metrics.jsonl";
  std::ofstream(path) << R"({"event":"run"})" "\n" R"({"event":"epoch","ep)";
  {
    MetricsLog log(path, true);
    log.write({{"event", "test"}});
  }
  const auto events = read_lines(path);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0]["event"], "run");
  EXPECT_EQ(events[1]["event"], "test");
  std::ofstream(path) << R"({"event":"ru)";
  { MetricsLog log(path, true); }
  EXPECT_TRUE(read_lines(path).empty());
}

TEST(MetricsLog, ForgetsOnlyLaterEpochsAndTheTestOfOnePrecision) {
  const testing::TempDir dir("metrics_log");
  const auto path = dir / "metrics.jsonl";
  std::ofstream(dir / ".metrics.jsonl.tmp-Zz9Yy8") << "left by a kill";
  MetricsLog log(path, false);
  EXPECT_FALSE(std::filesystem::exists(dir / ".metrics.jsonl.tmp-Zz9Yy8"));
  for (int epoch = 1; epoch <= 3; ++epoch) {
    for (const char* precision : {"bf16", "fp8"}) {
      log.write({{"event", "epoch"}, {"precision", precision}, {"epoch", epoch}});
    }
  }
  log.write({{"event", "test"}, {"precision", "fp8"}});        // written again by the resumed run
  log.write({{"event", "diverged"}, {"precision", "fp8"}});    // likewise
  log.write({{"event", "test"}, {"precision", "bf16"}});       // another precision's: kept
  log.write({{"event", "epoch"}, {"precision", "fp8"}, {"epoch", "7"}});  // not ours: kept
  log.forget_epochs_after("fp8", 1);
  log.write({{"event", "run"}});  // still appends, to the rewritten file
  std::vector<std::string> kept;
  for (const auto& event : read_lines(path)) {
    kept.push_back(event["event"].get<std::string>() + (event.contains("epoch") ? event["epoch"].dump() : "") +
                   event.value("precision", ""));
  }
  EXPECT_EQ(kept, (std::vector<std::string>{"epoch1bf16", "epoch1fp8", "epoch2bf16", "epoch3bf16", "testbf16",
                                            "epoch\"7\"fp8", "run"}));
  size_t files = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator(dir.path())) ++files;
  EXPECT_EQ(files, 1u);
}

}  // namespace
}  // namespace fp8kit::train

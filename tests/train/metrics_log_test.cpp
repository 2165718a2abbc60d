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

}  // namespace
}  // namespace fp8kit::train

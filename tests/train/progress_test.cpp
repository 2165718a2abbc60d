// Progress bar formatting (Keras layout, durations, step times) and the non-terminal line policy.
#include "train/progress.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>

namespace fp8kit::train {
namespace {

using ::testing::HasSubstr;

TEST(Progress, FormatsLikeKeras) {
  const std::vector<Metric> metrics{{"accuracy", 0.71234}, {"loss", 0.55121}};
  EXPECT_EQ(format_progress(625, 625, 12.2, 0.0192, metrics, false),
            "625/625 ━━━━━━━━━━━━━━━━━━━━ 12s 19ms/step - accuracy: 0.7123 - loss: 0.5512");
  EXPECT_EQ(format_progress(7, 625, 83.0, 0.134, {}, false), "  7/625 ──────────────────── 1:23 134ms/step");
  EXPECT_EQ(format_progress(250, 625, 50.0, 0.134, {}, false), "250/625 ━━━━━━━━──────────── 50s 134ms/step");
  // The coloured bar is 6 green of 20 at 30%.
  const std::string colored = format_progress(3, 10, 1.0, 0.1, {}, true);
  EXPECT_THAT(colored, HasSubstr("\x1b[32m━━━━━━\x1b[0m"));
}

TEST(Progress, FormatsDurationsAndStepTimes) {
  EXPECT_EQ(format_duration(0.4), "0s");
  EXPECT_EQ(format_duration(59.4), "59s");
  EXPECT_EQ(format_duration(65), "1:05");
  EXPECT_EQ(format_duration(3723), "1:02:03");
  EXPECT_EQ(format_step_time(2.4), "2s/step");
  EXPECT_EQ(format_step_time(0.019), "19ms/step");
  EXPECT_EQ(format_step_time(0.00025), "250us/step");
}

TEST(Progress, PrintsAboutTenPlainLinesWhenNotATerminal) {
  char* buffer = nullptr;
  size_t size = 0;
  std::FILE* out = ::open_memstream(&buffer, &size);
  ProgressBar bar(100, out, /*interactive=*/false);
  const std::vector<Metric> metrics{{"loss", 0.5}};
  for (int step = 1; step <= 100; ++step) bar.update(step, metrics);
  bar.finish(metrics);
  std::fclose(out);
  const std::string text(buffer, size);
  std::free(buffer);
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 10);  // 9 periodic + the final line
  EXPECT_EQ(text.find('\r'), std::string::npos);
  EXPECT_EQ(text.find('\x1b'), std::string::npos);
  EXPECT_THAT(text, HasSubstr("100/100 ━━━━━━━━━━━━━━━━━━━━ "));
}

}  // namespace
}  // namespace fp8kit::train

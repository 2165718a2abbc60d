// A Keras-like progress bar for one epoch:
//   625/625 ━━━━━━━━━━━━━━━━━━━━ 12s 19ms/step - accuracy: 0.7123 - loss: 0.5512
// On a terminal it redraws one line with \r (showing the ETA while running); otherwise it prints a
// plain line about every tenth of the epoch, so redirected logs stay readable.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <span>
#include <string>

namespace fp8kit::train {

struct Metric {
  std::string name;
  double value;
  int decimals = 4;  // e.g. 0 for tokens/s
};

// One progress line, without \r or newline. seconds: the ETA while running, the elapsed time once
// finished (Keras prints both in the same place); seconds_per_step: the mean so far. color: ANSI
// green for the done part of the bar, dim for the rest.
std::string format_progress(int64_t done, int64_t total, double seconds, double seconds_per_step,
                            std::span<const Metric> metrics, bool color);

// "12s", "1:05", "1:02:03" (Keras's ETA format).
std::string format_duration(double seconds);
// "19ms/step", "2s/step", "250us/step".
std::string format_step_time(double seconds_per_step);

class ProgressBar {
 public:
  // interactive: redraw in place; defaults to whether `out` is a terminal. out == nullptr: silent.
  ProgressBar(int64_t total_steps, std::FILE* out);
  ProgressBar(int64_t total_steps, std::FILE* out, bool interactive);

  // After `done` steps (1-based count) with the running metrics.
  void update(int64_t done, std::span<const Metric> metrics);
  // Ends the line with the final metrics (training and validation together, as Keras does): the
  // time is the whole epoch's, the time per step that of the training steps.
  void finish(std::span<const Metric> metrics);

 private:
  using Clock = std::chrono::steady_clock;
  double elapsed() const;

  int64_t total_;
  std::FILE* out_;
  bool interactive_;
  Clock::time_point start_;
  double train_seconds_ = 0;  // when the last step was reported
  int64_t last_printed_ = 0;  // non-interactive: the step of the last plain line
};

}  // namespace fp8kit::train

// Keras-like epoch progress bar: formatting (pure, tested) and the drawing policy (TTY or plain lines).
#include "train/progress.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <unistd.h>

namespace fp8kit::train {

namespace {
constexpr int kBarWidth = 20;
constexpr std::string_view kBarChar = "━";
constexpr std::string_view kRestChar = "─";  // without colour, the rest of the bar is drawn thin
}  // namespace

std::string format_duration(double seconds) {
  const auto s = static_cast<int64_t>(std::max(0.0, std::round(seconds)));
  if (s >= 3600) return fmt::format("{}:{:02}:{:02}", s / 3600, (s % 3600) / 60, s % 60);
  if (s >= 60) return fmt::format("{}:{:02}", s / 60, s % 60);
  return fmt::format("{}s", s);
}

std::string format_step_time(double seconds_per_step) {
  if (seconds_per_step >= 1.0) return fmt::format("{:.0f}s/step", seconds_per_step);
  if (seconds_per_step >= 1e-3) return fmt::format("{:.0f}ms/step", seconds_per_step * 1e3);
  return fmt::format("{:.0f}us/step", seconds_per_step * 1e6);
}

std::string format_progress(int64_t done, int64_t total, double seconds, double seconds_per_step,
                            std::span<const Metric> metrics, bool color) {
  const int digits = static_cast<int>(fmt::formatted_size("{}", total));
  std::string line = fmt::format("{:>{}}/{} ", done, digits, total);
  const int filled = total > 0 ? static_cast<int>(kBarWidth * std::min<int64_t>(done, total) / total) : kBarWidth;
  auto bar = [](int n, std::string_view c) {
    std::string s;
    for (int i = 0; i < n; ++i) s += c;
    return s;
  };
  if (color) {
    line += "\x1b[32m" + bar(filled, kBarChar) + "\x1b[0m\x1b[2m" + bar(kBarWidth - filled, kBarChar) + "\x1b[0m";
  } else {
    line += bar(filled, kBarChar) + bar(kBarWidth - filled, kRestChar);
  }
  line += fmt::format(" {} {}", format_duration(seconds), format_step_time(seconds_per_step));
  for (const Metric& metric : metrics) line += fmt::format(" - {}: {:.{}f}", metric.name, metric.value, metric.decimals);
  return line;
}

ProgressBar::ProgressBar(int64_t total_steps, std::FILE* out)
    : ProgressBar(total_steps, out, out != nullptr && ::isatty(::fileno(out))) {}

ProgressBar::ProgressBar(int64_t total_steps, std::FILE* out, bool interactive)
    : total_(total_steps), out_(out), interactive_(interactive), start_(Clock::now()) {}

double ProgressBar::elapsed() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }

void ProgressBar::update(int64_t done, std::span<const Metric> metrics) {
  if (done >= total_) train_seconds_ = elapsed();
  if (out_ == nullptr || done >= total_) return;  // the last step is drawn by finish()
  const double per_step = elapsed() / std::max<int64_t>(done, 1);
  const double eta = per_step * static_cast<double>(total_ - done);
  if (interactive_) {
    std::fprintf(out_, "\r%s\x1b[K", format_progress(done, total_, eta, per_step, metrics, true).c_str());
    std::fflush(out_);
  } else if (done - last_printed_ >= std::max<int64_t>(1, total_ / 10)) {
    last_printed_ = done;
    std::fprintf(out_, "%s\n", format_progress(done, total_, eta, per_step, metrics, false).c_str());
    std::fflush(out_);
  }
}

void ProgressBar::finish(std::span<const Metric> metrics) {
  if (out_ == nullptr) return;
  const double seconds = elapsed();
  const double train_seconds = train_seconds_ > 0 ? train_seconds_ : seconds;
  const std::string line =
      format_progress(total_, total_, seconds, train_seconds / std::max<int64_t>(total_, 1), metrics, interactive_);
  std::fprintf(out_, interactive_ ? "\r%s\x1b[K\n" : "%s\n", line.c_str());
  std::fflush(out_);
}

}  // namespace fp8kit::train

// Training metrics as JSON lines: one object per event (an epoch's losses and accuracies, a test
// evaluation), written through to disk (fsync) as written so a crashed or killed run keeps every
// finished event, and repaired on resume to agree with the checkpoints.
#pragma once

#include <nlohmann/json.hpp>

#include <filesystem>
#include <span>
#include <string_view>
#include <vector>

namespace fp8kit::train {

class MetricsLog {
 public:
  // Creates the parent directory if needed; append=false starts the file afresh. When appending, a
  // last line without its newline (a write cut short by a kill) is dropped, and temporary files a
  // killed forget_epochs_after left beside the log are removed.
  MetricsLog(const std::filesystem::path& path, bool append);
  ~MetricsLog();
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;

  // Writes `event` (a JSON object) as one line and syncs it to disk before returning.
  void write(const nlohmann::json& event);
  // Writes each of `events` as a line, in order, and syncs once.
  void write_all(std::span<const nlohmann::json> events);
  // Holds `event` back until the next write, which puts it first: a run's header line goes in only
  // once the run has something to log, so a run refused before that leaves the log as it was.
  void write_with_next(nlohmann::json event);

  // Removes the "epoch" and "health" events of `precision` numbered after `epoch` (those of epochs whose
  // checkpoint never landed, see train()) and its "test" and "diverged" events (the resumed run
  // writes them again); the file is replaced atomically, and only when one goes.
  void forget_epochs_after(std::string_view precision, int epoch);

  // Whether the log holds an event of `kind` ("test", ...) for `precision`.
  bool holds(std::string_view kind, std::string_view precision) const;

  const std::filesystem::path& path() const { return path_; }

 private:
  void open(bool append);

  std::filesystem::path path_;
  int fd_ = -1;
  std::vector<nlohmann::json> held_;  // by write_with_next
};

}  // namespace fp8kit::train

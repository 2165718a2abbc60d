// Training metrics as JSON lines: one object per event (an epoch's losses and accuracies, a test
// evaluation), flushed as written so a crashed or interrupted run keeps every finished event.
#pragma once

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

namespace fp8kit::train {

class MetricsLog {
 public:
  // Creates the parent directory if needed; append=false starts the file afresh.
  MetricsLog(const std::filesystem::path& path, bool append);

  // Writes `event` (a JSON object) as one line.
  void write(const nlohmann::json& event);

  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  std::ofstream out_;
};

}  // namespace fp8kit::train

// JSON-lines metrics log.
#include "train/metrics_log.h"

#include "base/error.h"

#include <cerrno>
#include <cstring>

namespace fp8kit::train {

MetricsLog::MetricsLog(const std::filesystem::path& path, bool append) : path_(path) {
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path());
  out_.open(path, append ? std::ios::app : std::ios::trunc);
  FP8KIT_CHECK(out_.is_open(), "cannot open the metrics log {}: {}", path.string(), std::strerror(errno));
}

void MetricsLog::write(const nlohmann::json& event) {
  FP8KIT_CHECK(event.is_object(), "a metrics event must be a JSON object, not {}", event.type_name());
  // NaN and inf are not JSON; dump() writes them as null, which readers accept.
  out_ << event.dump() << '\n';
  out_.flush();
  FP8KIT_CHECK(out_.good(), "cannot write the metrics log {}", path_.string());
}

}  // namespace fp8kit::train

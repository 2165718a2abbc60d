// JSON-lines metrics log on a POSIX descriptor (O_APPEND, fsync per event).
#include "train/metrics_log.h"

#include "base/error.h"
#include "io/safetensors.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace fp8kit::train {

namespace {

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  FP8KIT_CHECK(in.is_open(), "cannot read the metrics log {}: {}", path.string(), std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  return std::move(text).str();
}

}  // namespace

MetricsLog::MetricsLog(const std::filesystem::path& path, bool append) : path_(path) {
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path());
  io::remove_stale_temporary_files(path_);
  open(append);
  if (!append) return;
  const off_t size = ::lseek(fd_, 0, SEEK_END);
  FP8KIT_CHECK(size >= 0, "cannot read the metrics log {}: {}", path_.string(), std::strerror(errno));
  if (size == 0) return;
  const std::string text = read_file(path_);
  if (text.ends_with('\n')) return;
  const size_t keep = text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
  FP8KIT_CHECK(::ftruncate(fd_, static_cast<off_t>(keep)) == 0 && ::fsync(fd_) == 0,
               "cannot drop the unfinished last line of the metrics log {}: {}", path_.string(), std::strerror(errno));
}

MetricsLog::~MetricsLog() {
  if (fd_ >= 0) ::close(fd_);
}

void MetricsLog::open(bool append) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | (append ? 0 : O_TRUNC), 0644);
  FP8KIT_CHECK(fd_ >= 0, "cannot open the metrics log {}: {}", path_.string(), std::strerror(errno));
}

void MetricsLog::write(const nlohmann::json& event) { write_all(std::span(&event, 1)); }

void MetricsLog::write_with_next(nlohmann::json event) {
  FP8KIT_CHECK(event.is_object(), "a metrics event must be a JSON object, not {}", event.type_name());
  held_.push_back(std::move(event));
}

void MetricsLog::write_all(std::span<const nlohmann::json> events) {
  std::string lines;  // all in one write, one sync
  for (const nlohmann::json& event : held_) lines += event.dump() + '\n';
  for (const nlohmann::json& event : events) {
    FP8KIT_CHECK(event.is_object(), "a metrics event must be a JSON object, not {}", event.type_name());
    // NaN and inf are not JSON; dump() writes them as null, which readers accept.
    lines += event.dump() + '\n';
  }
  size_t written = 0;
  while (written < lines.size()) {
    const ssize_t n = ::write(fd_, lines.data() + written, lines.size() - written);
    if (n < 0 && errno == EINTR) continue;
    FP8KIT_CHECK(n > 0, "cannot write the metrics log {}: {}", path_.string(), std::strerror(errno));
    written += static_cast<size_t>(n);
  }
  FP8KIT_CHECK(::fsync(fd_) == 0, "cannot flush the metrics log {} to disk: {}", path_.string(),
               std::strerror(errno));
  held_.clear();
}

void MetricsLog::forget_epochs_after(std::string_view precision, int epoch) {
  std::istringstream in(read_file(path_));
  std::string kept;
  bool dropped = false;
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json event = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    // Lines we did not write this way (hand-edited, other fields' types) are kept as they are.
    const nlohmann::json number = event.is_object() ? event.value("epoch", nlohmann::json()) : nlohmann::json();
    const nlohmann::json kind = event.is_object() ? event.value("event", nlohmann::json()) : nlohmann::json();
    const bool ours = event.is_object() && event.value("precision", nlohmann::json()) == precision;
    const bool later_epoch = ours && (kind == "epoch" || kind == "health") && number.is_number_integer() &&
                             number.get<int64_t>() > epoch;
    // The resumed run evaluates the test set again and says again if it diverges: one line of each.
    const bool rewritten = ours && (kind == "test" || kind == "diverged");
    if (later_epoch || rewritten) {
      dropped = true;
    } else {
      kept += line + '\n';
    }
  }
  if (!dropped) return;
  io::write_file_atomically(path_, std::as_bytes(std::span(kept)));
  open(/*append=*/true);  // the old descriptor still points at the replaced file
}

bool MetricsLog::holds(std::string_view kind, std::string_view precision) const {
  std::istringstream in(read_file(path_));
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json event = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (event.is_object() && event.value("event", nlohmann::json()) == kind &&
        event.value("precision", nlohmann::json()) == precision) {
      return true;
    }
  }
  return false;
}

}  // namespace fp8kit::train

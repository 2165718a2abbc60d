// A file mapped read-only into memory (mmap), unmapped when the object goes: large weight files are
// read in place, never copied into memory whole.
#pragma once

#include <cstddef>
#include <filesystem>
#include <memory>
#include <span>
#include <string>

namespace fp8kit::io {

class MappedFile {
 public:
  // Maps `path`. Only regular files are opened (a FIFO, device or directory is refused at once,
  // never waited on); an empty file maps to an empty span. Throws fp8kit::Error naming the path.
  explicit MappedFile(const std::filesystem::path& path);

  // The file's bytes; they stay valid (at the same address) as long as this object, moves included
  // (a moved-from object views nothing).
  // The file must not be truncated while mapped (reading a page past its new end faults); fp8kit's
  // writers replace files by rename, so they never do that.
  std::span<const std::byte> bytes() const {
    return mapping_ ? std::span(static_cast<const std::byte*>(mapping_.get()), size_) : std::span<const std::byte>();
  }
  const std::string& path() const { return path_; }  // as given, for messages

 private:
  struct Unmap {
    size_t size;
    void operator()(void* address) const;
  };
  std::string path_;
  size_t size_ = 0;
  std::unique_ptr<void, Unmap> mapping_;  // null for an empty file
};

}  // namespace fp8kit::io

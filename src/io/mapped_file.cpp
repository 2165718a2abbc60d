// MappedFile: open without blocking, refuse anything but a regular file, map it read-only.
#include "io/mapped_file.h"

#include "base/error.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string_view>

namespace fp8kit::io {

namespace {

// "a FIFO", "a directory", ... for a refusal of a non-regular file.
std::string_view file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

}  // namespace

MappedFile::MappedFile(const std::filesystem::path& path) : path_(path.string()), mapping_(nullptr, Unmap{0}) {
  // O_NONBLOCK: opening a FIFO must not wait for a writer; it is refused below, as every non-regular file is.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  FP8KIT_CHECK(fd >= 0, "cannot open {}: {}", path_, std::strerror(errno));
  struct stat status {};
  const bool stat_ok = ::fstat(fd, &status) == 0;
  const int stat_errno = errno;
  if (!stat_ok || !S_ISREG(status.st_mode)) {
    ::close(fd);
    FP8KIT_CHECK(stat_ok, "cannot read the size of {}: {}", path_, std::strerror(stat_errno));
    fail("{} is {}, not a regular file", path_, file_kind(status.st_mode));
  }
  size_ = static_cast<size_t>(status.st_size);
  void* address = size_ == 0 ? nullptr : ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
  const int map_errno = errno;
  ::close(fd);  // the mapping keeps the file open
  FP8KIT_CHECK(address != MAP_FAILED, "cannot map {} ({} bytes) into memory: {}", path_, size_,
               std::strerror(map_errno));
  mapping_ = {address, Unmap{size_}};
}

void MappedFile::Unmap::operator()(void* address) const { ::munmap(address, size); }

}  // namespace fp8kit::io

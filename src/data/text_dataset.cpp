// Loading class-subdirectory text datasets from directories or archives (libarchive).
#include "data/text_dataset.h"

#include "base/error.h"
#include "text/utf8.h"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>
#define ZLIB_CONST
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <set>
#include <utility>

namespace fp8kit::data {

namespace fs = std::filesystem;

namespace {

// One .txt file found under a dataset root.
struct RawFile {
  std::string class_name;
  std::string dir;   // directory relative to the class folder ("" for files directly in it)
  std::string name;  // file name
  std::string bytes;
};

// What one pass over the source found for one dataset root.
struct RawDataset {
  bool root_found = false;
  std::set<std::string> class_dirs;  // every immediate subdirectory of the root
  std::vector<RawFile> files;
};

bool has_txt_extension(std::string_view name) {
  if (name.size() < 4) return false;
  std::string tail(name.substr(name.size() - 4));
  text::ascii_lowercase(tail);
  return tail == ".txt";
}

// Splits "class/dir/name" into its parts; returns false for paths without a class folder.
bool split_class_path(std::string_view relative, RawFile* file) {
  const size_t first = relative.find('/');
  if (first == std::string_view::npos) return false;
  const size_t last = relative.rfind('/');
  file->class_name = std::string(relative.substr(0, first));
  file->dir = last > first ? std::string(relative.substr(first + 1, last - first - 1)) : std::string();
  file->name = std::string(relative.substr(last + 1));
  return true;
}

// Whether files of `class_name` are wanted (empty selection = all classes).
bool wanted(const TextDatasetOptions& options, const std::string& class_name) {
  return options.class_names.empty() ||
         std::find(options.class_names.begin(), options.class_names.end(), class_name) != options.class_names.end();
}

// What a non-regular, non-directory file is, for messages.
std::string_view kind_of(fs::file_type type) {
  switch (type) {
    case fs::file_type::fifo: return "FIFO";
    case fs::file_type::socket: return "socket";
    case fs::file_type::block:
    case fs::file_type::character: return "device";
    default: return "special file";
  }
}

// An open file descriptor, closed on destruction.
class File {
 public:
  // Opens a regular file for reading; a FIFO, device or socket is refused (without blocking on it).
  explicit File(const fs::path& path) : path_(path.string()) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd_ < 0) fail("cannot read {}: {}", path_, std::strerror(errno));
    struct stat info{};
    const bool statted = ::fstat(fd_, &info) == 0;
    const int stat_error = errno;
    if (statted && S_ISREG(info.st_mode)) {
      size_ = info.st_size;
      return;
    }
    ::close(fd_);
    if (!statted) fail("cannot read {}: {}", path_, std::strerror(stat_error));
    fail("{} is not a regular file: pass a dataset folder or a .tar.gz", path_);
  }
  ~File() { ::close(fd_); }
  File(const File&) = delete;
  File& operator=(const File&) = delete;

  int64_t size() const { return size_; }

  // Reads up to buffer.size() bytes; 0 at the end.
  size_t read(std::span<unsigned char> buffer) {
    while (true) {
      const ssize_t n = ::read(fd_, buffer.data(), buffer.size());
      if (n >= 0) return static_cast<size_t>(n);
      if (errno != EINTR) fail("cannot read {}: {}", path_, std::strerror(errno));
    }
  }

 private:
  std::string path_;
  int fd_ = -1;
  int64_t size_ = 0;
};

[[noreturn]] void fail_too_big(const std::string& where, std::string_view file, int64_t limit) {
  fail("{}: {} is larger than {} bytes, the most read for one text file: is this a text dataset?", where, file, limit);
}

std::string read_whole_file(const fs::path& path, const std::string& where, std::string_view relative,
                            int64_t limit) {
  File file(path);
  if (file.size() > limit) fail_too_big(where, relative, limit);
  std::string bytes(static_cast<size_t>(file.size()), '\0');
  size_t filled = 0;
  while (true) {  // until read() says the end: the file may have grown since fstat
    if (filled == bytes.size()) bytes.resize(std::min<size_t>(filled * 2 + 4096, static_cast<size_t>(limit) + 1));
    const size_t n = file.read({reinterpret_cast<unsigned char*>(bytes.data()) + filled, bytes.size() - filled});
    if (n == 0) break;
    filled += n;
    if (filled > static_cast<size_t>(limit)) fail_too_big(where, relative, limit);
  }
  bytes.resize(filled);
  return bytes;
}

void scan_directory(const fs::path& root, const std::vector<std::string>& subdirs, const TextDatasetOptions& options,
                    std::vector<RawDataset>& raw) {
  for (size_t i = 0; i < subdirs.size(); ++i) {
    const fs::path base = subdirs[i].empty() ? root : root / subdirs[i];
    if (!fs::is_directory(base)) continue;
    raw[i].root_found = true;
    for (const auto& entry : fs::directory_iterator(base)) {
      if (!entry.is_directory()) continue;  // files directly under the root are not examples
      const std::string class_name = entry.path().filename().string();
      raw[i].class_dirs.insert(class_name);
      if (!wanted(options, class_name)) continue;
      for (const auto& file : fs::recursive_directory_iterator(entry.path())) {
        if (!file.is_regular_file() || !has_txt_extension(file.path().filename().string())) continue;
        RawFile raw_file;
        const std::string relative = fs::relative(file.path(), base).generic_string();
        split_class_path(relative, &raw_file);
        raw_file.bytes = read_whole_file(file.path(), root.string(), relative, options.max_file_bytes);
        raw[i].files.push_back(std::move(raw_file));
      }
    }
  }
}

// An archive's bytes, from a file or memory, as libarchive reads them. A gzip stream is decoded
// here by zlib, which checks every member's CRC32 and length: libarchive (3.6) checks neither, and
// stops reading at tar's end marker, so a flipped bit would load silently.
class ArchiveStream {
 public:
  ArchiveStream(std::string name, File* file, std::span<const std::byte> image)
      : name_(std::move(name)), file_(file), image_(image) {
    if (file_) input_.resize(static_cast<size_t>(std::clamp<int64_t>(file_->size(), 1, 1 << 20)));  // small file, small buffer
  }
  ~ArchiveStream() {
    if (gzip_) inflateEnd(&zlib_);
  }
  ArchiveStream(const ArchiveStream&) = delete;
  ArchiveStream& operator=(const ArchiveStream&) = delete;

  const std::string& name() const { return name_; }
  bool gzip() const { return gzip_; }

  // The next bytes of the archive (decoded if gzip), empty at the end; throws fp8kit::Error.
  std::span<const unsigned char> read() {
    if (!started_) start();
    if (!gzip_) return pending_.empty() ? raw_read() : std::exchange(pending_, {});
    while (true) {
      if (zlib_.avail_in == 0) {
        const auto raw = raw_read();
        if (raw.empty()) {
          FP8KIT_CHECK(!in_member_, "{} is truncated or corrupt: its gzip data ends early (download it again)", name_);
          return {};
        }
        zlib_.next_in = raw.data();
        zlib_.avail_in = static_cast<uInt>(raw.size());
      }
      if (!in_member_) {  // more bytes after a member: another member (anything else is corrupt)
        inflateReset(&zlib_);
        in_member_ = true;
      }
      zlib_.next_out = output_.data();
      zlib_.avail_out = static_cast<uInt>(output_.size());
      const int status = inflate(&zlib_, Z_NO_FLUSH);
      if (status == Z_STREAM_END) {
        in_member_ = false;
      } else if (status != Z_OK && status != Z_BUF_ERROR) {
        fail("{} is truncated or corrupt: gzip: {} (download it again)", name_, zlib_.msg ? zlib_.msg : zError(status));
      }
      const size_t n = output_.size() - zlib_.avail_out;
      if (n > 0) return {output_.data(), n};
    }
  }

  // Reads (and so checks) the rest of the stream, which libarchive needs not see.
  void read_to_end() {
    while (!read().empty()) {
    }
  }

  // libarchive's read callback: exceptions may not cross its C frames, so they wait in `error`.
  static la_ssize_t read_callback(archive* reader, void* self, const void** buffer) {
    auto* stream = static_cast<ArchiveStream*>(self);
    try {
      const auto bytes = stream->read();
      *buffer = bytes.data();
      return static_cast<la_ssize_t>(bytes.size());
    } catch (...) {
      stream->error = std::current_exception();
      archive_set_error(reader, EIO, "read error");
      return -1;
    }
  }

  std::exception_ptr error;

 private:
  void start() {
    started_ = true;
    pending_ = raw_read();
    FP8KIT_CHECK(!pending_.empty(), "{} is empty: pass a dataset folder or a .tar.gz (download it again)", name_);
    gzip_ = pending_.size() >= 2 && pending_[0] == 0x1f && pending_[1] == 0x8b;
    if (!gzip_) return;
    FP8KIT_CHECK(inflateInit2(&zlib_, 16 + MAX_WBITS) == Z_OK, "out of memory reading {}", name_);
    output_.resize(1 << 18);
    zlib_.next_in = pending_.data();
    zlib_.avail_in = static_cast<uInt>(pending_.size());
    pending_ = {};
    in_member_ = true;
  }

  // The next undecoded bytes (those of a file valid until the next call).
  std::span<const unsigned char> raw_read() {
    if (file_) return {input_.data(), file_->read(input_)};
    const auto bytes = image_.first(std::min(image_.size(), size_t{1} << 20));  // zlib counts in 32 bits
    image_ = image_.subspan(bytes.size());
    return {reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size()};
  }

  std::string name_;
  File* file_;
  std::span<const std::byte> image_;
  std::vector<unsigned char> input_;
  std::span<const unsigned char> pending_;
  bool started_ = false;
  bool gzip_ = false;
  z_stream zlib_{};
  bool in_member_ = false;
  std::vector<unsigned char> output_;
};

void scan_archive(ArchiveStream& stream, const std::vector<std::string>& subdirs, const TextDatasetOptions& options,
                  std::vector<RawDataset>& raw) {
  std::unique_ptr<archive, decltype(&archive_read_free)> reader(archive_read_new(), archive_read_free);
  FP8KIT_CHECK(reader != nullptr, "out of memory opening {}", stream.name());
  archive_read_support_filter_all(reader.get());
  archive_read_support_format_tar(reader.get());  // (format_all would read a text file as an mtree spec)
  auto reason = [&]() -> std::string {
    if (stream.error) std::rethrow_exception(stream.error);  // our message, not libarchive's "read error"
    const char* text = archive_error_string(reader.get());
    return text ? text : "read error";
  };
  if (archive_read_open(reader.get(), &stream, nullptr, &ArchiveStream::read_callback, nullptr) != ARCHIVE_OK) {
    const std::string why = reason();
    if (stream.gzip()) stream.read_to_end();  // a gzip that decodes to garbage is corrupt, not no archive
    fail("{} is not a .tar.gz or .tar archive ({})", stream.name(), why);
  }
  // Once a call fails (ARCHIVE_RETRY for a damaged header, FAILED, FATAL) the reader is not used again.
  auto corrupt = [&]() { fail("{} is truncated or corrupt: {} (download it again)", stream.name(), reason()); };
  archive_entry* entry = nullptr;
  while (true) {
    const int status = archive_read_next_header(reader.get(), &entry);
    if (status == ARCHIVE_EOF) break;
    if (status != ARCHIVE_OK && status != ARCHIVE_WARN) corrupt();
    std::string_view path = archive_entry_pathname(entry) ? archive_entry_pathname(entry) : "";
    while (path.starts_with("./")) path.remove_prefix(2);
    const bool is_dir = archive_entry_filetype(entry) == AE_IFDIR;
    if (is_dir && path.ends_with('/')) path.remove_suffix(1);
    const bool is_file = archive_entry_filetype(entry) == AE_IFREG;
    std::vector<std::pair<size_t, RawFile>> wanted_by;  // roots that take this file
    for (size_t i = 0; i < subdirs.size(); ++i) {
      std::string_view relative = path;
      if (!subdirs[i].empty()) {
        if (path == subdirs[i]) raw[i].root_found = true;
        if (!(path.starts_with(subdirs[i]) && path.size() > subdirs[i].size() && path[subdirs[i].size()] == '/')) continue;
        relative = path.substr(subdirs[i].size() + 1);
      }
      raw[i].root_found = true;
      if (is_dir) {
        if (!relative.empty() && relative.find('/') == std::string_view::npos) raw[i].class_dirs.insert(std::string(relative));
        continue;
      }
      RawFile file;
      if (!is_file || !split_class_path(relative, &file)) continue;
      raw[i].class_dirs.insert(file.class_name);  // archives may omit directory entries
      if (has_txt_extension(file.name) && wanted(options, file.class_name)) wanted_by.emplace_back(i, std::move(file));
    }
    if (wanted_by.empty()) {
      if (archive_read_data_skip(reader.get()) != ARCHIVE_OK) corrupt();
      continue;
    }
    const int64_t limit = options.max_file_bytes;
    std::string bytes;
    if (archive_entry_size_is_set(entry)) {
      const la_int64_t size = archive_entry_size(entry);
      if (size > limit) fail_too_big(stream.name(), path, limit);
      bytes.reserve(static_cast<size_t>(std::max<la_int64_t>(size, 0)));
    }
    char buffer[1 << 16];
    while (true) {
      const la_ssize_t n = archive_read_data(reader.get(), buffer, sizeof buffer);
      if (n == 0) break;
      if (n < 0) corrupt();
      bytes.append(buffer, static_cast<size_t>(n));
      if (static_cast<int64_t>(bytes.size()) > limit) fail_too_big(stream.name(), path, limit);
    }
    for (auto& [i, file] : wanted_by) {
      file.bytes = bytes;
      raw[i].files.push_back(std::move(file));
    }
  }
  stream.read_to_end();  // past tar's end marker: the rest of the gzip data, its CRC32 and length
}

TextDataset finish(RawDataset raw, const std::string& where, const TextDatasetOptions& options) {
  TextDataset dataset;
  if (options.class_names.empty()) {
    for (const auto& name : raw.class_dirs) {
      if (!name.starts_with('.')) dataset.class_names.push_back(name);  // std::set: sorted byte-wise
    }
    FP8KIT_CHECK(!dataset.class_names.empty(),
                 "{} has no class folders: expected one subdirectory per class holding .txt files "
                 "(e.g. {}/neg/0_3.txt, {}/pos/0_9.txt)",
                 where, where, where);
  } else {
    for (const auto& name : options.class_names) {
      FP8KIT_CHECK(raw.class_dirs.count(name) > 0, "{} has no class folder \"{}\" (found: {})", where, name,
                   fmt::join(raw.class_dirs, ", "));
    }
    dataset.class_names = options.class_names;
  }
  std::map<std::string, int32_t> label_of;
  for (size_t i = 0; i < dataset.class_names.size(); ++i) label_of[dataset.class_names[i]] = static_cast<int32_t>(i);
  std::erase_if(raw.files, [&](const RawFile& f) { return label_of.count(f.class_name) == 0; });
  std::vector<int64_t> files_of(dataset.class_names.size(), 0);
  for (const auto& file : raw.files) ++files_of[label_of[file.class_name]];
  for (size_t i = 0; i < files_of.size(); ++i) {
    FP8KIT_CHECK(files_of[i] > 0, "{}/{} has no .txt files: every class folder needs at least one example", where,
                 dataset.class_names[i]);
  }
  // Keras' order: by class, then directory (os.walk roots sorted), then file name, byte-wise.
  std::sort(raw.files.begin(), raw.files.end(), [&](const RawFile& a, const RawFile& b) {
    const int32_t la = label_of[a.class_name], lb = label_of[b.class_name];
    if (la != lb) return la < lb;
    if (a.dir != b.dir) return a.dir < b.dir;
    return a.name < b.name;
  });
  std::string first_invalid, first_empty;
  for (auto& file : raw.files) {
    std::string relative = file.class_name + "/" + (file.dir.empty() ? "" : file.dir + "/") + file.name;
    int64_t replaced = 0;
    std::string text = text::decode_utf8_lossy(file.bytes, &replaced);
    file.bytes = std::string();
    if (replaced > 0 && dataset.files_with_invalid_utf8++ == 0) first_invalid = relative;
    if (text.empty() && dataset.empty_files++ == 0) first_empty = relative;
    if (options.lowercase) text::ascii_lowercase(text);
    dataset.texts.push_back(std::move(text));
    dataset.labels.push_back(label_of[file.class_name]);
    dataset.paths.push_back(std::move(relative));
  }
  if (options.warn && dataset.files_with_invalid_utf8 > 0) {
    fmt::print(stderr, "warning: {} file(s) in {} are not valid UTF-8 (bad bytes replaced by U+FFFD), first: {}\n",
               dataset.files_with_invalid_utf8, where, first_invalid);
  }
  if (options.warn && dataset.empty_files > 0) {
    fmt::print(stderr, "warning: {} empty file(s) in {}, first: {}\n", dataset.empty_files, where, first_empty);
  }
  return dataset;
}

std::string normalized_subdir(std::string subdir) {
  while (subdir.starts_with("./")) subdir.erase(0, 2);
  while (subdir.ends_with('/')) subdir.pop_back();
  return subdir;
}

std::vector<std::string> normalized_subdirs(const std::vector<std::string>& subdirs, const std::string& name) {
  FP8KIT_CHECK(!subdirs.empty(), "no dataset folders requested from {}", name);
  std::vector<std::string> out;
  for (const auto& s : subdirs) out.push_back(normalized_subdir(s));
  return out;
}

std::vector<TextDataset> finish_all(std::vector<RawDataset> raw, const std::string& name,
                                    const std::vector<std::string>& subdirs, const TextDatasetOptions& options) {
  std::vector<TextDataset> datasets;
  for (size_t i = 0; i < subdirs.size(); ++i) {
    const std::string where = subdirs[i].empty() ? name : name + ":" + subdirs[i];
    FP8KIT_CHECK(raw[i].root_found, "{} has no folder {}", name, subdirs[i]);
    datasets.push_back(finish(std::move(raw[i]), where, options));
  }
  return datasets;
}

}  // namespace

std::vector<TextDataset> load_text_datasets(const fs::path& root, const std::vector<std::string>& subdirs_in,
                                            const TextDatasetOptions& options) {
  const std::vector<std::string> subdirs = normalized_subdirs(subdirs_in, root.string());
  std::error_code error;
  const auto status = fs::status(root, error);
  FP8KIT_CHECK(fs::exists(status), "{} does not exist: pass a dataset directory or a .tar.gz", root.string());
  std::vector<RawDataset> raw(subdirs.size());
  if (fs::is_directory(status)) {
    try {
      scan_directory(root, subdirs, options, raw);
    } catch (const fs::filesystem_error& e) {
      fail("cannot read {}: {}", e.path1().string(), e.code().message());
    }
  } else {
    FP8KIT_CHECK(fs::is_regular_file(status), "{} is a {}, not a dataset folder or a .tar.gz", root.string(),
                 kind_of(status.type()));
    File file(root);
    ArchiveStream stream(root.string(), &file, {});
    scan_archive(stream, subdirs, options, raw);
  }
  return finish_all(std::move(raw), root.string(), subdirs, options);
}

std::vector<TextDataset> load_text_datasets_from_memory(std::span<const std::byte> image, const std::string& name,
                                                        const std::vector<std::string>& subdirs_in,
                                                        const TextDatasetOptions& options) {
  const std::vector<std::string> subdirs = normalized_subdirs(subdirs_in, name);
  std::vector<RawDataset> raw(subdirs.size());
  ArchiveStream stream(name, nullptr, image);
  scan_archive(stream, subdirs, options, raw);
  return finish_all(std::move(raw), name, subdirs, options);
}

TextDataset load_text_dataset(const fs::path& root, const std::string& subdir, const TextDatasetOptions& options) {
  return std::move(load_text_datasets(root, {subdir}, options)[0]);
}

TextDataset select(const TextDataset& dataset, std::span<const int64_t> indices) {
  TextDataset out;
  out.class_names = dataset.class_names;
  out.files_with_invalid_utf8 = dataset.files_with_invalid_utf8;
  out.empty_files = dataset.empty_files;
  const auto n = static_cast<int64_t>(dataset.texts.size());
  for (int64_t i : indices) {
    FP8KIT_CHECK(i >= 0 && i < n, "example index {} outside [0, {})", i, n);
    out.texts.push_back(dataset.texts[i]);
    out.labels.push_back(dataset.labels[i]);
    out.paths.push_back(dataset.paths[i]);
  }
  return out;
}

}  // namespace fp8kit::data

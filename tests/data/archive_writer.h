// Test helper: writes small .tar.gz files (libarchive) and directory trees for dataset tests.
#pragma once

#include <archive.h>
#include <archive_entry.h>

#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace fp8kit::testing {

struct TreeEntry {
  std::string path;      // relative, '/'-separated; a trailing '/' makes a directory
  std::string contents;  // file bytes
};

// Writes `entries` as a ustar archive at `path`, gzip-compressed unless `gzip` is false.
inline void write_tar_gz(const std::filesystem::path& path, const std::vector<TreeEntry>& entries, bool gzip = true) {
  archive* a = archive_write_new();
  if (gzip) archive_write_add_filter_gzip(a);
  archive_write_set_format_pax_restricted(a);
  if (archive_write_open_filename(a, path.c_str()) != ARCHIVE_OK) throw std::runtime_error(archive_error_string(a));
  for (const auto& e : entries) {
    archive_entry* entry = archive_entry_new();
    const bool dir = !e.path.empty() && e.path.back() == '/';
    archive_entry_set_pathname(entry, e.path.c_str());
    archive_entry_set_filetype(entry, dir ? AE_IFDIR : AE_IFREG);
    archive_entry_set_perm(entry, dir ? 0755 : 0644);
    archive_entry_set_size(entry, dir ? 0 : static_cast<la_int64_t>(e.contents.size()));
    archive_write_header(a, entry);
    if (!dir) archive_write_data(a, e.contents.data(), e.contents.size());
    archive_entry_free(entry);
  }
  archive_write_close(a);
  archive_write_free(a);
}

// Overwrites the file at `path` with `bytes`.
inline void write_bytes(const std::filesystem::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

// Creates the same tree under `root`.
inline void write_tree(const std::filesystem::path& root, const std::vector<TreeEntry>& entries) {
  for (const auto& e : entries) {
    const std::filesystem::path p = root / e.path;
    if (!e.path.empty() && e.path.back() == '/') {
      std::filesystem::create_directories(p);
    } else {
      std::filesystem::create_directories(p.parent_path());
      std::ofstream(p, std::ios::binary) << e.contents;
    }
  }
}

}  // namespace fp8kit::testing

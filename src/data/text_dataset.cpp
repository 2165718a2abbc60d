// Loading class-subdirectory text datasets from directories or archives (libarchive).
#include "data/text_dataset.h"

#include "base/error.h"
#include "text/utf8.h"

#include <archive.h>
#include <archive_entry.h>
#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <memory>
#include <set>

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

std::string read_whole_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  FP8KIT_CHECK(in.good(), "cannot read {}", path.string());
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  FP8KIT_CHECK(!in.bad(), "error while reading {}", path.string());
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
        split_class_path(fs::relative(file.path(), base).generic_string(), &raw_file);
        raw_file.bytes = read_whole_file(file.path());
        raw[i].files.push_back(std::move(raw_file));
      }
    }
  }
}

void scan_archive(const fs::path& archive_path, const std::vector<std::string>& subdirs,
                  const TextDatasetOptions& options, std::vector<RawDataset>& raw) {
  std::unique_ptr<archive, decltype(&archive_read_free)> reader(archive_read_new(), archive_read_free);
  FP8KIT_CHECK(reader != nullptr, "out of memory opening {}", archive_path.string());
  archive_read_support_filter_all(reader.get());
  archive_read_support_format_all(reader.get());
  if (archive_read_open_filename(reader.get(), archive_path.c_str(), 1 << 20) != ARCHIVE_OK) {
    fail("cannot read {} as an archive: it is truncated or corrupt, or not a .tar.gz ({})", archive_path.string(),
         archive_error_string(reader.get()));
  }
  auto corrupt = [&]() {
    fail("{} is truncated or corrupt: {} (download it again)", archive_path.string(),
         archive_error_string(reader.get()) ? archive_error_string(reader.get()) : "read error");
  };
  archive_entry* entry = nullptr;
  while (true) {
    const int status = archive_read_next_header(reader.get(), &entry);
    if (status == ARCHIVE_EOF) break;
    if (status < ARCHIVE_WARN) corrupt();
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
      if (archive_read_data_skip(reader.get()) < ARCHIVE_WARN) corrupt();
      continue;
    }
    std::string bytes;
    if (archive_entry_size_is_set(entry)) {  // a header's size is not trusted beyond 64 MiB
      bytes.reserve(static_cast<size_t>(std::clamp<la_int64_t>(archive_entry_size(entry), 0, la_int64_t{1} << 26)));
    }
    char buffer[1 << 16];
    while (true) {
      const la_ssize_t n = archive_read_data(reader.get(), buffer, sizeof buffer);
      if (n == 0) break;
      if (n < 0) corrupt();
      bytes.append(buffer, static_cast<size_t>(n));
    }
    for (auto& [i, file] : wanted_by) {
      file.bytes = bytes;
      raw[i].files.push_back(std::move(file));
    }
  }
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

}  // namespace

std::vector<TextDataset> load_text_datasets(const fs::path& root, const std::vector<std::string>& subdirs_in,
                                            const TextDatasetOptions& options) {
  FP8KIT_CHECK(!subdirs_in.empty(), "no dataset folders requested from {}", root.string());
  std::error_code error;
  const auto status = fs::status(root, error);
  FP8KIT_CHECK(fs::exists(status), "{} does not exist: pass a dataset directory or a .tar.gz", root.string());
  std::vector<std::string> subdirs;
  for (const auto& s : subdirs_in) subdirs.push_back(normalized_subdir(s));
  std::vector<RawDataset> raw(subdirs.size());
  if (fs::is_directory(status)) {
    scan_directory(root, subdirs, options, raw);
  } else {
    scan_archive(root, subdirs, options, raw);
  }
  std::vector<TextDataset> datasets;
  for (size_t i = 0; i < subdirs.size(); ++i) {
    const std::string where = subdirs[i].empty() ? root.string() : root.string() + ":" + subdirs[i];
    FP8KIT_CHECK(raw[i].root_found, "{} has no folder {}", root.string(), subdirs[i]);
    datasets.push_back(finish(std::move(raw[i]), where, options));
  }
  return datasets;
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

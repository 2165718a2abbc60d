// safetensors reading (map the file read-only, validate the header against its size, then view or copy
// out each tensor) and atomic writing.
#include "io/safetensors.h"

#include "base/error.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <bit>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <numeric>
#include <optional>
#include <set>
#include <tuple>

namespace fp8kit::io {

static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian; so is this code");

namespace {

using nlohmann::json;

struct DtypeInfo {
  Dtype dtype;
  std::string_view name;
  size_t size;
};

constexpr std::array<DtypeInfo, 16> kDtypes{{
    {Dtype::Bool, "BOOL", 1},    {Dtype::U8, "U8", 1},   {Dtype::I8, "I8", 1},
    {Dtype::F8_E5M2, "F8_E5M2", 1}, {Dtype::F8_E4M3, "F8_E4M3", 1}, {Dtype::F8_E8M0, "F8_E8M0", 1},
    {Dtype::I16, "I16", 2},      {Dtype::U16, "U16", 2}, {Dtype::F16, "F16", 2},
    {Dtype::BF16, "BF16", 2},    {Dtype::I32, "I32", 4}, {Dtype::U32, "U32", 4},
    {Dtype::F32, "F32", 4},      {Dtype::I64, "I64", 8}, {Dtype::U64, "U64", 8},
    {Dtype::F64, "F64", 8},
}};

const DtypeInfo& info(Dtype dtype) {
  for (const auto& entry : kDtypes) {
    if (entry.dtype == dtype) return entry;
  }
  fail("invalid Dtype value {}", static_cast<int>(dtype));
}

// Headers larger than this are rejected before allocating (the Rust reader's limit).
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

// Shown text longer than this (in bytes of the source) is cut, so a corrupt header cannot flood a message.
constexpr size_t kMaxShownBytes = 200;

// The length of the UTF-8 sequence starting at text[i], or 0 when it is not well-formed (overlong
// forms, surrogates and code points past U+10FFFF included, as Rust's str::from_utf8 rejects them).
size_t utf8_sequence_length(std::string_view text, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char lead = byte(i);
  if (lead < 0x80) return 1;
  size_t length = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // the range of the second byte
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    if (lead == 0xE0) lo = 0xA0;
    if (lead == 0xED) hi = 0x9F;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    if (lead == 0xF0) lo = 0x90;
    if (lead == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if (i + length > text.size() || byte(i + 1) < lo || byte(i + 1) > hi) return 0;
  for (size_t k = 2; k < length; ++k) {
    if (byte(i + k) < 0x80 || byte(i + k) > 0xBF) return 0;
  }
  return length;
}

// Offset of the first byte that does not start a well-formed UTF-8 sequence; npos when all do.
size_t first_invalid_utf8(std::string_view text) {
  for (size_t i = 0; i < text.size();) {
    const size_t length = utf8_sequence_length(text, i);
    if (length == 0) return i;
    i += length;
  }
  return std::string_view::npos;
}

}  // namespace

std::string printable(std::string_view text) {
  std::string shown;
  size_t i = 0;
  while (i < text.size() && i < kMaxShownBytes) {
    const size_t length = utf8_sequence_length(text, i);
    const auto lead = static_cast<unsigned char>(text[i]);
    if (length == 0 || lead < 0x20 || lead == 0x7F || lead == '\\') {
      shown += lead == '\\' ? std::string("\\\\") : fmt::format("\\x{:02X}", lead);
      ++i;
    } else {
      shown.append(text.substr(i, length));
      i += length;
    }
  }
  if (i < text.size()) shown += fmt::format("... ({} bytes)", text.size());
  return shown;
}

namespace {

// Element count of `shape`; nullopt when it overflows 64 bits. Dimensions must be non-negative.
std::optional<uint64_t> element_count(const std::vector<int64_t>& shape) {
  uint64_t count = 1;
  for (int64_t dim : shape) {
    if (__builtin_mul_overflow(count, static_cast<uint64_t>(dim), &count)) return std::nullopt;
  }
  return count;
}

// Checks the header text as the reference (Rust) reader does, and stricter where it would let bytes
// through unparsed: well-formed UTF-8 (no byte-order mark), a JSON object from the first byte, and
// nothing after it but the spaces (0x20) that pad the header to a multiple of 8. nlohmann's parser
// would stop at a NUL byte and ignore what follows, so NUL is refused outright.
void check_header_text(std::string_view text, std::string_view source) {
  const size_t bad = first_invalid_utf8(text);
  FP8KIT_CHECK(bad == std::string_view::npos,
               "{}: the header is not valid UTF-8 (byte \\x{:02X} at offset {}); the file is corrupt or not "
               "safetensors", source, static_cast<unsigned char>(text[bad]), bad);
  const size_t nul = text.find('\0');
  FP8KIT_CHECK(nul == std::string_view::npos, "{}: the header holds a NUL byte at offset {}; the file is corrupt",
               source, nul);
  FP8KIT_CHECK(text.starts_with('{'), "{}: the header must be a JSON object starting with '{{' but starts with \"{}\"",
               source, printable(text.substr(0, 16)));
}

// Parses the header JSON, rejecting a key repeated within one object (nlohmann would keep one silently).
json parse_header_json(std::string_view text, std::string_view source) {
  check_header_text(text, source);
  // Trailing spaces are padding; any other byte after the object makes the JSON parse fail.
  const std::string_view json_text = text.substr(0, text.find_last_not_of(' ') + 1);
  FP8KIT_CHECK(json_text.ends_with('}'),
               "{}: the header must end with the JSON object's '}}' followed only by spaces, but ends with \"{}\"",
               source, printable(json_text.substr(json_text.size() - std::min<size_t>(json_text.size(), 16))));
  std::vector<std::set<std::string>> open_objects;
  auto reject_duplicates = [&](int /*depth*/, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::object_start) {
      open_objects.emplace_back();
    } else if (event == json::parse_event_t::object_end) {
      open_objects.pop_back();
    } else if (event == json::parse_event_t::key) {
      const auto& key = parsed.get_ref<const std::string&>();
      if (!open_objects.back().insert(key).second) {
        fail("{}: the header names \"{}\" twice; every name must be unique", source, printable(key));
      }
    }
    return true;
  };
  try {
    return json::parse(json_text.begin(), json_text.end(), reject_duplicates);
  } catch (const json::exception& e) {
    fail("{}: the header is not valid JSON ({})", source, printable(e.what()));
  }
}

std::vector<int64_t> parse_shape(const json& shape, std::string_view name, std::string_view source) {
  FP8KIT_CHECK(shape.is_array(), "{}: tensor \"{}\" has a \"shape\" that is not an array", source, name);
  std::vector<int64_t> dims;
  for (const json& dim : shape) {
    FP8KIT_CHECK(dim.is_number_unsigned() && dim.get<uint64_t>() <= static_cast<uint64_t>(INT64_MAX),
                 "{}: tensor \"{}\" has a shape entry {} that is not a non-negative integer", source, name,
                 printable(dim.dump()));
    dims.push_back(static_cast<int64_t>(dim.get<uint64_t>()));
  }
  return dims;
}

struct Entry {
  std::string name;
  Dtype dtype;
  std::vector<int64_t> shape;
  uint64_t begin, end;  // relative to the end of the header
};

Entry parse_entry(const std::string& raw_name, const json& value, std::string_view source) {
  const std::string name = printable(raw_name);  // for messages
  FP8KIT_CHECK(value.is_object(), "{}: the header entry \"{}\" is {} but must be an object with dtype, shape and "
               "data_offsets", source, name, value.type_name());
  for (const auto& [key, unused] : value.items()) {
    FP8KIT_CHECK(key == "dtype" || key == "shape" || key == "data_offsets",
                 "{}: tensor \"{}\" has an unexpected field \"{}\" (expected dtype, shape, data_offsets)", source,
                 name, printable(key));
  }
  for (const char* key : {"dtype", "shape", "data_offsets"}) {
    FP8KIT_CHECK(value.contains(key), "{}: tensor \"{}\" has no \"{}\"", source, name, key);
  }
  const json& dtype = value["dtype"];
  FP8KIT_CHECK(dtype.is_string(), "{}: tensor \"{}\" has a \"dtype\" that is not a string", source, name);
  Entry entry{raw_name, Dtype::F32, parse_shape(value["shape"], name, source), 0, 0};
  try {
    entry.dtype = parse_dtype(dtype.get_ref<const std::string&>());
  } catch (const Error& e) {
    fail("{}: tensor \"{}\": {}", source, name, e.what());
  }
  const json& offsets = value["data_offsets"];
  FP8KIT_CHECK(offsets.is_array() && offsets.size() == 2 && offsets[0].is_number_unsigned() &&
                   offsets[1].is_number_unsigned(),
               "{}: tensor \"{}\" has data_offsets {} but needs [begin, end] as two non-negative integers", source,
               name, printable(offsets.dump()));
  entry.begin = offsets[0].get<uint64_t>();
  entry.end = offsets[1].get<uint64_t>();
  FP8KIT_CHECK(entry.begin <= entry.end, "{}: tensor \"{}\" has data_offsets [{}, {}] that end before they begin",
               source, name, entry.begin, entry.end);
  const std::optional<uint64_t> count = element_count(entry.shape);
  uint64_t bytes = 0;
  FP8KIT_CHECK(count && !__builtin_mul_overflow(*count, dtype_size(entry.dtype), &bytes),
               "{}: tensor \"{}\": the byte size of its shape [{}] of {} overflows 64 bits", source, name,
               fmt::join(entry.shape, ", "), dtype_name(entry.dtype));
  FP8KIT_CHECK(entry.end - entry.begin == bytes,
               "{}: tensor \"{}\" has data_offsets [{}, {}] ({} bytes) but its shape [{}] of {} needs {} bytes",
               source, name, entry.begin, entry.end, entry.end - entry.begin, fmt::join(entry.shape, ", "),
               dtype_name(entry.dtype), bytes);
  return entry;
}

Metadata parse_metadata(const json& value, std::string_view source) {
  FP8KIT_CHECK(value.is_object(), "{}: \"__metadata__\" must be an object of strings, not {}", source,
               value.type_name());
  Metadata metadata;
  for (const auto& [key, item] : value.items()) {
    FP8KIT_CHECK(item.is_string(), "{}: \"__metadata__\" value of \"{}\" must be a string, not {}", source,
                 printable(key), item.type_name());
    metadata[key] = item.get<std::string>();
  }
  return metadata;
}

template <typename Tensor>
const Tensor* find_named(const std::vector<Tensor>& tensors, std::string_view name) {
  for (const auto& tensor : tensors) {
    if (tensor.name == name) return &tensor;
  }
  return nullptr;
}

// The view's tensors copied out of the image.
SafetensorsFile to_file(const SafetensorsView& view) {
  SafetensorsFile file{view.metadata, {}};
  for (const TensorView& tensor : view.tensors) {
    file.tensors.push_back(
        StoredTensor{tensor.name, tensor.dtype, tensor.shape, {tensor.data.begin(), tensor.data.end()}});
  }
  return file;
}

uint64_t read_u64_le(std::span<const std::byte> bytes) {
  uint64_t value = 0;
  std::memcpy(&value, bytes.data(), sizeof(value));
  return value;
}

// The file image's metadata and tensors as views into `bytes`, everything validated: sizes are
// checked against the image's size before any tensor byte is touched, and nothing is allocated in
// proportion to the data.
SafetensorsView parse_view(std::span<const std::byte> bytes, std::string_view source) {
  FP8KIT_CHECK(bytes.size() >= 8, "{}: {} bytes is too short for a safetensors file (the header length alone is 8)",
               source, bytes.size());
  const uint64_t header_bytes = read_u64_le(bytes.first(8));
  FP8KIT_CHECK(header_bytes <= bytes.size() - 8,
               "{}: the header length {} runs past the end of the file ({} bytes after the length field); the "
               "file is truncated or not safetensors", source, header_bytes, bytes.size() - 8);
  FP8KIT_CHECK(header_bytes <= kMaxHeaderBytes, "{}: the header length {} exceeds the limit of {} bytes", source,
               header_bytes, kMaxHeaderBytes);
  const auto* header_begin = reinterpret_cast<const char*>(bytes.data() + 8);
  const json header = parse_header_json(std::string_view(header_begin, header_bytes), source);
  FP8KIT_CHECK(header.is_object(), "{}: the header must be a JSON object, not {}", source, header.type_name());

  SafetensorsView view;
  std::vector<Entry> entries;
  for (const auto& [name, value] : header.items()) {
    if (name == "__metadata__") {
      view.metadata = parse_metadata(value, source);
    } else {
      entries.push_back(parse_entry(name, value, source));
    }
  }

  // The data section must be covered exactly: sorted by offset, each tensor starts where the previous ended.
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
  });
  const uint64_t data_bytes = bytes.size() - 8 - header_bytes;
  uint64_t covered = 0;
  const Entry* previous = nullptr;
  for (const Entry& entry : entries) {
    FP8KIT_CHECK(entry.end <= data_bytes,
                 "{}: tensor \"{}\" has data_offsets [{}, {}] that run past the end of the data ({} bytes)", source,
                 printable(entry.name), entry.begin, entry.end, data_bytes);
    FP8KIT_CHECK(entry.begin >= covered, "{}: tensors \"{}\" and \"{}\" overlap (bytes {}..{} and {}..{})", source,
                 previous ? printable(previous->name) : "", printable(entry.name), previous ? previous->begin : 0,
                 covered, entry.begin, entry.end);
    FP8KIT_CHECK(entry.begin == covered, "{}: a gap of {} unused data bytes precedes tensor \"{}\" (at offset {})",
                 source, entry.begin - covered, printable(entry.name), covered);
    covered = entry.end;
    previous = &entry;
  }
  FP8KIT_CHECK(covered == data_bytes, "{}: {} bytes after the last tensor belong to no tensor", source,
               data_bytes - covered);

  const std::span<const std::byte> data = bytes.subspan(8 + header_bytes);
  for (Entry& entry : entries) {
    view.tensors.push_back(TensorView{std::move(entry.name), entry.dtype, std::move(entry.shape),
                                      data.subspan(entry.begin, entry.end - entry.begin)});
  }
  return view;
}

std::filesystem::path parent_directory(const std::filesystem::path& path) {
  return path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
}

// write_file_atomically's temporary files for `path` are this prefix and mkstemp's six characters.
std::string temporary_prefix(const std::filesystem::path& path) {
  return fmt::format(".{}.tmp-", path.filename().string());
}

// Closes the descriptor and removes the temporary file unless released (on success).
struct TempFile {
  std::string path;
  int fd = -1;
  bool keep = false;
  ~TempFile() {
    if (fd >= 0) ::close(fd);
    if (!keep) ::unlink(path.c_str());
  }
};

}  // namespace

std::string_view dtype_name(Dtype dtype) { return info(dtype).name; }
size_t dtype_size(Dtype dtype) { return info(dtype).size; }

Dtype parse_dtype(std::string_view name) {
  for (const auto& entry : kDtypes) {
    if (entry.name == name) return entry.dtype;
  }
  std::vector<std::string_view> names;
  for (const auto& entry : kDtypes) names.push_back(entry.name);
  fail("unknown dtype \"{}\" (supported: {})", printable(name), fmt::join(names, " "));
}

int64_t StoredTensor::element_count() const {
  return std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<>());
}

std::vector<float> StoredTensor::to_f32() const {
  FP8KIT_CHECK(dtype == Dtype::F32, "tensor \"{}\" is {}, expected F32", name, dtype_name(dtype));
  std::vector<float> values(data.size() / sizeof(float));
  if (!values.empty()) std::memcpy(values.data(), data.data(), values.size() * sizeof(float));
  return values;
}

StoredTensor f32_tensor(std::string name, std::vector<int64_t> shape, std::span<const float> values) {
  StoredTensor tensor{std::move(name), Dtype::F32, std::move(shape), {}};
  FP8KIT_CHECK(tensor.element_count() == static_cast<int64_t>(values.size()),
               "tensor \"{}\": shape [{}] holds {} values but {} were given", tensor.name,
               fmt::join(tensor.shape, ", "), tensor.element_count(), values.size());
  tensor.data.resize(values.size_bytes());
  if (!values.empty()) std::memcpy(tensor.data.data(), values.data(), values.size_bytes());
  return tensor;
}

const StoredTensor* SafetensorsFile::find(std::string_view name) const { return find_named(tensors, name); }
const TensorView* SafetensorsView::find(std::string_view name) const { return find_named(tensors, name); }

SafetensorsFile parse_safetensors(std::span<const std::byte> bytes, std::string_view source) {
  return to_file(parse_view(bytes, source));
}

MappedSafetensors::MappedSafetensors(const std::filesystem::path& path)
    : file_(path), view_(parse_view(file_.bytes(), file_.path())) {}

SafetensorsFile read_safetensors(const std::filesystem::path& path) {
  return to_file(MappedSafetensors(path).view());
}

void check_tensor_bytes(const TensorView& tensor) {
  FP8KIT_CHECK(std::ranges::all_of(tensor.shape, [](int64_t dim) { return dim >= 0; }),
               "tensor \"{}\" has a negative dimension in its shape [{}]", tensor.name, fmt::join(tensor.shape, ", "));
  const std::optional<uint64_t> count = element_count(tensor.shape);
  uint64_t expected = 0;
  FP8KIT_CHECK(count && !__builtin_mul_overflow(*count, dtype_size(tensor.dtype), &expected),
               "tensor \"{}\": the byte size of its shape [{}] overflows 64 bits", tensor.name,
               fmt::join(tensor.shape, ", "));
  FP8KIT_CHECK(tensor.data.size() == expected, "tensor \"{}\" holds {} bytes but shape [{}] of {} needs {}",
               tensor.name, tensor.data.size(), fmt::join(tensor.shape, ", "), dtype_name(tensor.dtype), expected);
}

namespace {

// A file image in pieces: the length field and padded header, then each tensor's bytes in file order.
struct Layout {
  std::vector<std::byte> header;
  std::vector<std::span<const std::byte>> data;
};

// Tensors ordered by dtype size (largest first) then name, each starting aligned to its element size.
Layout layout(const Metadata& metadata, std::span<const TensorView> tensors) {
  std::vector<const TensorView*> order;
  std::set<std::string_view> names;
  for (const auto& tensor : tensors) {
    FP8KIT_CHECK(tensor.name != "__metadata__", "\"__metadata__\" is reserved and cannot name a tensor");
    FP8KIT_CHECK(names.insert(tensor.name).second, "two tensors are named \"{}\"; names must be unique", tensor.name);
    check_tensor_bytes(tensor);
    order.push_back(&tensor);
  }
  std::sort(order.begin(), order.end(), [](const TensorView* a, const TensorView* b) {
    const size_t size_a = dtype_size(a->dtype), size_b = dtype_size(b->dtype);
    return size_a != size_b ? size_a > size_b : a->name < b->name;
  });

  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  Layout result;
  for (const TensorView* tensor : order) {
    header[tensor->name] = {{"dtype", dtype_name(tensor->dtype)},
                            {"shape", tensor->shape},
                            {"data_offsets", {offset, offset + tensor->data.size()}}};
    offset += tensor->data.size();
    result.data.push_back(tensor->data);
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const json::exception& e) {
    fail("cannot write the safetensors header ({}); names and metadata must be valid UTF-8", e.what());
  }
  text.append((8 - text.size() % 8) % 8, ' ');
  result.header.resize(8 + text.size());
  const uint64_t header_bytes = text.size();
  std::memcpy(result.header.data(), &header_bytes, 8);
  std::memcpy(result.header.data() + 8, text.data(), text.size());
  return result;
}

std::vector<TensorView> views_of(const SafetensorsFile& file) {
  std::vector<TensorView> views;
  for (const StoredTensor& tensor : file.tensors) {
    views.push_back({tensor.name, tensor.dtype, tensor.shape, tensor.data});
  }
  return views;
}

}  // namespace

std::vector<std::byte> serialize_safetensors(const SafetensorsFile& file) {
  const Layout image = layout(file.metadata, views_of(file));
  std::vector<std::byte> bytes = image.header;
  for (std::span<const std::byte> data : image.data) bytes.insert(bytes.end(), data.begin(), data.end());
  return bytes;
}

void write_safetensors(const std::filesystem::path& path, const SafetensorsFile& file) {
  write_safetensors(path, file.metadata, views_of(file));
}

void write_safetensors(const std::filesystem::path& path, const Metadata& metadata,
                       std::span<const TensorView> tensors) {
  const Layout image = layout(metadata, tensors);
  std::vector<std::span<const std::byte>> pieces{image.header};
  pieces.insert(pieces.end(), image.data.begin(), image.data.end());
  write_file_atomically(path, pieces);
}

void write_file_atomically(const std::filesystem::path& path, std::span<const std::byte> bytes) {
  write_file_atomically(path, std::span(&bytes, 1));
}

void write_file_atomically(const std::filesystem::path& path, std::span<const std::span<const std::byte>> pieces) {
  const std::filesystem::path dir = parent_directory(path);
  TempFile temp{(dir / (temporary_prefix(path) + "XXXXXX")).string()};
  temp.fd = ::mkstemp(temp.path.data());
  if (temp.fd < 0) {
    temp.keep = true;  // nothing was created
    fail("cannot create a temporary file in {} to write {}: {}", dir.string(), path.string(), std::strerror(errno));
  }
  ::fchmod(temp.fd, 0644);
  for (std::span<const std::byte> bytes : pieces) {
    size_t written = 0;
    while (written < bytes.size()) {
      const ssize_t n = ::write(temp.fd, bytes.data() + written, bytes.size() - written);
      if (n < 0 && errno == EINTR) continue;
      FP8KIT_CHECK(n > 0, "cannot write {}: {}", path.string(), std::strerror(errno));
      written += static_cast<size_t>(n);
    }
  }
  FP8KIT_CHECK(::fsync(temp.fd) == 0, "cannot flush {} to disk: {}", path.string(), std::strerror(errno));
  const int fd = temp.fd;
  temp.fd = -1;
  FP8KIT_CHECK(::close(fd) == 0, "cannot write {}: {}", path.string(), std::strerror(errno));
  FP8KIT_CHECK(::rename(temp.path.c_str(), path.c_str()) == 0, "cannot replace {}: {}", path.string(),
               std::strerror(errno));
  temp.keep = true;
  // Make the rename itself durable.
  const int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (dir_fd >= 0) {
    ::fsync(dir_fd);
    ::close(dir_fd);
  }
}

std::vector<std::filesystem::path> stale_temporary_files(const std::filesystem::path& path) {
  const std::string prefix = temporary_prefix(path);
  std::vector<std::filesystem::path> found;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(parent_directory(path), error)) {
    const std::string name = entry.path().filename().string();
    const bool ours = name.size() == prefix.size() + 6 && name.starts_with(prefix) &&
                      std::all_of(name.begin() + prefix.size(), name.end(),
                                  [](char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; });
    std::error_code ignored;
    if (ours && entry.is_regular_file(ignored) && !entry.is_symlink(ignored)) found.push_back(entry.path());
  }
  return found;  // a directory that cannot be listed holds none we could remove
}

size_t remove_stale_temporary_files(const std::filesystem::path& path) {
  size_t removed = 0;
  for (const std::filesystem::path& stale : stale_temporary_files(path)) {
    std::error_code error;
    removed += std::filesystem::remove(stale, error);
  }
  return removed;
}

}  // namespace fp8kit::io

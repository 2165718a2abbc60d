// safetensors files (the Hugging Face format): an 8-byte little-endian header length, a JSON
// header naming each tensor's dtype, shape and byte range, then the raw little-endian tensor bytes.
// The reader validates everything before trusting it; the writer replaces files atomically.
#pragma once

#include "io/mapped_file.h"

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace fp8kit::io {

// Element types of the format whose elements are whole bytes (sub-byte F4/F6 are not supported).
enum class Dtype { Bool, U8, I8, F8_E5M2, F8_E4M3, F8_E8M0, I16, U16, F16, BF16, I32, U32, F32, I64, U64, F64 };

std::string_view dtype_name(Dtype dtype);  // the header's spelling: "F32", "F8_E4M3", ...
Dtype parse_dtype(std::string_view name);  // throws on names the format does not define or we do not support
size_t dtype_size(Dtype dtype);            // bytes per element

struct StoredTensor {
  std::string name;
  Dtype dtype = Dtype::F32;
  std::vector<int64_t> shape;   // row-major; {} is a scalar
  std::vector<std::byte> data;  // little-endian, tightly packed: element_count(shape) * dtype_size bytes

  int64_t element_count() const;
  // The data as floats; the dtype must be F32.
  std::vector<float> to_f32() const;
};

// A float32 tensor holding `values` (copied) with the given shape.
StoredTensor f32_tensor(std::string name, std::vector<int64_t> shape, std::span<const float> values);

using Metadata = std::map<std::string, std::string>;  // the header's "__metadata__" (string -> string)

struct SafetensorsFile {
  Metadata metadata;
  std::vector<StoredTensor> tensors;  // in file order (ascending data offset)

  // nullptr when absent.
  const StoredTensor* find(std::string_view name) const;
};

// A tensor's header entry and its bytes inside a file image (or mapping) that outlives the view.
struct TensorView {
  std::string name;
  Dtype dtype = Dtype::F32;
  std::vector<int64_t> shape;
  std::span<const std::byte> data;
};

struct SafetensorsView {
  Metadata metadata;
  std::vector<TensorView> tensors;  // in file order (ascending data offset)

  // nullptr when absent.
  const TensorView* find(std::string_view name) const;
};

// A safetensors file mapped read-only, never read into memory whole: the 8-byte length and the
// header are checked against the file's size before any tensor byte is touched. Only regular files
// are opened (a FIFO, device or directory is refused at once, never waited on). Views live as long
// as this object.
class MappedSafetensors {
 public:
  explicit MappedSafetensors(const std::filesystem::path& path);

  const SafetensorsView& view() const { return view_; }
  const std::string& source() const { return file_.path(); }  // the path, for messages

 private:
  MappedFile file_;
  SafetensorsView view_;
};

// Parses a whole file image. Throws fp8kit::Error naming the problem (and `source`, e.g. the path).
SafetensorsFile parse_safetensors(std::span<const std::byte> bytes, std::string_view source = "safetensors data");
// Maps the file (as MappedSafetensors) and copies its tensors out.
SafetensorsFile read_safetensors(const std::filesystem::path& path);

// `text` (header-derived: a name, a key, a value) made safe to print in a message: control bytes,
// backslashes and bytes that are not well-formed UTF-8 escaped as \xNN (\\), and cut after 200 bytes.
std::string printable(std::string_view text);

// Throws unless the shape is non-negative and `data` holds exactly the bytes it needs in `dtype`
// (the message names the tensor). The writers check every tensor so.
void check_tensor_bytes(const TensorView& tensor);

// The file image: tensors ordered by dtype size (largest first) then name, so each tensor's data
// starts aligned to its element size; the header is space-padded to a multiple of 8 bytes, as the
// Python package writes it. Rejects duplicate names, the reserved name "__metadata__", and data
// sizes that disagree with the shape.
std::vector<std::byte> serialize_safetensors(const SafetensorsFile& file);
// Writes atomically: a temporary file in the same directory, fsync, rename over `path`, fsync of the
// directory. A crash leaves either the old file or the new one, never a partial file.
void write_safetensors(const std::filesystem::path& path, const SafetensorsFile& file);
// The same from views of the tensors' bytes, written straight from them: no image of the file is
// built in memory, so saving large weights needs no second copy of them.
void write_safetensors(const std::filesystem::path& path, const Metadata& metadata,
                       std::span<const TensorView> tensors);

// Writes `bytes` to `path` with the same atomic replace. The temporary file is named
// ".<file name>.tmp-XXXXXX" (mkstemp's six characters) beside `path`.
void write_file_atomically(const std::filesystem::path& path, std::span<const std::byte> bytes);
// The same for the concatenation of `pieces`, written one after another.
void write_file_atomically(const std::filesystem::path& path, std::span<const std::span<const std::byte>> pieces);

// The temporary files of write_file_atomically(path) that a kill mid-write left behind: regular
// files named exactly ".<file name>.tmp-" and six letters or digits, in path's directory.
std::vector<std::filesystem::path> stale_temporary_files(const std::filesystem::path& path);
// Removes them (nothing else); returns how many. No writer of `path` may be running.
size_t remove_stale_temporary_files(const std::filesystem::path& path);

}  // namespace fp8kit::io

// safetensors: round trips of every dtype, a file written by Python's `safetensors` package, and
// every malformed case the reader must reject (files built byte by byte).
#include "io/safetensors.h"

#include "base/error.h"
#include "common/temp_dir.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include <sys/stat.h>

namespace fp8kit::io {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::vector<std::byte> to_bytes(std::string_view text) {
  std::vector<std::byte> bytes(text.size());
  if (!text.empty()) std::memcpy(bytes.data(), text.data(), text.size());
  return bytes;
}

// A file image: the 8-byte length of `header`, `header`, then `data_bytes` bytes of data.
std::vector<std::byte> make_file(std::string_view header, size_t data_bytes, uint64_t declared_length = ~0ull) {
  const uint64_t length = declared_length == ~0ull ? header.size() : declared_length;
  std::vector<std::byte> bytes(8);
  std::memcpy(bytes.data(), &length, 8);
  const auto text = to_bytes(header);
  bytes.insert(bytes.end(), text.begin(), text.end());
  bytes.resize(bytes.size() + data_bytes, std::byte{0x5a});
  return bytes;
}

std::string parse_error(const std::vector<std::byte>& bytes) {
  try {
    parse_safetensors(bytes, "test.safetensors");
  } catch (const Error& e) {
    return e.what();
  }
  return "(accepted)";
}

std::string read_error(const std::filesystem::path& path) {
  try {
    read_safetensors(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "(accepted)";
}

TEST(Safetensors, EveryDtypeRoundTrips) {
  const std::vector<Dtype> all{Dtype::Bool, Dtype::U8,   Dtype::I8,  Dtype::F8_E5M2, Dtype::F8_E4M3, Dtype::F8_E8M0,
                               Dtype::I16,  Dtype::U16,  Dtype::F16, Dtype::BF16,    Dtype::I32,     Dtype::U32,
                               Dtype::F32,  Dtype::I64,  Dtype::U64, Dtype::F64};
  SafetensorsFile file;
  for (Dtype dtype : all) {
    EXPECT_EQ(parse_dtype(dtype_name(dtype)), dtype);
    StoredTensor tensor{std::string(dtype_name(dtype)) + ".t", dtype, {2, 3}, {}};
    tensor.data.resize(6 * dtype_size(dtype));
    for (size_t i = 0; i < tensor.data.size(); ++i) tensor.data[i] = std::byte(i * 37 + tensor.name.size());
    file.tensors.push_back(tensor);
  }
  const auto bytes = serialize_safetensors(file);
  const uint64_t header_length = [&] { uint64_t n; std::memcpy(&n, bytes.data(), 8); return n; }();
  EXPECT_EQ(header_length % 8, 0u);
  const SafetensorsFile back = parse_safetensors(bytes);
  ASSERT_EQ(back.tensors.size(), all.size());
  for (const auto& tensor : file.tensors) {
    const StoredTensor* read = back.find(tensor.name);
    ASSERT_NE(read, nullptr) << tensor.name;
    EXPECT_EQ(read->dtype, tensor.dtype);
    EXPECT_EQ(read->shape, tensor.shape);
    EXPECT_EQ(read->data, tensor.data);
  }
  // File order is by element size, largest first, so every tensor starts aligned to its element size.
  for (size_t i = 1; i < back.tensors.size(); ++i) {
    EXPECT_GE(dtype_size(back.tensors[i - 1].dtype), dtype_size(back.tensors[i].dtype));
  }
}

TEST(Safetensors, MetadataScalarsAndEmptyTensorsRoundTrip) {
  SafetensorsFile file;
  file.metadata = {{"step", "42"}, {"config", R"({"a": 1})"}, {"unicode", "\xc3\xa9t\xc3\xa9"}};
  const float scale = 0.5f;
  file.tensors.push_back(f32_tensor("scale", {}, std::span(&scale, 1)));
  file.tensors.push_back(f32_tensor("empty", {0, 4}, {}));
  file.tensors.push_back(f32_tensor("also_empty", {3, 0}, {}));
  const SafetensorsFile back = parse_safetensors(serialize_safetensors(file));
  EXPECT_EQ(back.metadata, file.metadata);
  ASSERT_NE(back.find("scale"), nullptr);
  EXPECT_TRUE(back.find("scale")->shape.empty());
  EXPECT_EQ(back.find("scale")->to_f32(), std::vector<float>{0.5f});
  EXPECT_EQ(back.find("empty")->shape, (std::vector<int64_t>{0, 4}));
  EXPECT_TRUE(back.find("also_empty")->data.empty());
  EXPECT_EQ(back.find("missing"), nullptr);

  EXPECT_EQ(parse_safetensors(serialize_safetensors(SafetensorsFile{})).tensors.size(), 0u);
}

TEST(Safetensors, ReadsAFileWrittenByPythonSafetensors) {
  // Written by safetensors 0.8.0 (safetensors.numpy.save) with numpy 2.4.
  const SafetensorsFile file = read_safetensors(FP8KIT_SOURCE_DIR "/tests/io/data/python_written.safetensors");
  EXPECT_EQ(file.metadata, (Metadata{{"format", "np"}, {"note", "fixture"}}));
  ASSERT_EQ(file.tensors.size(), 7u);
  EXPECT_EQ(file.find("weight")->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(file.find("weight")->to_f32(), (std::vector<float>{1.5f, -2.25f, 3.0f, 0.0f, 1e-3f, -7.5f}));
  EXPECT_EQ(file.find("scalar")->to_f32(), std::vector<float>{0.25f});
  EXPECT_EQ(file.find("empty")->shape, (std::vector<int64_t>{0, 4}));

  const StoredTensor& ids = *file.find("ids");
  EXPECT_EQ(ids.dtype, Dtype::I64);
  int64_t id_values[3];
  std::memcpy(id_values, ids.data.data(), sizeof(id_values));
  EXPECT_EQ(id_values[0], 1);
  EXPECT_EQ(id_values[1], -2);
  EXPECT_EQ(id_values[2], 3000000000);

  const StoredTensor& half = *file.find("half");
  EXPECT_EQ(half.dtype, Dtype::F16);
  uint16_t half_bits[3];
  std::memcpy(half_bits, half.data.data(), sizeof(half_bits));
  EXPECT_EQ(half_bits[0], 0x3c00);  // 1.0
  EXPECT_EQ(half_bits[1], 0xb800);  // -0.5
  EXPECT_EQ(half_bits[2], 0x7bff);  // 65504

  int32_t counts[2];
  std::memcpy(counts, file.find("counts")->data.data(), sizeof(counts));
  EXPECT_EQ(counts[0], 7);
  EXPECT_EQ(counts[1], -8);
  EXPECT_EQ(file.find("bytes")->data, (std::vector<std::byte>{std::byte{0}, std::byte{255}, std::byte{17}}));
}

TEST(Safetensors, AcceptsAHandBuiltFile) {
  EXPECT_EQ(parse_error(make_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 8)), "(accepted)");
  // Header padding with spaces, as the Python writer adds.
  EXPECT_EQ(parse_error(make_file(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}   )", 1)), "(accepted)");
}

TEST(Safetensors, RejectsTruncatedFilesAndHeaderLengthsBeyondTheFile) {
  EXPECT_THAT(parse_error(to_bytes("abc")), HasSubstr("too short"));
  EXPECT_THAT(parse_error(make_file("{}", 0, 1000)), HasSubstr("runs past the end of the file"));
  EXPECT_THAT(parse_error(make_file("{}", 0, ~0ull - 1)), HasSubstr("runs past the end of the file"));
}

TEST(Safetensors, RejectsInvalidJson) {
  EXPECT_THAT(parse_error(make_file(R"({"a": })", 0)), HasSubstr("not valid JSON"));
  EXPECT_THAT(parse_error(make_file("", 0)), HasSubstr("must be a JSON object starting with '{'"));
  EXPECT_THAT(parse_error(make_file("{\"\xff\": 1}", 0)), HasSubstr("not valid UTF-8 (byte \\xFF at offset 2)"));
  EXPECT_THAT(parse_error(make_file("[1, 2]", 0)), HasSubstr("must be a JSON object starting with '{'"));
}

// As strict as the reference (Rust) reader: UTF-8, '{' first, and only space padding after the object.
TEST(Safetensors, RejectsHeadersTheReferenceReaderRejects) {
  const std::string object = R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})";
  EXPECT_EQ(parse_error(make_file(object + "     ", 1)), "(accepted)");
  EXPECT_THAT(parse_error(make_file("\xEF\xBB\xBF" + object, 1)), HasSubstr("starting with '{'"));
  EXPECT_THAT(parse_error(make_file(" " + object, 1)), HasSubstr("starting with '{'"));
  EXPECT_THAT(parse_error(make_file(object + std::string("\0\0", 2), 1)), HasSubstr("NUL byte at offset 53"));
  EXPECT_THAT(parse_error(make_file(object + std::string("\0junk", 5), 1)), HasSubstr("NUL byte"));
  EXPECT_THAT(parse_error(make_file(object + " x", 1)), HasSubstr("followed only by spaces"));
  EXPECT_THAT(parse_error(make_file(object + "\n", 1)), HasSubstr("followed only by spaces"));
  EXPECT_THAT(parse_error(make_file(object + "{}", 1)), HasSubstr("not valid JSON"));
  // Surrogates and overlong forms are not UTF-8 either.
  EXPECT_THAT(parse_error(make_file("{\"\xED\xA0\x80\": 1}", 0)), HasSubstr("not valid UTF-8"));
  EXPECT_THAT(parse_error(make_file("{\"\xC0\xAF\": 1}", 0)), HasSubstr("not valid UTF-8"));
  EXPECT_EQ(parse_error(make_file(R"({"\u00e9\u4e2d":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})", 1)),
            "(accepted)");
}

// Header text echoed in a message is escaped and cut short: a corrupt file cannot put raw bytes or
// megabytes into the one-line error.
TEST(Safetensors, EscapesAndCapsHeaderTextInMessages) {
  const std::string message =
      parse_error(make_file(R"({"a":{"dtype":"\u0001\u007f\\)" + std::string(5000, 'Z') +
                                R"(","shape":[1],"data_offsets":[0,1]}})", 1));
  EXPECT_THAT(message, HasSubstr("unknown dtype \"\\x01\\x7F\\\\ZZZ"));
  EXPECT_THAT(message, HasSubstr("... (5003 bytes)"));
  EXPECT_LT(message.size(), 700u);
  EXPECT_EQ(printable("caf\xC3\xA9 \xFF\n"), "caf\xC3\xA9 \\xFF\\x0A");
  // nlohmann's own message quotes what it read last; it is escaped too.
  EXPECT_THAT(parse_error(make_file("{\"a\x01\": 1}", 0)), Not(HasSubstr("\x01")));
}

TEST(Safetensors, ReadsOnlyRegularFilesAndNeverWaitsOnAFifo) {
  const testing::TempDir dir("safetensors");
  const auto fifo = dir.path() / "fifo.safetensors";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_THAT(read_error(fifo), HasSubstr(fifo.string() + " is a FIFO, not a regular file"));
  EXPECT_THAT(read_error(dir.path()), HasSubstr(dir.path().string() + " is a directory, not a regular file"));
  EXPECT_THAT(read_error("/dev/zero"), HasSubstr("/dev/zero is a character device, not a regular file"));
  const auto empty = dir.path() / "empty.safetensors";
  std::ofstream(empty).close();
  EXPECT_THAT(read_error(empty), HasSubstr(empty.string() + ": 0 bytes is too short"));
}

// The header is checked against the file's size before anything is read in proportion to the file:
// a huge sparse file is refused at once, not read into memory.
TEST(Safetensors, RefusesAHugeSparseFileWithoutReadingIt) {
  const testing::TempDir dir("safetensors");
  const auto path = dir.path() / "huge.safetensors";
  std::ofstream(path).close();
  std::error_code error;
  std::filesystem::resize_file(path, uint64_t{1} << 40, error);  // 1 TiB of holes
  if (error) GTEST_SKIP() << "this file system has no sparse files: " << error.message();
  EXPECT_THAT(read_error(path), HasSubstr(path.string() + ": the header must be a JSON object"));
}

TEST(Safetensors, RejectsUnknownDtypes) {
  EXPECT_THAT(parse_error(make_file(R"({"a":{"dtype":"F128","shape":[1],"data_offsets":[0,16]}})", 16)),
              HasSubstr("unknown dtype \"F128\""));
  EXPECT_THAT(parse_error(make_file(R"({"a":{"dtype":7,"shape":[1],"data_offsets":[0,4]}})", 4)),
              HasSubstr("not a string"));
}

TEST(Safetensors, RejectsOverlapsGapsAndOffsetsPastTheFile) {
  EXPECT_THAT(parse_error(make_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                    R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", 12)),
              HasSubstr("overlap"));
  EXPECT_THAT(parse_error(make_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                                    R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})", 12)),
              HasSubstr("gap of 4"));
  EXPECT_THAT(parse_error(make_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8)),
              HasSubstr("gap of 4"));
  EXPECT_THAT(parse_error(make_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 4)),
              HasSubstr("run past the end"));
  EXPECT_THAT(parse_error(make_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 6)),
              HasSubstr("2 bytes after the last tensor"));
  EXPECT_THAT(parse_error(make_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}})", 4)),
              HasSubstr("end before they begin"));
  EXPECT_THAT(parse_error(make_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", 4)),
              HasSubstr("two non-negative integers"));
}

TEST(Safetensors, RejectsOffsetsThatDisagreeWithShapeAndDtype) {
  EXPECT_THAT(parse_error(make_file(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8)),
              HasSubstr("needs 12 bytes"));
  EXPECT_THAT(parse_error(make_file(R"({"a":{"dtype":"BF16","shape":[2,2],"data_offsets":[0,4]}})", 4)),
              HasSubstr("needs 8 bytes"));
  EXPECT_THAT(parse_error(make_file(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4)),
              HasSubstr("not a non-negative integer"));
  EXPECT_THAT(parse_error(make_file(R"({"a":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})", 4)),
              HasSubstr("not a non-negative integer"));
  EXPECT_THAT(parse_error(make_file(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],)"
                                    R"("data_offsets":[0,4]}})", 4)),
              HasSubstr("test.safetensors: tensor \"a\": the byte size of its shape [4294967296, 4294967296] of F32 "
                        "overflows 64 bits"));
}

TEST(Safetensors, RejectsDuplicateNames) {
  EXPECT_THAT(parse_error(make_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                                    R"("a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8)),
              HasSubstr("names \"a\" twice"));
  EXPECT_THAT(parse_error(make_file(R"({"a":{"dtype":"F32","dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 4)),
              HasSubstr("names \"dtype\" twice"));
  EXPECT_THAT(parse_error(make_file(R"({"__metadata__":{"k":"1","k":"2"}})", 0)), HasSubstr("names \"k\" twice"));
}

TEST(Safetensors, RejectsMalformedEntriesAndMetadata) {
  EXPECT_THAT(parse_error(make_file(R"({"a":[1,2]})", 0)), HasSubstr("must be an object"));
  EXPECT_THAT(parse_error(make_file(R"({"a":{"dtype":"F32","shape":[1]}})", 4)), HasSubstr("no \"data_offsets\""));
  EXPECT_THAT(parse_error(make_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":1}})", 4)),
              HasSubstr("unexpected field \"x\""));
  EXPECT_THAT(parse_error(make_file(R"({"a":{"dtype":"F32","shape":1,"data_offsets":[0,4]}})", 4)),
              HasSubstr("not an array"));
  EXPECT_THAT(parse_error(make_file(R"({"__metadata__":{"k":1}})", 0)), HasSubstr("must be a string"));
  EXPECT_THAT(parse_error(make_file(R"({"__metadata__":"x"})", 0)), HasSubstr("must be an object"));
}

TEST(Safetensors, WriterRejectsInconsistentTensors) {
  const float one = 1.0f;
  SafetensorsFile duplicate;
  duplicate.tensors = {f32_tensor("a", {1}, std::span(&one, 1)), f32_tensor("a", {1}, std::span(&one, 1))};
  EXPECT_THROW(serialize_safetensors(duplicate), Error);
  SafetensorsFile reserved;
  reserved.tensors = {f32_tensor("__metadata__", {1}, std::span(&one, 1))};
  EXPECT_THROW(serialize_safetensors(reserved), Error);
  SafetensorsFile wrong_size;
  wrong_size.tensors = {StoredTensor{"a", Dtype::F32, {2}, std::vector<std::byte>(4)}};
  EXPECT_THROW(serialize_safetensors(wrong_size), Error);
  EXPECT_THROW(f32_tensor("a", {2, 2}, std::span(&one, 1)), Error);
}

TEST(Safetensors, WritesAtomicallyAndLeavesNoTemporaryFiles) {
  const testing::TempDir dir("safetensors");
  const auto path = dir.path() / "model.safetensors";
  const float values[2] = {1.0f, 2.0f};
  SafetensorsFile first;
  first.tensors = {f32_tensor("w", {2}, values)};
  write_safetensors(path, first);
  EXPECT_EQ(read_safetensors(path).find("w")->to_f32(), (std::vector<float>{1.0f, 2.0f}));

  // A failed write (duplicate names) leaves the existing file as it was.
  SafetensorsFile bad;
  bad.tensors = {f32_tensor("x", {2}, values), f32_tensor("x", {2}, values)};
  EXPECT_THROW(write_safetensors(path, bad), Error);
  EXPECT_EQ(read_safetensors(path).find("w")->to_f32(), (std::vector<float>{1.0f, 2.0f}));

  SafetensorsFile second;
  second.metadata = {{"step", "2"}};
  second.tensors = {f32_tensor("v", {1}, std::span(values, 1))};
  write_safetensors(path, second);
  const SafetensorsFile back = read_safetensors(path);
  EXPECT_EQ(back.metadata.at("step"), "2");
  EXPECT_EQ(back.find("w"), nullptr);

  size_t files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) {
    ++files;
    EXPECT_EQ(entry.path().filename(), "model.safetensors");
  }
  EXPECT_EQ(files, 1u);

  EXPECT_THROW(write_safetensors(dir.path() / "missing" / "x.safetensors", second), Error);
  EXPECT_THROW(read_safetensors(dir.path() / "absent.safetensors"), Error);
}

// Writing from views streams the header and each tensor's bytes: the file is byte for byte the image
// serialize_safetensors builds (dtype-size order, aligned data, padded header).
TEST(Safetensors, WritingFromViewsGivesTheSerializedImage) {
  const testing::TempDir dir("safetensors");
  const float values[3] = {1.0f, -2.0f, 0.5f};
  const uint16_t halves[2] = {0x3F80, 0xC000};
  SafetensorsFile file;
  file.metadata = {{"format", "pt"}};
  file.tensors = {f32_tensor("b", {3}, values), StoredTensor{"a", Dtype::BF16, {2}, {}},
                  StoredTensor{"e", Dtype::U8, {0}, {}}};
  const auto half_bytes = std::as_bytes(std::span(halves));
  file.tensors[1].data.assign(half_bytes.begin(), half_bytes.end());
  const std::vector<TensorView> views{{"a", Dtype::BF16, {2}, half_bytes},
                                      {"e", Dtype::U8, {0}, {}},
                                      {"b", Dtype::F32, {3}, std::as_bytes(std::span(values))}};
  write_safetensors(dir / "views.safetensors", file.metadata, views);
  const MappedFile written(dir / "views.safetensors");
  EXPECT_TRUE(std::ranges::equal(written.bytes(), serialize_safetensors(file)));
  EXPECT_EQ(read_safetensors(dir / "views.safetensors").find("b")->to_f32(), (std::vector<float>{1.0f, -2.0f, 0.5f}));
}

}  // namespace
}  // namespace fp8kit::io

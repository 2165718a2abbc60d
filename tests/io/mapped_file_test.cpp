// MappedFile: a file's bytes in place, empty files, moves, and one-line refusals naming the path.
#include "io/mapped_file.h"

#include "common/error_of.h"
#include "common/temp_dir.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <fstream>
#include <string>

namespace fp8kit::io {
namespace {

using ::testing::HasSubstr;
using testing::error_of;

TEST(MappedFile, ViewsTheFileBytesAndKeepsThemAcrossAMove) {
  const testing::TempDir dir("mapped_file");
  const auto path = dir / "data.bin";
  std::ofstream(path, std::ios::binary) << std::string("hello\0world", 11);
  MappedFile file(path);
  ASSERT_EQ(file.bytes().size(), 11u);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(file.bytes().data()), 11), std::string("hello\0world", 11));
  EXPECT_EQ(file.path(), path.string());
  const std::byte* address = file.bytes().data();
  const MappedFile moved = std::move(file);
  EXPECT_EQ(moved.bytes().data(), address);
  EXPECT_EQ(moved.bytes().size(), 11u);
  EXPECT_TRUE(file.bytes().empty());  // NOLINT(bugprone-use-after-move): a moved-from file views nothing
}

TEST(MappedFile, AnEmptyFileIsAnEmptySpan) {
  const testing::TempDir dir("mapped_file");
  std::ofstream(dir / "empty").close();
  EXPECT_TRUE(MappedFile(dir / "empty").bytes().empty());
}

TEST(MappedFile, RefusesMissingFilesAndNonRegularFilesNamingThePath) {
  const testing::TempDir dir("mapped_file");
  const auto missing = dir / "missing.bin";
  EXPECT_EQ(error_of([&] { MappedFile{missing}; }), "cannot open " + missing.string() + ": No such file or directory");
  EXPECT_EQ(error_of([&] { MappedFile{dir.path()}; }), dir.path().string() + " is a directory, not a regular file");
  const auto fifo = dir / "fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_EQ(error_of([&] { MappedFile{fifo}; }), fifo.string() + " is a FIFO, not a regular file");  // never blocks
  EXPECT_THAT(error_of([&] { MappedFile{"/dev/null"}; }), HasSubstr("character device"));
}

}  // namespace
}  // namespace fp8kit::io

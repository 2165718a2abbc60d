// CSV files (report/csv.h): quoting, row widths, and files that are never left half-written.
#include "report/csv.h"

#include "base/error.h"
#include "common/read_text.h"
#include "common/temp_dir.h"

#include <gtest/gtest.h>

#include <filesystem>

namespace fp8kit::report {
namespace {

namespace fs = std::filesystem;

TEST(Csv, Quoting) {
  EXPECT_EQ(csv_line({"a", "b c", "1.5"}), "a,b c,1.5\n");
  EXPECT_EQ(csv_line({"x, y", "say \"hi\"", ""}), "\"x, y\",\"say \"\"hi\"\"\",\n");
}

TEST(Csv, WritesAtomicallyAndChecksWidths) {
  const testing::TempDir dir("csv");
  const std::string path = (dir / "t.csv").string();
  write_csv(path, {"a", "b"}, {{"1", "2"}, {"3", "4"}});
  EXPECT_EQ(testing::read_text(path), "a,b\n1,2\n3,4\n");
  EXPECT_THROW(write_csv(path, {"a", "b"}, {{"1"}}), Error);
  EXPECT_THROW(write_csv((dir / "missing" / "t.csv").string(), {"a"}, {}), Error);
  EXPECT_FALSE(fs::exists(dir / "missing"));
  EXPECT_FALSE(fs::exists(path + ".tmp"));
}

}  // namespace
}  // namespace fp8kit::report

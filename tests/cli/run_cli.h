// Test helper: runs the fp8kit binary (FP8KIT_CLI) with arguments and captures its output.
#pragma once

#include <cstdio>
#include <string>
#include <sys/wait.h>

namespace fp8kit::testing {

struct CliResult {
  int exit_code;
  std::string output;  // stdout and stderr together
};

// `arguments` is pasted into a shell command line after the binary: quote what needs quoting.
inline CliResult run_cli(const std::string& arguments) {
  const std::string command = std::string("'") + FP8KIT_CLI + "' " + arguments + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return {-1, "popen failed"};
  std::string output;
  char buffer[4096];
  for (size_t n; (n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;) output.append(buffer, n);
  const int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, output};
}

// Whether a failed command's output is the one line of an error: "error: ..." and a newline.
inline bool one_error_line(const std::string& output) {
  return output.rfind("error: ", 0) == 0 && output.find('\n') == output.size() - 1;
}

}  // namespace fp8kit::testing

// Subcommand registry: each src/cli/<name>.cpp registers one `fp8kit <name>` at static-init time,
// so adding a subcommand is adding a file.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <string>
#include <vector>

namespace fp8kit::cli {

struct Command {
  std::string name;
  std::string description;
  // Adds the subcommand's options to `app` and sets `app.callback(...)` to run it.
  std::function<void(CLI::App& app)> setup;
};

// Registers a subcommand; returns true so it can initialise a namespace-scope constant:
//   const bool registered = register_command({"formats", "...", setup_formats});
bool register_command(Command command);
const std::vector<Command>& commands();

}  // namespace fp8kit::cli

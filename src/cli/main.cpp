// `fp8kit`: the command-line entry point. Builds the subcommands from the registry, runs one, and
// turns every error into a one-line `error: ...` on stderr with a non-zero exit.
#include "base/error.h"
#include "base/version.h"
#include "cli/command.h"

#include <omp.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <string>

namespace fp8kit::cli {

static std::vector<Command>& registry() {
  static std::vector<Command> all;
  return all;
}

bool register_command(Command command) {
  registry().push_back(std::move(command));
  return true;
}

const std::vector<Command>& commands() { return registry(); }

namespace {

// "fp8kit train": the subcommands CLI11 had parsed when an error stopped it, for the --help hint.
std::string command_path(const CLI::App& app) {
  std::string path = app.get_name();
  for (const CLI::App* current = &app; !current->get_subcommands().empty();) {
    current = current->get_subcommands().front();
    path += " " + current->get_name();
  }
  return path;
}

// For a word where a subcommand is expected but none has that name ("fp8kit trian", "fp8kit bench
// gem"), the error to print; else "". CLI11 itself would only say "A subcommand is required".
std::string unknown_subcommand(CLI::App& app, int argc, char** argv) {
  CLI::App* current = &app;
  std::string path = app.get_name();
  for (int i = 1; i < argc; ++i) {
    const std::vector<CLI::App*> subcommands = current->get_subcommands([](CLI::App*) { return true; });
    if (subcommands.empty()) return "";  // options and values of a leaf subcommand from here on
    const std::string word = argv[i];
    if (word.starts_with('-')) continue;  // --help, --version
    const auto found = std::find_if(subcommands.begin(), subcommands.end(),
                                    [&](CLI::App* sub) { return sub->check_name(word); });
    if (found == subcommands.end()) {
      std::vector<std::string> names;
      for (const CLI::App* sub : subcommands) names.push_back(sub->get_name());
      return fmt::format("unknown subcommand '{}' ({} has {}); run `{} --help`", word, path, fmt::join(names, ", "),
                         path);
    }
    current = *found;
    path += " " + current->get_name();
  }
  return "";
}

}  // namespace
}  // namespace fp8kit::cli

int main(int argc, char** argv) {
  using namespace fp8kit;
  // On a busy machine OpenMP's spin-waiting threads starve each other (a 2-core training step went
  // from 80 ms to 940 ms); dynamic teams shrink to the idle cores. Results do not depend on the
  // thread count.
  omp_set_dynamic(1);
  CLI::App app{"fp8kit: FP8 training and inference for Transformers (CPU reference, CUDA on Hopper)", "fp8kit"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "fp8kit " + std::string(kVersion));

  auto sorted = cli::commands();
  std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  for (const auto& command : sorted) {
    CLI::App* sub = app.add_subcommand(command.name, command.description);
    command.setup(*sub);
  }

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    const std::string unknown = cli::unknown_subcommand(app, argc, argv);
    if (!unknown.empty()) {
      std::fprintf(stderr, "error: %s\n", unknown.c_str());
    } else {
      // CLI11 words an option given twice as "--epochs: At Most 1 required but received 2".
      std::string message = e.what();
      if (const size_t at = message.find(": At Most 1 required but received "); at != std::string::npos) {
        message = message.substr(0, at) + ": given more than once; give it once";
      }
      std::fprintf(stderr, "error: %s (see `%s --help`)\n", message.c_str(), cli::command_path(app).c_str());
    }
    return 2;
  } catch (const std::exception& e) {
    // What the command printed first goes out before the error: with both streams redirected to one
    // file, stdout's buffer would otherwise land after the error, or split a line around it.
    std::fflush(stdout);
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}

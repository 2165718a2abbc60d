// `fp8kit`: the command-line entry point. Builds the subcommands from the registry, runs one, and
// turns every error into a one-line `error: ...` on stderr with a non-zero exit.
#include "base/error.h"
#include "base/version.h"
#include "cli/command.h"

#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <exception>

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
    std::fprintf(stderr, "error: %s (see `fp8kit --help`)\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}

// `fp8kit lm pack`: packs an HF Llama directory into FP8 (quant/pack.h); registered on `fp8kit lm`.
#pragma once

#include <CLI/CLI.hpp>

namespace fp8kit::cli {

// Adds the `pack` subcommand to `lm`.
void add_lm_pack_command(CLI::App& lm);

}  // namespace fp8kit::cli

// The FP8 recipe's command-line options, shared by every training command: each field of Fp8Recipe
// has its flag (--recipe, --lag, --amax-history, --amax-algo, --margin, --formats,
// --power-of-two-scales, --skip-zero-amax); and per-Linear overrides of the precision
// (--linear-recipe PATTERN=RECIPE, repeatable) for the commands whose models take them.
#pragma once

#include "numerics/recipe.h"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstddef>
#include <string>
#include <vector>

namespace fp8kit::cli {

struct RecipeArgs {
  std::string recipe = "delayed";
  std::string lag = "te";
  size_t amax_history = 1024;
  std::string amax_algo = "max";
  int margin = 0;
  std::string formats = "hybrid";
  bool power_of_two_scales = false;
  bool skip_zero_amax = false;

  Fp8Recipe parse() const;     // throws naming the option whose value is not one it takes
  nlohmann::json json() const;  // for a run's metrics log
};

void add_recipe_options(CLI::App& app, RecipeArgs& args);
// --linear-recipe PATTERN=RECIPE into `rules` (parse them with nn::LinearRecipes::parse).
void add_linear_recipe_option(CLI::App& app, std::vector<std::string>& rules);

}  // namespace fp8kit::cli

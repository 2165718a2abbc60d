// The FP8 recipe's options: their definitions, limits and parsing.
#include "cli/recipe_options.h"

#include "cli/options.h"

namespace fp8kit::cli {

namespace {

// Far beyond use (Transformer Engine's default history is 1024), small enough to keep the amax
// histories to megabytes.
constexpr int64_t kMaxAmaxHistory = 100'000;
// 2^16 headroom already leaves E4M3 a single bit of its range to use.
constexpr int64_t kMaxMargin = 16;

}  // namespace

Fp8Recipe RecipeArgs::parse() const {
  Fp8Recipe r;
  r.mode = parse_scaling_mode(recipe);
  r.lag = parse_scaling_lag(lag);
  r.amax_history_length = amax_history;
  r.amax_algorithm = parse_amax_algorithm(amax_algo);
  r.scale_options = {.margin = margin, .power_of_two = power_of_two_scales};
  r.skip_zero_amax = skip_zero_amax;
  set_fp8_formats(r, formats);
  return r;
}

nlohmann::json RecipeArgs::json() const {
  return {{"recipe", recipe},   {"lag", lag},         {"amax_history", amax_history},
          {"amax_algo", amax_algo}, {"margin", margin}, {"formats", formats},
          {"power_of_two_scales", power_of_two_scales}, {"skip_zero_amax", skip_zero_amax}};
}

void add_recipe_options(CLI::App& app, RecipeArgs& args) {
  app.add_option("--recipe", args.recipe, "FP8 scaling: delayed or current (per tensor), or block (1x128 activations and gradients, "
                 "128x128 weights, current scales: DeepSeek-V3's and Transformer Engine's Float8BlockScaling; TE's "
                 "default formats are --formats e4m3)")
      ->capture_default_str()
      ->check(CLI::IsMember({"delayed", "current", "block"}));
  app.add_option("--lag", args.lag, "delayed scaling lag: te (one step) or keras (two steps)")
      ->capture_default_str()
      ->check(CLI::IsMember({"te", "keras"}));
  app.add_option("--amax-history", args.amax_history, "amax history length")
      ->capture_default_str()
      ->check(whole_number(1, kMaxAmaxHistory));
  app.add_option("--amax-algo", args.amax_algo,
                 "delayed scaling's amax: max (of the history) or most_recent (the last step's)")
      ->capture_default_str()
      ->check(CLI::IsMember({"max", "most_recent"}));
  app.add_option("--margin", args.margin, "scale = fp8_max / amax / 2^margin: headroom of 2^margin")
      ->capture_default_str()
      ->check(whole_number(0, kMaxMargin));
  app.add_option("--formats", args.formats,
                 "FP8 formats: hybrid (E4M3 inputs and weights, E5M2 gradients) or e4m3 (E4M3 for all)")
      ->capture_default_str()
      // e5m2 for all is a natural guess: say why it is not offered rather than only list the others.
      ->check([](const std::string& text) {
        return text == "e5m2" ? "e5m2 would need E5M2 x E5M2 GEMMs, which FP8 tensor cores do not run: use "
                                "hybrid or e4m3"
                              : "";
      })
      ->check(CLI::IsMember({"hybrid", "e4m3"}));
  app.add_flag("--power-of-two-scales", args.power_of_two_scales,
               "round every scale down to a power of two (then scaling changes no mantissa bits)");
  app.add_flag("--skip-zero-amax", args.skip_zero_amax,
               "an amax of exactly 0 (an all-zero tensor) leaves the amax history as it is, as TE does");
}

void add_linear_recipe_option(CLI::App& app, std::vector<std::string>& rules) {
  app.add_option("--linear-recipe", rules,
                 "PATTERN=RECIPE, repeatable: the Linears whose module path matches PATTERN (* matches anything, "
                 "e.g. lm_head, model.layers.*.mlp.down_proj, model.layers.0.*) run RECIPE: fp32, bf16, fp8 (the "
                 "--recipe), delayed, current or block (FP8 with that scaling and the recipe's other options), "
                 "whatever --precision is; the last matching rule wins")
      ->allow_extra_args(false);  // one rule per flag
}

}  // namespace fp8kit::cli

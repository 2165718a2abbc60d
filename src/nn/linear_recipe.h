// Precision per Linear, chosen by configuration: rules "pattern=recipe" matched against each
// Linear's module path ("model.layers.0.mlp.down_proj", "lm_head"), on top of the model's precision
// and FP8 recipe.
#pragma once

#include "nn/precision.h"
#include "numerics/recipe.h"

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace fp8kit::nn {

// What a rule gives a Linear. Fp8 is the model's FP8 recipe (its --recipe); Delayed, Current and
// Block are FP8 with that scaling mode and the model recipe's other fields (lag, amax history and
// algorithm, margin, formats, ...). Block keeps no scaling-table slots.
enum class LinearRecipe { Fp32, Bf16, Fp8, Delayed, Current, Block };

// "fp32" | "bf16" | "fp8" | "delayed" | "current" | "block"; throws naming the accepted values.
LinearRecipe parse_linear_recipe(std::string_view text);
std::string_view name(LinearRecipe recipe);

// The precision of a Linear given `recipe`, and its FP8 scaling mode (the model recipe's for Fp8).
struct LinearChoice {
  Precision precision = Precision::Fp32;
  ScalingMode mode = ScalingMode::Delayed;  // Fp8 only
};
LinearChoice choose(LinearRecipe recipe, const Fp8Recipe& model_recipe);

// `*` matches any run of characters, dots included ("model.layers.*.mlp.*" matches
// "model.layers.10.mlp.up_proj"); every other character matches itself.
bool glob_match(std::string_view pattern, std::string_view path);

struct LinearRecipeRule {
  std::string pattern;
  LinearRecipe recipe = LinearRecipe::Bf16;
};

// The rules in the order given. The LAST rule that matches a Linear decides (general rules first,
// exceptions after: "model.layers.*=bf16" then "model.layers.0.*=fp8").
class LinearRecipes {
 public:
  LinearRecipes() = default;
  explicit LinearRecipes(std::vector<LinearRecipeRule> rules);
  // Each text "pattern=recipe"; throws naming the text that is not one.
  static LinearRecipes parse(std::span<const std::string> texts);

  bool empty() const { return rules_.empty(); }
  const std::vector<LinearRecipeRule>& rules() const { return rules_; }
  // The recipe of the last rule matching `path`; none: the model's default for it.
  std::optional<LinearRecipe> find(std::string_view path) const;
  // Throws naming the first rule whose pattern matches none of `paths` (a typo would otherwise
  // silently leave every Linear as it was).
  void check_matched(std::span<const std::string> paths) const;
  // "lm_head=fp8,model.layers.*.mlp.down_proj=bf16" (the texts parse() reads back); "" when empty.
  std::string describe() const;

 private:
  std::vector<LinearRecipeRule> rules_;
};

}  // namespace fp8kit::nn

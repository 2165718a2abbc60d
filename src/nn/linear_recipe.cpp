// Parsing and matching of per-Linear recipe rules.
#include "nn/linear_recipe.h"

#include "base/error.h"

#include <fmt/format.h>

namespace fp8kit::nn {

namespace {

constexpr std::string_view kRecipeChoices = "use fp32, bf16, fp8 (the model's --recipe), delayed, current or block";

std::optional<LinearRecipe> find_recipe(std::string_view text) {
  for (const LinearRecipe r : {LinearRecipe::Fp32, LinearRecipe::Bf16, LinearRecipe::Fp8, LinearRecipe::Delayed,
                               LinearRecipe::Current, LinearRecipe::Block})
    if (text == name(r)) return r;
  return std::nullopt;
}

}  // namespace

LinearRecipe parse_linear_recipe(std::string_view text) {
  const std::optional<LinearRecipe> r = find_recipe(text);
  FP8KIT_CHECK(r.has_value(), "unknown Linear recipe '{}': {}", text, kRecipeChoices);
  return *r;
}

std::string_view name(LinearRecipe recipe) {
  switch (recipe) {
    case LinearRecipe::Fp32: return "fp32";
    case LinearRecipe::Bf16: return "bf16";
    case LinearRecipe::Fp8: return "fp8";
    case LinearRecipe::Delayed: return "delayed";
    case LinearRecipe::Current: return "current";
    case LinearRecipe::Block: return "block";
  }
  return "?";
}

LinearChoice choose(LinearRecipe recipe, const Fp8Recipe& model_recipe) {
  switch (recipe) {
    case LinearRecipe::Fp32: return {Precision::Fp32};
    case LinearRecipe::Bf16: return {Precision::Bf16};
    case LinearRecipe::Fp8: return {Precision::Fp8, model_recipe.mode};
    case LinearRecipe::Delayed: return {Precision::Fp8, ScalingMode::Delayed};
    case LinearRecipe::Current: return {Precision::Fp8, ScalingMode::Current};
    case LinearRecipe::Block: return {Precision::Fp8, ScalingMode::Block};
  }
  return {};
}

bool glob_match(std::string_view pattern, std::string_view path) {
  // Greedy with backtracking to the last star: linear in practice for these short paths.
  size_t p = 0, s = 0, star = std::string_view::npos, resume = 0;
  while (s < path.size()) {
    if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      resume = s;
    } else if (p < pattern.size() && pattern[p] == path[s]) {
      ++p;
      ++s;
    } else if (star != std::string_view::npos) {
      p = star + 1;
      s = ++resume;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

LinearRecipes::LinearRecipes(std::vector<LinearRecipeRule> rules) : rules_(std::move(rules)) {
  for (const LinearRecipeRule& r : rules_)
    FP8KIT_CHECK(!r.pattern.empty(), "a Linear recipe rule needs a pattern before '=' (e.g. lm_head=fp8)");
}

LinearRecipes LinearRecipes::parse(std::span<const std::string> texts) {
  std::vector<LinearRecipeRule> rules;
  for (const std::string& text : texts) {
    const size_t eq = text.find('=');
    FP8KIT_CHECK(eq != std::string::npos && eq > 0 && eq + 1 < text.size(),
                 "Linear recipe rule '{}' is not PATTERN=RECIPE (e.g. lm_head=fp8 or model.layers.*.mlp.down_proj=bf16)",
                 text);
    const std::optional<LinearRecipe> recipe = find_recipe(std::string_view(text).substr(eq + 1));
    FP8KIT_CHECK(recipe.has_value(), "Linear recipe rule '{}' names an unknown recipe '{}': {}", text,
                 text.substr(eq + 1), kRecipeChoices);
    rules.push_back({text.substr(0, eq), *recipe});
  }
  return LinearRecipes(std::move(rules));
}

std::optional<LinearRecipe> LinearRecipes::find(std::string_view path) const {
  for (auto r = rules_.rbegin(); r != rules_.rend(); ++r)
    if (glob_match(r->pattern, path)) return r->recipe;
  return std::nullopt;
}

void LinearRecipes::check_matched(std::span<const std::string> paths) const {
  for (const LinearRecipeRule& r : rules_) {
    bool matched = false;
    for (const std::string& path : paths) matched = matched || glob_match(r.pattern, path);
    FP8KIT_CHECK(matched, "Linear recipe pattern '{}' matches no Linear of the model (its Linears are named like {})",
                 r.pattern, paths.empty() ? std::string("nothing") : paths.front());
  }
}

std::string LinearRecipes::describe() const {
  std::string text;
  for (const LinearRecipeRule& r : rules_) text += fmt::format("{}{}={}", text.empty() ? "" : ",", r.pattern, name(r.recipe));
  return text;
}

}  // namespace fp8kit::nn

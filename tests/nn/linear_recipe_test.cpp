// Per-Linear recipe rules: parsing (with one-line errors naming the bad rule), glob matching of module
// paths, the last matching rule winning, and what each recipe gives a Linear.
#include "nn/linear_recipe.h"

#include "base/error.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace fp8kit::nn {
namespace {

std::string error_of(const std::vector<std::string>& texts) {
  try {
    LinearRecipes::parse(texts);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(LinearRecipe, GlobStarMatchesAnyRunDotsIncluded) {
  EXPECT_TRUE(glob_match("lm_head", "lm_head"));
  EXPECT_FALSE(glob_match("lm_head", "lm_head2"));
  EXPECT_FALSE(glob_match("lm_hea", "lm_head"));
  EXPECT_TRUE(glob_match("model.layers.*.mlp.down_proj", "model.layers.0.mlp.down_proj"));
  EXPECT_TRUE(glob_match("model.layers.*.mlp.down_proj", "model.layers.17.mlp.down_proj"));
  EXPECT_FALSE(glob_match("model.layers.*.mlp.down_proj", "model.layers.1.mlp.up_proj"));
  EXPECT_TRUE(glob_match("model.layers.0.*", "model.layers.0.self_attn.q_proj"));
  EXPECT_FALSE(glob_match("model.layers.0.*", "model.layers.10.self_attn.q_proj"));
  EXPECT_TRUE(glob_match("*", "lm_head"));
  EXPECT_TRUE(glob_match("*proj", "model.layers.3.self_attn.o_proj"));
  EXPECT_TRUE(glob_match("*.*_proj", "model.layers.3.mlp.gate_proj"));
  EXPECT_FALSE(glob_match("*.q_proj", "model.layers.3.self_attn.k_proj"));
  EXPECT_TRUE(glob_match("**", ""));
}

TEST(LinearRecipe, TheLastMatchingRuleWins) {
  const LinearRecipes r =
      LinearRecipes::parse(std::vector<std::string>{"*=bf16", "model.layers.0.*=block", "lm_head=fp8", "*.k_proj=current"});
  EXPECT_EQ(r.find("lm_head"), LinearRecipe::Fp8);
  EXPECT_EQ(r.find("model.layers.0.mlp.up_proj"), LinearRecipe::Block);
  EXPECT_EQ(r.find("model.layers.0.self_attn.k_proj"), LinearRecipe::Current);
  EXPECT_EQ(r.find("model.layers.1.mlp.up_proj"), LinearRecipe::Bf16);
  EXPECT_FALSE(LinearRecipes().find("lm_head").has_value());
  EXPECT_EQ(r.describe(), "*=bf16,model.layers.0.*=block,lm_head=fp8,*.k_proj=current");
}

TEST(LinearRecipe, EachRecipeGivesAPrecisionAndMode) {
  const Fp8Recipe model{.mode = ScalingMode::Current};
  EXPECT_EQ(choose(LinearRecipe::Fp32, model).precision, Precision::Fp32);
  EXPECT_EQ(choose(LinearRecipe::Bf16, model).precision, Precision::Bf16);
  for (const auto& [recipe, mode] : {std::pair{LinearRecipe::Fp8, ScalingMode::Current},
                                     std::pair{LinearRecipe::Delayed, ScalingMode::Delayed},
                                     std::pair{LinearRecipe::Current, ScalingMode::Current},
                                     std::pair{LinearRecipe::Block, ScalingMode::Block}}) {
    EXPECT_EQ(choose(recipe, model).precision, Precision::Fp8) << name(recipe);
    EXPECT_EQ(choose(recipe, model).mode, mode) << name(recipe);
    EXPECT_EQ(parse_linear_recipe(name(recipe)), recipe);
  }
}

TEST(LinearRecipe, BadRulesAreNamed) {
  EXPECT_THAT(error_of({"lm_head"}), ::testing::HasSubstr("'lm_head' is not PATTERN=RECIPE"));
  EXPECT_THAT(error_of({"=bf16"}), ::testing::HasSubstr("'=bf16' is not PATTERN=RECIPE"));
  EXPECT_THAT(error_of({"lm_head="}), ::testing::HasSubstr("'lm_head=' is not PATTERN=RECIPE"));
  EXPECT_THAT(error_of({"lm_head=fp4"}), ::testing::HasSubstr("rule 'lm_head=fp4' names an unknown recipe 'fp4'"));
  EXPECT_THROW(parse_linear_recipe("fp4"), Error);
  EXPECT_EQ(error_of({"lm_head=bf16", "*.down_proj=delayed"}), "");
}

TEST(LinearRecipe, APatternMatchingNoLinearIsNamed) {
  const std::vector<std::string> paths = {"model.layers.0.mlp.down_proj", "lm_head"};
  const LinearRecipes ok = LinearRecipes::parse(std::vector<std::string>{"lm_head=fp8", "*.down_proj=bf16"});
  EXPECT_NO_THROW(ok.check_matched(paths));
  const LinearRecipes typo = LinearRecipes::parse(std::vector<std::string>{"lm_head=fp8", "*.down_prj=bf16"});
  try {
    typo.check_matched(paths);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("pattern '*.down_prj' matches no Linear"));
  }
}

}  // namespace
}  // namespace fp8kit::nn

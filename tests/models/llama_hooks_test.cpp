// Llama::backward's hooks for data-parallel training, on the CPU (ops run in program order): every
// parameter is reported final once per backward, and its gradient when reported is the one the
// backward ends with; the FP8 hook runs once, before the scale update reads the amaxes it may change.
#include "models/llama.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace fp8kit::models {
namespace {

LlamaConfig config(bool tied) {
  LlamaConfig c;
  c.vocab_size = 37;
  c.hidden_size = 32;
  c.intermediate_size = 48;
  c.num_hidden_layers = 3;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 8;
  c.max_position_embeddings = 16;
  c.tie_word_embeddings = tied;
  return c;
}

std::vector<float> grad_of(const nn::Parameter& p) {
  return {p.grad.data<float>(), p.grad.data<float>() + p.grad.numel()};
}

TEST(LlamaHooks, EveryGradientIsReportedOnceWhenFinal) {
  for (const bool tied : {true, false}) {
    for (const nn::Precision precision : {nn::Precision::Bf16, nn::Precision::Fp8}) {
      Llama model(config(tied), 7);
      model.set_precision(precision);
      std::mt19937 rng(3);
      Tensor tokens({2, 8}, DType::I32), targets({16}, DType::I32), losses;
      for (int32_t& t : tokens.span<int32_t>()) t = static_cast<int32_t>(rng() % 37);
      for (int32_t& t : targets.span<int32_t>()) t = static_cast<int32_t>(rng() % 37);
      const std::vector<nn::Parameter*> params = model.parameters();
      std::vector<int> reports(params.size());
      std::vector<std::vector<float>> at_report(params.size());
      int amax_hooks = 0;
      BackwardHooks hooks;
      hooks.gradients_final = [&](ops::Context&, size_t begin, size_t end) {
        for (size_t i = begin; i < end; ++i) {
          ++reports[i];
          at_report[i] = grad_of(*params[i]);
        }
      };
      hooks.before_scaling_update = [&](ops::Context&, ops::ScalingTable& table) {
        ++amax_hooks;
        EXPECT_EQ(table.amaxes().numel(), table.size());
      };
      for (int step = 0; step < 2; ++step) {  // the second backward overwrites the first's gradients
        std::fill(reports.begin(), reports.end(), 0);
        amax_hooks = 0;
        model.forward(tokens, true);
        model.backward(targets, 1.0f / 16, losses, hooks);
        for (size_t i = 0; i < params.size(); ++i) {
          EXPECT_EQ(reports[i], 1) << params[i]->name;
          EXPECT_EQ(at_report[i], grad_of(*params[i])) << params[i]->name << (tied ? " tied" : " untied");
        }
        EXPECT_EQ(amax_hooks, precision == nn::Precision::Fp8 ? 1 : 0);
      }
    }
  }
}

}  // namespace
}  // namespace fp8kit::models

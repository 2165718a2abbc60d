// Data-parallel LM training on the GPU through NCCL. One rank (one GPU): the step with its bucketed
// all-reduces on the Comm lane and the FP8 amax reduction, captured as a CUDA graph, ends with the
// single process's weights and FP8 state bit for bit (a sum or max over one rank is the identity, and
// the GPU step is deterministic). Two GPUs (skipped with fewer): `lm train --gpus 2` against one GPU
// at the same global batch, within the tolerance of the CPU tests' FP8 drift, and with --zero1 (the
// gradients reduce-scattered) as without it, within that tolerance too.
#include "train/lm_trainer.h"

#include <gtest/gtest.h>

#include <chrono>
#include <regex>
#include <string>
#include <vector>

#include "cli/run_cli.h"
#include "common/temp_dir.h"
#include "common/tiny_imdb.h"
#include "common/tiny_llama.h"
#include "dist/communicator.h"
#include "ops/cuda/gpu_test.h"

namespace fp8kit::train {
namespace {

std::vector<float> host_values(const Tensor& t) {
  const Tensor host = t.to(Device::Cpu);
  return {host.data<float>(), host.data<float>() + host.numel()};
}

TEST(LmDataParallelCuda, OneRankThroughNcclIsTheSingleProcessBitForBit) {
  FP8KIT_REQUIRE_GPU();
  if (!dist::nccl_available()) GTEST_SKIP() << "this build has no NCCL";
  auto comm = dist::connect(dist::Rendezvous{}, dist::Backend::Nccl, {.timeout = std::chrono::seconds(60)});
  const auto train = testing::learnable_stream(3000, 21), validation = testing::learnable_stream(600, 22);
  for (const bool tied : {true, false}) {
    for (const nn::Precision precision : {nn::Precision::Bf16, nn::Precision::Fp8}) {
      testing::TempDir dir("dp_cuda");
      LmTrainOptions o;
      o.model = models::llama_preset("tiny", 64);
      o.model.max_position_embeddings = 64;
      o.model.tie_word_embeddings = tied;
      o.precision = precision;
      o.device = Device::Cuda;
      o.seq = 32;
      o.batch = 4;
      o.accumulation = 2;
      o.steps = 5;  // the graph is captured at the second step and replayed after
      o.adam.warmup_steps = 2;
      o.eval_batches = 2;
      o.health_every = 0;
      o.out = dir.path() / "alone";
      o.console = nullptr;
      o.bucket_bytes = 64 << 10;  // several buckets
      LmTrainResult alone = train_lm(o, train, validation);
      o.out = dir.path() / "job";
      o.comm = comm.get();
      LmTrainResult job = train_lm(o, train, validation);
      const std::string what = std::string(nn::name(precision)) + (tied ? " tied" : " untied");
      EXPECT_EQ(host_values(job.model.parameter_set().values()), host_values(alone.model.parameter_set().values()))
          << what;
      std::vector<float> fp8_alone, fp8_job;
      for (const nn::StateTensor& t : alone.model.fp8_state())
        for (float v : host_values(*t.tensor)) fp8_alone.push_back(v);
      for (const nn::StateTensor& t : job.model.fp8_state())
        for (float v : host_values(*t.tensor)) fp8_job.push_back(v);
      EXPECT_EQ(fp8_job, fp8_alone) << what;
      EXPECT_EQ(job.validation->loss, alone.validation->loss) << what;
    }
  }
}

double validation_loss(const std::string& output) {
  std::smatch m;
  const std::regex pattern("Validation: loss ([0-9.]+)");
  return std::regex_search(output, m, pattern) ? std::stod(m[1]) : -1;
}

TEST(LmDataParallelCuda, TwoGpusMatchOneAtTheSameGlobalBatch) {
  FP8KIT_REQUIRE_GPU();
  if (cuda::list_devices().size() < 2 || !dist::nccl_available()) GTEST_SKIP() << "needs 2 GPUs and NCCL";
  const testing::TempDir dir("dp_cuda_cli");
  const std::string common = " --device cuda --precision fp8 --config tiny --steps 20 --seq 32 --batch 8 "
                             "--accumulation 2 --warmup 2 --eval-batches 4 --vocab-size 300 --data " +
                             testing::make_tiny_imdb(dir.path(), "aclImdb", 12).string();
  const testing::CliResult one = testing::run_cli("lm train --gpus 1 --out " + (dir.path() / "one").string() + common);
  ASSERT_EQ(one.exit_code, 0) << one.output;
  const testing::CliResult two = testing::run_cli("lm train --gpus 2 --out " + (dir.path() / "two").string() + common);
  ASSERT_EQ(two.exit_code, 0) << two.output;
  EXPECT_NE(two.output.find("[rank 0] Data parallel: 2 processes"), std::string::npos) << two.output;
  const double a = validation_loss(one.output), b = validation_loss(two.output);
  ASSERT_GT(a, 0) << one.output;
  ASSERT_GT(b, 0) << two.output;
  EXPECT_NEAR(b, a, 2e-3);
  // ZeRO-1: the same updates up to the clipping norm's rounding (the shards' sums of squares added in
  // float), which FP8's roundings can carry as far as the ranks' summation order.
  const testing::CliResult zero1 =
      testing::run_cli("lm train --gpus 2 --zero1 --out " + (dir.path() / "zero1").string() + common);
  ASSERT_EQ(zero1.exit_code, 0) << zero1.output;
  EXPECT_NEAR(validation_loss(zero1.output), b, 2e-3);
}

}  // namespace
}  // namespace fp8kit::train

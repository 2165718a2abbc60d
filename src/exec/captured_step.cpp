// CapturedStep: eager, then captured, then replayed (CUDA); eager always (CPU).
#include "exec/captured_step.h"

#if FP8KIT_HAVE_CUDA
#include "ops/cuda/context.h"
#include "runtime/cuda/graph.h"
#endif

namespace fp8kit::exec {

#if FP8KIT_HAVE_CUDA
struct CapturedStep::Graph {
  cuda::Graph graph;
  uint64_t steps_per_run = 0;  // how far one run advances the context's step
};
#else
struct CapturedStep::Graph {};
#endif

CapturedStep::CapturedStep(std::function<void(ops::Context&)> step) : step_(std::move(step)) {}
CapturedStep::~CapturedStep() = default;
CapturedStep::CapturedStep(CapturedStep&&) noexcept = default;
CapturedStep& CapturedStep::operator=(CapturedStep&&) noexcept = default;

bool CapturedStep::captured() const { return graph_ != nullptr; }

void CapturedStep::run(ops::Context& context) {
#if FP8KIT_HAVE_CUDA
  if (context.is_cuda() && runs_ > 0) {
    const cudaStream_t main = ops::stream(context, ops::Lane::Main);
    if (graph_ == nullptr) {  // capturing runs the host code (which advances the host step) once
      auto graph = std::make_unique<Graph>();
      const uint64_t before = context.step();
      graph->graph = cuda::Graph::capture(main, [&] {
        step_(context);
        context.join_all();
      });
      graph->steps_per_run = context.step() - before;
      graph_ = std::move(graph);
    } else {
      context.count_steps(graph_->steps_per_run);
    }
    graph_->graph.launch(main);
    ++runs_;
    return;
  }
#endif
  step_(context);
  context.join_all();
  ++runs_;
}

}  // namespace fp8kit::exec

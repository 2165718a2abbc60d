// Op table rows: token + position embedding, bit for bit: the forward in f32 and bf16 rounding with its
// fused dropout active and inactive, and the backward pair (the sort on the side lane, the sums on the
// main lane after it); shapes with T not a multiple of 32, batch 1, dims that are not a multiple of 32,
// runs of repeated ids about a warp long, a one-id vocabulary, and the vocabulary's first and last ids;
// and without a position table (Llama's token embedding: an empty one).
#include "ops/cuda/op_table.h"
#include "ops/embedding.h"

#include <fmt/format.h>

#include <algorithm>
#include <random>

namespace fp8kit::testing {
namespace {

struct Shape {
  const char* name;
  int64_t batch, seq, dim, vocabulary;
  bool runs = false;  // ids 0..5 on 32, 33, 1, 31, 65 and 38 positions (a warp's run is 32), shuffled
};
constexpr Shape kShapes[] = {{"seed", 32, 200, 32, 20000},    {"b3_t37_d33", 3, 37, 33, 50},
                             {"b1_t70_d64", 1, 70, 64, 1000}, {"runs", 2, 100, 33, 6, true},
                             {"one_id", 4, 33, 40, 1},        {"wide_vocabulary", 2, 3, 33, 70000}};

// Ids with repeats (a quarter are id 0), the last id of the vocabulary first and id 0 last.
std::vector<int32_t> ids(const Shape& s) {
  std::mt19937 rng(3);
  std::vector<int32_t> out;
  if (s.runs) {
    const int lengths[] = {32, 33, 1, 31, 65, 38};
    for (int id = 0; id < 6; ++id) out.insert(out.end(), lengths[id], id);
    std::shuffle(out.begin(), out.end(), rng);
    return out;
  }
  out.resize(static_cast<size_t>(s.batch * s.seq));
  for (int32_t& id : out) id = static_cast<int32_t>(rng() % 4 == 0 ? 0 : rng() % s.vocabulary);
  out.front() = static_cast<int32_t>(s.vocabulary - 1);
  out.back() = 0;
  return out;
}

const RegisterOps rows([](std::vector<OpCase>& t) {
  for (const Shape& s : kShapes) {
    for (const bool bf16 : {false, true}) {
      for (const bool dropout : {false, true}) {
        for (const bool positions : {true, false}) {
          t.push_back({fmt::format("embedding_forward/{}/{}{}{}", s.name, bf16 ? "bf16" : "f32",
                                   dropout ? "/dropout" : "", positions ? "" : "/no_positions"),
                       [=](ops::Context& c) {
                         const Tensor tokens = device_ints(ids(s), {s.batch, s.seq}, c.device());
                         const Tensor table =
                             device_tensor(random_values(s.vocabulary * s.dim, 1), {s.vocabulary, s.dim}, c.device());
                         const Tensor position =
                             positions ? device_tensor(random_values(s.seq * s.dim, 2), {s.seq, s.dim}, c.device())
                                       : Tensor();
                         std::vector<Tensor> out(1);
                         ops::embedding_forward(c, tokens, table, position, bf16, {0, 0.1f, dropout}, out[0]);
                         c.synchronize();  // before the inputs are freed
                         return out;
                       }});
        }
      }
    }
    for (const bool positions : {true, false}) {
      t.push_back(
          {fmt::format("embedding_backward/{}{}", s.name, positions ? "" : "/no_positions"), [=](ops::Context& c) {
             const Tensor tokens = device_ints(ids(s), {s.batch, s.seq}, c.device());
             const Tensor dout =
                 device_tensor(random_values(s.batch * s.seq * s.dim, 4), {s.batch, s.seq, s.dim}, c.device());
             // Stale values: the pair overwrites every element.
             std::vector<Tensor> grads;
             grads.push_back(device_tensor(random_values(s.vocabulary * s.dim, 5), {s.vocabulary, s.dim}, c.device()));
             grads.push_back(positions ? device_tensor(random_values(s.seq * s.dim, 6), {s.seq, s.dim}, c.device())
                                       : Tensor());
             Tensor workspace;
             c.fork(ops::Lane::Side);
             {
               const ops::Context::OnLane side(c, ops::Lane::Side);
               ops::embedding_backward_sort(c, tokens, grads[0], workspace);
             }
             c.join(ops::Lane::Side);
             ops::embedding_backward_sums(c, tokens, dout, grads[0], grads[1], workspace);
             c.synchronize();  // before the inputs and the workspace are freed
             if (!positions) grads.pop_back();  // the empty position gradient: nothing to compare
             return grads;
           }});
    }
  }
});

}  // namespace
}  // namespace fp8kit::testing

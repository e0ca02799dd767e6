// Vocabulary-parallel embedding and cross-entropy on 2 and 4 local ranks equal the
// single-process embedding and cross-entropy, values and gradients.
#include <gtest/gtest.h>

#include <strata/autograd/engine.h>
#include <strata/comm/local.h>
#include "equivalence.h"
#include <strata/parallel/tensor/vocab.h>

namespace strata::parallel {
namespace {

using strata::testing::expect_close;

Tensor ids(const Shape& s, int64_t vocab, uint64_t seed, int64_t ignored = -1) {
  Generator g(seed);
  auto u = ops::uniform({shape_numel(s)}, 0.0, double(vocab), g).to_vector<float>();
  std::vector<int64_t> v(u.size());
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::min<int64_t>(vocab - 1, int64_t(u[i]));
  if (ignored >= 0) v[1] = v[4] = ignored;
  return ops::from_vector(v, s);
}

TEST(TpVocab, EmbeddingEqualsTheWholeTable) {
  for (int n : {2, 4})
    comm::run_local(n, [n](comm::ProcessGroup& w) {
      std::shared_ptr<comm::ProcessGroup> tp(&w, [](comm::ProcessGroup*) {});
      Generator gen(3);
      nn::Embedding whole(16, 6, gen);
      const Tensor idx = ids({3, 5}, 16, 9);
      const Tensor up = ops::normal({3, 5, 6}, 0.0, 1.0, gen);
      backward(sum(whole.forward(idx) * up));
      VocabParallelEmbedding par(whole, tp);
      Tensor y = par.forward(idx);
      expect_close(y, whole.forward(idx).detach(), 1e-6, "embedding forward");
      backward(sum(y * up));
      const int64_t rows = 16 / n;
      expect_close(par.parameter("weight").grad(), ops::narrow(whole.weight().grad(), 0, w.rank() * rows, rows), 1e-6,
                   "embedding weight gradient");
    });
}

TEST(TpVocab, CrossEntropyEqualsTheGatheredLogits) {
  for (int n : {2, 4})
    comm::run_local(n, [n](comm::ProcessGroup& tp) {
      Generator gen(4);
      const int64_t v = 12, vl = v / n;
      Tensor full = ops::normal({7, v}, 0.0, 3.0, gen, DType::f64);
      full.set_requires_grad(true);
      const Tensor t_ign = ids({7}, v, 5, /*ignored=*/99);  // two rows ignored
      Tensor want = cross_entropy(full, t_ign, 99);
      backward(want);
      Tensor local = ops::contiguous(ops::narrow(full.detach(), 1, tp.rank() * vl, vl));
      local.set_requires_grad(true);
      Tensor got = vocab_parallel_cross_entropy(local, t_ign, tp, 99);
      EXPECT_NEAR(got.item<double>(), want.item<double>(), 1e-12);
      backward(got);
      expect_close(local.grad(), ops::narrow(full.grad(), 1, tp.rank() * vl, vl), 1e-12, "logits gradient");
    });
}

}  // namespace
}  // namespace strata::parallel

// DDP on N local ranks (threads) must end with the same parameters as one process on
// the full batch: N = 1..4, SGD and Adam, MLP and CNN (with and without BatchNorm),
// odd bucket caps that cut parameters in two, bucket views and no_sync accumulation.
#include <gtest/gtest.h>

#include <mutex>

#include <strata/comm/local.h>
#include "equivalence.h"

namespace strata::testing {
namespace {

constexpr double kTol = 1e-5;

// A cap of `floats` f32 elements, in MiB.
double cap_mib(int64_t floats) { return double(floats * 4) / (1024.0 * 1024.0); }

void check_equivalent(const EquivCase& c, int n) {
  const nn::NamedTensors ref = reference_state(c, n);
  std::vector<nn::NamedTensors> got(static_cast<size_t>(n));
  comm::run_local(n, [&](comm::ProcessGroup& g) { got[size_t(g.rank())] = ddp_state(g, c); },
                  comm::CommOptions{.timeout_s = 60});
  for (int r = 0; r < n; ++r) {
    std::string worst;
    const double err = max_relative_error(got[size_t(r)], ref, &worst);
    EXPECT_LT(err, kTol) << c.model << "/" << c.optim << " N=" << n << " rank " << r << ": worst tensor " << worst;
  }
}

TEST(DDPEquivalence, MlpSgdOneToFourRanks) {
  for (int n = 1; n <= 4; ++n) check_equivalent(EquivCase{}, n);
}

TEST(DDPEquivalence, MlpAdamOneToFourRanks) {
  for (int n = 1; n <= 4; ++n) check_equivalent(EquivCase{.optim = "adam"}, n);
}

TEST(DDPEquivalence, OddBucketCapSplitsParameters) {
  // An 11-float first bucket, a 7-float last one and ~34-float ones between: boundaries
  // fall inside weights and biases (the MLP's tensors hold 192, 12, 120, 10, 50, 5 floats).
  EquivCase c{.ddp = {.bucket_cap_mb = cap_mib(37), .first_bucket_mb = cap_mib(11), .last_bucket_mb = cap_mib(7)}};
  for (int n = 2; n <= 4; ++n) check_equivalent(c, n);
  c.optim = "adam";
  check_equivalent(c, 3);
}

TEST(DDPEquivalence, GradientAsBucketView) {
  EquivCase c{.ddp = {.bucket_cap_mb = cap_mib(37), .first_bucket_mb = cap_mib(11), .gradient_as_bucket_view = true}};
  check_equivalent(c, 3);
  c.optimizer_zero_grad = true;  // .grad dropped every step: rebound to the views by the hooks
  check_equivalent(c, 2);
  c.optim = "adam";
  check_equivalent(c, 4);
}

TEST(DDPEquivalence, CnnWithoutBatchNorm) {
  for (int n : {2, 4}) check_equivalent(EquivCase{.model = "cnn", .ddp = {.bucket_cap_mb = cap_mib(50)}}, n);
}

TEST(DDPEquivalence, CnnBatchNormBroadcastBuffers) {
  for (int n : {2, 3}) check_equivalent(EquivCase{.model = "cnn_bn", .ddp = {.bucket_cap_mb = cap_mib(64)}}, n);
  check_equivalent(EquivCase{.model = "cnn_bn", .optim = "adam"}, 4);
}

TEST(DDPEquivalence, LlamaGqaUntiedHead) {
  for (int n : {2, 3}) check_equivalent(EquivCase{.model = "llama", .optim = "adam"}, n);
  check_equivalent(EquivCase{.model = "llama_ckpt", .optim = "adam"}, 2);
}

TEST(DDPEquivalence, GptTiedEmbeddingsTokenLoss) {
  // wte is used twice (embedding and lm head) and listed once; its gradient is ready last.
  // SGD: the attention key bias has an exactly-zero gradient (softmax ignores a constant
  // shift), which Adam would blow up from rounding noise to full-size steps.
  EquivCase c{.model = "gpt", .optim = "sgd", .ddp = {.bucket_cap_mb = cap_mib(100), .first_bucket_mb = cap_mib(30)}};
  for (int n : {2, 3}) check_equivalent(c, n);
  c.ddp.gradient_as_bucket_view = true;
  c.accum = 2;
  check_equivalent(c, 2);
}

TEST(DDPEquivalence, NoSyncAccumulationEqualsLargeBatch) {
  // Two micro-batches per rank per step; the first under no_sync.
  EquivCase c{.accum = 2, .ddp = {.bucket_cap_mb = cap_mib(37), .first_bucket_mb = cap_mib(11)}};
  check_equivalent(c, 2);
  check_equivalent(c, 3);
  c.accum = 3;
  c.ddp.gradient_as_bucket_view = true;
  check_equivalent(c, 2);
  c.accum = 2;
  c.optim = "adam";
  check_equivalent(c, 1);
}

}  // namespace
}  // namespace strata::testing

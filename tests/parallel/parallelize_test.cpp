// ParallelDims (degrees resolved and checked in one place) and parallelize(): every
// layout composed from one options struct trains the same model as one process.
#include <gtest/gtest.h>

#include <cmath>

#include <strata/comm/local.h>
#include <strata/parallel/parallelize.h>
#include "zero_equivalence.h"

namespace strata::parallel {
namespace {

using strata::testing::EquivCase;
using strata::testing::ZeroCase;

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(ParallelDims, ResolvesDpAutoAndChecksTheWorld) {
  EXPECT_EQ(ParallelDims{}.resolve(4).dp, 4);
  EXPECT_EQ(ParallelDims{}.resolve(1).dp, 1);
  EXPECT_EQ((ParallelDims{.dp = 2, .zero_stage = 3}).resolve(2), (ParallelDims{.dp = 2, .zero_stage = 3}));
  EXPECT_EQ(error_of([] { ParallelDims{.dp = 2}.resolve(3); }),
            "parallel: dp x tp x pp = 2 x 1 x 1 = 2 rank(s), but the world has 3 (start with mpirun -np 2, or set "
            "parallel.dp: auto)");
  EXPECT_EQ(ParallelDims{.tp = 2}.resolve(4), (ParallelDims{.dp = 2, .tp = 2}));
  EXPECT_NE(error_of([] { ParallelDims{.pp = 0}.resolve(4); }).find("parallel.pp"), std::string::npos);
  EXPECT_NE(error_of([] { ParallelDims{.zero_stage = 4}.resolve(1); }).find("parallel.zero_stage"), std::string::npos);
  EXPECT_NE(error_of([] { ParallelDims{.dp = -1}.resolve(1); }).find("parallel.dp: must be >= 1"), std::string::npos);
}

TEST(ParallelDims, ModelLimitsNameTheKeys) {
  const ParallelDims tp4{.dp = 1, .tp = 4};
  EXPECT_EQ(error_of([&] { tp4.check_model({.heads = 6, .vocab = {}, .layers = {}}); }),
            "parallel.tp: is 4 but model.n_head = 6 is not divisible by it (each tp rank holds whole heads)");
  EXPECT_NE(error_of([&] { tp4.check_model({.heads = 8, .vocab = 65, .layers = {}}); }).find("vocabulary of 65"), std::string::npos);
  EXPECT_EQ(error_of([] { ParallelDims{.dp = 1, .pp = 3}.check_model({.heads = {}, .vocab = {}, .layers = 2}); }),
            "parallel.pp: is 3 but model.n_layer = 2 (each stage needs at least one block)");
  EXPECT_EQ(error_of([&] { tp4.check_model({.heads = 8, .vocab = 256, .layers = 1}); }), "");
}

TEST(ParallelDims, MeshIsPpDpTpWithTpFastest) {
  const ParallelDims d{.dp = 2, .tp = 1, .pp = 1, .zero_stage = 1};
  EXPECT_EQ(d.mesh_shape().str(), "pp=1 x dp=2 x tp=1");
  EXPECT_EQ(d.str(), "dp 2 x tp 1 x pp 1, zero_stage 1");
  EXPECT_EQ(d.dp_strategy(), "ZeRO-1");
  EXPECT_EQ(ParallelDims{.dp = 2}.dp_strategy(), "DDP");
  EXPECT_EQ(ParallelDims{.dp = 1}.dp_strategy(), "single process");
  EXPECT_THROW((void)ParallelDims{}.mesh_shape(), Error);  // dp unresolved
}

// Trains c through parallelize() on this rank (different init per rank: the layout must
// broadcast rank 0's), with clipping, and returns the full state after the last step.
nn::NamedTensors parallel_state(comm::ProcessGroup& world_ref, const ZeroCase& zc, std::vector<double>* norms,
                                std::string* described) {
  const EquivCase& c = zc.base;
  const int n = world_ref.size(), r = world_ref.rank();
  auto model = strata::testing::make_model(c.model, r == 0 ? strata::testing::kModelSeed
                                                           : strata::testing::kModelSeed + 77 * uint64_t(r));
  DDPOptions buckets;
  buckets.bucket_cap_mb = zc.bucket_cap_mb;
  auto pm = strata::testing::parallelize_on(world_ref, model, zc.stage, buckets, zc.prefetch, c.optim);
  if (described) *described = pm->describe();
  EXPECT_EQ(pm->sharded(), zc.stage > 0);
  EXPECT_EQ(pm->ddp() != nullptr, zc.stage == 0 && n > 1);
  const int64_t per = c.batch / n, micro = per / c.accum;
  for (int s = 0; s < c.steps; ++s) {
    auto [x, y] = strata::testing::make_batch(c.model, c.batch, s);
    for (int m = 0; m < c.accum; ++m) {
      Tensor xm = ops::narrow(x, 0, r * per + m * micro, micro), ym = ops::narrow(y, 0, r * per + m * micro, micro);
      std::optional<NoSync> guard;
      if (m + 1 < c.accum) guard.emplace(pm->no_sync());
      Tensor loss = pm->forward_with([&] { return strata::testing::batch_loss(pm->module(), xm, ym); });
      backward(loss * (1.0 / double(c.accum)));
      pm->finalize();
    }
    if (zc.clip > 0 && norms) norms->push_back(pm->clip_grad_norm(zc.clip));
    pm->step();
    pm->zero_grad();
  }
  const ParallelModel::FullParams full = pm->summon_full_params();
  nn::NamedTensors out;
  for (const auto& [name, t] : pm->module().state_dict()) out.emplace_back(name, ops::clone(t));
  return out;
}

void check_layout(const ZeroCase& zc, int n) {
  std::vector<double> ref_norms;
  // accum micro-batches of B/(N accum) each sum to the full batch's mean gradient.
  ZeroCase ref = zc;
  const nn::NamedTensors want = strata::testing::reference_state_clipped(ref, &ref_norms);
  comm::run_local(n, [&](comm::ProcessGroup& w) {
    std::vector<double> norms;
    std::string described;
    const nn::NamedTensors got = parallel_state(w, zc, &norms, &described);
    std::string worst;
    const double err = strata::testing::max_relative_error(got, want, &worst);
    EXPECT_LT(err, 1e-5) << described << " model " << zc.base.model << " rank " << w.rank() << " worst " << worst;
    ASSERT_EQ(norms.size(), ref_norms.size());
    for (size_t i = 0; i < norms.size(); ++i) EXPECT_NEAR(norms[i], ref_norms[i], 1e-5 * ref_norms[i]) << described;
  });
}

TEST(Parallelize, EveryDpLayoutEqualsOneProcess) {
  // zero_stage 0 is DDP at N > 1 and the bare model at N = 1; 1-3 are ZeRO.
  for (int stage = 0; stage <= 3; ++stage)
    for (int n = 1; n <= 4; ++n)
      check_layout(ZeroCase{.base = {.optim = "adam", .batch = 24, .accum = 2}, .stage = stage, .clip = 0.05}, n);
}

TEST(Parallelize, GptWithTiedEmbeddings) {
  for (int stage = 0; stage <= 3; ++stage) check_layout(ZeroCase{.base = {.model = "gpt"}, .stage = stage, .clip = 0.5}, 2);
}

TEST(Parallelize, RefusesAMeshThatDoesNotMatchTheDegrees) {
  comm::run_local(2, [](comm::ProcessGroup& w) {
    std::shared_ptr<comm::ProcessGroup> world(&w, [](comm::ProcessGroup*) {});
    const ParallelDims dims = ParallelDims{}.resolve(2);
    const comm::DeviceMesh flat(world, comm::MeshShape({{"dp", 2}}));
    EXPECT_THROW(parallelize(strata::testing::make_model("mlp", 1), flat,
                             {.dims = dims,
                              .ddp = {},
                              .fsdp_prefetch = true,
                              .fsdp_wrap = {},
                              .make_optimizer = strata::testing::optimizer_factory("sgd")}),
                 Error);
  });
}

// The same steps through train_step, the one call a training loop makes for every layout:
// the micro-batches as a list, accumulation, clipping and the step inside the handle.
nn::NamedTensors train_step_state(comm::ProcessGroup& w, const ZeroCase& zc, std::vector<double>* norms) {
  const EquivCase& c = zc.base;
  const int n = w.size(), r = w.rank();
  auto model = strata::testing::make_model(c.model, r == 0 ? strata::testing::kModelSeed
                                                           : strata::testing::kModelSeed + 77 * uint64_t(r));
  std::shared_ptr<comm::ProcessGroup> world(&w, [](comm::ProcessGroup*) {});
  const ParallelDims dims = ParallelDims{.zero_stage = zc.stage}.resolve(n);
  DDPOptions buckets;
  buckets.bucket_cap_mb = zc.bucket_cap_mb;
  auto pm = parallelize(model, comm::DeviceMesh(world, dims.mesh_shape()),
                        {.dims = dims,
                         .ddp = buckets,
                         .fsdp_prefetch = zc.prefetch,
                         .make_optimizer = strata::testing::optimizer_factory(c.optim),
                         .loss = strata::testing::batch_loss});
  const int64_t per = c.batch / n, micro = per / c.accum;
  for (int s = 0; s < c.steps; ++s) {
    auto [x, y] = strata::testing::make_batch(c.model, c.batch, s);
    std::vector<Batch> batches;
    for (int m = 0; m < c.accum; ++m)
      batches.push_back({ops::narrow(x, 0, r * per + m * micro, micro), ops::narrow(y, 0, r * per + m * micro, micro)});
    const StepResult res = pm->train_step(batches, {.grad_clip = zc.clip});
    EXPECT_TRUE(std::isfinite(res.loss));
    if (res.grad_norm) norms->push_back(*res.grad_norm);
  }
  const ParallelModel::FullParams full = pm->summon_full_params();
  nn::NamedTensors out;
  for (const auto& [name, t] : pm->module().state_dict()) out.emplace_back(name, ops::clone(t));
  return out;
}

TEST(Parallelize, TrainStepEqualsOneProcessForEveryDpLayout) {
  for (int stage = 0; stage <= 3; ++stage)
    for (int n : {1, 2, 3}) {
      const ZeroCase zc{.base = {.optim = "adam", .batch = 24, .accum = 2}, .stage = stage, .clip = 0.05};
      std::vector<double> ref_norms;
      const nn::NamedTensors want = strata::testing::reference_state_clipped(zc, &ref_norms);
      comm::run_local(n, [&](comm::ProcessGroup& w) {
        std::vector<double> norms;
        const nn::NamedTensors got = train_step_state(w, zc, &norms);
        std::string worst;
        EXPECT_LT(strata::testing::max_relative_error(got, want, &worst), 1e-5)
            << "stage " << stage << " at " << n << " rank(s), worst " << worst;
        ASSERT_EQ(norms.size(), ref_norms.size());
        for (size_t i = 0; i < norms.size(); ++i) EXPECT_NEAR(norms[i], ref_norms[i], 1e-5 * ref_norms[i]);
      });
    }
}

// A program that calls parallelize() gets the CLI's errors, naming the key, before
// anything is built.
TEST(Parallelize, RefusesWhatTheLayoutCannotRunWithTheKeysNamed) {
  const auto refusal = [](const ParallelDims& unresolved, int world_size, const LayoutChecks& checks,
                          DataParallelOptions replicas = {}) {
    std::string msg;
    comm::run_local(world_size, [&](comm::ProcessGroup& w) {
      std::shared_ptr<comm::ProcessGroup> world(&w, [](comm::ProcessGroup*) {});
      const ParallelDims dims = unresolved.resolve(world_size);
      const std::string m = error_of([&] {
        (void)parallelize(strata::testing::make_model("mlp", 1), comm::DeviceMesh(world, dims.mesh_shape()),
                          {.dims = dims,
                           .make_optimizer = strata::testing::optimizer_factory("sgd"),
                           .replicas = replicas,
                           .checks = checks});
      });
      if (w.rank() == 0) msg = m;
    });
    return msg;
  };
  EXPECT_EQ(refusal({.pp = 2}, 2, {.grad_accum_steps = 2}),
            "train.grad_accum_steps: is 2 but the pipeline accumulates over its micro-batches: use "
            "parallel.microbatches instead (grad_accum_steps: 1)");
  EXPECT_EQ(refusal({.pp = 2}, 2, {.global_batch = 6, .microbatches = 4}),
            "parallel.microbatches: is 4 but each data-parallel rank's batch of 6 is not divisible by it");
  EXPECT_EQ(refusal({.pp = 2}, 2, {.precision = Precision::f16}),
            "run.precision: is f16 but the pipeline does not scale its micro-batch losses (use bf16 or f32 with pp > 1)");
  EXPECT_EQ(refusal({.cp = 2}, 2, {.model_type = "mlp", .context_parallel = false}),
            "parallel.cp: is 2 but model.type is 'mlp': its family has no sequences to split");
  EXPECT_EQ(refusal({.cp = 2}, 2, {.precision = Precision::bf16}),
            "run.precision: is bf16 but ring attention (parallel.cp > 1) runs in f32 only");
  // Ring attention runs on CUDA (f32 there too): a GPU run with cp validates, a 16-bit one does not.
  EXPECT_EQ(error_of([] { ParallelDims{.cp = 2}.resolve(2).validate({.context_parallel = true, .cuda = true, .world = 2}); }),
            "");
  EXPECT_EQ(refusal({.cp = 2}, 2, {.precision = Precision::bf16, .cuda = true}),
            "run.precision: is bf16 but ring attention (parallel.cp > 1) runs in f32 only");
  EXPECT_EQ(refusal({.tp = 2}, 2, {.model_type = "mlp", .sequence_parallel_ok = false, .sequence_parallel = true}),
            "parallel.sequence_parallel: is true but the model (mlp) has no sequence dimension to shard");
  EXPECT_EQ(refusal({}, 2, {.global_batch = 5}),
            "train.batch_size: is 5 but must be divisible by the 2 data-parallel ranks (the global batch is split evenly)");
  EXPECT_NE(refusal({}, 2, {}, {.replicas = 2}).find("parallel.replicas: runs thread replicas inside one process"),
            std::string::npos);
  EXPECT_EQ(refusal({}, 2, {.global_batch = 4}), "");
  // Mixture of experts and expert parallelism.
  EXPECT_EQ(refusal({.ep = 2}, 2, {}), "parallel.ep: is 2 but the model (MLP) has no mixture-of-experts layers (set model.moe)");
  const auto moe = [](int64_t experts, bool capacity) {
    ModelLimits m;
    m.experts = experts;
    m.moe_capacity = capacity;
    return m;
  };
  EXPECT_EQ(refusal({.ep = 2}, 2, {.model = moe(3, false)}),
            "parallel.ep: is 2 but model.moe.experts = 3 is not divisible by it (each ep rank holds experts / ep whole "
            "experts)");
  EXPECT_EQ(refusal({.cp = 2}, 2, {.model = moe(4, true)}),
            "model.moe.capacity_factor: is set but parallel.cp = 2 splits each sequence, and the capacity is decided "
            "per whole sequence: use dropless routing (0) with cp");
  EXPECT_EQ(refusal({.tp = 2}, 2, {.model = moe(4, false), .sequence_parallel = true}),
            "parallel.sequence_parallel: is true but does not compose with model.moe in this version (the MoE layers "
            "run replicated over tp on whole sequences)");
  EXPECT_EQ(refusal({.ep = 2}, 2, {.model = moe(4, false), .precision = Precision::f16}),
            "run.precision: is f16 but expert parallelism does not unscale its experts' gradients with the loss "
            "scaler in this version (use bf16 or bf16_params)");
  EXPECT_EQ(refusal({}, 1, {.model = moe(4, false), .cuda = true}),
            "run.device: is a CUDA device but the mixture-of-experts layer has no CUDA path yet");
  try {
    (void)ParallelDims{.ep = 3}.resolve(2);
    ADD_FAILURE() << "ep 3 of dp 2 resolved";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(), "parallel.ep: is 3 but does not divide parallel.dp = 2 (expert parallelism is carved out of "
                           "the data-parallel ranks)");
  }
}

}  // namespace
}  // namespace strata::parallel

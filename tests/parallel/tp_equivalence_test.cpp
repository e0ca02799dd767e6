// Tensor parallelism trains the same model as one process: the MLP and the GPT at tp 2
// and 4, and dp 2 x tp 2 with DDP and ZeRO, after k AdamW steps with global-norm
// clipping (gathered parameters, losses and norms to 1e-5), all on local ranks.
#include <gtest/gtest.h>

#include "tp_harness.h"

namespace strata::parallel {
namespace {

namespace st = strata::testing;
using namespace strata::testing::tp;  // NOLINT: test harness

TEST(TensorParallel, MlpEqualsOneProcess) {
  check({.model = "mlp", .tp = 2});
  check({.model = "mlp", .tp = 4});
}

TEST(TensorParallel, MlpDp2Tp2WithDdpAndZero) {
  for (int stage : {0, 1, 3}) check({.model = "mlp", .dp = 2, .tp = 2, .stage = stage});
}

TEST(TensorParallel, GptEqualsOneProcess) {
  check({.model = "gpt", .tp = 2});
  check({.model = "gpt", .tp = 4});
}

TEST(TensorParallel, GptWithActivationCheckpointing) { check({.model = "gpt_ckpt", .tp = 2}); }

TEST(TensorParallel, GptDp2Tp2WithZero1) { check({.model = "gpt", .dp = 2, .tp = 2, .stage = 1}); }

TEST(TensorParallel, AModelWithoutAPlanIsAConfigError) {
  comm::run_local(2, [](comm::ProcessGroup& w) {
    std::shared_ptr<comm::ProcessGroup> world(&w, [](comm::ProcessGroup*) {});
    const ParallelDims dims = ParallelDims{.tp = 2}.resolve(2);
    try {
      parallelize(st::make_model("cnn", 1), comm::DeviceMesh(world, dims.mesh_shape()),
                  {.dims = dims, .ddp = {}, .fsdp_prefetch = true, .fsdp_wrap = {}, .tp_plan = {}, .make_optimizer = adamw});
      ADD_FAILURE() << "no error";
    } catch (const ConfigError& e) {
      EXPECT_EQ(std::string(e.what()), "parallel.tp: is 2 but the model (CNN) has no tensor-parallel plan (use tp: 1)");
    }
  });
}

TEST(TensorParallel, APlanEntryMustNameALinear) {
  comm::run_local(2, [](comm::ProcessGroup& w) {
    std::shared_ptr<comm::ProcessGroup> tp(&w, [](comm::ProcessGroup*) {});
    auto m = st::make_model("mlp", 1);
    EXPECT_THROW(apply_tp(*m, {{"net.2", TpStyle::colwise}}, tp), Error);  // the activation
    EXPECT_THROW(apply_tp(*m, {{"net.9", TpStyle::colwise}}, tp), Error);  // absent
  });
}

}  // namespace
}  // namespace strata::parallel

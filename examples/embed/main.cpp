// A program built against an installed strata: an MLP classifier trained with AdamW
// through parallel::parallelize(). Run it alone (one rank) or under mpirun (DDP over the
// ranks; PARALLEL_ZERO_STAGE=1|2|3 shards it with ZeRO instead): the global batch is the
// same, so every layout prints the same losses. Exits 0 when training converged.
//   ./embed
//   mpirun -np 2 ./embed
#include <cstdio>
#include <cstdlib>
#include <memory>

#include <strata/autograd/engine.h>
#include <strata/autograd/functions.h>
#include <strata/comm/local.h>
#include <strata/comm/mpi.h>
#include <strata/nn/mlp.h>
#include <strata/optim/adam.h>
#include <strata/parallel/parallelize.h>

using namespace strata;

int main() {
  // The world: every process of mpirun is a rank; alone, a world of one.
  auto world = comm::launched_by_mpi() ? comm::init_mpi_world() : comm::make_local_world(1)[0];
  const char* stage = std::getenv("PARALLEL_ZERO_STAGE");
  const parallel::ParallelDims dims = parallel::ParallelDims{.zero_stage = stage ? std::atoi(stage) : 0}.resolve(
      world->size());  // dp = every rank

  // Data: 256 points in 8-D, labelled by which of 4 fixed directions they align with best.
  Generator data_gen(7);
  const int64_t n = 256, global_batch = 64;
  const Tensor x = ops::uniform({n, 8}, -1, 1, data_gen);
  const Tensor w_true = ops::uniform({8, 4}, -1, 1, data_gen);
  const Tensor y = ops::argmax(ops::matmul(x, w_true), 1);

  Generator init(0);
  auto model = std::make_shared<nn::MLP>(nn::MLPConfig{.input = 8, .hidden = {32}, .classes = 4}, init);
  auto pm = parallel::parallelize(model, comm::DeviceMesh(world, dims.mesh_shape()),
                                  {.dims = dims, .make_optimizer = [](optim::NamedTensors p) {
                                     return std::make_unique<optim::AdamW>(std::move(p), optim::AdamWOptions{.lr = 1e-2});
                                   }});

  // Each dp rank trains on its contiguous share of every global batch.
  const int64_t per_rank = global_batch / dims.dp, rank = pm->mesh().rank("dp");
  double loss_v = 0;
  for (int step = 0; step < 150; ++step) {
    const int64_t first = (step * global_batch) % n + rank * per_rank;
    const Tensor xb = ops::narrow(x, 0, first, per_rank), yb = ops::narrow(y, 0, first, per_rank);
    Tensor loss = pm->forward_with([&] { return cross_entropy(pm->module().forward(xb), yb); });
    backward(loss);
    pm->finalize();          // gradients averaged over the dp ranks
    pm->clip_grad_norm(1.0);  // the global norm, as one process computes it
    pm->step();
    pm->zero_grad();
    const Tensor mean = comm::all_reduce_host(*world, ops::from_vector(std::vector<double>{loss.item<double>()}, {1}),
                                              comm::ReduceOp::sum);
    loss_v = mean.item<double>() / double(world->size());
    if (world->rank() == 0 && step % 50 == 49) std::printf("step %d loss %.6f\n", step + 1, loss_v);
  }
  if (world->rank() == 0) std::printf("layout: %s, final loss %.6f\n", pm->describe().c_str(), loss_v);
  return loss_v < 0.2 ? 0 : 1;
}

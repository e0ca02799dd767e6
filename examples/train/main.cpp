// A complete program on an installed strata: its own Module, its own Dataset read through
// a DataLoader with a DistributedSampler, AdamW, data parallelism through parallelize()
// (DDP under mpirun, ZeRO with PARALLEL_ZERO_STAGE), and checkpoints it can resume from.
//   ./train RUN_DIR [STEPS]          trains STEPS (default 60) steps, saving every 20
//   mpirun -np 2 ./train RUN_DIR     the same global batch over 2 ranks
// A second call with the same RUN_DIR resumes from its newest checkpoint, at any world
// size, and ends where one uninterrupted run ends. Prints "final loss X" on rank 0.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include <strata/strata.h>

using namespace strata;
namespace fs = std::filesystem;

namespace {

// A dataset of its own: 2-D points labelled by which of 3 rings around the origin they
// fall in. get_batch writes every sample of a batch into one pair of tensors.
class RingsDataset : public data::Dataset {
 public:
  explicit RingsDataset(int64_t n) : n_(n) {}
  int64_t size() const override { return n_; }
  data::Batch get_batch(const std::vector<int64_t>& indices) const override {
    data::detail::check_indices("RingsDataset", indices, n_);
    const int64_t b = int64_t(indices.size());
    std::vector<float> x(size_t(2 * b));
    std::vector<int64_t> y(static_cast<size_t>(b));
    for (int64_t i = 0; i < b; ++i) {
      // A fixed point per index: deterministic on every rank, no storage.
      const uint64_t h = uint64_t(indices[size_t(i)]) * 0x9E3779B97F4A7C15ull;
      const float u = float(h >> 40) / float(1 << 24), v = float((h >> 16) & 0xFFFFFF) / float(1 << 24);
      x[size_t(2 * i)] = 2 * u - 1;
      x[size_t(2 * i + 1)] = 2 * v - 1;
      const float r2 = x[size_t(2 * i)] * x[size_t(2 * i)] + x[size_t(2 * i + 1)] * x[size_t(2 * i + 1)];
      y[size_t(i)] = r2 < 0.25f ? 0 : r2 < 0.7f ? 1 : 2;
    }
    return {ops::from_vector(x, {b, 2}), ops::from_vector(y, {b})};
  }

 private:
  int64_t n_;
};

// A module of its own: a residual MLP. Children are registered under names, so the
// parameters are "inp.weight", "hidden.weight", "out.bias", ... in checkpoints.
class ResidualMLP : public nn::Module {
 public:
  ResidualMLP(int64_t width, Generator& gen)
      : inp_(register_module("inp", std::make_shared<nn::Linear>(2, width, gen))),
        hidden_(register_module("hidden", std::make_shared<nn::Linear>(width, width, gen))),
        out_(register_module("out", std::make_shared<nn::Linear>(width, 3, gen))) {}
  Tensor forward(const Tensor& x) override {
    const Tensor h = tanh(inp_->forward(x));
    return out_->forward(add(h, tanh(hidden_->forward(h))));
  }
  std::string type_name() const override { return "ResidualMLP"; }

 private:
  std::shared_ptr<nn::Linear> inp_, hidden_, out_;
};

}  // namespace

int main(int argc, char** argv) {
  // What the strata CLI does first: pick OpenBLAS's kernels for this CPU (re-executes once).
  tune_environment_and_reexec(argv);
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s RUN_DIR [STEPS]\n", argv[0]);
    return 2;
  }
  const fs::path run_dir = argv[1];
  const int64_t steps = argc > 2 ? std::atoll(argv[2]) : 60, save_every = 20, global_batch = 64;
  auto world = comm::launched_by_mpi() ? comm::init_mpi_world() : comm::make_local_world(1)[0];
  if (world->size() > 1) set_num_threads(1);
  const char* stage = std::getenv("PARALLEL_ZERO_STAGE");
  const auto dims = parallel::ParallelDims{.zero_stage = stage ? std::atoi(stage) : 0}.resolve(world->size());

  Generator init(0);
  auto model = std::make_shared<ResidualMLP>(32, init);
  auto pm = parallel::parallelize(model, comm::DeviceMesh(world, dims.mesh_shape()),
                                  {.dims = dims, .make_optimizer = [](optim::NamedTensors p) {
                                     return std::make_unique<optim::AdamW>(std::move(p), optim::AdamWOptions{.lr = 1e-2});
                                   }});

  // Resume: the newest step_N directory, written at any world size.
  int64_t start = 0;
  const fs::path ckpt_root = run_dir / "checkpoints";
  if (fs::exists(ckpt_root))
    for (const auto& e : fs::directory_iterator(ckpt_root)) {
      const std::string name = e.path().filename().string();
      if (name.rfind("step_", 0) == 0 && name.find('.') == std::string::npos)
        start = std::max<int64_t>(start, std::atoll(name.c_str() + 5));
    }
  if (start > 0) {
    pm->load_state(parallel::CheckpointReader((ckpt_root / ("step_" + std::to_string(start))).string()), true);
    if (world->rank() == 0) std::printf("resumed at step %lld\n", (long long)start);
  }

  // Each dp rank reads its share of every global batch; the order depends only on the epoch.
  auto dataset = std::make_shared<RingsDataset>(1024);
  const int64_t dp = dims.dp, dp_rank = pm->mesh().rank("dp");
  auto sampler = std::make_shared<data::DistributedSampler>(
      dataset->size(), data::DistributedSamplerOptions{.num_replicas = dp, .rank = dp_rank, .seed = 1, .shuffle = true,
                                                       .drop_last = true});
  const int64_t per_rank = global_batch / dp, batches_per_epoch = sampler->size() / per_rank;
  data::DataLoader loader(dataset, sampler, {.batch_size = per_rank, .drop_last = true},
                          {.epoch = start / batches_per_epoch, .batch = start % batches_per_epoch});

  double loss_v = 0;
  for (int64_t step = start; step < steps; ++step) {
    std::optional<data::Batch> b = loader.next();
    if (!b) b = loader.next();  // the end of an epoch; the next one starts
    Tensor loss = pm->forward_with([&] { return cross_entropy(pm->module().forward(b->input), b->target); });
    backward(loss);
    pm->finalize();  // gradients averaged over the dp ranks
    pm->step();
    pm->zero_grad();
    loss_v = comm::all_reduce_host(*world, ops::from_vector(std::vector<double>{loss.item<double>()}, {1}),
                                   comm::ReduceOp::sum).item<double>() / double(world->size());
    if ((step + 1) % save_every == 0)  // collective: every rank writes its pieces
      parallel::save_sharded((ckpt_root / ("step_" + std::to_string(step + 1))).string(), *world,
                             parallel::RankPieces{pm->state_pieces(), {}}, {.zero_stage = dims.zero_stage},
                             nlohmann::json{{"step", step + 1},
                                            {parallel::kOptimizerMetaKey, pm->optimizer().state_dict().scalars}});
  }
  if (world->rank() == 0) std::printf("layout: %s, final loss %.6f\n", pm->describe().c_str(), loss_v);
  return 0;
}

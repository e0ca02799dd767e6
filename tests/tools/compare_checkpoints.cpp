// compare_checkpoints A B TOL: the model tensors of two training checkpoints of any layout
// (every name A's meta.model_tensors lists) must be in B with the same shape and agree
// within TOL relative to the larger magnitude of the two tensors. Prints the worst tensor;
// exit 0 when they agree, 1 when not (or a tensor is missing), 2 on bad arguments. The
// e2e cases compare the parameters a layout trained with one process's, not only losses.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <strata/parallel/checkpoint/reader.h>
#include <strata/parallel/checkpoint/training.h>
#include <strata/tensor/ops.h>

int main(int argc, char** argv) {
  using namespace strata;
  if (argc != 4) {
    std::fprintf(stderr, "usage: compare_checkpoints A B TOL\n");
    return 2;
  }
  const double tol = std::atof(argv[3]);
  try {
    const parallel::CheckpointReader a(parallel::resolve_checkpoint_dir(argv[1]));
    const parallel::CheckpointReader b(parallel::resolve_checkpoint_dir(argv[2]));
    const auto& listed = a.meta().value("model_tensors", nlohmann::json::array());
    if (!listed.is_array() || listed.empty()) {
      std::fprintf(stderr, "%s: its meta lists no model tensors\n", argv[1]);
      return 1;
    }
    const std::vector<std::string> in_b = b.names();
    double worst = 0;
    std::string worst_name;
    for (const auto& n : listed) {
      const std::string name = n.get<std::string>();
      if (std::find(in_b.begin(), in_b.end(), name) == in_b.end()) {
        std::fprintf(stderr, "%s has no tensor '%s'\n", argv[2], name.c_str());
        return 1;
      }
      const std::vector<double> x = ops::to_dtype(a.read_full(name), DType::f64).to_vector<double>();
      const std::vector<double> y = ops::to_dtype(b.read_full(name), DType::f64).to_vector<double>();
      if (x.size() != y.size()) {
        std::fprintf(stderr, "'%s': %zu vs %zu elements\n", name.c_str(), x.size(), y.size());
        return 1;
      }
      double diff = 0, scale = 1e-30;
      for (size_t i = 0; i < x.size(); ++i) {
        diff = std::max(diff, std::abs(x[i] - y[i]));
        scale = std::max({scale, std::abs(x[i]), std::abs(y[i])});
      }
      if (diff / scale > worst) worst = diff / scale, worst_name = name;
    }
    std::printf("%zu model tensors, worst relative difference %.3g (%s)\n", listed.size(), worst, worst_name.c_str());
    return worst <= tol ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "compare_checkpoints: %s\n", e.what());
    return 1;
  }
}

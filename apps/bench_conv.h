// `strata bench conv`: the CNN's convolutions alone, strata's im2col kernel against
// oneDNN (plain and blocked layouts), pass by pass, alternating in one process.
#pragma once
#include <string>
#include <vector>

namespace strata::apps {

struct BenchConvOptions {
  std::string config = "configs/fashion_cnn.yaml";  // model.channels and the data's image shape
  std::vector<int> batches{64, 128};
  std::vector<int> threads{1, 2};
  int rounds = 15;  // timed calls per path, alternating
};

/// Prints one table per thread count: per conv layer of the config's CNN and pass
/// (forward, backward weights only, backward with the input gradient), the median wall
/// and CPU milliseconds of each path and the speed-up of oneDNN's faster layout.
int bench_conv(const BenchConvOptions& o);

}  // namespace strata::apps

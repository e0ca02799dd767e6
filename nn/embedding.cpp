// Embedding layer: a parameter table and the differentiable embedding() lookup.
#include <strata/nn/embedding.h>

#include <strata/nn/init.h>

namespace strata::nn {

Embedding::Embedding(int64_t num_embeddings, int64_t dim, Generator& gen, double init_std)
    : num_(num_embeddings), dim_(dim) {
  STRATA_CHECK(num_embeddings > 0 && dim > 0, "[Embedding] sizes must be positive, got (", num_embeddings, ", ",
               dim, ")");
  weight_ = &register_parameter("weight", init::normal({num_, dim_}, init_std, gen));
}

Tensor Embedding::forward(const Tensor& idx) { return embedding(*weight_, idx); }

}  // namespace strata::nn

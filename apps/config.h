// The training config schema as plain structs: what `strata train/eval/bench` read
// from YAML. Loading reads every key through ConfigNode (so errors name the key path
// and line, and unknown keys are rejected) and validate() checks cross-field rules.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <strata/comm/types.h>
#include <strata/core/config.h>
#include <strata/core/precision.h>
#include <strata/nn/moe.h>
#include <strata/nn/recompute.h>
#include <strata/parallel/parallel_config.h>

namespace strata::apps {

struct RunSection {
  std::string dir = "runs/default";
  uint64_t seed = 0;
  int threads = 0;  // 0 = all cores
  /// cpu | cuda | cuda:N. "cuda" under mpirun is each rank's local-rank GPU (one GPU per
  /// rank, like torchrun's LOCAL_RANK), else cuda:0.
  std::string device = "cpu";
  /// f32 | bf16 | f16: forward and loss under autocast (autograd/autocast.h) with f32
  /// master weights; f16 adds dynamic loss scaling (optim::GradScaler). bf16_params |
  /// f16_params: 16-bit model states with f32 masters (core/precision.h).
  Precision precision = Precision::f32;
  /// Diagnostics (warnings, notes, errors) at this level and above: trace | debug | info |
  /// warn | error | critical | off. Empty: info on rank 0, warn elsewhere.
  /// $STRATA_LOG_LEVEL overrides it. Each rank also writes <dir>/logs/rank<R>.log.
  std::string log_level;
  /// FLOP/s that MFU is reported against (e.g. a GPU's datasheet figure); 0 = this
  /// machine's GEMM throughput, measured when training starts.
  double peak_flops = 0;
  /// run.trace: {start_step: S, steps: K}: every rank records a timeline of the K steps
  /// after the first S (steps S+1 .. S+K) into <dir>/trace/rank<R>.json (docs/observe.md).
  /// steps 0 (the default) records nothing.
  int64_t trace_start_step = 1;
  int64_t trace_steps = 0;
  /// Also write the logged scalars as TensorBoard event files into <dir>/tb/ (rank 0).
  bool tensorboard = false;
  /// Bytes a rank may hold ("80G", "512MiB", or a number); 0 = no limit. `parallel: auto`
  /// chooses among the layouts that fit it.
  int64_t memory_per_rank = 0;
};

/// model.rope_scaling (llama): Llama 3.1's frequency rescaling (nn::RopeScaling).
struct RopeScalingSection {
  double factor = 8.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 8192;
};

struct ModelSection {
  std::string type = "mlp";  // mlp | cnn | gpt | llama
  /// A Hugging Face model directory (config.json + safetensors) whose weights a new run
  /// starts from (docs/interop.md). Its config.json fills model.type and the shape keys;
  /// a shape key given beside it must agree. Ignored when the run resumes.
  std::string init_from;
  // mlp
  std::vector<int64_t> hidden = {256, 128};
  std::string activation = "relu";
  // cnn
  std::vector<int64_t> channels = {32, 64};
  bool batch_norm = true;
  int64_t fc_hidden = 128;
  // mlp, cnn, gpt
  double dropout = 0.0;
  // gpt
  int64_t block_size = 64;
  int64_t n_layer = 4;
  int64_t n_head = 4;
  int64_t n_embd = 128;
  bool bias = true;
  bool tie_weights = true;
  /// none | full (each block's input kept, the block recomputed) | selective (the GEMM
  /// outputs kept, the attention core recomputed); true / false read as full / none.
  nn::Recompute checkpoint_activations = nn::Recompute::none;
  /// gpt: embedding/output rows; 0 = from the data (256 for text, data.vocab_size for
  /// synthetic tokens). Required for data.dataset tokens and registered token datasets.
  int64_t vocab_size = 0;
  // llama (with block_size, n_layer, n_head, n_embd, tie_weights, checkpoint_activations,
  // vocab_size above; tie_weights defaults to false for llama)
  int64_t n_kv_head = 0;           ///< key/value heads; 0 = n_head
  int64_t intermediate_size = 0;   ///< SwiGLU width; 0 = from ffn_dim_multiplier and multiple_of
  double ffn_dim_multiplier = 0;   ///< 0 = unset
  int64_t multiple_of = 256;
  double norm_eps = 1e-5;
  double rope_theta = 10000.0;
  std::optional<RopeScalingSection> rope_scaling{};
  // gpt, llama: the mixture-of-experts MLP (model.moe; experts 0 = dense)
  nn::MoEConfig moe{};
  /// A model over token sequences (gpt, llama): token data, block_size and vocab_size apply.
  bool token_model() const { return type == "gpt" || type == "llama"; }
};

struct DataSection {
  /// fashion_mnist | text | synthetic | tokens | idx | npy, or a name registered with
  /// data::register_dataset (data/registry.h).
  std::string dataset = "fashion_mnist";
  std::string path;                       // "" = the dataset's default location
  /// Held out of the training data for evaluation during training: the tail of a token
  /// stream (text, tokens without a val file, synthetic), a seeded random subset
  /// (fashion_mnist, idx, npy, registered). Default 0.1, but 0 where a test split exists.
  double val_fraction = 0.1;
  int64_t stride = 1;                     // text, tokens: distance between training windows (tokens: 0 = block_size)
  int64_t prefetch = 2;                   // batches built ahead on the loader thread
  /// text, tokens: a tokenizer.json (byte-level BPE). text is encoded with it and
  /// model.vocab_size defaults to its vocabulary; `strata sample` decodes with it.
  std::string tokenizer;
  // tokens
  std::string val_path;  // "" = <path>/val.bin when path is a directory, else carved by val_fraction
  // idx, npy: labelled images (test_* optional, evaluated once after training)
  std::string images, labels, test_images, test_labels;
  // registered datasets: data.options as YAML text (a mapping), handed to the factory
  std::string options_yaml;
  // synthetic
  std::string kind = "classification";  // classification | tokens
  int64_t size = 1024;
  std::vector<int64_t> sample_shape = {32};  // synthetic, registered: one input's shape
  int64_t num_classes = 10;                  // synthetic, idx, npy, registered
  int64_t vocab_size = 64;
  double noise = 0.1;
  uint64_t seed = 0;  // synthetic: the data; fashion_mnist, idx, npy, registered: the val split
};

struct OptimSection {
  std::string name = "adam";  // sgd | adam | adamw
  double lr = 1e-3;
  double momentum = 0.0;
  double dampening = 0.0;
  bool nesterov = false;
  double weight_decay = 0.0;
  std::vector<double> betas = {0.9, 0.999};
  double eps = 1e-8;
};

struct ScheduleSection {
  std::string name = "constant";  // constant | step | cosine
  int64_t warmup_steps = 0;
  int64_t step_size = 1000;
  double gamma = 0.1;
  double min_lr = 0.0;
};

struct TrainSection {
  int64_t epochs = 1;     // used when max_steps == 0
  int64_t max_steps = 0;  // optimizer steps; 0 = epochs * steps per epoch
  int64_t batch_size = 64;
  double grad_clip = 0.0;  // max global grad norm; 0 = off
  int64_t eval_every = 0;  // steps; 0 = only at the end
  int64_t eval_batches = 0;  // cap on eval batches; 0 = the whole eval split
  int64_t log_every = 50;
  int64_t checkpoint_every = 0;  // steps; 0 = only the final checkpoint
  int64_t keep_checkpoints = 0;  // newest step_* dirs kept; 0 = all
  bool save_final = true;
  /// Checkpoints are copied to host buffers at the step and written in the background.
  bool checkpoint_async = false;
  std::string resume;  // checkpoint dir (or run dir) to resume from; "" = fresh
  int64_t grad_accum_steps = 1;
};

/// A whole training config. `yaml` is the effective YAML (after --set), echoed into
/// checkpoints so `strata sample` can rebuild the model.
struct TrainConfig {
  RunSection run;
  ModelSection model;
  DataSection data;
  OptimSection optim;
  ScheduleSection schedule;
  TrainSection train;
  /// parallel.*: degrees dp (auto) / tp / pp, zero_stage, DDP bucket options, fsdp_prefetch, thread replicas.
  parallel::ParallelConfig parallel;
  /// comm.*: algorithm native|ring|tree|recursive|auto, timeout_s, debug (every multi-rank layout).
  comm::CommOptions comm;
  /// comm.backend: auto | mpi | nccl (under mpirun; auto = nccl for a CUDA
  /// run.device, mpi otherwise).
  std::string comm_backend = "auto";
  std::string yaml;
  std::string source;  // file name, for messages

  /// Reads every section from `root`, rejects unknown keys, then validate().
  /// Throws ConfigError naming the key path.
  static TrainConfig from_node(const ConfigNode& root);
  /// load_file + from_node.
  static TrainConfig load(const std::string& path, const std::vector<std::string>& overrides = {});
  /// Cross-field checks (e.g. n_embd % n_head, model/dataset compatibility);
  /// ConfigError naming the key path of the first violation.
  void validate() const;
};

/// "80G", "80GiB", "512MiB", "1e9": bytes (K/M/G/T suffixes are powers of 1024, as a
/// GPU's "80 GB" is 80 GiB); ConfigError naming `what` on anything else.
int64_t parse_bytes(const std::string& what, const std::string& s);

}  // namespace strata::apps

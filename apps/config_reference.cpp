// The config key table behind docs/config.md. A key added to a reader in apps/config.cpp
// (or parallel/parallel_config.cpp) needs a line here: tests/apps/config_reference_test.cpp
// loads configs of every model and dataset kind and names each key that lacks one.
#include "apps/config_reference.h"

#include <map>
#include <set>
#include <sstream>

namespace strata::apps {
namespace {

struct SectionDoc {
  const char* name;
  const char* intro;
};

const SectionDoc kSections[] = {
    {"run", "Where the run writes, its seed, threads, device and precision."},
    {"model", "The network. `type` selects the keys that apply: an `mlp` config with `n_head` is an unknown-key "
              "error."},
    {"data", "The dataset. `dataset` selects the keys that apply."},
    {"optim", "The optimizer (PyTorch's `torch.optim` semantics). `name` selects the keys that apply."},
    {"schedule", "The learning-rate schedule. Every key is read whatever `name` is, so switching `name` with "
                 "`--set` leaves the others valid."},
    {"train", "The training loop: length, batch, evaluation, logging and checkpoints."},
    {"parallel", "The layout, given by degrees whose product is the world size (see docs/parallelism.md). "
                 "`parallel: auto` instead leaves the choice to strata: once the world size is known, the planner's "
                 "fastest predicted layout that fits `run.memory_per_rank` is run, and the choice is logged with its "
                 "reasons (docs/planner.md)."},
    {"comm", "The collectives under every multi-rank layout."},
};

const std::vector<ConfigKeyDoc> kDocs = {
    // run
    {"run.dir", "string", "runs/default",
     "Run directory: `metrics.jsonl`, `checkpoints/step_N` (+ `LATEST`), `logs/rank<R>.log`. `strata train` refuses "
     "one holding an earlier run unless it resumes or `--overwrite` is given."},
    {"run.seed", "integer", "0", "Seed of parameter initialisation, data order and dropout."},
    {"run.threads", "integer", "0", "Compute threads per process; 0 = all cores. Under mpirun keep ranks x threads "
                                    "within the cores of a node."},
    {"run.device", "string", "cpu",
     "`cpu`, `cuda` or `cuda:N`. `cuda` under mpirun is the local rank's GPU (like torchrun's `LOCAL_RANK`), "
     "else `cuda:0`. Needs a CUDA build."},
    {"run.precision", "string", "f32",
     "`f32`, `bf16` or `f16`: forward and loss under autocast with f32 master weights; `f16` adds dynamic loss "
     "scaling. On the CPU 16-bit types are emulated (rounded, f32 arithmetic). `bf16_params`: 16-bit model "
     "states (docs/precision.md): the model's parameters, activations and gradients are bf16 (2 bytes each, on "
     "the CPU and on CUDA devices; the kernels compute in f32), gradients are all-reduced / reduce-scattered in "
     "bf16, and the optimizer keeps f32 master weights and f32 moments (ZeRO shards them), writing back rounded "
     "bf16 parameters in one fused pass. `f16_params`: the same with f16 and dynamic loss scaling (grad_scaler: "
     "skip the step on inf/NaN, back off, grow), on one process, with DDP or with ZeRO-1/2/3 or tensor "
     "parallelism (the skip decision agreed over the ranks)."},
    {"run.log_level", "string", "\"\"",
     "`trace`, `debug`, `info`, `warn`, `error`, `critical` or `off`; empty = `info` on rank 0, `warn` elsewhere. "
     "`$STRATA_LOG_LEVEL` overrides it."},
    {"run.peak_flops", "number", "0",
     "FLOP/s that MFU is reported against (e.g. a GPU's datasheet figure); 0 = this machine's GEMM throughput, "
     "measured when training starts."},
    {"run.trace.start_step", "integer", "1",
     "Timeline trace: first step recorded (per-rank Chrome trace JSON in `<run.dir>/trace/`, docs/observe.md)."},
    {"run.trace.steps", "integer", "0", "Timeline trace: steps recorded from `start_step`; 0 = tracing off (free)."},
    {"run.tensorboard", "boolean", "false",
     "Also write the logged scalars (train loss, lr, throughput, MFU; eval loss and accuracy) as TensorBoard "
     "event files in `<run.dir>/tb/` (`tensorboard --logdir runs`)."},
    {"run.memory_per_rank", "size", "0",
     "Bytes a rank may hold (`80G`, `512MiB`, or a number; K/M/G/T are powers of 1024); 0 = no limit. "
     "`parallel: auto` chooses among the layouts that fit it."},
    // model
    {"model.type", "string", "mlp", "`mlp`, `cnn`, `gpt` or `llama` (`gpt` and `llama` need token data: `text`, "
                                    "`tokens`, or `synthetic` with `kind: tokens`; docs/models.md)."},
    {"model.dropout", "number", "0", "Dropout probability in [0, 1); must be 0 for `llama`."},
    {"model.hidden", "list of integers (mlp) or integer (cnn)", "[256, 128] (mlp); 128 (cnn)",
     "mlp: the hidden layer widths. cnn: the width of the fully connected layer after the conv blocks."},
    {"model.activation", "string", "relu", "mlp: `relu`, `gelu`, `gelu_tanh` or `tanh`."},
    {"model.channels", "list of integers", "[32, 64]",
     "cnn: output channels of each conv block (3x3 conv, optional batch norm, ReLU, 2x2 max pool). 28x28 "
     "images allow at most 2 blocks."},
    {"model.batch_norm", "boolean", "true", "cnn: batch norm after each convolution."},
    {"model.init_from", "string", "\"\"",
     "A Hugging Face model directory (config.json + model.safetensors or a sharded index) whose weights a new "
     "run starts from, at any layout; its config.json fills `model.type` and the shape keys, and a shape key "
     "given beside it must agree (docs/interop.md). Ignored when the run resumes."},
    {"model.block_size", "integer", "64", "gpt, llama: context length in tokens (llama: the most positions)."},
    {"model.vocab_size", "integer", "0",
     "gpt, llama: token ids the model embeds; 0 = from the data. Required for `data.dataset: tokens`, whose largest id "
     "is checked against it."},
    {"model.n_layer", "integer", "4", "gpt, llama: transformer blocks."},
    {"model.n_head", "integer", "4", "gpt, llama: attention (query) heads; must divide `n_embd`."},
    {"model.n_embd", "integer", "128", "gpt, llama: embedding width (llama: `n_embd / n_head` must be even)."},
    {"model.bias", "boolean", "true", "gpt: biases in the linear layers and layer norms."},
    {"model.tie_weights", "boolean", "true (gpt); false (llama)",
     "gpt, llama: the output projection shares the token embedding's weights."},
    {"model.checkpoint_activations", "string", "none",
     "gpt, llama: activations recomputed in backward instead of stored. `none`; `full`: each block keeps only its "
     "input and is recomputed whole; `selective` (gpt only): the GEMM outputs are kept and the attention core "
     "(scores, softmax, dropout) is recomputed, after Megatron-LM's selective recomputation (docs/planner.md). "
     "`true` / `false` mean `full` / `none`."},
    {"model.n_kv_head", "integer", "0",
     "llama: key/value heads (grouped-query attention); 0 = `n_head`, 1 = multi-query; must divide `n_head`, and "
     "under tensor parallelism be divisible by `parallel.tp`."},
    {"model.intermediate_size", "integer", "0",
     "llama: the SwiGLU hidden width; 0 = torchtitan's rule: 4 x `n_embd`, times 2/3, times `ffn_dim_multiplier` "
     "when set, rounded up to a multiple of `multiple_of`."},
    {"model.ffn_dim_multiplier", "number", "0", "llama: multiplier of the SwiGLU width rule; 0 = unset."},
    {"model.multiple_of", "integer", "256", "llama: the SwiGLU width rule rounds up to a multiple of this."},
    {"model.norm_eps", "number", "1e-05", "llama: the RMSNorm epsilon."},
    {"model.rope_theta", "number", "10000", "llama: the rotary embedding base (Llama 3: 500000)."},
    {"model.rope_scaling.factor", "number", "8",
     "llama: Llama 3.1's rotary frequency scaling (present when `rope_scaling` is given): long wavelengths are "
     "divided by `factor`."},
    {"model.rope_scaling.low_freq_factor", "number", "1",
     "llama: wavelengths above `original_max_position_embeddings / low_freq_factor` are scaled."},
    {"model.rope_scaling.high_freq_factor", "number", "4",
     "llama: wavelengths below `original_max_position_embeddings / high_freq_factor` are kept; those between "
     "are interpolated."},
    {"model.rope_scaling.original_max_position_embeddings", "integer", "8192",
     "llama: the context length the rotary frequencies were trained for."},
    {"model.moe.experts", "integer", "required",
     "gpt, llama: a mixture of experts replaces the MLP of every `every`-th block: this many experts, top_k of "
     "them per token, summed with their gates (docs/moe.md)."},
    {"model.moe.top_k", "integer", "2", "Experts per token (at most `experts`)."},
    {"model.moe.every", "integer", "1", "Block i (from 0) is MoE when (i + 1) % every == 0; 1 = every block."},
    {"model.moe.gate", "string", "softmax",
     "`softmax` over the router logits (Switch, Mixtral) or `sigmoid` per expert (DeepSeek-V3)."},
    {"model.moe.norm_topk", "boolean", "true", "The top_k gates of a token are divided by their sum."},
    {"model.moe.aux_loss_coef", "number", "0.01",
     "Load-balancing loss coefficient: coef x E x sum_e f_e P_e per sequence (f_e: share of the sequence's "
     "assignments to e, P_e: its mean routing probability), averaged over sequences; 0 = off."},
    {"model.moe.z_loss_coef", "number", "0", "Router z-loss coefficient: the mean of logsumexp(logits)^2; 0 = off."},
    {"model.moe.shared_experts", "integer", "0",
     "Dense experts every token also passes through (one FFN of shared_experts x hidden); 0 = none."},
    {"model.moe.capacity_factor", "number", "0",
     "0 = dropless (grouped GEMM over variable-size groups). > 0: an expert takes at most "
     "ceil(capacity_factor x T x top_k / experts) tokens of a sequence of T; the rest of its assignments are "
     "dropped (first slots before second, tokens in order)."},
    {"model.moe.hidden", "integer", "0",
     "Expert hidden width; 0 = the dense MLP's (gpt: 4 x n_embd; llama: its SwiGLU width)."},
    {"model.moe.shared_expert_overlap", "boolean", "false",
     "Under expert parallelism the shared experts compute while the routed rows travel to their experts' ranks; "
     "false: after them (Megatron-LM's --moe-shared-expert-overlap)."},
    // data
    {"data.dataset", "string", "fashion_mnist",
     "`fashion_mnist` (IDX files), `text` (byte-level corpus), `tokens` (nanoGPT/llm.c .bin token files), `idx` "
     "and `npy` (your own images or vectors and labels), `synthetic` (generated in memory), or a name registered "
     "from C++ (docs/data.md lists every format and its keys)."},
    {"data.prefetch", "integer", "2", "Batches built ahead on the loader thread; 0 = build on the training thread."},
    {"data.path", "string", "\"\"; required (tokens)",
     "fashion_mnist: directory of the four IDX files (default /usr/share/datasets/fashion-mnist). text: a text file "
     "or a directory of them (default /usr/share/games/fortunes). tokens: a .bin token file (llm.c header or raw "
     "uint16) or a directory with train.bin (and val.bin); required. A registered dataset: handed to its factory."},
    {"data.val_path", "string", "\"\"",
     "tokens: the val split's token file; default `<path>/val.bin` when `path` is a directory holding one, else "
     "the tail `val_fraction` of the train tokens (setting both is an error)."},
    {"data.images", "string", "required", "idx, npy: the training images (or vectors) file, samples first."},
    {"data.labels", "string", "required", "idx, npy: the training labels file, one label per sample."},
    {"data.test_images", "string", "\"\"",
     "idx, npy: optional test images, evaluated once after training (with `test_labels`)."},
    {"data.test_labels", "string", "\"\"", "idx, npy: the labels of `test_images`."},
    {"data.val_fraction", "number", "0.1; 0",
     "Share of the training data held out (seeded) as the validation split for evaluation during training: text "
     "and synthetic hold out the tail. Default 0.1, or 0 where the dataset has a test split (fashion_mnist, idx "
     "and npy with test files), which is then evaluated instead."},
    {"data.stride", "integer", "1 (text); 0 (tokens)",
     "text: distance in bytes between the starts of training windows (>= 1). tokens: tokens between them; 0 = "
     "`model.block_size` (non-overlapping, as llm.c reads)."},
    {"data.tokenizer", "string", "\"\"",
     "text, tokens: a `tokenizer.json` (byte-level BPE, e.g. written by `strata tokenizer train`). text is encoded "
     "with it instead of read as bytes; `model.vocab_size` defaults to its vocabulary; `strata sample` encodes the "
     "prompt and decodes with it. A relative path that does not exist from the working directory is looked up "
     "beside the config file (a config names the tokenizer shipped with it); checkpoints record the absolute path. "
     "A missing file is a config error, a malformed one a data error naming the file (docs/tokenizer.md)."},
    {"data.kind", "string", "classification", "synthetic: `classification` (vectors or images) or `tokens` (for gpt)."},
    {"data.size", "integer", "1024", "synthetic: number of samples."},
    {"data.seed", "integer", "0", "synthetic: seed of the generated data."},
    {"data.sample_shape", "list of integers", "[32]",
     "synthetic classification: shape of one sample; `[C, H, W]` with square sides divisible by 2^blocks for cnn."},
    {"data.num_classes", "integer", "10; required (idx, npy)",
     "synthetic classification, idx, npy, registered datasets: number of classes (labels in [0, num_classes))."},
    {"data.vocab_size", "integer", "64", "synthetic tokens: vocabulary size."},
    {"data.noise", "number", "0.1", "synthetic tokens: probability that a token is random instead of following the "
                                    "generating rule."},
    // optim
    {"optim.name", "string", "adam", "`sgd`, `adam` or `adamw`."},
    {"optim.lr", "number", "required", "Learning rate (the peak, when a schedule warms up or decays)."},
    {"optim.weight_decay", "number", "0 (sgd, adam); 0.01 (adamw)",
     "L2 penalty added to the gradient (sgd, adam) or decoupled decay (adamw)."},
    {"optim.momentum", "number", "0", "sgd: momentum in [0, 1)."},
    {"optim.dampening", "number", "0", "sgd: dampening of the momentum."},
    {"optim.nesterov", "boolean", "false", "sgd: Nesterov momentum (needs momentum > 0 and dampening 0)."},
    {"optim.betas", "list of numbers", "[0.9, 0.999]", "adam, adamw: `[beta1, beta2]`, each in [0, 1)."},
    {"optim.eps", "number", "1e-08", "adam, adamw: term added to the denominator."},
    // schedule
    {"schedule.name", "string", "constant",
     "`constant`, `step` (multiply by `gamma` every `step_size` steps) or `cosine` (decay to `min_lr` at the last "
     "step)."},
    {"schedule.warmup_steps", "integer", "0", "Linear warm-up from 0 to `optim.lr` over this many steps."},
    {"schedule.step_size", "integer", "1000", "step: steps between decays."},
    {"schedule.gamma", "number", "0.1", "step: decay factor in (0, 1]."},
    {"schedule.min_lr", "number", "0", "cosine: the final learning rate (at most `optim.lr`)."},
    // train
    {"train.epochs", "integer", "1", "Passes over the training set; used when `max_steps` is 0."},
    {"train.max_steps", "integer", "0", "Optimizer steps; 0 = `epochs` x steps per epoch."},
    {"train.batch_size", "integer", "64",
     "Global batch of one forward and backward: each of N data-parallel ranks reads `batch_size / N` samples (must "
     "divide)."},
    {"train.grad_clip", "number", "0", "Clip gradients to this global norm; 0 = off."},
    {"train.eval_every", "integer", "0", "Evaluate every N steps; 0 = only at the end."},
    {"train.eval_batches", "integer", "0", "Cap on evaluation batches; 0 = the whole evaluation split."},
    {"train.log_every", "integer", "50", "Steps between progress lines and `metrics.jsonl` step records."},
    {"train.checkpoint_every", "integer", "0", "Checkpoint every N steps; 0 = only the final checkpoint."},
    {"train.keep_checkpoints", "integer", "0", "Newest `step_*` checkpoints kept; 0 = all."},
    {"train.save_final", "boolean", "true", "Write a checkpoint at the end of training."},
    {"train.checkpoint_async", "boolean", "false",
     "Copy each checkpoint to host buffers at the step and write it in the background; a failed write ends the run at the next step."},
    {"train.resume", "string", "\"\"",
     "Checkpoint dir, or run dir (its `LATEST`), to continue from; `auto` = `run.dir`'s newest checkpoint if it has "
     "one, else a fresh start. Same as `--resume`."},
    {"train.grad_accum_steps", "integer", "1",
     "Batches of `batch_size` per optimizer step (their gradients add up; DDP all-reduces only the last one's, "
     "the others run under `no_sync`)."},
    // parallel
    {"parallel.dp", "integer or auto", "auto",
     "Data-parallel degree; `auto` = world size / (cp x tp x pp): every rank under mpirun, 1 without it."},
    {"parallel.cp", "integer", "1",
     "Context-parallel degree (gpt): every sequence split over cp ranks, attention by ring attention; "
     "block_size must divide by 2 x cp. Gradients are averaged over dp x cp. Mesh order pp x dp x cp x tp. "
     "Composes with dp/ZeRO, tp and pp; dropout masks are one process's. CPU, f32 only (no CUDA kernel)."},
    {"parallel.cp_split", "string", "zigzag",
     "How cp cuts a sequence: `zigzag` (rank r holds chunks r and 2cp-1-r of 2cp: equal causal work) or `plain` "
     "(rank r holds the r-th T/cp tokens)."},
    {"parallel.tp", "integer", "1",
     "Tensor-parallel degree (mlp and gpt): consecutive ranks, Megatron-style column/row-parallel linears."},
    {"parallel.sequence_parallel", "boolean", "false",
     "At tp > 1 (gpt): LayerNorm and dropout run on sequence shards, all-gather/reduce-scatter replace the "
     "all-reduces (Megatron-SP); block_size must divide by tp."},
    {"parallel.pp", "integer", "1", "Pipeline stages."},
    {"parallel.pp_schedule", "string", "1f1b",
     "Pipeline schedule at pp > 1: `gpipe`, `1f1b`, `interleaved` (interleaved 1F1B, `pp_virtual` chunks per rank) "
     "or `zb-h1` (zero bubble: 1F1B with the linear layers' weight gradients deferred into the cool-down's idle "
     "time)."},
    {"parallel.microbatches", "integer", "0",
     "Micro-batches per step at pp > 1; 0 = pp (one per stage). Each data-parallel rank's batch must divide by it."},
    {"parallel.pp_virtual", "integer", "1", "Model chunks per rank for the `interleaved` schedule (v)."},
    {"parallel.pp_exchanges", "string", "auto",
     "How pipeline exchanges run: `inline` (posted and progressed by the compute thread, which polls while it "
     "waits), `thread` (each channel's comm thread) or `auto`: inline when this host's ranks x compute threads "
     ">= its cores, else thread. Pick `thread` on a host whose cores other processes also load (docs/pipeline.md)."},
    {"parallel.pp_layers", "list of integers", "[]",
     "Blocks (GPT) or layers (MLP: a Linear with its activation and dropout) per pipeline stage, e.g. [3, 1]; "
     "empty = balanced by parameter count."},
    {"parallel.zero_stage", "integer", "0",
     "0 = DDP on the dp ranks; 1, 2, 3 = ZeRO sharding of optimizer state, + gradients, + parameters (FSDP)."},
    {"parallel.ep", "integer", "1",
     "Expert-parallel degree (model.moe): each MoE layer's experts are sharded over groups of ep consecutive dp "
     "ranks, tokens go to their experts' ranks and back by all-to-all; must divide dp and `model.moe.experts`. The "
     "other parameters stay data-parallel over all dp ranks (DDP or ZeRO), the experts' over the dp / ep ranks "
     "holding the same experts (docs/moe.md)."},
    {"parallel.dp_shard", "integer", "0",
     "HSDP (hybrid sharding): ZeRO shards within groups of this many consecutive dp ranks and averages the "
     "gradient slices over the dp / dp_shard replicas; must divide dp and needs zero_stage >= 1. 0 (or dp) = "
     "ZeRO over every dp rank; 1 = every rank holds the whole state (docs/zero.md#hybrid-sharding-hsdp)."},
    {"parallel.dp_replicate", "integer", "0",
     "HSDP: the number of replicas, dp / dp_shard; 0 = derived. Given alone it sets dp_shard = dp / dp_replicate; "
     "given with dp_shard their product must be dp."},
    {"parallel.replicas", "integer", "null (off, or the length of `devices` when that is given)",
     "K >= 1 thread replicas of the model in one process (DataParallel)."},
    {"parallel.devices", "list of strings", "[]",
     "DataParallel over devices (`[cuda:0, cuda:1]`): replica k runs on `devices[k]`; `devices[0]` must be "
     "`run.device`."},
    {"parallel.bucket_cap_mb", "number", "25", "DDP and ZeRO-1/2: MiB per gradient bucket (PyTorch's default)."},
    {"parallel.first_bucket_mb", "number", "1", "DDP and ZeRO-1/2: size of the first (earliest ready) bucket."},
    {"parallel.last_bucket_mb", "number", "1", "DDP and ZeRO-1/2: size of the last bucket, reduced after backward."},
    {"parallel.find_unused_parameters", "boolean", "false",
     "DDP: mark parameters that got no gradient as ready, so a forward that skips some still completes."},
    {"parallel.broadcast_buffers", "boolean", "true", "DDP: rank 0's buffers (batch norm statistics) are broadcast "
                                                      "before each forward."},
    {"parallel.gradient_as_bucket_view", "boolean", "false",
     "DDP: parameters' `.grad` alias the buckets (saves one gradient copy, 4 bytes per parameter at f32)."},
    {"parallel.fsdp_prefetch", "boolean", "true", "ZeRO-3: gather the next block's parameters while this one runs."},
    // comm
    {"comm.backend", "string", "auto", "`auto`, `mpi` or `nccl` under mpirun; `auto` = nccl for a CUDA `run.device`, "
                                       "mpi otherwise."},
    {"comm.algorithm", "string", "auto",
     "`native` (the backend's own), `ring`, `tree`, `recursive` or `auto` (native where the backend has it, else "
     "recursive doubling below `small_message_bytes` and ring above)."},
    {"comm.timeout_s", "number", "300",
     "Limit on every wait; on expiry the op fails naming op, group and rank and the process exits 3."},
    {"comm.debug", "boolean", "false",
     "Check that every rank calls the same collective with the same shapes (or `STRATA_COMM_DEBUG=1`)."},
    {"comm.chunk_bytes", "integer", "1048576", "Pipelining unit of the ring and tree algorithms."},
    {"comm.small_message_bytes", "integer", "65536", "Threshold below which `auto` and `recursive` use recursive "
                                                     "doubling."},
    {"comm.reduce_dtype", "string", "param",
     "What 16-bit gradients (`run.precision: bf16_params`) are reduced in: `param` = their own dtype, 16 bits on the "
     "wire (ring/tree/recursive and mpi round at every combining step, local sums in f32 and rounds once); `f32` = "
     "widened to f32, reduced and sent in f32 (twice the bytes), rounded once. As FSDP's "
     "`MixedPrecision(reduce_dtype=...)`, which defaults to the parameters' dtype."},
};

std::string section_of(const std::string& path) { return path.substr(0, path.find('.')); }

// Markdown table cells may not hold a bare '|'.
std::string cell(const std::string& s) {
  std::string out;
  for (char c : s) out += c == '|' ? std::string("\\|") : std::string(1, c);
  return out;
}

// The alternatives a documented type or default lists, as (value, note): "[256, 128]
// (mlp); 128 (cnn)" -> {("[256, 128]", " (mlp)"), ("128", " (cnn)")}, "integer or auto" ->
// {("integer", ""), ("auto", "")}. A parenthesised note ends an alternative.
std::vector<std::pair<std::string, std::string>> split_alternatives(const std::string& text, const std::string& sep) {
  std::vector<std::pair<std::string, std::string>> out;
  for (size_t b = 0;;) {
    const size_t e = text.find(sep, b);
    const std::string alt = text.substr(b, e == std::string::npos ? std::string::npos : e - b);
    const size_t p = alt.find(" (");
    if (p != std::string::npos && alt.back() == ')') out.emplace_back(alt.substr(0, p), alt.substr(p));
    else out.emplace_back(alt, "");
    if (e == std::string::npos) return out;
    b = e + sep.size();
  }
}

std::set<std::string> alternatives(const std::string& text, const std::string& sep) {
  std::set<std::string> values;
  for (const auto& [value, note] : split_alternatives(text, sep)) values.insert(value);
  return values;
}

bool contains(const std::string& hay, const std::string& needle) { return hay.find(needle) != std::string::npos; }

// A default for the table: each alternative's value in code style, its note as prose
// ("`0` (sgd, adam); `0.01` (adamw)"); "required" stays a word.
std::string render_default(const std::string& text) {
  if (text == "required") return text;
  std::string out;
  for (const auto& [value, note] : split_alternatives(text, "; ")) out += (out.empty() ? "`" : "; `") + value + "`" + note;
  return out;
}

}  // namespace

const std::vector<ConfigKeyDoc>& config_key_docs() { return kDocs; }

std::string config_reference_markdown() {
  std::ostringstream md;
  md << "# Config reference\n\n"
        "Every key `strata train`, `eval`, `plan` and `bench` read, generated from the schema: this file is the "
        "output of `strata config reference`, and a test fails when a reader and this table disagree. A key "
        "that does not apply to the config's `model.type`, `data.dataset`, `data.kind` or `optim.name` is an "
        "unknown-key error. `strata config show --config X.yaml [--set k=v]...` prints a config with every "
        "default filled in.\n\n"
        "Any key can be set on the command line: `--set optim.lr=3e-4` (the value is parsed as YAML, so "
        "`--set optim.betas=[0.9,0.95]` is a list).\n";
  std::set<std::string> listed;
  for (const SectionDoc& s : kSections) {
    md << "\n## " << s.name << "\n\n" << s.intro << "\n\n| key | type | default | meaning |\n| --- | --- | --- | --- |\n";
    for (const ConfigKeyDoc& d : kDocs) {
      if (section_of(d.path) != s.name) continue;
      listed.insert(d.path);
      md << "| `" << d.path << "` | " << cell(d.type) << " | " << cell(render_default(d.default_text)) << " | "
         << cell(d.meaning) << " |\n";
    }
  }
  for (const ConfigKeyDoc& d : kDocs)  // a section missing from kSections must not hide its keys
    if (!listed.count(d.path)) md << "\n(no section) `" << d.path << "` | " << d.type << " | " << d.meaning << "\n";
  return md.str();
}

std::map<std::string, std::set<std::string>> choices_of(const std::vector<ConfigKeyRead>& reads) {
  std::map<std::string, std::set<std::string>> out;
  for (const ConfigKeyRead& r : reads)
    if (!r.choices.empty()) out[r.path].insert(r.choices.begin(), r.choices.end());
  return out;
}

std::vector<std::string> check_config_reads(const std::vector<ConfigKeyRead>& reads, bool all_read) {
  std::map<std::string, const ConfigKeyDoc*> docs;
  std::vector<std::string> problems;
  for (const ConfigKeyDoc& d : kDocs)
    if (!docs.emplace(d.path, &d).second) problems.push_back(std::string(d.path) + ": documented twice");
  std::set<std::string> read, reported;
  for (const ConfigKeyRead& r : reads) {
    read.insert(r.path);
    const std::string def = r.default_text ? *r.default_text : "required";
    const auto it = docs.find(r.path);
    if (it == docs.end()) {
      if (reported.insert(r.path).second)
        problems.push_back(r.path + ": read by the config loader but not documented; add to kDocs in "
                           "apps/config_reference.cpp: {\"" + r.path + "\", \"" + r.type + "\", \"" + def +
                           "\", \"<meaning>\"}, then regenerate docs/config.md");
      continue;
    }
    const ConfigKeyDoc& d = *it->second;
    const std::set<std::string> documented = alternatives(d.type, " or ");
    bool type_ok = true;
    for (const std::string& t : alternatives(r.type, " or ")) type_ok = type_ok && documented.count(t);
    if (!type_ok)
      problems.push_back(r.path + ": read as " + r.type + " but documented as '" + d.type + "'");
    if (!alternatives(d.default_text, "; ").count(def))
      problems.push_back(r.path + ": a reader's default is " + def + " but the documented default is '" +
                         d.default_text + "'");
  }
  for (const auto& [path, choices] : choices_of(reads)) {
    const auto it = docs.find(path);
    if (it == docs.end()) continue;
    for (const std::string& c : choices)
      if (!contains(it->second->meaning, "`" + c + "`"))
        problems.push_back(path + ": accepts '" + c + "' but its meaning in apps/config_reference.cpp does not name `" +
                           c + "`");
  }
  if (all_read)
    for (const ConfigKeyDoc& d : kDocs)
      if (!read.count(d.path))
        problems.push_back(std::string(d.path) + ": documented but no loaded config read it (a removed key, or a "
                           "variant missing from the test's configs)");
  return problems;
}

}  // namespace strata::apps

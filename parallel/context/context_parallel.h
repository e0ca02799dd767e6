// Context parallelism: every sequence split over the ranks of a cp group, attention by
// ring attention (K/V blocks passed around the ring, merged with the online softmax, as
// in Ring Attention and Megatron-LM's CP), causal work balanced by the zigzag split.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include <strata/comm/process_group.h>
#include <strata/nn/module.h>

namespace strata::parallel {

/// How a sequence of T tokens is cut over cp ranks. zigzag: 2*cp chunks of T/(2 cp),
/// rank r holds chunks r and 2cp-1-r (equal causal work on every rank; Megatron-LM's
/// and torchtitan's load-balanced layout). plain: rank r holds the r-th T/cp tokens
/// (the last rank does cp times the first one's causal work).
enum class CpSplit { zigzag, plain };
const char* cp_split_name(CpSplit s);

/// One contiguous run of a rank's tokens: global start position and length.
struct SeqSegment {
  int64_t start = 0, length = 0;
  bool operator==(const SeqSegment&) const = default;
};

/// Rank `rank`'s segments of a length-t sequence, in local order (zigzag: 2, plain: 1).
/// Error unless t is divisible by 2*cp (zigzag) or cp (plain).
std::vector<SeqSegment> cp_segments(int64_t t, int cp, int rank, CpSplit split);
/// The global positions (t / cp) i64 of rank `rank`'s tokens, in local order.
Tensor cp_positions(int64_t t, int cp, int rank, CpSplit split);
/// x (B, t, ...) -> rank `rank`'s tokens (B, t / cp, ...) along dim 1 (a copy; no autograd).
Tensor cp_shard(const Tensor& x, int cp, int rank, CpSplit split);

/// Causal self-attention of this rank's tokens against the whole sequence, autograd-aware
/// and collective over `cp` (every rank calls it for the same layer in the same order):
/// qkv (B, T/cp, 3*H*hd) holds q|k|v of this rank's tokens laid out by `split` ->
/// y (B, T/cp, H*hd), equal to those rows of full causal attention. f32/f64 on the CPU
/// (cp over an mpi or local group) or on a CUDA device (cp over an nccl group: the K/V
/// blocks and dK/dV accumulators stay in device memory and travel by NCCL send/recv).
/// Forward: cp-1 ring steps, each sending this rank's current K/V block (B, T/cp, 2*H*hd)
/// to the next rank while the block in hand is computed; fully masked (query chunk,
/// key chunk) pairs are skipped. Backward: the K/V blocks go around again with their dK/dV
/// accumulators, which end up back with the rank that owns them (cp-1 K/V sends and cp
/// dK/dV sends per rank, about twice the forward's bytes).
/// Attention dropout (dropout_p > 0, gen given): one gen->reserve(B*H*T*T) as the whole
/// attention's ops::dropout makes, and every (b, h, i, j)'s mask from its global
/// positions (AttentionDropout), so the cp ranks (whose generators agree) drop what one
/// process drops; the backward recomputes the masks.
Tensor ring_attention(const Tensor& qkv, int64_t head_dim, const std::shared_ptr<comm::ProcessGroup>& cp,
                      CpSplit split, double dropout_p = 0, Generator* gen = nullptr);

/// Token-wise dropout of this rank's part of the sequences, x (B, T/cp, ...): the mask of
/// each element is the one ops::dropout draws for the whole (B, T, ...) (one
/// gen.reserve(B*T*...), element (b, global t, ...) of it), so dropout under cp equals
/// one process's. Autograd-aware. The mask is drawn on the host and copied to x's device
/// (CUDA: B*T/cp*... bytes per call). Installed on the model's nn::Dropout modules by apply_cp.
Tensor cp_dropout(const Tensor& x, double p, Generator& gen, int cp, int rank, CpSplit split);

namespace detail {
/// ring_attention's arithmetic without its communication, as rank `rank` of `cp`: each
/// ring step computes against this rank's own K/V block placed at the positions of the
/// block it would hold there (the same blocks computed or skipped, the same FLOPs).
/// Benchmarks only: the compute-only baseline of exposed communication (its dK/dV are
/// not those of real attention).
Tensor ring_attention_compute_only(const Tensor& qkv, int64_t head_dim, int cp, int rank, CpSplit split);
}  // namespace detail

/// Bytes one rank sends for one attention layer in one step (forward, backward): the K/V
/// block is B * (T/cp) * 2C elements; forward (cp-1) blocks, backward (cp-1) K/V blocks
/// plus cp dK/dV blocks.
struct CpLayerBytes {
  int64_t forward = 0, backward = 0;
};
CpLayerBytes cp_layer_bytes(int64_t batch, int64_t t, int64_t channels, int cp, int64_t elem_size);

/// The activations one rank keeps from forward to backward in a GPT-style decoder
/// (pre-LN blocks, fused q|k|v, 4C GELU MLP, tied head), with N = batch * seq / cp tokens
/// per rank, in elements of bytes_per_element: per layer 16 N C (LayerNorm inputs and
/// outputs, q|k|v, the attention output, the MLP's 4C input and GELU output) + 4 N (the
/// LayerNorms' mean and rstd) + attention's own: at cp 1 the fused kernel's log-sum-exp
/// H N, at cp > 1 ring attention's output copy, K/V block and log-sum-exp (3 N C + H N);
/// then ln_f (N C + 2 N) and the loss's probabilities (N V).
struct CpActivationInput {
  int64_t batch = 1, seq = 1, embd = 1, heads = 1, layers = 1, vocab = 1;
  int64_t bytes_per_element = 4;
  int cp = 1;
};
int64_t cp_activation_bytes(const CpActivationInput& in);

/// What apply_cp changed, for undoing it (FullParams: one rank evaluates alone).
struct CpLayout {
  std::shared_ptr<comm::ProcessGroup> cp;
  CpSplit split = CpSplit::zigzag;
  std::vector<std::string> attention;  ///< module paths whose attention core is ring attention
};

/// Context parallelism on `model` over `cp`: every nn::ReplaceableAttention module gets
/// ring attention, and a language model (nn::LanguageModel) shards its input sequences
/// (shard_sequence hook: tokens and targets) and embeds global positions. Other hooks
/// (tensor parallelism's) are kept; every nn::Dropout draws its masks by cp_dropout
/// (attention dropout is ring attention's). Error when the model has no attention module.
CpLayout apply_cp(nn::Module& model, std::shared_ptr<comm::ProcessGroup> cp, CpSplit split);
/// RAII: while alive the model runs whole sequences with its own attention (the cp hooks
/// removed), e.g. for rank 0's evaluation; they are put back on destruction.
class CpSuspended {
 public:
  CpSuspended(nn::Module& model, const CpLayout& layout);
  ~CpSuspended();
  CpSuspended(const CpSuspended&) = delete;
  CpSuspended& operator=(const CpSuspended&) = delete;

 private:
  nn::Module& model_;
  const CpLayout& layout_;
};

}  // namespace strata::parallel

// Ring attention over a cp group and the model hooks that split sequences over it.
// Per rank: tokens in segments (zigzag: chunks r and 2cp-1-r), the K/V of one rank's
// tokens a contiguous block (B, T/cp, 2C) that travels the ring r -> r+1; at ring step s
// rank r holds the block of rank (r - s) mod cp. Shapes: C = H*hd of this rank's heads.
#include <strata/parallel/context/context_parallel.h>

#include <array>
#include <cmath>
#include <limits>
#include <optional>

#include <strata/autograd/lambda_node.h>
#include <strata/core/error.h>
#include <strata/nn/dropout.h>
#include <strata/nn/lm_hooks.h>
#include <strata/tensor/attention_block.h>
#include <strata/tensor/ops.h>

namespace strata::parallel {
namespace {

constexpr int kKvTag = 17, kGradTag = 18;  // K/V blocks and their dK/dV accumulators

// The per-segment views of a (B, Tl, W) tensor's columns [c0, c0 + C).
Tensor seg_cols(const Tensor& t, const SeqSegment& local, int64_t c0, int64_t c) {
  return ops::narrow(ops::narrow(t, 1, local.start, local.length), 2, c0, c);
}

// Local segments: the same lengths at local offsets 0, L, 2L ...
std::vector<SeqSegment> local_of(const std::vector<SeqSegment>& segs) {
  std::vector<SeqSegment> out;
  int64_t at = 0;
  for (const SeqSegment& s : segs) {
    out.push_back({at, s.length});
    at += s.length;
  }
  return out;
}

// Posts this ring step's exchange: `send` to the next rank, `recv` from the previous one.
comm::Work ring_exchange(comm::ProcessGroup& g, const Tensor& send, const Tensor& recv, int tag, const char* what) {
  const int r = g.rank(), n = g.size();
  return g.batch_isend_irecv({{comm::P2POp::Kind::send, send, (r + 1) % n, tag},
                              {comm::P2POp::Kind::recv, recv, (r + n - 1) % n, tag}},
                             what);
}

struct RingState {
  std::shared_ptr<comm::ProcessGroup> cp;  // null: compute only
  int n, r;
  CpSplit split;
  int64_t hd, t;               // head_dim, global sequence length
  Tensor qkv, kv, out, lse;    // (B,Tl,3C), own K/V (B,Tl,2C), y (B,Tl,C), lse (nseg,B,H,L)
  AttentionDropout drop;       // p 0: none
};

}  // namespace

const char* cp_split_name(CpSplit s) { return s == CpSplit::zigzag ? "zigzag" : "plain"; }

std::vector<SeqSegment> cp_segments(int64_t t, int cp, int rank, CpSplit split) {
  STRATA_CHECK(cp >= 1 && rank >= 0 && rank < cp, "[cp_segments] rank ", rank, " of ", cp);
  if (split == CpSplit::plain) {
    STRATA_CHECK(t % cp == 0, "[cp_segments] sequence length ", t, " is not divisible by cp = ", cp);
    return {{rank * (t / cp), t / cp}};
  }
  STRATA_CHECK(t % (2 * cp) == 0, "[cp_segments] sequence length ", t, " is not divisible by 2 x cp = ", 2 * cp,
               " (the zigzag split)");
  const int64_t c = t / (2 * cp);
  return {{rank * c, c}, {(2 * cp - 1 - rank) * c, c}};
}

Tensor cp_positions(int64_t t, int cp, int rank, CpSplit split) {
  std::vector<int64_t> pos;
  for (const SeqSegment& s : cp_segments(t, cp, rank, split))
    for (int64_t i = 0; i < s.length; ++i) pos.push_back(s.start + i);
  return ops::from_vector(pos, {int64_t(pos.size())});
}

Tensor cp_shard(const Tensor& x, int cp, int rank, CpSplit split) {
  STRATA_CHECK(x.dim() >= 2, "[cp_shard] expects (B, T, ...), got ", x.str());
  std::vector<Tensor> parts;
  for (const SeqSegment& s : cp_segments(x.size(1), cp, rank, split)) parts.push_back(ops::narrow(x, 1, s.start, s.length));
  return parts.size() == 1 ? ops::contiguous(parts[0]) : ops::cat(parts, 1);
}

int64_t cp_activation_bytes(const CpActivationInput& in) {
  const int64_t n = in.batch * in.seq / in.cp, c = in.embd;
  const int64_t attn = in.cp == 1 ? in.heads * n : 3 * n * c + in.heads * n;
  const int64_t per_layer = 16 * n * c + 4 * n + attn;
  return (in.layers * per_layer + n * c + 2 * n + n * in.vocab) * in.bytes_per_element;
}

CpLayerBytes cp_layer_bytes(int64_t batch, int64_t t, int64_t channels, int cp, int64_t elem_size) {
  const int64_t block = batch * (t / cp) * 2 * channels * elem_size;
  return {(cp - 1) * block, (cp > 1 ? (cp - 1) + cp : 0) * block};
}

namespace {

// ring_attention on rank r of n; without a group (the benchmarks' compute-only baseline)
// every step computes against this rank's own K/V block at the positions of the block it
// would hold, and nothing is sent.
Tensor ring_impl(const Tensor& qkv_in, int64_t hd, const std::shared_ptr<comm::ProcessGroup>& cp_group, int n, int r,
                 CpSplit split, double dropout_p = 0, Generator* gen = nullptr) {
  STRATA_CHECK(qkv_in.dim() == 3 && qkv_in.size(2) % 3 == 0 && (qkv_in.size(2) / 3) % hd == 0,
               "[ring_attention] expects qkv (B, T/cp, 3*H*hd) with head_dim ", hd, ", got ", shape_str(qkv_in.shape()));
  STRATA_CHECK((qkv_in.device().is_cpu() || qkv_in.device().type == DeviceType::CUDA) &&
                   (qkv_in.dtype() == DType::f32 || qkv_in.dtype() == DType::f64),
               "[ring_attention] runs on f32/f64 tensors on the CPU or a CUDA device, got ", qkv_in.str());
  STRATA_CHECK(!cp_group || cp_group->device() == qkv_in.device(), "[ring_attention] qkv is on ",
               qkv_in.device().str(), " but the cp group '", cp_group->name(), "' (", cp_group->backend_kind(),
               ") moves tensors on ", cp_group->device().str(),
               ": CUDA tensors need an nccl group, CPU tensors an mpi or local one");
  auto st = std::make_shared<RingState>();
  st->cp = cp_group;
  st->n = n;
  st->r = r;
  st->split = split;
  st->hd = hd;
  st->qkv = ops::contiguous(qkv_in.detach());
  const int64_t B = st->qkv.size(0), tl = st->qkv.size(1), C = st->qkv.size(2) / 3, H = C / hd;
  st->t = tl * n;
  const std::vector<SeqSegment> mine = cp_segments(st->t, n, r, split), loc = local_of(mine);
  const int64_t L = loc[0].length;
  const DType dt = st->qkv.dtype();
  const Device dev = st->qkv.device();  // every buffer, the blocks that travel included, lives here
  if (dropout_p > 0 && gen) {  // the whole (B, H, T, T) draw, as the fused module's ops::dropout
    st->drop = {.p = dropout_p, .seed = gen->seed(), .base = 0, .seq = st->t};
    st->drop.base = gen->reserve(uint64_t(B * H * st->t * st->t));
  }
  st->kv = ops::contiguous(ops::narrow(st->qkv, 2, C, 2 * C));  // (B, Tl, 2C): the block that travels
  st->out = ops::zeros({B, tl, C}, dt, dev);
  st->lse = ops::full({int64_t(loc.size()), B, H, L}, -std::numeric_limits<double>::infinity(), dt, dev);
  Tensor cur = st->kv, spare[2] = {ops::empty({B, tl, 2 * C}, dt, dev), ops::empty({B, tl, 2 * C}, dt, dev)};
  for (int s = 0; s < n; ++s) {
    const int src = (r - s + n) % n;
    std::optional<comm::Work> w;
    Tensor next;
    if (s + 1 < n && cp_group) {  // the next block arrives while this one is computed
      next = spare[s % 2];
      w = ring_exchange(*cp_group, cur, next, kKvTag, "cp ring attention forward");
    }
    const std::vector<SeqSegment> theirs = cp_segments(st->t, n, src, split), tloc = local_of(theirs);
    for (size_t i = 0; i < mine.size(); ++i) {
      Tensor q = seg_cols(st->qkv, loc[i], 0, C), o = ops::narrow(st->out, 1, loc[i].start, L);
      Tensor l = ops::select(st->lse, 0, int64_t(i));
      for (size_t j = 0; j < theirs.size(); ++j)
        ops::attention_block_forward(q, seg_cols(cur, tloc[j], 0, C), seg_cols(cur, tloc[j], C, C), mine[i].start,
                                     theirs[j].start, hd, o, l, st->drop);
    }
    if (w) {
      w->wait();
      cur = next;
    }
  }
  Tensor y = st->out.detach();
  if (!qkv_in.requires_grad()) return y;
  return record_fn("RingAttentionBackward", y, {qkv_in}, [st](const Tensor& dy) {
    const int n = st->n, r = st->r;
    const Tensor gy = ops::contiguous(dy);
    const int64_t B = st->qkv.size(0), tl = st->qkv.size(1), C = st->qkv.size(2) / 3;
    const std::vector<SeqSegment> mine = cp_segments(st->t, n, r, st->split), loc = local_of(mine);
    const int64_t L = loc[0].length;
    const DType dt = st->qkv.dtype();
    const Device dev = st->qkv.device();
    Tensor delta = ops::empty(st->lse.shape(), dt, dev);
    for (size_t i = 0; i < mine.size(); ++i) {
      Tensor d = ops::select(delta, 0, int64_t(i));
      ops::attention_block_delta(ops::narrow(gy, 1, loc[i].start, L), ops::narrow(st->out, 1, loc[i].start, L), st->hd, d);
    }
    Tensor dqkv = ops::zeros(st->qkv.shape(), dt, dev);
    Tensor cur = st->kv, kv_spare[2] = {ops::empty({B, tl, 2 * C}, dt, dev), ops::empty({B, tl, 2 * C}, dt, dev)};
    // dK/dV: this step's part is computed into a free buffer while the accumulator of the
    // block in hand is still arriving from the previous rank; then added and passed on.
    // send / recv: the accumulator in flight out and in; z: this step's part (s > 0).
    Tensor send = ops::zeros({B, tl, 2 * C}, dt, dev), recv = ops::empty({B, tl, 2 * C}, dt, dev),
           z = ops::empty({B, tl, 2 * C}, dt, dev);
    std::optional<comm::Work> wacc;
    for (int s = 0; s < n; ++s) {
      const int src = (r - s + n) % n;
      std::optional<comm::Work> w;
      Tensor next;
      if (s + 1 < n && st->cp) {
        next = kv_spare[s % 2];
        w = ring_exchange(*st->cp, cur, next, kKvTag, "cp ring attention backward (K/V)");
      }
      Tensor part = s == 0 ? send : z;
      if (s > 0) ops::zero_(z);
      const std::vector<SeqSegment> theirs = cp_segments(st->t, n, src, st->split), tloc = local_of(theirs);
      for (size_t i = 0; i < mine.size(); ++i) {
        Tensor q = seg_cols(st->qkv, loc[i], 0, C), go = ops::narrow(gy, 1, loc[i].start, L);
        Tensor dq = seg_cols(dqkv, loc[i], 0, C);
        const Tensor l = ops::select(st->lse, 0, int64_t(i)), d = ops::select(delta, 0, int64_t(i));
        for (size_t j = 0; j < theirs.size(); ++j) {
          Tensor dk = seg_cols(part, tloc[j], 0, C), dv = seg_cols(part, tloc[j], C, C);
          ops::attention_block_backward(q, seg_cols(cur, tloc[j], 0, C), seg_cols(cur, tloc[j], C, C), go, l, d,
                                        mine[i].start, theirs[j].start, st->hd, dq, dk, dv, st->drop);
        }
      }
      if (s > 0) {
        if (wacc) {  // the block's accumulator has arrived: add this rank's part, pass it on
          wacc->wait();
          ops::add_(recv, z);
          std::swap(send, recv);
        } else {  // compute only: the same add, nothing travels
          ops::add_(send, z);
        }
      }
      // After the last step this hop brings every accumulator home.
      if (n > 1 && st->cp) wacc = ring_exchange(*st->cp, send, recv, kGradTag, "cp ring attention backward (dK/dV)");
      if (w) {
        w->wait();
        cur = next;
      }
    }
    if (wacc) wacc->wait();
    Tensor dkv = ops::narrow(dqkv, 2, C, 2 * C);
    ops::copy_(dkv, wacc ? recv : send);
    return std::vector<Tensor>{dqkv};
  });
}

}  // namespace

Tensor ring_attention(const Tensor& qkv, int64_t head_dim, const std::shared_ptr<comm::ProcessGroup>& cp, CpSplit split,
                      double dropout_p, Generator* gen) {
  STRATA_CHECK(cp != nullptr, "[ring_attention] no cp group");
  return ring_impl(qkv, head_dim, cp, cp->size(), cp->rank(), split, dropout_p, gen);
}

Tensor cp_dropout(const Tensor& x, double p, Generator& gen, int cp, int rank, CpSplit split) {
  STRATA_CHECK(x.dim() >= 2, "[cp_dropout] expects (B, T/cp, ...), got ", x.str());
  STRATA_CHECK(p >= 0 && p < 1, "[cp_dropout] p must be in [0, 1), got ", p);
  const int64_t B = x.size(0), tl = x.size(1), inner = tl > 0 && B > 0 ? x.numel() / (B * tl) : 0, T = tl * cp;
  const std::vector<int64_t> pos = cp_positions(T, cp, rank, split).to_vector<int64_t>();
  // The whole tensor's draw (element (b, t, i) at (b T + t) inner + i), this rank's rows.
  const uint64_t base = gen.reserve(uint64_t(B * T * inner));
  const uint32_t threshold = uint32_t(std::ceil(double(float(p)) * 16777216.0));  // as cpu::dropout_kernel
  Tensor mask = ops::empty(x.shape(), DType::u8);
  uint8_t* m = mask.data<uint8_t>();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < tl; ++t) {
      const uint64_t e0 = uint64_t((b * T + pos[size_t(t)]) * inner);
      uint8_t* row = m + (b * tl + t) * inner;
      uint64_t have = ~uint64_t(0);
      std::array<uint32_t, 4> w{};
      for (int64_t i = 0; i < inner; ++i) {
        const uint64_t e = e0 + uint64_t(i), c = base + e / 4;
        if (c != have) {
          w = gen.block(c);
          have = c;
        }
        row[i] = (w[e % 4] >> 8) >= threshold;
      }
    }
  // The mask is drawn on the host (the draws of global rows) and applied on x's device.
  if (!x.device().is_cpu()) mask = mask.to(x.device());
  // y = x * mask / (1-p): dropout's backward kernel is exactly that product.
  Tensor y = ops::dropout_backward(ops::contiguous(x.detach()), mask, p);
  if (!x.requires_grad()) return y;
  return record_fn("CpDropoutBackward", y, {x},
                   [mask, p](const Tensor& g) { return std::vector<Tensor>{ops::dropout_backward(g, mask, p)}; });
}

namespace detail {
Tensor ring_attention_compute_only(const Tensor& qkv, int64_t head_dim, int cp, int rank, CpSplit split) {
  return ring_impl(qkv, head_dim, nullptr, cp, rank, split);
}
}  // namespace detail

CpLayout apply_cp(nn::Module& model, std::shared_ptr<comm::ProcessGroup> cp, CpSplit split) {
  STRATA_CHECK(cp != nullptr, "[apply_cp] no cp group");
  CpLayout layout{.cp = cp, .split = split, .attention = {}};
  for (const auto& [name, m] : model.named_modules()) {
    if (auto* d = dynamic_cast<nn::Dropout*>(m.get())) {  // token-wise: the whole sequence's masks
      const int n = cp->size(), r = cp->rank();
      d->set_dropout_fn([n, r, split](const Tensor& x, double p, Generator& g) { return cp_dropout(x, p, g, n, r, split); });
      continue;
    }
    auto* a = dynamic_cast<nn::ReplaceableAttention*>(m.get());
    if (!a) continue;
    a->set_attention_fn([cp, split](const Tensor& qkv, int64_t hd, double p, Generator* gen) {
      return ring_attention(qkv, hd, cp, split, p, gen);
    });
    layout.attention.push_back(name);
  }
  STRATA_CHECK(!layout.attention.empty(), "[apply_cp] the model (", model.type_name(),
               ") has no replaceable attention module: context parallelism needs one");
  if (auto* lm = dynamic_cast<nn::LanguageModel*>(&model)) {
    nn::LmHooks h = lm->lm_hooks();
    const int n = cp->size(), r = cp->rank();
    h.shard_sequence = [n, r, split](const Tensor& x) { return cp_shard(x, n, r, split); };
    h.positions = [n, r, split](int64_t t_local) { return cp_positions(t_local * n, n, r, split); };
    lm->set_lm_hooks(std::move(h));
  }
  return layout;
}

CpSuspended::CpSuspended(nn::Module& model, const CpLayout& layout) : model_(model), layout_(layout) {
  for (const auto& [name, m] : model_.named_modules()) {
    if (auto* a = dynamic_cast<nn::ReplaceableAttention*>(m.get())) a->set_attention_fn(nullptr);
    if (auto* d = dynamic_cast<nn::Dropout*>(m.get())) d->set_dropout_fn(nullptr);
  }
  if (auto* lm = dynamic_cast<nn::LanguageModel*>(&model_)) {
    nn::LmHooks h = lm->lm_hooks();
    h.shard_sequence = nullptr;
    h.positions = nullptr;
    lm->set_lm_hooks(std::move(h));
  }
}

CpSuspended::~CpSuspended() {
  try {
    apply_cp(model_, layout_.cp, layout_.split);
  } catch (...) {  // the same modules as before: cannot fail; never throw from a destructor
  }
}

}  // namespace strata::parallel

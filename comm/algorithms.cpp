// Ring, tree and recursive algorithms over Backend::isend/irecv (see algorithms.h).
// Scratch buffers are u8 tensors charged to MemCategory::comm.
#include <strata/comm/algorithms.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include <strata/comm/reduce_kernels.h>
#include <strata/core/error.h>
#include <strata/core/memory.h>

namespace strata::comm::detail {
namespace {

Tensor scratch(int64_t bytes) {
  MemoryScope scope(MemCategory::comm);
  return Tensor::empty({std::max<int64_t>(bytes, 1)}, DType::u8);
}
char* bytes_of(const Tensor& t) { return static_cast<char*>(t.raw_data()); }

int mod(int x, int n) { return ((x % n) + n) % n; }

// Balanced split of `count` into `parts`: piece k is [count*k/parts, count*(k+1)/parts).
inline int64_t split_at(int64_t count, int64_t parts, int64_t k) { return count * k / parts; }

}  // namespace

// ------------------------------------------------------------------ P2P

std::unique_ptr<Request> P2P::isend(const void* data, int64_t bytes, int dst) {
  *bytes_sent_ += bytes;
  return b_.isend(data, bytes, dst, tag_);
}

std::unique_ptr<Request> P2P::irecv(void* data, int64_t bytes, int src) { return b_.irecv(data, bytes, src, tag_); }

void P2P::wait(std::unique_ptr<Request>& r) {
  if (!r) return;
  if (!r->wait_until(deadline_)) throw TimedOut(r->peer());
  r.reset();
}

void P2P::send(const void* data, int64_t bytes, int dst) {
  auto r = isend(data, bytes, dst);
  wait(r);
}

void P2P::recv(void* data, int64_t bytes, int src) {
  auto r = irecv(data, bytes, src);
  wait(r);
}

void P2P::sendrecv(const void* sdata, int64_t sbytes, int dst, void* rdata, int64_t rbytes, int src) {
  auto rr = irecv(rdata, rbytes, src);
  auto sr = isend(sdata, sbytes, dst);
  wait(rr);
  wait(sr);
}

// ------------------------------------------------------------------ ring

namespace {

// Pipelined ring reduce-scatter over N segments (offsets/counts in elements).
// Step s (0..N-2): send segment (r-s-1), receive segment (r-s-2) and reduce it with
// `in`; after the last step rank r holds the full reduction of segment r.
// src_of(s, k): where segment k's partial sum sent at step s lives (s == 0: `in`).
// dst_of(s, k): where the reduction of step s is written.
template <class SrcOf, class DstOf>
void ring_reduce_scatter_core(P2P& p, const char* in, const std::vector<int64_t>& off,
                              const std::vector<int64_t>& cnt, DType dt, ReduceOp op, int64_t chunk_bytes,
                              SrcOf src_of, DstOf dst_of) {
  const int n = p.size(), r = p.rank();
  const int64_t es = int64_t(element_size(dt));
  const int64_t max_cnt = *std::max_element(cnt.begin(), cnt.end());
  const int64_t nchunks = std::max<int64_t>(1, (max_cnt * es + chunk_bytes - 1) / chunk_bytes);
  const int64_t max_chunk = (max_cnt + nchunks - 1) / nchunks + 1;
  Tensor tmp_t = scratch(2 * max_chunk * es);
  char* tmp[2] = {bytes_of(tmp_t), bytes_of(tmp_t) + max_chunk * es};
  const int right = mod(r + 1, n), left = mod(r - 1, n);
  const int64_t items = int64_t(n - 1) * nchunks;

  struct InFlight {
    std::unique_ptr<Request> send, recv;
  };
  auto chunk_range = [&](int k, int64_t c) {  // element [begin, count) of chunk c in segment k
    const int64_t b = split_at(cnt[k], nchunks, c), e = split_at(cnt[k], nchunks, c + 1);
    return std::pair<int64_t, int64_t>(b, e - b);
  };
  auto post = [&](int64_t i) {
    InFlight f;
    const int s = int(i / nchunks);
    const int64_t c = i % nchunks;
    const int ks = mod(r - s - 1, n), kr = mod(r - s - 2, n);
    auto [sb, sn] = chunk_range(ks, c);
    auto [rb, rn] = chunk_range(kr, c);
    if (rn > 0) f.recv = p.irecv(tmp[i % 2], rn * es, left);
    if (sn > 0) f.send = p.isend(src_of(s, ks) + sb * es, sn * es, right);
    return f;
  };

  InFlight cur = post(0);
  for (int64_t i = 0; i < items; ++i) {
    p.wait(cur.recv);
    // Posting item i+1 before reducing item i is safe unless it sends what item i
    // produces, which happens only with a single chunk per segment.
    const bool early = nchunks >= 2 && i + 1 < items;
    InFlight next;
    if (early) next = post(i + 1);
    const int s = int(i / nchunks);
    const int64_t c = i % nchunks;
    const int kr = mod(r - s - 2, n);
    auto [rb, rn] = chunk_range(kr, c);
    reduce3(dst_of(s, kr) + rb * es, in + (off[kr] + rb) * es, tmp[i % 2], rn, dt, op);
    p.wait(cur.send);
    if (!early && i + 1 < items) next = post(i + 1);
    cur = std::move(next);
  }
}

// Ring all-gather of N segments of buf (byte offsets/sizes); rank r already holds
// segment `own`. Step s sends segment own-s and receives own-s-1.
void ring_all_gather_core(P2P& p, char* buf, const std::vector<int64_t>& off, const std::vector<int64_t>& len,
                          int own) {
  const int n = p.size(), r = p.rank();
  const int right = mod(r + 1, n), left = mod(r - 1, n);
  for (int s = 0; s < n - 1; ++s) {
    const int ks = mod(own - s, n), kr = mod(own - s - 1, n);
    std::unique_ptr<Request> rr, sr;
    if (len[kr] > 0) rr = p.irecv(buf + off[kr], len[kr], left);
    if (len[ks] > 0) sr = p.isend(buf + off[ks], len[ks], right);
    p.wait(rr);
    p.wait(sr);
  }
}

}  // namespace

void ring_all_reduce(P2P& p, void* buf, int64_t count, DType dt, ReduceOp op, int64_t chunk_bytes) {
  const int n = p.size();
  if (n == 1 || count == 0) return;
  const int64_t es = int64_t(element_size(dt));
  std::vector<int64_t> off(n), cnt(n), boff(n), blen(n);
  for (int k = 0; k < n; ++k) {
    off[k] = split_at(count, n, k);
    cnt[k] = split_at(count, n, k + 1) - off[k];
    boff[k] = off[k] * es;
    blen[k] = cnt[k] * es;
  }
  char* b = static_cast<char*>(buf);
  auto seg = [&](int, int k) { return b + off[k] * es; };  // in place: every step reads/writes buf
  ring_reduce_scatter_core(p, b, off, cnt, dt, op, chunk_bytes, seg, seg);
  ring_all_gather_core(p, b, boff, blen, p.rank());
}

void ring_reduce_scatter(P2P& p, const void* input, void* output, int64_t count_per_rank, DType dt,
                         ReduceOp op, int64_t chunk_bytes) {
  const int n = p.size();
  const int64_t es = int64_t(element_size(dt));
  const char* in = static_cast<const char*>(input);
  char* out = static_cast<char*>(output);
  if (count_per_rank == 0) return;
  if (n == 1) {
    if (out != in) std::memmove(out, in, size_t(count_per_rank * es));
    return;
  }
  std::vector<int64_t> off(n), cnt(n, count_per_rank);
  for (int k = 0; k < n; ++k) off[k] = k * count_per_rank;
  // Partial sums alternate between two scratch segments; the last step writes output.
  Tensor partial_t = n > 2 ? scratch(2 * count_per_rank * es) : Tensor();  // 2 ranks: one step, into output
  char* partial[2] = {n > 2 ? bytes_of(partial_t) : nullptr, n > 2 ? bytes_of(partial_t) + count_per_rank * es : nullptr};
  auto src_of = [&](int s, int k) -> const char* { return s == 0 ? in + off[k] * es : partial[(s - 1) % 2]; };
  auto dst_of = [&](int s, int) -> char* { return s == n - 2 ? out : partial[s % 2]; };
  ring_reduce_scatter_core(p, in, off, cnt, dt, op, chunk_bytes, src_of, dst_of);
}

void ring_all_gather(P2P& p, const void* input, void* output, int64_t bytes_per_rank) {
  const int n = p.size(), r = p.rank();
  char* out = static_cast<char*>(output);
  if (bytes_per_rank == 0) return;
  if (out + r * bytes_per_rank != input) std::memmove(out + r * bytes_per_rank, input, size_t(bytes_per_rank));
  std::vector<int64_t> off(n), len(n, bytes_per_rank);
  for (int k = 0; k < n; ++k) off[k] = k * bytes_per_rank;
  ring_all_gather_core(p, out, off, len, r);
}

// ------------------------------------------------------------------ binomial tree

namespace {
struct TreeLinks {
  int parent = -1;            // group rank, -1 at root
  std::vector<int> children;  // group ranks, largest subtree first
};
// MPICH-style binomial tree over virtual ranks vr = (r - root) mod N.
TreeLinks binomial_tree(int r, int n, int root) {
  TreeLinks t;
  const int vr = mod(r - root, n);
  int mask = 1;
  while (mask < n) {
    if (vr & mask) {
      t.parent = mod(vr - mask + root, n);
      break;
    }
    mask <<= 1;
  }
  for (mask >>= 1; mask > 0; mask >>= 1)
    if (vr + mask < n) t.children.push_back(mod(vr + mask + root, n));
  return t;
}
}  // namespace

void tree_broadcast(P2P& p, void* buf, int64_t bytes, int root, int64_t chunk_bytes) {
  const int n = p.size();
  if (n == 1 || bytes == 0) return;
  const TreeLinks t = binomial_tree(p.rank(), n, root);
  char* b = static_cast<char*>(buf);
  const int64_t nchunks = std::max<int64_t>(1, (bytes + chunk_bytes - 1) / chunk_bytes);
  std::vector<std::unique_ptr<Request>> sends;
  std::unique_ptr<Request> recv;
  auto range = [&](int64_t c) {
    const int64_t s = split_at(bytes, nchunks, c);
    return std::pair<int64_t, int64_t>(s, split_at(bytes, nchunks, c + 1) - s);
  };
  if (t.parent >= 0) recv = p.irecv(b + range(0).first, range(0).second, t.parent);
  for (int64_t c = 0; c < nchunks; ++c) {
    p.wait(recv);
    if (t.parent >= 0 && c + 1 < nchunks) recv = p.irecv(b + range(c + 1).first, range(c + 1).second, t.parent);
    auto [s, len] = range(c);
    for (int child : t.children) sends.push_back(p.isend(b + s, len, child));
  }
  for (auto& s : sends) p.wait(s);
}

namespace {
// Binomial-tree reduce to root. keep_input: non-roots with children accumulate in scratch
// so their own buffer stays unchanged; otherwise every rank accumulates in place.
void tree_reduce_core(P2P& p, void* buf, int64_t count, DType dt, ReduceOp op, int root, int64_t chunk_bytes,
                      bool keep_input) {
  const TreeLinks t = binomial_tree(p.rank(), p.size(), root);
  const int64_t es = int64_t(element_size(dt));
  char* b = static_cast<char*>(buf);
  Tensor acc_t;
  char* acc = b;
  if (keep_input && t.parent >= 0 && !t.children.empty()) {
    acc_t = scratch(count * es);
    acc = bytes_of(acc_t);
    std::memcpy(acc, b, size_t(count * es));
  }
  const int64_t nchunks = std::max<int64_t>(1, (count * es + chunk_bytes - 1) / chunk_bytes);
  const int64_t max_chunk = (count + nchunks - 1) / nchunks + 1;
  Tensor tmp_t = t.children.empty() ? Tensor() : scratch(max_chunk * es);
  std::vector<std::unique_ptr<Request>> sends;
  // Children in order of increasing subtree size (reverse of the broadcast order).
  std::vector<int> kids(t.children.rbegin(), t.children.rend());
  for (int64_t c = 0; c < nchunks; ++c) {
    const int64_t s = split_at(count, nchunks, c), len = split_at(count, nchunks, c + 1) - s;
    for (int kid : kids) {
      p.recv(bytes_of(tmp_t), len * es, kid);
      reduce3(acc + s * es, acc + s * es, bytes_of(tmp_t), len, dt, op);
    }
    if (t.parent >= 0) sends.push_back(p.isend(acc + s * es, len * es, t.parent));
  }
  for (auto& s : sends) p.wait(s);
}
}  // namespace

void tree_reduce(P2P& p, void* buf, int64_t count, DType dt, ReduceOp op, int root, int64_t chunk_bytes) {
  if (p.size() == 1 || count == 0) return;
  tree_reduce_core(p, buf, count, dt, op, root, chunk_bytes, /*keep_input=*/true);
}

void tree_all_reduce(P2P& p, void* buf, int64_t count, DType dt, ReduceOp op, int64_t chunk_bytes) {
  if (p.size() == 1 || count == 0) return;
  // Every rank's buffer is overwritten by the broadcast, so the reduce may use it as scratch.
  tree_reduce_core(p, buf, count, dt, op, 0, chunk_bytes, /*keep_input=*/false);
  tree_broadcast(p, buf, count * int64_t(element_size(dt)), 0, chunk_bytes);
}

// ------------------------------------------------------------------ recursive doubling / halving

namespace {
// Folding of a non-power-of-two group onto p2 = 2^floor(log2 N) virtual ranks: among
// the first 2*rem ranks, odd ones hand their data to the even neighbour and sit out.
struct Fold {
  int p2 = 1, rem = 0, vrank = -1;
  int real(int v) const { return v < rem ? 2 * v : v + rem; }
};
Fold make_fold(int r, int n) {
  Fold f;
  while (f.p2 * 2 <= n) f.p2 *= 2;
  f.rem = n - f.p2;
  if (r < 2 * f.rem) f.vrank = (r % 2 == 0) ? r / 2 : -1;
  else f.vrank = r - f.rem;
  return f;
}
// Before: odd ranks < 2*rem send to r-1, which reduces. Returns false if r sits out.
bool fold_in(P2P& p, const Fold& f, char* b, int64_t count, DType dt, ReduceOp op, char* tmp) {
  const int r = p.rank();
  const int64_t bytes = count * int64_t(element_size(dt));
  if (r >= 2 * f.rem) return true;
  if (r % 2 == 1) {
    p.send(b, bytes, r - 1);
    return false;
  }
  p.recv(tmp, bytes, r + 1);
  reduce3(b, b, tmp, count, dt, op);  // lower rank first
  return true;
}
void fold_out(P2P& p, const Fold& f, char* b, int64_t bytes) {
  const int r = p.rank();
  if (r >= 2 * f.rem) return;
  if (r % 2 == 1) p.recv(b, bytes, r - 1);
  else p.send(b, bytes, r + 1);
}
}  // namespace

void recursive_doubling_all_reduce(P2P& p, void* buf, int64_t count, DType dt, ReduceOp op) {
  const int n = p.size();
  if (n == 1 || count == 0) return;
  const int64_t bytes = count * int64_t(element_size(dt));
  char* b = static_cast<char*>(buf);
  Tensor tmp_t = scratch(bytes);
  char* tmp = bytes_of(tmp_t);
  const Fold f = make_fold(p.rank(), n);
  if (fold_in(p, f, b, count, dt, op, tmp)) {
    for (int mask = 1; mask < f.p2; mask <<= 1) {
      const int vpartner = f.vrank ^ mask;
      p.sendrecv(b, bytes, f.real(vpartner), tmp, bytes, f.real(vpartner));
      // The lower virtual rank's data goes first so both sides compute the same bits.
      if (f.vrank < vpartner) reduce3(b, b, tmp, count, dt, op);
      else reduce3(b, tmp, b, count, dt, op);
    }
  }
  fold_out(p, f, b, bytes);
}

void halving_doubling_all_reduce(P2P& p, void* buf, int64_t count, DType dt, ReduceOp op) {
  const int n = p.size();
  if (n == 1 || count == 0) return;
  const int64_t es = int64_t(element_size(dt));
  char* b = static_cast<char*>(buf);
  Tensor tmp_t = scratch(count * es);
  char* tmp = bytes_of(tmp_t);
  const Fold f = make_fold(p.rank(), n);
  if (fold_in(p, f, b, count, dt, op, tmp)) {
    const int p2 = f.p2, v = f.vrank;
    auto blk = [&](int k) { return split_at(count, p2, k); };  // element offset of block k
    // Reduce-scatter by recursive halving: at `mask`, keep the half of the current
    // 2*mask-block range that contains v, send the partner's half.
    for (int mask = p2 / 2; mask >= 1; mask >>= 1) {
      const int vp = v ^ mask;
      const int keep = (v / mask) * mask, give = (vp / mask) * mask;
      const int64_t kb = blk(keep), kn = blk(keep + mask) - kb;
      const int64_t gb = blk(give), gn = blk(give + mask) - gb;
      p.sendrecv(b + gb * es, gn * es, f.real(vp), tmp, kn * es, f.real(vp));
      if (v < vp) reduce3(b + kb * es, b + kb * es, tmp, kn, dt, op);
      else reduce3(b + kb * es, tmp, b + kb * es, kn, dt, op);
    }
    // All-gather by recursive doubling: v owns block v, then ranges double.
    for (int mask = 1; mask < p2; mask <<= 1) {
      const int vp = v ^ mask;
      const int mine = (v / mask) * mask, theirs = (vp / mask) * mask;
      const int64_t mb = blk(mine), mn = blk(mine + mask) - mb;
      const int64_t tb = blk(theirs), tn = blk(theirs + mask) - tb;
      p.sendrecv(b + mb * es, mn * es, f.real(vp), b + tb * es, tn * es, f.real(vp));
    }
  }
  fold_out(p, f, b, count * es);
}

// ------------------------------------------------------------------ linear forms

void linear_gather(P2P& p, const void* input, void* output, int64_t bytes_per_rank, int root) {
  const int n = p.size(), r = p.rank();
  if (bytes_per_rank == 0) return;
  if (r != root) {
    p.send(input, bytes_per_rank, root);
    return;
  }
  char* out = static_cast<char*>(output);
  if (out + r * bytes_per_rank != input) std::memmove(out + r * bytes_per_rank, input, size_t(bytes_per_rank));
  std::vector<std::unique_ptr<Request>> recvs;
  for (int j = 0; j < n; ++j)
    if (j != root) recvs.push_back(p.irecv(out + j * bytes_per_rank, bytes_per_rank, j));
  for (auto& q : recvs) p.wait(q);
}

void linear_scatter(P2P& p, const void* input, void* output, int64_t bytes_per_rank, int root) {
  const int n = p.size(), r = p.rank();
  if (bytes_per_rank == 0) return;
  if (r != root) {
    p.recv(output, bytes_per_rank, root);
    return;
  }
  const char* in = static_cast<const char*>(input);
  std::vector<std::unique_ptr<Request>> sends;
  for (int j = 0; j < n; ++j)
    if (j != root) sends.push_back(p.isend(in + j * bytes_per_rank, bytes_per_rank, j));
  std::memmove(output, in + r * bytes_per_rank, size_t(bytes_per_rank));
  for (auto& q : sends) p.wait(q);
}

void pairwise_all_to_all(P2P& p, const void* input, void* output, int64_t bytes_per_rank) {
  const int n = p.size(), r = p.rank();
  if (bytes_per_rank == 0) return;
  const char* in = static_cast<const char*>(input);
  char* out = static_cast<char*>(output);
  std::memmove(out + r * bytes_per_rank, in + r * bytes_per_rank, size_t(bytes_per_rank));
  for (int s = 1; s < n; ++s) {
    const int dst = mod(r + s, n), src = mod(r - s, n);
    p.sendrecv(in + dst * bytes_per_rank, bytes_per_rank, dst, out + src * bytes_per_rank, bytes_per_rank, src);
  }
}

void dissemination_barrier(P2P& p) {
  const int n = p.size(), r = p.rank();
  for (int k = 1; k < n; k <<= 1) p.sendrecv(nullptr, 0, mod(r + k, n), nullptr, 0, mod(r - k, n));
}

}  // namespace strata::comm::detail

// Local backend: ranks are threads sharing memory. A collective publishes each rank's
// buffer pointers, meets at a barrier, lets every rank work on its own slice of all
// buffers directly, and meets again before anyone returns (see comm/local.h).
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

#include <strata/comm/algorithms.h>
#include <strata/comm/local.h>
#include <strata/comm/reduce_kernels.h>
#include <strata/core/error.h>

namespace strata::comm {
namespace {

// A posted send or receive waiting for its match.
struct Slot {
  void* ptr = nullptr;  // receive buffer, or (const) send data
  int64_t bytes = 0;
  int tag = 0;
  bool done = false;
  std::string error;
};

// Messages from one rank to another. Whoever arrives second does the copy.
struct Channel {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::shared_ptr<Slot>> sends, recvs;
};

// State shared by all ranks of one local group.
struct Shared {
  explicit Shared(int n_, int world_n_ = 0) : n(n_), world_n(world_n_ > 0 ? world_n_ : n_), in(n_), out(n_), color_key(n_), children(n_) {
    for (int i = 0; i < n * n; ++i) channels.push_back(std::make_unique<Channel>());
  }
  const int n;
  const int world_n;  // ranks of the world this group was split from (all threads of this process)

  std::mutex mu;  // barrier, abort, split bookkeeping
  std::condition_variable cv;
  int arrived = 0;
  uint64_t generation = 0;
  std::atomic<uint64_t> gen{0};
  std::atomic<bool> aborted{false};
  std::string abort_reason;
  std::vector<std::weak_ptr<Shared>> descendants;

  // Published by each rank for the collective in progress.
  std::vector<const void*> in;
  std::vector<void*> out;
  // split(): each rank's (color, key) and the new groups' state, by leader rank.
  std::vector<std::pair<int, int>> color_key;
  std::vector<std::shared_ptr<Shared>> children;

  std::vector<std::unique_ptr<Channel>> channels;  // index src * n + dst
  Channel& channel(int src, int dst) { return *channels[size_t(src * n + dst)]; }

  [[noreturn]] void throw_aborted() {
    std::string why;
    {
      std::lock_guard<std::mutex> lk(mu);
      why = abort_reason;
    }
    STRATA_THROW(CommError, "local group aborted: ", why);
  }

  void abort(const std::string& reason) {
    std::vector<std::weak_ptr<Shared>> kids;
    {
      std::lock_guard<std::mutex> lk(mu);
      if (!aborted.load()) {
        abort_reason = reason;
        aborted.store(true);
      }
      kids = descendants;
    }
    cv.notify_all();
    for (auto& ch : channels) {
      std::lock_guard<std::mutex> lk(ch->mu);
      ch->cv.notify_all();
    }
    for (auto& w : kids)
      if (auto k = w.lock()) k->abort(reason);
  }

  // All n ranks meet; spins briefly (cheap when cores are free), then sleeps.
  void barrier(Deadline deadline) {
    std::unique_lock<std::mutex> lk(mu);
    if (aborted.load()) {
      lk.unlock();
      throw_aborted();
    }
    const uint64_t g = generation;
    if (++arrived == n) {
      arrived = 0;
      ++generation;
      gen.store(generation, std::memory_order_release);
      lk.unlock();
      cv.notify_all();
      return;
    }
    lk.unlock();
    for (int i = 0; i < 256; ++i) {
      if (gen.load(std::memory_order_acquire) != g) return;
      if (aborted.load()) break;
      if (i >= 32) std::this_thread::yield();
    }
    lk.lock();
    while (generation == g) {
      if (aborted.load()) {
        lk.unlock();
        throw_aborted();
      }
      if (cv.wait_until(lk, deadline) == std::cv_status::timeout && generation == g && !aborted.load())
        throw detail::TimedOut(-1);
    }
  }
};

class LocalRequest final : public Request {
 public:
  LocalRequest(std::shared_ptr<Shared> sh, Channel* ch, std::shared_ptr<Slot> slot, int peer)
      : sh_(std::move(sh)), ch_(ch), slot_(std::move(slot)), peer_(peer) {}
  bool wait_until(Deadline deadline) override {
    std::unique_lock<std::mutex> lk(ch_->mu);
    while (!slot_->done) {
      if (sh_->aborted.load()) {
        lk.unlock();
        sh_->throw_aborted();
      }
      if (ch_->cv.wait_until(lk, deadline) == std::cv_status::timeout && !slot_->done) return false;
    }
    if (!slot_->error.empty()) STRATA_THROW(CommError, slot_->error);
    return true;
  }
  int peer() const override { return peer_; }

 private:
  std::shared_ptr<Shared> sh_;
  Channel* ch_;
  std::shared_ptr<Slot> slot_;
  int peer_;
};

inline int64_t split_at(int64_t count, int64_t parts, int64_t k) { return count * k / parts; }

class LocalBackend final : public Backend {
 public:
  LocalBackend(std::shared_ptr<Shared> sh, int rank) : sh_(std::move(sh)), rank_(rank) {}

  const char* kind() const override { return "local"; }
  int rank() const override { return rank_; }
  int size() const override { return sh_->n; }
  int host_ranks() const override { return sh_->world_n; }

  std::unique_ptr<Request> isend(const void* data, int64_t bytes, int dst, int tag) override {
    return post(/*is_send=*/true, const_cast<void*>(data), bytes, dst, tag);
  }
  std::unique_ptr<Request> irecv(void* data, int64_t bytes, int src, int tag) override {
    return post(/*is_send=*/false, data, bytes, src, tag);
  }

  bool supports(const Collective&) const override { return true; }  // every collective, dtype and op

  std::unique_ptr<Request> start(const Collective& c) override {
    // Shared-memory collectives need every rank inside them at once: the request runs the
    // whole op when waited on, against the caller's deadline.
    struct Run final : Request {
      LocalBackend* b;
      Collective c;
      Run(LocalBackend* b_, Collective c_) : b(b_), c(std::move(c_)) {}
      bool wait_until(Deadline d) override {
        b->run(c, d);
        return true;
      }
    };
    return std::make_unique<Run>(this, c);
  }

  std::unique_ptr<Backend> split(int color, int key, Deadline deadline) override {
    Shared& s = *sh_;
    s.color_key[size_t(rank_)] = {color, key};
    s.barrier(deadline);
    std::vector<int> members;
    if (color >= 0) {
      for (int j = 0; j < s.n; ++j)
        if (s.color_key[size_t(j)].first == color) members.push_back(j);
      std::stable_sort(members.begin(), members.end(),
                       [&](int a, int b) { return s.color_key[size_t(a)].second < s.color_key[size_t(b)].second; });
      if (members.front() == rank_) {
        auto child = std::make_shared<Shared>(int(members.size()), s.world_n);
        s.children[size_t(rank_)] = child;
        std::lock_guard<std::mutex> lk(s.mu);
        s.descendants.push_back(child);
      }
    }
    s.barrier(deadline);  // children published
    std::unique_ptr<Backend> result;
    if (color >= 0) {
      const int new_rank = int(std::find(members.begin(), members.end(), rank_) - members.begin());
      result = std::make_unique<LocalBackend>(s.children[size_t(members.front())], new_rank);
    }
    // The next split writes children[] only after its first barrier, which every rank
    // reaches after reading here, so no third barrier is needed.
    return result;
  }

  bool p2p_any_thread() const override { return true; }
  void check_peers() override {
    if (sh_->aborted.load()) sh_->throw_aborted();
  }
  void abort(const std::string& reason) override { sh_->abort(reason); }

  void run(const Collective& c, Deadline d);

 private:
  std::unique_ptr<Request> post(bool is_send, void* data, int64_t bytes, int peer, int tag) {
    STRATA_CHECK(peer >= 0 && peer < sh_->n && peer != rank_, "[", is_send ? "send" : "recv", "] bad peer rank ",
                 peer, " for rank ", rank_, " of a local group of ", sh_->n);
    // After an abort nothing new is matched: a peer's posted buffers may be gone.
    if (sh_->aborted.load()) sh_->throw_aborted();
    Channel& ch = is_send ? sh_->channel(rank_, peer) : sh_->channel(peer, rank_);
    auto mine = std::make_shared<Slot>();
    mine->ptr = data;
    mine->bytes = bytes;
    mine->tag = tag;
    {
      std::lock_guard<std::mutex> lk(ch.mu);
      auto& waiting = is_send ? ch.recvs : ch.sends;
      auto it = std::find_if(waiting.begin(), waiting.end(), [&](const auto& s) { return s->tag == tag; });
      if (it == waiting.end()) {
        (is_send ? ch.sends : ch.recvs).push_back(mine);
      } else {
        std::shared_ptr<Slot> other = *it;
        waiting.erase(it);
        Slot& snd = is_send ? *mine : *other;
        Slot& rcv = is_send ? *other : *mine;
        const int src = is_send ? rank_ : peer, dst = is_send ? peer : rank_;
        if (snd.bytes != rcv.bytes) {
          const std::string msg = strata::detail::str_cat("[recv] size mismatch: rank ", src, " sent ", snd.bytes,
                                                  " bytes to rank ", dst, ", which expected ", rcv.bytes,
                                                  " bytes (tag ", tag, ")");
          snd.error = rcv.error = msg;
        } else if (snd.bytes > 0) {
          std::memcpy(rcv.ptr, snd.ptr, size_t(snd.bytes));
        }
        snd.done = rcv.done = true;
        ch.cv.notify_all();
      }
    }
    return std::make_unique<LocalRequest>(sh_, &ch, mine, peer);
  }

  std::shared_ptr<Shared> sh_;
  int rank_;
};

// Reduces slice [lo, lo+len) over all ranks' `srcs` into dsts[self] and copies it to every
// other non-null dsts[j], in cache-sized pieces so the copies read hot data. (Streaming
// stores for the copies were measured slower here: the destinations are often cached by
// their owner's core.)
void reduce_and_spread(const std::vector<const char*>& srcs, const std::vector<char*>& dsts, int64_t lo,
                       int64_t len, DType dt, ReduceOp op, double scale, int self) {
  const int n = int(srcs.size());
  const int64_t es = int64_t(element_size(dt));
  const int64_t piece = std::max<int64_t>(1, (int64_t(32) << 10) / es);
  std::vector<const void*> ptrs(static_cast<size_t>(n), nullptr);
  for (int64_t b = lo; b < lo + len; b += piece) {
    const int64_t m = std::min(piece, lo + len - b);
    for (int j = 0; j < n; ++j) ptrs[size_t(j)] = srcs[size_t(j)] + b * es;
    char* mine = dsts[size_t(self)] + b * es;
    detail::reduce_many(mine, ptrs.data(), n, m, dt, op, scale);
    for (int j = 0; j < n; ++j)
      if (j != self && dsts[size_t(j)]) std::memcpy(dsts[size_t(j)] + b * es, mine, size_t(m * es));
  }
}

void LocalBackend::run(const Collective& c, Deadline d) {
  Shared& s = *sh_;
  const int n = s.n, r = rank_;
  const Tensor& any = c.output.defined() ? c.output : c.input;
  const DType dt = any.defined() ? any.dtype() : DType::u8;
  const int64_t es = int64_t(element_size(dt));
  const double scale = c.op == ReduceOp::avg ? 1.0 / n : 1.0;
  auto ptr = [](const Tensor& t) -> char* { return t.defined() ? static_cast<char*>(t.raw_data()) : nullptr; };
  auto all_in = [&] {
    std::vector<const char*> v(static_cast<size_t>(n));
    for (int j = 0; j < n; ++j) v[size_t(j)] = static_cast<const char*>(s.in[size_t(j)]);
    return v;
  };
  auto all_out = [&] {
    std::vector<char*> v(static_cast<size_t>(n));
    for (int j = 0; j < n; ++j) v[size_t(j)] = static_cast<char*>(s.out[size_t(j)]);
    return v;
  };

  switch (c.kind) {
    case OpKind::all_reduce: {
      const int64_t count = c.output.numel();
      s.in[size_t(r)] = ptr(c.output);
      s.out[size_t(r)] = ptr(c.output);
      s.barrier(d);
      const int64_t lo = split_at(count, n, r), hi = split_at(count, n, r + 1);
      reduce_and_spread(all_in(), all_out(), lo, hi - lo, dt, c.op, scale, r);
      s.barrier(d);
      break;
    }
    case OpKind::reduce: {
      const int64_t count = c.output.numel();
      s.in[size_t(r)] = ptr(c.output);
      s.barrier(d);
      const int64_t lo = split_at(count, n, r), hi = split_at(count, n, r + 1);
      // Every rank reduces its slice straight into the root's buffer.
      std::vector<char*> dsts(static_cast<size_t>(n), nullptr);
      dsts[size_t(r)] = const_cast<char*>(static_cast<const char*>(s.in[size_t(c.root)]));
      reduce_and_spread(all_in(), dsts, lo, hi - lo, dt, c.op, scale, r);
      s.barrier(d);
      break;
    }
    case OpKind::broadcast: {
      s.in[size_t(r)] = ptr(c.output);
      s.barrier(d);
      if (r != c.root && c.output.nbytes() > 0) std::memcpy(ptr(c.output), s.in[size_t(c.root)], size_t(c.output.nbytes()));
      s.barrier(d);
      break;
    }
    case OpKind::all_gather: {
      const int64_t bytes = c.input.nbytes();
      s.in[size_t(r)] = ptr(c.input);
      s.barrier(d);
      char* out = ptr(c.output);
      for (int j = 0; j < n; ++j) {
        const char* src = static_cast<const char*>(s.in[size_t(j)]);
        if (bytes > 0 && out + j * bytes != src) std::memcpy(out + j * bytes, src, size_t(bytes));
      }
      s.barrier(d);
      break;
    }
    case OpKind::reduce_scatter: {
      const int64_t count = c.output.numel();
      s.in[size_t(r)] = ptr(c.input);
      s.barrier(d);
      std::vector<const void*> srcs(static_cast<size_t>(n));
      for (int j = 0; j < n; ++j) srcs[size_t(j)] = static_cast<const char*>(s.in[size_t(j)]) + r * count * es;
      detail::reduce_many(ptr(c.output), srcs.data(), n, count, dt, c.op, scale);
      s.barrier(d);
      break;
    }
    case OpKind::gather: {
      const int64_t bytes = c.input.nbytes();
      s.out[size_t(r)] = ptr(c.output);
      s.barrier(d);
      char* dst = static_cast<char*>(s.out[size_t(c.root)]) + r * bytes;
      if (bytes > 0 && dst != ptr(c.input)) std::memcpy(dst, ptr(c.input), size_t(bytes));
      s.barrier(d);
      break;
    }
    case OpKind::scatter: {
      const int64_t bytes = c.output.nbytes();
      s.in[size_t(r)] = ptr(c.input);
      s.barrier(d);
      const char* src = static_cast<const char*>(s.in[size_t(c.root)]) + r * bytes;
      if (bytes > 0) std::memcpy(ptr(c.output), src, size_t(bytes));
      s.barrier(d);
      break;
    }
    case OpKind::all_to_all: {
      const int64_t bytes = c.output.nbytes() / n;
      s.in[size_t(r)] = ptr(c.input);
      s.barrier(d);
      char* out = ptr(c.output);
      for (int j = 0; j < n; ++j)
        if (bytes > 0) std::memcpy(out + j * bytes, static_cast<const char*>(s.in[size_t(j)]) + r * bytes, size_t(bytes));
      s.barrier(d);
      break;
    }
    case OpKind::barrier: s.barrier(d); break;
    default: STRATA_THROW(Error, "[comm] local backend has no native ", op_kind_name(c.kind));
  }
}

}  // namespace

std::vector<std::unique_ptr<Backend>> detail::make_local_backends(int n) {
  STRATA_CHECK(n >= 1, "[make_local_world] need at least 1 rank, got ", n);
  auto sh = std::make_shared<Shared>(n);
  std::vector<std::unique_ptr<Backend>> v;
  for (int r = 0; r < n; ++r) v.push_back(std::make_unique<LocalBackend>(sh, r));
  return v;
}

std::vector<std::shared_ptr<ProcessGroup>> make_local_world(int n, const CommOptions& options) {
  auto backends = detail::make_local_backends(n);
  std::vector<std::shared_ptr<ProcessGroup>> groups;
  for (auto& b : backends) groups.push_back(std::make_shared<ProcessGroup>(std::move(b), options, "world"));
  return groups;
}

void run_local(int n, const std::function<void(ProcessGroup&)>& fn, const CommOptions& options) {
  auto groups = make_local_world(n, options);
  std::mutex mu;
  std::exception_ptr first;
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        fn(*groups[size_t(r)]);
      } catch (const std::exception& e) {
        {
          std::lock_guard<std::mutex> lk(mu);
          if (!first) first = std::current_exception();
        }
        groups[size_t(r)]->abort(strata::detail::str_cat("rank ", r, " failed: ", e.what()));
      } catch (...) {
        {
          std::lock_guard<std::mutex> lk(mu);
          if (!first) first = std::current_exception();
        }
        groups[size_t(r)]->abort(strata::detail::str_cat("rank ", r, " failed with a non-standard exception"));
      }
    });
  }
  for (auto& t : threads) t.join();
  groups.clear();  // joins the comm threads
  if (first) std::rethrow_exception(first);
}

}  // namespace strata::comm

// Shared by the local (threads) and mpi (processes) tests of batch_isend_irecv: a ring
// exchange posted as one batch, and a batch of mixed sizes, dtypes, tags and layouts,
// each checked against values every rank can compute.
#pragma once
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "collective_checks.h"

namespace strata::comm::testing {

/// Every rank sends to r+1 and receives from r-1 in one batch (with plain send then
/// recv every rank would wait in its send). Repeated so stale matching would show.
inline void check_ring_exchange(ProcessGroup& g, int64_t numel) {
  const int n = g.size(), r = g.rank();
  for (int round = 0; round < 3; ++round) {
    std::vector<double> mine(static_cast<size_t>(numel));
    for (int64_t i = 0; i < numel; ++i) mine[size_t(i)] = r * 1000 + round * 100 + double(i % 97);
    Tensor out = make_tensor(DType::f32, mine);
    Tensor in = ops::zeros({numel}, DType::f32);
    g.batch_isend_irecv({{P2POp::Kind::send, out, (r + 1) % n, 3}, {P2POp::Kind::recv, in, (r + n - 1) % n, 3}},
                        "ring round " + std::to_string(round))
        .wait();
    const int src = (r + n - 1) % n;
    std::vector<double> want(static_cast<size_t>(numel));
    for (int64_t i = 0; i < numel; ++i) want[size_t(i)] = src * 1000 + round * 100 + double(i % 97);
    expect_values(read_tensor(in), want, 0, "ring exchange rank " + std::to_string(r));
  }
}

/// With every other rank j, in one batch: f32 (size depends on both ranks) and bf16 on
/// tag 1, matched in posting order, and i64 (possibly empty) on tag 2; the f32 is received
/// into a non-contiguous view. Also checks the bytes counted in CommStats.
inline void check_mixed_batch(ProcessGroup& g) {
  const int n = g.size(), r = g.rank();
  auto f32_vals = [](int src, int dst) {
    std::vector<double> v(size_t(3 + src + 2 * dst));
    for (size_t i = 0; i < v.size(); ++i) v[i] = 1000 * src + 10 * dst + double(i);
    return v;
  };
  auto i64_vals = [](int src, int dst) {
    std::vector<double> v(size_t((src + dst) % 3));
    for (size_t i = 0; i < v.size(); ++i) v[i] = 100 * src + 7 * dst + double(i);
    return v;
  };
  auto bf16_vals = [](int src, int dst) {
    std::vector<double> v(5);
    for (size_t i = 0; i < v.size(); ++i) v[i] = double(src) - 0.5 * double(dst) + double(i);  // exact in bf16
    return v;
  };
  std::vector<P2POp> ops;
  const size_t nr = static_cast<size_t>(n);
  std::vector<Tensor> f32_in(nr), f32_base(nr), i64_in(nr), bf16_in(nr);
  int64_t sent = 0;
  for (int j = 0; j < n; ++j) {
    if (j == r) continue;
    const int64_t m = int64_t(f32_vals(j, r).size());
    f32_base[size_t(j)] = ops::zeros({m, 2}, DType::f32);
    f32_in[size_t(j)] = ops::select(f32_base[size_t(j)], 1, 1);  // stride 2: staged and copied back
    i64_in[size_t(j)] = ops::zeros({int64_t(i64_vals(j, r).size())}, DType::i64);
    bf16_in[size_t(j)] = ops::zeros({5}, DType::bf16);
    Tensor f = make_tensor(DType::f32, f32_vals(r, j)), i = make_tensor(DType::i64, i64_vals(r, j)),
           b = make_tensor(DType::bf16, bf16_vals(r, j));
    sent += f.nbytes() + i.nbytes() + b.nbytes();
    // Lower ranks list their receives first, higher ranks their sends: order within a
    // batch must not matter.
    std::vector<P2POp> recvs = {{P2POp::Kind::recv, f32_in[size_t(j)], j, 1},
                                {P2POp::Kind::recv, i64_in[size_t(j)], j, 2},
                                {P2POp::Kind::recv, bf16_in[size_t(j)], j, 1}};
    std::vector<P2POp> sends = {{P2POp::Kind::send, f, j, 1}, {P2POp::Kind::send, i, j, 2},
                                {P2POp::Kind::send, b, j, 1}};
    auto& first = r < j ? recvs : sends;
    auto& second = r < j ? sends : recvs;
    ops.insert(ops.end(), first.begin(), first.end());
    ops.insert(ops.end(), second.begin(), second.end());
  }
  const OpStats before = g.stats()[OpKind::batch_isend_irecv];
  g.batch_isend_irecv(ops, "mixed").wait();
  const OpStats after = g.stats()[OpKind::batch_isend_irecv];
  EXPECT_EQ(after.calls - before.calls, 1);
  EXPECT_EQ(after.bytes_sent - before.bytes_sent, sent);  // counted, message by message
  EXPECT_EQ(after.bytes_modelled - before.bytes_modelled, 0);
  for (int j = 0; j < n; ++j) {
    if (j == r) continue;
    const std::string from = " from rank " + std::to_string(j) + " on rank " + std::to_string(r);
    expect_values(read_tensor(f32_in[size_t(j)]), f32_vals(j, r), 0, "f32" + from);
    // The other column of the base was not touched.
    const std::vector<double> other = read_tensor(ops::select(f32_base[size_t(j)], 1, 0));
    expect_values(other, std::vector<double>(other.size(), 0.0), 0, "untouched column" + from);
    expect_values(read_tensor(i64_in[size_t(j)]), i64_vals(j, r), 0, "i64" + from);
    expect_values(read_tensor(bf16_in[size_t(j)]), bf16_vals(j, r), 0, "bf16" + from);
  }
}

}  // namespace strata::comm::testing

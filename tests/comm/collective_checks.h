// Shared by the local (threads) and mpi (processes) comm tests: runs every collective
// for every algorithm, dtype and size on one rank's group and compares with a reference
// computed sequentially from the inputs every rank is known to have.
#pragma once
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <string>
#include <vector>

#include <strata/comm/process_group.h>
#include <strata/tensor/ops.h>

namespace strata::comm::testing {

inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

inline Tensor make_tensor(DType dt, const std::vector<double>& v) {
  Tensor t = Tensor::empty({int64_t(v.size())}, dt);
  void* p = t.raw_data();
  for (size_t i = 0; i < v.size(); ++i) {
    switch (dt) {
      case DType::f32: static_cast<float*>(p)[i] = float(v[i]); break;
      case DType::f64: static_cast<double*>(p)[i] = v[i]; break;
      case DType::f16: static_cast<uint16_t*>(p)[i] = float_to_half(float(v[i])); break;
      case DType::bf16: static_cast<uint16_t*>(p)[i] = float_to_bf16(float(v[i])); break;
      case DType::i32: static_cast<int32_t*>(p)[i] = int32_t(v[i]); break;
      case DType::i64: static_cast<int64_t*>(p)[i] = int64_t(v[i]); break;
      case DType::u8: static_cast<uint8_t*>(p)[i] = uint8_t(v[i]); break;
    }
  }
  return t;
}

inline std::vector<double> read_tensor(const Tensor& t) {
  Tensor c = ops::contiguous(t);
  std::vector<double> v(size_t(c.numel()));
  const void* p = c.raw_data();
  for (size_t i = 0; i < v.size(); ++i) {
    switch (c.dtype()) {
      case DType::f32: v[i] = static_cast<const float*>(p)[i]; break;
      case DType::f64: v[i] = static_cast<const double*>(p)[i]; break;
      case DType::f16: v[i] = half_to_float(static_cast<const uint16_t*>(p)[i]); break;
      case DType::bf16: v[i] = bf16_to_float(static_cast<const uint16_t*>(p)[i]); break;
      case DType::i32: v[i] = static_cast<const int32_t*>(p)[i]; break;
      case DType::i64: v[i] = double(static_cast<const int64_t*>(p)[i]); break;
      case DType::u8: v[i] = static_cast<const uint8_t*>(p)[i]; break;
    }
  }
  return v;
}

/// Expects got == want elementwise within |diff| <= tol * max(1, |want|); one failure
/// message per call naming the first bad element.
inline bool expect_values(const std::vector<double>& got, const std::vector<double>& want, double tol,
                          const std::string& what) {
  if (got.size() != want.size()) {
    ADD_FAILURE() << what << ": got " << got.size() << " elements, want " << want.size();
    return false;
  }
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::abs(got[i] - want[i]) > tol * std::max(1.0, std::abs(want[i]))) {
      ADD_FAILURE() << what << ": element " << i << " is " << got[i] << ", want " << want[i];
      return false;
    }
  }
  return true;
}

/// Input value of element i on `rank` for a reduction with `op`: small integers, so every
/// summation order and every dtype (bf16 included) gives the exact same result.
inline double input_value(int rank, int64_t i, ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::avg: return double((rank * 7 + i * 3) % 11) - 5.0;
    case ReduceOp::prod: {
      const int64_t k = (rank + i) % 4;
      return k == 1 ? 2.0 : k == 3 ? -1.0 : 1.0;
    }
    case ReduceOp::min:
    case ReduceOp::max: return double((rank * 13 + i * 7) % 17) - 8.0;
  }
  return 0;
}
/// Distinct per rank, for data-movement ops.
inline double move_value(int rank, int64_t i) { return double((rank * 37 + i * 5) % 201) - 100.0; }

inline std::vector<double> inputs(int rank, int64_t n, ReduceOp op) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = input_value(rank, i, op);
  return v;
}
inline std::vector<double> moves(int rank, int64_t n, int64_t offset = 0) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = move_value(rank, i + offset);
  return v;
}

/// Sequential reference: op over ranks 0..n-1 of input_value(r, first + i).
inline std::vector<double> reference(int nranks, int64_t first, int64_t n, ReduceOp op) {
  std::vector<double> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    double acc = input_value(0, first + i, op);
    for (int r = 1; r < nranks; ++r) {
      const double x = input_value(r, first + i, op);
      switch (op) {
        case ReduceOp::sum:
        case ReduceOp::avg: acc += x; break;
        case ReduceOp::prod: acc *= x; break;
        case ReduceOp::min: acc = std::min(acc, x); break;
        case ReduceOp::max: acc = std::max(acc, x); break;
      }
    }
    out[size_t(i)] = op == ReduceOp::avg ? acc / nranks : acc;
  }
  return out;
}

inline double tolerance(DType dt, ReduceOp op) {
  if (op != ReduceOp::avg) return 0.0;  // small integers: exact everywhere
  switch (dt) {
    case DType::bf16: return 1e-2;
    case DType::f16: return 2e-3;
    case DType::f32: return 1e-6;
    default: return 1e-12;
  }
}

struct CheckConfig {
  std::vector<Algorithm> algorithms{Algorithm::native, Algorithm::ring, Algorithm::tree, Algorithm::recursive,
                                    Algorithm::automatic};
  std::vector<DType> dtypes{DType::f32, DType::f64, DType::i32, DType::bf16, DType::f16};
  std::vector<int64_t> counts{0, 1, 5, 1003};
};

/// Runs the whole matrix on this rank's group (every rank of g must call it).
inline void check_all_collectives(ProcessGroup& g, const CheckConfig& cfg = {}) {
  const int n = g.size(), r = g.rank();
  for (Algorithm algo : cfg.algorithms) {
    g.set_algorithm(algo);
    for (DType dt : cfg.dtypes) {
      const bool fl = is_floating(dt);
      for (int64_t count : cfg.counts) {
        const std::string ctx = std::string(" [") + algorithm_name(algo) + " " + dtype_name(dt) +
                                " count=" + std::to_string(count) + " rank " + std::to_string(r) + "/" +
                                std::to_string(n) + "]";
        std::vector<ReduceOp> ops{ReduceOp::sum, ReduceOp::prod, ReduceOp::min, ReduceOp::max};
        if (fl) ops.push_back(ReduceOp::avg);
        const int root = int(count % n);

        for (ReduceOp op : ops) {  // all_reduce, in place
          Tensor t = make_tensor(dt, inputs(r, count, op));
          g.all_reduce(t, op).wait();
          expect_values(read_tensor(t), reference(n, 0, count, op), tolerance(dt, op),
                        std::string("all_reduce ") + reduce_op_name(op) + ctx);
        }
        for (ReduceOp op : {ReduceOp::sum, ReduceOp::max, fl ? ReduceOp::avg : ReduceOp::min}) {  // reduce
          Tensor t = make_tensor(dt, inputs(r, count, op));
          g.reduce(t, root, op).wait();
          const auto want = r == root ? reference(n, 0, count, op) : read_tensor(make_tensor(dt, inputs(r, count, op)));
          expect_values(read_tensor(t), want, tolerance(dt, op),
                        std::string("reduce ") + reduce_op_name(op) + " root " + std::to_string(root) + ctx);
        }
        {  // broadcast
          Tensor t = make_tensor(dt, moves(r, count));
          g.broadcast(t, root).wait();
          expect_values(read_tensor(t), read_tensor(make_tensor(dt, moves(root, count))), 0,
                        "broadcast root " + std::to_string(root) + ctx);
        }
        std::vector<double> gathered;  // every rank's moves(), concatenated
        for (int j = 0; j < n; ++j) {
          auto v = read_tensor(make_tensor(dt, moves(j, count)));
          gathered.insert(gathered.end(), v.begin(), v.end());
        }
        {  // all_gather, separate output and in-place form
          Tensor in = make_tensor(dt, moves(r, count));
          Tensor out = ops::zeros({n * count}, dt);
          g.all_gather(in, out).wait();
          expect_values(read_tensor(out), gathered, 0, "all_gather" + ctx);
          Tensor buf = ops::zeros({n * count}, dt);
          Tensor mine = ops::narrow(buf, 0, r * count, count);
          ops::copy_(mine, in);
          g.all_gather(mine, buf).wait();
          expect_values(read_tensor(buf), gathered, 0, "all_gather in place" + ctx);
        }
        for (ReduceOp op : {ReduceOp::sum, ReduceOp::min, fl ? ReduceOp::avg : ReduceOp::prod}) {  // reduce_scatter
          Tensor in = make_tensor(dt, inputs(r, n * count, op));
          Tensor out = ops::zeros({count}, dt);
          g.reduce_scatter(in, out, op).wait();
          expect_values(read_tensor(out), reference(n, r * count, count, op), tolerance(dt, op),
                        std::string("reduce_scatter ") + reduce_op_name(op) + ctx);
        }
        {  // gather
          Tensor in = make_tensor(dt, moves(r, count));
          Tensor out = r == root ? ops::zeros({n * count}, dt) : Tensor();
          g.gather(in, out, root).wait();
          if (r == root) expect_values(read_tensor(out), gathered, 0, "gather root " + std::to_string(root) + ctx);
        }
        {  // scatter: root's input is `gathered`, block j goes to rank j
          Tensor in = r == root ? make_tensor(dt, gathered) : Tensor();
          Tensor out = ops::zeros({count}, dt);
          g.scatter(in, out, root).wait();
          expect_values(read_tensor(out), read_tensor(make_tensor(dt, moves(r, count))), 0,
                        "scatter root " + std::to_string(root) + ctx);
        }
        {  // all_to_all: rank r's input block j = moves(r, count, j*count); output block j = rank j's block r
          Tensor in = make_tensor(dt, moves(r, n * count));
          Tensor out = ops::zeros({n * count}, dt);
          g.all_to_all(in, out).wait();
          std::vector<double> want;
          for (int j = 0; j < n; ++j) {
            auto v = read_tensor(make_tensor(dt, moves(j, count, r * count)));
            want.insert(want.end(), v.begin(), v.end());
          }
          expect_values(read_tensor(out), want, 0, "all_to_all" + ctx);
        }
        g.barrier().wait();
        if (n > 1) {  // point-to-point: a ring exchange and a rank-0 fan-out
          Tensor s = make_tensor(dt, moves(r, count));
          Tensor rcv = ops::zeros({count}, dt);
          g.send_recv(s, (r + 1) % n, rcv, (r + n - 1) % n).wait();
          expect_values(read_tensor(rcv), read_tensor(make_tensor(dt, moves((r + n - 1) % n, count))), 0,
                        "send_recv" + ctx);
          if (r == 0) {
            std::vector<Work> ws;
            for (int j = 1; j < n; ++j) ws.push_back(g.send(make_tensor(dt, moves(j, count)), j, 7));
            for (auto& w : ws) w.wait();
          } else {
            Tensor t = ops::zeros({count}, dt);
            g.recv(t, 0, 7).wait();
            expect_values(read_tensor(t), read_tensor(make_tensor(dt, moves(r, count))), 0, "send/recv" + ctx);
          }
        }
      }
    }
  }
  g.set_algorithm(Algorithm::automatic);
}

}  // namespace strata::comm::testing

// Names, parsers and validation for the comm vocabulary in comm/types.h.
#include <strata/comm/types.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <strata/core/error.h>

namespace strata::comm {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return "sum";
    case ReduceOp::avg: return "avg";
    case ReduceOp::min: return "min";
    case ReduceOp::max: return "max";
    case ReduceOp::prod: return "prod";
  }
  return "?";
}

ReduceOp parse_reduce_op(const std::string& s) {
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::min, ReduceOp::max, ReduceOp::prod})
    if (s == reduce_op_name(op)) return op;
  STRATA_THROW(ConfigError, "unknown reduce op '", s, "' (expected sum, avg, min, max or prod)");
}

const char* op_kind_name(OpKind k) {
  switch (k) {
    case OpKind::broadcast: return "broadcast";
    case OpKind::reduce: return "reduce";
    case OpKind::all_reduce: return "all_reduce";
    case OpKind::all_gather: return "all_gather";
    case OpKind::reduce_scatter: return "reduce_scatter";
    case OpKind::gather: return "gather";
    case OpKind::scatter: return "scatter";
    case OpKind::all_to_all: return "all_to_all";
    case OpKind::send: return "send";
    case OpKind::recv: return "recv";
    case OpKind::send_recv: return "send_recv";
    case OpKind::barrier: return "barrier";
    case OpKind::split: return "split";
    case OpKind::batch_isend_irecv: return "batch_isend_irecv";
    case OpKind::kCount: break;
  }
  return "?";
}

OpKind parse_op_kind(const std::string& s) {
  for (int i = 0; i < kNumOpKinds; ++i)
    if (s == op_kind_name(OpKind(i))) return OpKind(i);
  STRATA_THROW(ConfigError, "unknown comm op '", s,
               "' (expected all_reduce, all_gather, reduce_scatter, broadcast, reduce, gather, scatter, "
               "all_to_all or barrier)");
}

const char* algorithm_name(Algorithm a) {
  switch (a) {
    case Algorithm::native: return "native";
    case Algorithm::ring: return "ring";
    case Algorithm::tree: return "tree";
    case Algorithm::recursive: return "recursive";
    case Algorithm::automatic: return "auto";
  }
  return "?";
}

Algorithm parse_algorithm(const std::string& s) {
  if (s == "native") return Algorithm::native;
  if (s == "ring") return Algorithm::ring;
  if (s == "tree") return Algorithm::tree;
  if (s == "recursive") return Algorithm::recursive;
  if (s == "auto" || s == "automatic") return Algorithm::automatic;
  STRATA_THROW(ConfigError, "comm.algorithm: unknown value '", s, "' (expected native, ring, tree, recursive or auto)");
}

const char* reduce_dtype_name(ReduceDtype d) { return d == ReduceDtype::f32 ? "f32" : "param"; }

ReduceDtype parse_reduce_dtype(const std::string& s) {
  if (s == "param") return ReduceDtype::param;
  if (s == "f32") return ReduceDtype::f32;
  STRATA_THROW(ConfigError, "comm.reduce_dtype: unknown value '", s, "' (expected param or f32)");
}

void CommOptions::validate() const {
  if (!(timeout_s > 0))
    STRATA_THROW(ConfigError, "comm.timeout_s: must be > 0 seconds, got ", timeout_s);
  if (chunk_bytes < 1024)
    STRATA_THROW(ConfigError, "comm.chunk_bytes: must be >= 1024, got ", chunk_bytes);
  if (small_message_bytes < 0)
    STRATA_THROW(ConfigError, "comm.small_message_bytes: must be >= 0, got ", small_message_bytes);
}

bool CommOptions::debug_enabled() const {
  if (debug) return true;
  const char* env = std::getenv("STRATA_COMM_DEBUG");
  return env && (std::strcmp(env, "1") == 0 || std::strcmp(env, "true") == 0);
}

int64_t CommStats::total_bytes_sent() const {
  int64_t t = 0;
  for (const auto& s : ops) t += s.bytes_sent;
  return t;
}

int64_t CommStats::total_bytes_modelled() const {
  int64_t t = 0;
  for (const auto& s : ops) t += s.bytes_modelled;
  return t;
}

const char* bytes_kind(int64_t bytes_sent, int64_t bytes_modelled) {
  if (bytes_sent == 0) return "none";
  if (bytes_modelled == 0) return "counted";
  return bytes_modelled == bytes_sent ? "modelled" : "counted+modelled";
}

std::string format_bytes(int64_t bytes) {
  char buf[64];
  const double b = double(bytes);
  if (bytes < 1024)
    std::snprintf(buf, sizeof buf, "%lld B", static_cast<long long>(bytes));
  else if (bytes < (int64_t(1) << 20))
    std::snprintf(buf, sizeof buf, "%.1f KiB", b / 1024.0);
  else if (bytes < (int64_t(1) << 30))
    std::snprintf(buf, sizeof buf, "%.1f MiB", b / (1024.0 * 1024.0));
  else
    std::snprintf(buf, sizeof buf, "%.2f GiB", b / (1024.0 * 1024.0 * 1024.0));
  return buf;
}

}  // namespace strata::comm

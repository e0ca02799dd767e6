// matmul / gemm_ front ends. Strided operands whose last two dims are a plain or
// transposed matrix go to BLAS as-is (lda + trans flag); anything else is copied once.
#include <strata/tensor/cpu/gemm.h>
#include <strata/tensor/dispatch.h>
#include <strata/tensor/ops.h>

namespace strata::ops {
namespace {

using GemmFn = void(DType, int64_t, int64_t, int64_t, double, cpu::MatRef, cpu::MatRef, double, void*, int64_t);
const KernelTable<GemmFn> kGemm{"matmul", {&cpu::gemm, nullptr}};
// Optional: the GEMM with a bias added to every row in the library's kernel; devices
// without one write the bias rows and accumulate kGemm onto them.
using GemmBiasFn = void(DType, int64_t, int64_t, int64_t, cpu::MatRef, cpu::MatRef, const void*, void*, int64_t);
const KernelTable<GemmBiasFn> kGemmBias{"addmm", {&cpu::gemm_bias, nullptr}};
// Optional: `batch` GEMMs whose operands sit at constant element strides (cuBLAS
// strided-batched); devices without one loop over kGemm.
using GemmBatchedFn = void(DType, int64_t batch, int64_t m, int64_t n, int64_t k, cpu::MatRef a, int64_t stride_a,
                           cpu::MatRef b, int64_t stride_b, void* c, int64_t ldc, int64_t stride_c);
const KernelTable<GemmBatchedFn> kGemmBatched{"matmul_batched", {nullptr, nullptr}};

// Matrix view of the last two dims of t (rows x cols) for BLAS, or nullopt if it needs a copy.
std::optional<std::pair<int64_t, bool>> blas_layout(const Tensor& t) {
  const int64_t r = t.size(-2), c = t.size(-1);
  const int64_t sr = t.stride(-2), sc = t.stride(-1);
  if ((sc == 1 || c == 1) && sr >= std::max<int64_t>(c, 1)) return std::make_pair(sr, false);
  if ((sr == 1 || r == 1) && sc >= std::max<int64_t>(r, 1)) return std::make_pair(sc, true);
  return std::nullopt;
}

// Makes t BLAS-ready: returns the tensor to use and its (ld, trans).
std::pair<Tensor, std::pair<int64_t, bool>> prepare(const Tensor& t) {
  if (auto l = blas_layout(t)) return {t, *l};
  Tensor c = contiguous(t);
  return {c, {std::max<int64_t>(c.size(-1), 1), false}};
}

cpu::MatRef mat_ref(const Tensor& t, const std::pair<int64_t, bool>& l, int64_t elem_offset) {
  const auto* base = static_cast<const char*>(t.raw_data());
  return {base + elem_offset * int64_t(element_size(t.dtype())), l.first, l.second};
}

// A 2-d operand as BLAS takes it: in place when its layout allows (no handle copy), else
// a contiguous copy held here for the call.
struct MatOperand {
  Tensor copy;
  cpu::MatRef ref;
};
MatOperand mat_operand(const Tensor& t) {
  if (auto l = blas_layout(t)) return {Tensor(), mat_ref(t, *l, 0)};
  auto [c, l] = prepare(t);
  return {c, mat_ref(c, l, 0)};
}

}  // namespace

void gemm_(Tensor& out, const Tensor& a, const Tensor& b, double alpha, double beta) {
  const Device d = common_device("gemm_", out, a, b);
  STRATA_CHECK(a.dim() == 2 && b.dim() == 2 && out.dim() == 2, "[gemm_] expects 2-d operands, got ",
               shape_str(a.shape()), " @ ", shape_str(b.shape()));
  STRATA_CHECK(a.size(1) == b.size(0) && out.size(0) == a.size(0) && out.size(1) == b.size(1),
               "[gemm_] shape mismatch: ", shape_str(a.shape()), " @ ", shape_str(b.shape()), " -> ",
               shape_str(out.shape()));
  STRATA_CHECK(a.dtype() == b.dtype() && a.dtype() == out.dtype(), "[gemm_] dtype mismatch");
  // rows of out at any stride (a column block of a wider matrix), each row contiguous
  STRATA_CHECK(out.is_contiguous() || (out.stride(1) == 1 && out.stride(0) >= out.size(1)),
               "[gemm_] out must be contiguous or a block of whole-stride rows, got ", out.str());
  const MatOperand oa = mat_operand(a), ob = mat_operand(b);
  kGemm(d)(out.dtype(), a.size(0), b.size(1), a.size(1), alpha, oa.ref, ob.ref, beta, out.raw_data(),
           out.is_contiguous() ? std::max<int64_t>(out.size(1), 1) : out.stride(0));
  out.bump_version();
}

Tensor addmm(const Tensor& bias, const Tensor& a, const Tensor& b) {
  const Device d = common_device("addmm", bias, a, b);
  STRATA_CHECK(a.dim() == 2 && b.dim() == 2 && bias.dim() == 1, "[addmm] expects a 1-d bias and 2-d operands, got ",
               shape_str(bias.shape()), " + ", shape_str(a.shape()), " @ ", shape_str(b.shape()));
  STRATA_CHECK(a.size(1) == b.size(0) && bias.size(0) == b.size(1), "[addmm] shape mismatch: ",
               shape_str(bias.shape()), " + ", shape_str(a.shape()), " @ ", shape_str(b.shape()));
  STRATA_CHECK(a.dtype() == b.dtype() && a.dtype() == bias.dtype(), "[addmm] dtype mismatch");
  Tensor out = Tensor::empty({a.size(0), b.size(1)}, a.dtype(), d);
  if (kGemmBias.find(d)) {
    const Tensor bc = bias.is_contiguous() ? bias : contiguous(bias);
    const MatOperand oa = mat_operand(a), ob = mat_operand(b);
    kGemmBias(d)(out.dtype(), a.size(0), b.size(1), a.size(1), oa.ref, ob.ref, bc.raw_data(), out.raw_data(),
       std::max<int64_t>(b.size(1), 1));
  } else {
    copy_(out, bias);
    gemm_(out, a, b, 1.0, 1.0);
  }
  return out;
}

Tensor matmul(const Tensor& a_in, const Tensor& b_in) {
  const Device d = common_device("matmul", a_in, b_in);
  STRATA_CHECK(a_in.dim() >= 1 && b_in.dim() >= 1, "[matmul] operands must be at least 1-d");
  STRATA_CHECK(a_in.dtype() == b_in.dtype(), "[matmul] dtype mismatch: ", dtype_name(a_in.dtype()), " @ ",
               dtype_name(b_in.dtype()));
  if (a_in.dim() == 2 && b_in.dim() == 2) {  // the common case, without batch bookkeeping
    const int64_t n = a_in.size(0), k = a_in.size(1), m = b_in.size(1);
    STRATA_CHECK(b_in.size(0) == k, "[matmul] inner dimensions differ: ", shape_str(a_in.shape()), " @ ",
                 shape_str(b_in.shape()));
    Tensor out = Tensor::empty({n, m}, a_in.dtype(), d);
    const MatOperand oa = mat_operand(a_in), ob = mat_operand(b_in);
    kGemm(d)(out.dtype(), n, m, k, 1.0, oa.ref, ob.ref, 0.0, out.raw_data(), std::max<int64_t>(m, 1));
    return out;
  }
  Tensor a = a_in.dim() == 1 ? unsqueeze(a_in, 0) : a_in;
  Tensor b = b_in.dim() == 1 ? unsqueeze(b_in, 1) : b_in;
  const int64_t n = a.size(-2), k = a.size(-1), m = b.size(-1);
  STRATA_CHECK(b.size(-2) == k, "[matmul] inner dimensions differ: ", shape_str(a_in.shape()), " @ ",
               shape_str(b_in.shape()));
  const Shape ab(a.shape().begin(), a.shape().end() - 2), bb(b.shape().begin(), b.shape().end() - 2);
  const Shape batch = broadcast_shapes(ab, bb);
  Shape out_shape = batch;
  out_shape.push_back(n);
  out_shape.push_back(m);
  Tensor out = Tensor::empty(out_shape, a.dtype(), d);

  if (batch.empty()) {
    gemm_(out, a, b);
  } else {
    Shape ea = batch, eb = batch;
    ea.insert(ea.end(), {n, k});
    eb.insert(eb.end(), {k, m});
    auto [ta, la] = prepare(expand(a, ea));
    auto [tb, lb] = prepare(expand(b, eb));
    const int64_t nb = shape_numel(batch);
    const int64_t nbd = int64_t(batch.size());
    std::vector<int64_t> oa(size_t(nb), 0), ob(size_t(nb), 0);
    for (int64_t i = 0; i < nb; ++i) {
      int64_t rem = i;
      for (int64_t dd = nbd - 1; dd >= 0; --dd) {
        const int64_t idx = rem % batch[dd];
        rem /= batch[dd];
        oa[size_t(i)] += idx * ta.strides()[dd];
        ob[size_t(i)] += idx * tb.strides()[dd];
      }
    }
    // Strided-batched calls (CUDA) over the largest run of trailing batch dims whose
    // matrices step by one stride: all of them for a contiguous batch, the heads within
    // each sequence for attention's (B, H) views into a packed qkv (one call per b, not
    // one GEMM per (b, h): 2 x 3000 launches a step of a small GPT otherwise).
    const auto runs_of = [&](int64_t inner) {
      for (int64_t i = 0; i < nb; ++i) {
        const int64_t first = i - i % inner, j = i % inner;
        if (oa[size_t(i)] != oa[size_t(first)] + j * oa[1] || ob[size_t(i)] != ob[size_t(first)] + j * ob[1])
          return false;
      }
      return true;
    };
    int64_t inner = nb;
    for (int64_t dd = 0; dd < nbd && inner > 1 && !runs_of(inner); ++dd) inner /= batch[size_t(dd)];
    const int64_t es = int64_t(element_size(out.dtype()));
    const bool batched = inner > 1 && kGemmBatched.find(d) != nullptr;
    for (int64_t first = 0; first < nb; first += batched ? inner : 1) {
      auto* o = static_cast<char*>(out.raw_data()) + first * n * m * es;
      if (batched) {
        kGemmBatched(d)(out.dtype(), inner, n, m, k, mat_ref(ta, la, oa[size_t(first)]), oa[1],
                        mat_ref(tb, lb, ob[size_t(first)]), ob[1], o, std::max<int64_t>(m, 1), n * m);
      } else {
        kGemm(d)(out.dtype(), n, m, k, 1.0, mat_ref(ta, la, oa[size_t(first)]), mat_ref(tb, lb, ob[size_t(first)]), 0.0,
                 o, std::max<int64_t>(m, 1));
      }
    }
  }
  if (a_in.dim() == 1) out = squeeze(out, -2);
  if (b_in.dim() == 1) out = squeeze(out, -1);
  return out;
}

}  // namespace strata::ops

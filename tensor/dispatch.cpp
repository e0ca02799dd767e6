// The backend kernel registry behind KernelTable's empty slots: (op name, device type)
// -> kernel, with the kernel's C++ type kept so a signature mismatch is an error, not UB.
#include <strata/tensor/dispatch.h>

#include <map>
#include <mutex>
#include <string_view>
#include <typeindex>

#ifdef STRATA_WITH_CUDA
namespace strata::cuda {
void init();  // tensor/cuda/register.cpp: registers the CUDA allocator and kernels once
}  // namespace strata::cuda
#endif

namespace strata::detail {
namespace {

struct Entry {
  std::type_index type;
  AnyKernel fn;
};

struct Registry {
  std::mutex mu;
  std::map<std::string, Entry, std::less<>> table[kNumDeviceTypes];
};

Registry& registry() {
  static Registry r;
  return r;
}

void load_backend(DeviceType t) {
#ifdef STRATA_WITH_CUDA
  if (t == DeviceType::CUDA) cuda::init();
#else
  (void)t;
#endif
}

}  // namespace

void register_kernel(const char* op, DeviceType t, const std::type_info& type, AnyKernel fn) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.table[int(t)].insert_or_assign(std::string(op), Entry{std::type_index(type), fn});
}

AnyKernel find_kernel(const char* op, DeviceType t, const std::type_info& type) {
  load_backend(t);
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  const auto& m = r.table[int(t)];
  const auto it = m.find(std::string_view(op));
  if (it == m.end()) return nullptr;
  STRATA_CHECK(it->second.type == std::type_index(type), "[", op, "] the kernel registered for ",
               t == DeviceType::CUDA ? "cuda" : "cpu", " has signature ", it->second.type.name(),
               " but the front end calls ", type.name(), "; rebuild the backend against this tensor/ops.h");
  return it->second.fn;
}

}  // namespace strata::detail

namespace strata {

std::vector<std::string> registered_kernels(DeviceType t) {
  detail::load_backend(t);
  detail::Registry& r = detail::registry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::vector<std::string> names;
  for (const auto& [name, e] : r.table[int(t)]) names.push_back(name);
  return names;
}

void throw_devices_differ(const char* op, Device expected, std::initializer_list<Device> got) {
  for (Device o : got)
    STRATA_CHECK(o == expected, "[", op, "] tensors on different devices: ", o.str(), " vs ", expected.str());
  STRATA_THROW(Error, "[", op, "] tensors on different devices");
}

}  // namespace strata

#include "runtime/memory.h"

#include <algorithm>
#include <atomic>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <utility>

#include "common/env.h"
#include "mlx/ops.h"
#include "runtime/device.h"

namespace mlx_ep {
namespace {

// One allocation handed to ORT: a buffer and what owns it (MLX's allocator::Data for a
// DeviceAlloc buffer, the array for an adopted output). Arrays wrapping it share the owner, so
// the memory lives until ORT has freed it and MLX no longer reads it.
struct Allocation {
  mx::allocator::Buffer buffer{nullptr};
  size_t bytes = 0;
  std::shared_ptr<const void> owner;
};

// Allocations by start address. ORT may hand back a pointer inside one: with its memory
// patterns (SessionOptions.enable_mem_pattern, on by default) it allocates one block for many
// intermediate tensors and places each at an offset in it.
class Registry {
 public:
  void Add(const void* p, Allocation a) {
    std::lock_guard<std::mutex> lock(mu_);
    map_.emplace(Address(p), std::move(a));
  }
  // Removes and returns the allocation that starts at `p` (nullopt when unknown).
  std::optional<Allocation> Take(const void* p) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = map_.find(Address(p));
    if (it == map_.end()) return std::nullopt;
    Allocation a = std::move(it->second);
    map_.erase(it);
    return a;
  }
  // The allocation holding `p` and p's offset in it (nullopt when none does).
  std::optional<std::pair<Allocation, size_t>> Find(const void* p) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = map_.upper_bound(Address(p));
    if (it == map_.begin()) return std::nullopt;
    --it;
    const size_t offset = Address(p) - it->first;
    if (offset >= std::max<size_t>(it->second.bytes, 1)) return std::nullopt;
    return std::make_pair(it->second, offset);
  }

 private:
  static uintptr_t Address(const void* p) { return reinterpret_cast<uintptr_t>(p); }
  mutable std::mutex mu_;
  std::map<uintptr_t, Allocation> map_;
};

Registry& registry() {
  static auto* r = new Registry;  // never destroyed: ORT may free tensors during process exit
  return *r;
}

std::atomic<uint64_t> transferred[3];  // host->device, device->host, device->device
std::atomic<uint64_t> prefetched;      // of host->device, moved to the GPU by the driver

// The output an AdoptScope on this thread offers to the next allocation.
thread_local const mx::array* pending_adoption = nullptr;

}  // namespace

bool DeviceMemoryEnabled() {
  static const bool enabled = [] {
    const std::string v = EnvString(env::kDeviceMemory);
    if (v == "force") return true;  // also on the CPU device: tests the path where CI runs
    if (v == "0" || v == "false" || v == "off" || v == "OFF") return false;
    // On by default on GPUs (docs/gpu_memory.md: the H200 runs of the parity tests and the LLM and
    // BERT benchmarks had it on); MLX's CPU device has nothing to gain (ORT's memory is the host's).
    return RuntimeDevice() != mx::Device(mx::Device::cpu);
  }();
  return enabled;
}

void* DeviceAlloc(size_t bytes) {
  if (bytes == 0) return nullptr;
  if (const mx::array* a = pending_adoption; a && a->nbytes() == bytes) {
    pending_adoption = nullptr;  // one allocation only: the output it was offered for
    auto owner = std::make_shared<const mx::array>(*a);
    void* p = const_cast<void*>(owner->data<void>());
    registry().Add(p, Allocation{owner->buffer(), bytes, std::move(owner)});
    return p;
  }
  auto owner = std::make_shared<const mx::allocator::Data>(mx::allocator::malloc(bytes));
  mx::allocator::Buffer buffer = owner->buffer();
  void* p = buffer.raw_ptr();  // managed memory: no migration, the pointer both sides use
  registry().Add(p, Allocation{buffer, bytes, std::move(owner)});
  return p;
}

void DeviceFree(void* p) {
  if (!p) return;
  (void)registry().Take(p);  // drops the registry's reference to the owner
}

bool IsDeviceMemory(const void* p) { return p && registry().Find(p).has_value(); }

std::optional<mx::array> WrapDeviceMemory(const void* p, const mx::Shape& shape, mx::Dtype dtype) {
  std::optional<std::pair<Allocation, size_t>> found = p ? registry().Find(p) : std::nullopt;
  if (!found) return std::nullopt;
  const auto& [a, offset] = *found;
  const size_t item = dtype.size();
  size_t bytes = item;
  for (int d : shape) bytes *= static_cast<size_t>(d);
  if (offset + bytes > a.bytes) return std::nullopt;
  // The buffer stays ORT's: the array does not free it but shares its owner, so that ORT
  // freeing the tensor while MLX still reads it cannot release the memory.
  std::shared_ptr<const void> owner = a.owner;
  auto keep = [owner](mx::allocator::Buffer) {};
  if (offset == 0) return mx::array(mx::allocator::Data(a.buffer, keep), shape, dtype);
  // A tensor inside the block (ORT's memory patterns): the block as `dtype` elements, then a
  // slice at the tensor's offset and a reshape, both views of the same buffer (no copy).
  const size_t elements = a.bytes / item;
  if (offset % item != 0 || elements > static_cast<size_t>(std::numeric_limits<int>::max()))
    return std::nullopt;
  const mx::array block(mx::allocator::Data(a.buffer, keep), mx::Shape{static_cast<int>(elements)}, dtype);
  const int first = static_cast<int>(offset / item), count = static_cast<int>(bytes / item);
  const mx::Stream s = mx::default_stream(RuntimeDevice());
  return mx::reshape(mx::slice(block, {first}, {first + count}, s), shape, s);
}

TransferStats GetTransferStats() {
  return {transferred[0].load(), transferred[1].load(), transferred[2].load(), prefetched.load()};
}

void CountTransfer(bool from_device, bool to_device, uint64_t bytes) {
  if (from_device || to_device) transferred[from_device ? (to_device ? 2 : 1) : 0] += bytes;
}

void CountPrefetch(uint64_t bytes) { prefetched += bytes; }

const char* AdoptRefusal(const mx::array& a) {
  // Only a buffer nothing else refers to, from MLX's allocator: not a constant of the plan or of
  // a compiled function, an input passed through (Identity), a value that is two outputs, nor a
  // view sharing its buffer (MLX's own test for donating a buffer).
  if (a.nbytes() == 0) return "empty";
  if (a.offset() != 0 || !a.flags().row_contiguous || a.data_size() != a.size())
    return "a strided or offset view";
  if (!a.is_donatable()) {
    // On a GPU, MLX's command encoder holds the buffers of the kernels it ran until their
    // completion handler runs, which can be after eval returned: wait for it, then look again.
    mx::synchronize();
    if (!a.is_donatable())
      return "its buffer is shared (a constant, an input passed through, or another output)";
  }
  if (IsDeviceMemory(a.data<void>())) return "it is already ORT's memory";
  return nullptr;
}

bool Adoptable(const mx::array& a) { return AdoptRefusal(a) == nullptr; }

AdoptScope::AdoptScope(const mx::array& a) : data_(a.data<void>()) { pending_adoption = &a; }

AdoptScope::~AdoptScope() { pending_adoption = nullptr; }

bool AdoptScope::Adopted(const void* dst) const { return dst == data_ && !pending_adoption; }

}  // namespace mlx_ep

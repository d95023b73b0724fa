// libFuzzer target over ONNX model bytes: ORT (the onnxruntime wheel's libonnxruntime, loaded
// with dlopen as tests/cpp/host_test.cc does) builds a session from each input with the MLX
// plugin EP appended, then runs it on inputs made from the model's declared input types and
// shapes. Session creation or a run may fail (most mutants are not valid models); the process
// must never crash, abort, leak memory errors or hang. Built by `make fuzz` (README.md here).
//
// Environment: MLX_EP_FUZZ_CPU_ONLY=1 leaves the EP out (is a crash ORT's own?);
// ONNXRUNTIME_EP_MLX_NO_COMPILE defaults to 1 here (every compiled signature JIT-compiles
// kernels with a C++ compiler on MLX's CPU backend: seconds per input); set it to 0 to fuzz
// the compiled path too.
#include <dlfcn.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#define ORT_API_MANUAL_INIT
#include <onnxruntime_cxx_api.h>

namespace {

constexpr const char* kEp = "MLXExecutionProvider";
// Feeds are capped so that a declared [2^40] input is skipped rather than allocated.
constexpr int64_t kMaxFeedElements = 1 << 16;
constexpr size_t kMaxInputs = 64;

struct Host {
  std::unique_ptr<Ort::Env> env;
  std::vector<Ort::ConstEpDevice> devices;  // empty: CPU EP only
};

const char* EnvOr(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}

Host& GetHost() {
  static Host* host = [] {
    auto* h = new Host;  // never destroyed: libFuzzer exits without running our teardown
    void* ort = dlopen(EnvOr("MLX_EP_FUZZ_ORT_LIB", ORT_RUNTIME_LIB), RTLD_NOW | RTLD_LOCAL);
    if (!ort) {
      std::fprintf(stderr, "dlopen failed: %s\n", dlerror());
      std::abort();
    }
    using GetApiBase = const OrtApiBase* (*)();
    auto get_base = reinterpret_cast<GetApiBase>(dlsym(ort, "OrtGetApiBase"));
    const OrtApi* api = get_base ? get_base()->GetApi(ORT_API_VERSION) : nullptr;
    if (!api) {
      std::fprintf(stderr, "the ORT library offers no API version %d\n", ORT_API_VERSION);
      std::abort();
    }
    Ort::InitApi(api);
    h->env = std::make_unique<Ort::Env>(ORT_LOGGING_LEVEL_FATAL, "fuzz_model");
    if (std::strcmp(EnvOr("MLX_EP_FUZZ_CPU_ONLY", "0"), "1") != 0) {
      h->env->RegisterExecutionProviderLibrary(kEp, EnvOr("MLX_EP_FUZZ_PLUGIN", MLX_EP_PLUGIN));
      for (const auto& d : h->env->GetEpDevices())
        if (std::string(d.EpName()) == kEp) h->devices.push_back(d);
      if (h->devices.size() != 1) {
        std::fprintf(stderr, "expected one MLX EP device, found %zu\n", h->devices.size());
        std::abort();
      }
    }
    return h;
  }();
  return *host;
}

// Small values (-1..3 as k - 1, unsigned 0..4 as k, bool alternating) keep indices, axes and
// shapes mostly in range, so runs get past input validation into the kernels.
int SmallValue(int64_t i) { return static_cast<int>((i * 7 + 3) % 5); }

template <typename T>
void FillInts(void* data, int64_t n, int offset) {
  for (int64_t i = 0; i < n; ++i) static_cast<T*>(data)[i] = static_cast<T>(SmallValue(i) + offset);
}

template <typename T>
void FillFloats(void* data, int64_t n) {
  for (int64_t i = 0; i < n; ++i) static_cast<T*>(data)[i] = static_cast<T>((SmallValue(i) - 1) * 0.75);
}

// float16 / bfloat16 bit patterns of -0.75, 0, 0.75, 1.5, 2.25 (the float fill's values).
void FillHalves(void* data, int64_t n, bool bfloat) {
  static const uint16_t kHalf[] = {0xBA00, 0x0000, 0x3A00, 0x3E00, 0x4080};
  static const uint16_t kBf16[] = {0xBF40, 0x0000, 0x3F40, 0x3FC0, 0x4010};
  for (int64_t i = 0; i < n; ++i) static_cast<uint16_t*>(data)[i] = (bfloat ? kBf16 : kHalf)[SmallValue(i)];
}

// False for element types the harness does not feed (strings, float8, int4, ...).
bool FillSmallValues(ONNXTensorElementDataType type, void* data, int64_t n) {
  switch (type) {
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT:
      FillFloats<float>(data, n);
      return true;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_DOUBLE:
      FillFloats<double>(data, n);
      return true;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16:
      FillHalves(data, n, false);
      return true;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16:
      FillHalves(data, n, true);
      return true;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT8:
      FillInts<int8_t>(data, n, -1);
      return true;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT16:
      FillInts<int16_t>(data, n, -1);
      return true;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32:
      FillInts<int32_t>(data, n, -1);
      return true;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64:
      FillInts<int64_t>(data, n, -1);
      return true;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8:
      FillInts<uint8_t>(data, n, 0);
      return true;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT16:
      FillInts<uint16_t>(data, n, 0);
      return true;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT32:
      FillInts<uint32_t>(data, n, 0);
      return true;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT64:
      FillInts<uint64_t>(data, n, 0);
      return true;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_BOOL:
      for (int64_t i = 0; i < n; ++i) static_cast<bool*>(data)[i] = i % 2;
      return true;
    default:
      return false;
  }
}

// A feed for every graph input from its declared type and shape (symbolic dims become 2);
// false when an input is not a fillable tensor or too large.
bool MakeFeeds(Ort::Session& session, std::vector<std::string>& names, std::vector<Ort::Value>& feeds) {
  Ort::AllocatorWithDefaultOptions alloc;
  const size_t count = session.GetInputCount();
  if (count > kMaxInputs) return false;
  for (size_t i = 0; i < count; ++i) {
    names.push_back(session.GetInputNameAllocated(i, alloc).get());
    Ort::TypeInfo type = session.GetInputTypeInfo(i);
    if (type.GetONNXType() != ONNX_TYPE_TENSOR) return false;
    auto info = type.GetTensorTypeAndShapeInfo();
    const ONNXTensorElementDataType elem = info.GetElementType();
    std::vector<int64_t> shape = info.GetShape();
    int64_t elements = 1;
    for (int64_t& d : shape) {
      if (d < 0) d = 2;
      if (d > kMaxFeedElements) return false;
      elements *= d;
      if (elements > kMaxFeedElements) return false;
    }
    feeds.push_back(Ort::Value::CreateTensor(alloc, shape.data(), shape.size(), elem));
    if (!FillSmallValues(elem, feeds.back().GetTensorMutableRawData(), elements)) return false;
  }
  return true;
}

void RunOnce(const uint8_t* data, size_t size) {
  Host& host = GetHost();
  Ort::SessionOptions so;
  so.SetIntraOpNumThreads(1);
  so.SetInterOpNumThreads(1);
  // The graph as written reaches the EP (no ORT fusions or constant folding in between).
  so.SetGraphOptimizationLevel(ORT_DISABLE_ALL);
  if (!host.devices.empty())
    so.AppendExecutionProvider_V2(*host.env, host.devices, std::unordered_map<std::string, std::string>{});
  Ort::Session session(*host.env, data, size, so);

  std::vector<std::string> names;
  std::vector<Ort::Value> feeds;
  if (!MakeFeeds(session, names, feeds)) return;
  std::vector<const char*> in_names;
  for (const auto& n : names) in_names.push_back(n.c_str());
  Ort::AllocatorWithDefaultOptions alloc;
  std::vector<Ort::AllocatedStringPtr> out_holders;
  std::vector<const char*> out_names;
  for (size_t i = 0; i < session.GetOutputCount(); ++i) {
    out_holders.push_back(session.GetOutputNameAllocated(i, alloc));
    out_names.push_back(out_holders.back().get());
  }
  // Two runs: the second hits the EP's cached (compiled or traced) function for the signature.
  for (int run = 0; run < 2; ++run)
    session.Run(Ort::RunOptions{nullptr}, in_names.data(), feeds.data(), feeds.size(), out_names.data(),
                out_names.size());
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  setenv("ONNXRUNTIME_EP_MLX_NO_COMPILE", "1", /*overwrite=*/0);
  setenv("ONNXRUNTIME_EP_MLX_BLAS_THREADS", "1", 0);
  GetHost();  // register the plugin before fuzzing starts, so libFuzzer sees its coverage counters
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    RunOnce(data, size);
  } catch (const Ort::Exception&) {
    // A clean error: what a bad model or input must produce.
  }
  return 0;
}

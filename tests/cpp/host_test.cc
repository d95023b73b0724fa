// A C++ host: loads ONNX Runtime's shared library (from the onnxruntime wheel) with dlopen,
// registers the MLX plugin through the C API and runs models, checking outputs and that the
// nodes really ran on MLX (from ORT's own profile).
#include <dlfcn.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#define ORT_API_MANUAL_INIT
#include <onnxruntime_cxx_api.h>

#include "abi/status.h"

namespace {

constexpr const char* kEp = "MLXExecutionProvider";

// One process-wide ORT environment with the plugin registered.
class OrtHost {
 public:
  static OrtHost& Get() {
    static OrtHost host;
    return host;
  }
  Ort::Env& env() { return *env_; }
  std::vector<Ort::ConstEpDevice> MlxDevices() {
    std::vector<Ort::ConstEpDevice> out;
    for (const auto& d : env_->GetEpDevices())
      if (std::string(d.EpName()) == kEp) out.push_back(d);
    return out;
  }

 private:
  OrtHost() {
    handle_ = dlopen(ORT_RUNTIME_LIB, RTLD_NOW | RTLD_LOCAL);
    if (!handle_) throw std::runtime_error(std::string("dlopen failed: ") + dlerror());
    using GetApiBase = const OrtApiBase* (*)();
    auto get_base = reinterpret_cast<GetApiBase>(dlsym(handle_, "OrtGetApiBase"));
    if (!get_base) throw std::runtime_error("OrtGetApiBase not found");
    const OrtApi* api = get_base()->GetApi(ORT_API_VERSION);
    if (!api)
      throw std::runtime_error("the ORT library does not offer API version " +
                               std::to_string(ORT_API_VERSION));
    Ort::InitApi(api);
    env_ = std::make_unique<Ort::Env>(ORT_LOGGING_LEVEL_WARNING, "host_test");
    env_->RegisterExecutionProviderLibrary(kEp, MLX_EP_PLUGIN);
  }
  void* handle_ = nullptr;
  std::unique_ptr<Ort::Env> env_;
};

struct RunResult {
  std::vector<float> output;
  std::vector<int64_t> shape;
  int mlx_nodes = 0;
  int other_nodes = 0;
};

Ort::Session MakeSession(const std::string& model, const std::string& profile_prefix) {
  OrtHost& host = OrtHost::Get();
  Ort::SessionOptions so;
  auto devices = host.MlxDevices();
  if (devices.size() != 1) throw std::runtime_error("expected one MLX EP device");
  so.AppendExecutionProvider_V2(host.env(), devices, std::unordered_map<std::string, std::string>{});
  if (!profile_prefix.empty()) so.EnableProfiling(profile_prefix.c_str());
  return Ort::Session(host.env(), model.c_str(), so);
}

Ort::Value Tensor(std::vector<float>& data, const std::vector<int64_t>& shape) {
  OrtHost::Get();  // the API must be initialised before any Ort:: call
  auto mem = Ort::MemoryInfo::CreateCpu(OrtArenaAllocator, OrtMemTypeDefault);
  return Ort::Value::CreateTensor<float>(mem, data.data(), data.size(), shape.data(), shape.size());
}

// Runs `model` once with profiling and counts which EP ran each node.
RunResult RunModel(const std::string& model, std::vector<std::string> names,
                   std::vector<Ort::Value>& inputs) {
  // One prefix a process: ORT names the file by the prefix and the second it starts, so two test
  // processes of `ctest -j` would write, read and delete one file.
  Ort::Session session =
      MakeSession(model, ::testing::TempDir() + "host_test_profile_" + std::to_string(getpid()));
  std::vector<const char*> in_names;
  for (auto& n : names) in_names.push_back(n.c_str());
  Ort::AllocatorWithDefaultOptions alloc;
  auto out_name = session.GetOutputNameAllocated(0, alloc);
  const char* out_names[] = {out_name.get()};
  auto outs =
      session.Run(Ort::RunOptions{nullptr}, in_names.data(), inputs.data(), inputs.size(), out_names, 1);
  RunResult r;
  auto info = outs[0].GetTensorTypeAndShapeInfo();
  r.shape = info.GetShape();
  const float* p = outs[0].GetTensorData<float>();
  r.output.assign(p, p + info.GetElementCount());

  auto profile = session.EndProfilingAllocated(alloc);
  std::ifstream f(profile.get());
  for (const auto& e : nlohmann::json::parse(f)) {
    if (e.value("cat", "") != "Node" || !e.contains("args") || !e["args"].contains("provider")) continue;
    if (e["name"].get<std::string>().find("_kernel_time") == std::string::npos) continue;
    (e["args"]["provider"] == kEp ? r.mlx_nodes : r.other_nodes)++;
  }
  std::remove(profile.get());
  return r;
}

std::string ModelPath(const char* name) { return std::string(HOST_TEST_MODELS) + "/" + name; }

TEST(HostTest, LoadsPluginAndOffersOneDevice) {
  auto devices = OrtHost::Get().MlxDevices();
  ASSERT_EQ(devices.size(), 1u);
  EXPECT_STREQ(devices[0].EpVendor(), "onnxruntime-ep-mlx");
}

// libmlx.so's cblas_sgemm must land in OpenBLAS (through the EP's shim, src/blas/blas_shim.c),
// not in the reference BLAS bundled with the mlx-cpu wheel. The EP reads libmlx's GOT slot and
// publishes what it found in its device metadata.
TEST(HostTest, MlxSgemmResolvesToOpenBlas) {
#if !defined(MLX_EP_EXPECT_OPENBLAS)
  GTEST_SKIP() << "built without scipy-openblas32 (or not on Linux)";
#else
  auto devices = OrtHost::Get().MlxDevices();
  ASSERT_EQ(devices.size(), 1u);
  Ort::ConstKeyValuePairs metadata = devices[0].EpMetadata();
  auto value = [&](const char* key) {
    const char* v = metadata.GetValue(key);
    return std::string(v ? v : "");
  };
  auto basename = [](const std::string& path) { return path.substr(path.find_last_of('/') + 1); };
  EXPECT_EQ(value("blas"), "openblas") << value("blas_sgemm_library") << ": " << value("blas_note");
  EXPECT_EQ(basename(value("blas_sgemm_library")), "libonnxruntime_ep_mlx_blas.so");
  EXPECT_EQ(basename(value("blas_library")).rfind("libscipy_openblas", 0), 0u) << value("blas_library");
#endif
}

TEST(HostTest, RunsWholeModelOnMlx) {
  std::vector<float> a = {1, -2, 3, -4, 5, -6}, b = {0.5f, 1.5f, -2.5f};
  std::vector<Ort::Value> inputs;
  inputs.push_back(Tensor(a, {2, 3}));
  inputs.push_back(Tensor(b, {3}));
  RunResult r = RunModel(ModelPath("add_mul_relu.onnx"), {"a", "b"}, inputs);
  ASSERT_EQ(r.shape, (std::vector<int64_t>{2, 3}));
  for (size_t i = 0; i < a.size(); ++i) {
    const float expect = std::max(0.f, (a[i] + b[i % 3]) * a[i]);
    EXPECT_FLOAT_EQ(r.output[i], expect) << "element " << i;
  }
  EXPECT_EQ(r.other_nodes, 0);
  EXPECT_EQ(r.mlx_nodes, 1);  // the three nodes run as one fused MLX partition
}

TEST(HostTest, FallsBackToCpuForUnclaimedNode) {
  std::vector<float> a = {2, 0, 0, 0, 3, 0, 0, 0, 4}, b(9, 0.f), c = {1.f};
  std::vector<Ort::Value> inputs;
  inputs.push_back(Tensor(a, {3, 3}));
  inputs.push_back(Tensor(b, {3, 3}));
  inputs.push_back(Tensor(c, {}));
  RunResult r = RunModel(ModelPath("mixed_fallback.onnx"), {"a", "b", "c"}, inputs);
  ASSERT_EQ(r.output.size(), 1u);
  EXPECT_NEAR(r.output[0], 25.f, 1e-4);  // det(diag(2,3,4)) + 1
  EXPECT_EQ(r.mlx_nodes, 2);             // the two Adds, each its own partition
  EXPECT_EQ(r.other_nodes, 1);           // Det on the CPU EP
}

TEST(HostTest, WrongInputShapeIsACleanError) {
  std::vector<float> a(4, 1.f), b(3, 1.f);
  std::vector<Ort::Value> inputs;
  inputs.push_back(Tensor(a, {2, 2}));
  inputs.push_back(Tensor(b, {3}));
  EXPECT_THROW(RunModel(ModelPath("add_mul_relu.onnx"), {"a", "b"}, inputs), Ort::Exception);
}

// Each kind of error reaches ORT with the code common/error.h gives it.
template <typename Throw>
OrtErrorCode CodeOf(Throw thrower) {
  OrtHost::Get();
  OrtStatus* status = [&]() -> OrtStatus* {
    MLX_EP_API_BEGIN
    thrower();
    return nullptr;
    MLX_EP_API_END("test")
  }();
  if (!status) return ORT_OK;
  const OrtErrorCode code = Ort::GetApi().GetErrorCode(status);
  Ort::GetApi().ReleaseStatus(status);
  return code;
}

TEST(HostTest, ErrorsCarryTheOrtCodeUsersExpect) {
  using namespace mlx_ep;
  EXPECT_EQ(CodeOf([] { throw InvalidArgumentError("index out of range"); }), ORT_INVALID_ARGUMENT);
  EXPECT_EQ(CodeOf([] { throw std::invalid_argument("[broadcast_shapes] MLX's shape error"); }),
            ORT_INVALID_ARGUMENT);
  EXPECT_EQ(CodeOf([] { throw NotImplementedError("a type MLX lacks"); }), ORT_NOT_IMPLEMENTED);
  EXPECT_EQ(CodeOf([] { throw OutOfMemoryError("Failed to allocate memory"); }), ORT_FAIL);
  EXPECT_EQ(CodeOf([] { throw std::bad_alloc(); }), ORT_FAIL);
  EXPECT_EQ(CodeOf([] { throw std::runtime_error("[eval] MLX's runtime error"); }), ORT_RUNTIME_EXCEPTION);
  EXPECT_EQ(CodeOf([] { throw std::logic_error("an invariant of the EP"); }), ORT_RUNTIME_EXCEPTION);
  EXPECT_EQ(CodeOf([] { throw EpError(ErrorKind::kInvalidGraph, "a value without a type"); }),
            ORT_INVALID_GRAPH);
  EXPECT_EQ(CodeOf([] { throw EpError(ErrorKind::kEpFail, "a plan that cannot be built"); }), ORT_EP_FAIL);
  EXPECT_EQ(CodeOf([] { throw Ort::Exception("from ORT", ORT_NO_SUCHFILE); }), ORT_NO_SUCHFILE);
  EXPECT_EQ(CodeOf([] { throw 7; }), ORT_RUNTIME_EXCEPTION);
  EXPECT_EQ(CodeOf([] {}), ORT_OK);
}

}  // namespace

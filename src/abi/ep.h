// OrtEp: GetCapability (claim + partition) and Compile (plan + runner per fused node).
#pragma once

#include <map>
#include <memory>
#include <string>

#include "abi/ort.h"

namespace mlx_ep {

class MlxEpFactory;
class SessionReport;  // diagnostics/report.h: kept out of this header, which would pull in MLX

/** One EP instance, created per session. */
class MlxEp : public OrtEp {
 public:
  MlxEp(MlxEpFactory& factory, const OrtLogger& logger);
  ~MlxEp();

 private:
  static const char* ORT_API_CALL GetNameImpl(const OrtEp* this_ptr) noexcept;
  static OrtStatus* ORT_API_CALL GetCapabilityImpl(OrtEp* this_ptr, const OrtGraph* graph,
                                                   OrtEpGraphSupportInfo* graph_support_info) noexcept;
  static OrtStatus* ORT_API_CALL CompileImpl(OrtEp* this_ptr, const OrtGraph** graphs,
                                             const OrtNode** fused_nodes, size_t count,
                                             OrtNodeComputeInfo** node_compute_infos,
                                             OrtNode** ep_context_nodes) noexcept;
  static OrtStatus* ORT_API_CALL GetDefaultMemoryDeviceImpl(const OrtEp* this_ptr,
                                                            const OrtMemoryDevice** device) noexcept;
  static void ORT_API_CALL ReleaseNodeComputeInfosImpl(OrtEp* this_ptr, OrtNodeComputeInfo** infos,
                                                       size_t num_infos) noexcept;

  void ClaimGraph(const OrtGraph* graph, OrtEpGraphSupportInfo* graph_support_info);
  void CompilePartitions(const OrtGraph** graphs, const OrtNode** fused_nodes, size_t count,
                         OrtNodeComputeInfo** node_compute_infos);

  MlxEpFactory& factory_;
  const OrtLogger& logger_;
  std::unique_ptr<SessionReport> report_;
  /** ONNXRUNTIME_EP_MLX_REPORT as it was when the session was created: a session released
   *  later (by a garbage collector, say) still writes its own report where it was asked to. */
  std::string report_path_;
  /** Why a node holding subgraphs could not take its bodies whole when ORT asked about a body
   *  first (by node name): the reason shown when that node is declined later. */
  std::map<std::string, std::string> holder_reasons_;
};

}  // namespace mlx_ep

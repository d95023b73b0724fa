// ORT's side of the EP's device memory on a GPU runtime device (runtime/memory.h,
// docs/gpu_memory.md): the OrtMemoryInfos the factory registers on its OrtEpDevice, the
// OrtAllocator ORT allocates MLX partitions' tensors with, and the OrtDataTransferImpl that
// copies between that memory and the host.
#pragma once

#include "abi/ort.h"

namespace mlx_ep {

/** The memory infos of the EP's device memory (created once; valid for the process). */
struct DeviceMemoryInfos {
  const OrtMemoryInfo* device = nullptr;           ///< OrtDeviceMemoryType_DEFAULT
  const OrtMemoryInfo* host_accessible = nullptr;  ///< OrtDeviceMemoryType_HOST_ACCESSIBLE
};
/** The infos, made on first use (only on a GPU runtime device with device memory enabled). */
const DeviceMemoryInfos& GetDeviceMemoryInfos();

/** An allocator over MLX memory for `info` (one of GetDeviceMemoryInfos), or nullptr for any
 *  other memory info. Released with ReleaseDeviceAllocator. */
OrtAllocator* CreateDeviceAllocator(const OrtMemoryInfo* info);
void ReleaseDeviceAllocator(OrtAllocator* allocator);

/** The data transfer between the EP's memory and the host (one per process; ORT's Release of it
 *  does nothing). */
OrtDataTransferImpl* GetDeviceDataTransfer();

}  // namespace mlx_ep

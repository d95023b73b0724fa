// Reads an OrtGraph into our owned Graph snapshot.
#pragma once

#include <cstddef>

#include "abi/ort.h"
#include "graph/graph.h"

namespace mlx_ep {

/** Copies nodes, value infos, and attributes of `graph`. Constant initializers with at
 *  most `max_constant_bytes` bytes have their data copied too (all of them with SIZE_MAX). */
Graph ReadGraph(const OrtGraph* graph, size_t max_constant_bytes);

/** A graph holding only `node` (with its subgraphs) and the values it reads and writes: enough
 *  to claim it without its graph (ORT asks about a body before the node that holds it). */
Graph ReadNodeAlone(const OrtNode* node, size_t max_constant_bytes);

}  // namespace mlx_ep

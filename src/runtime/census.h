// What MLX evaluates per run: the primitives of a run's graph, counted by name
// (ONNXRUNTIME_EP_MLX_GRAPH_CENSUS). On a GPU each primitive is encoded on the host every run,
// so this count, not the ONNX node count, is what a run's host time scales with.
#pragma once

#include <map>
#include <string>
#include <vector>

#include <mlx/array.h>

namespace mlx_ep {

namespace mx = mlx::core;

/** Primitive name -> how many of the graph behind `outputs` are still to be evaluated (a
 *  multi-output primitive counts once; evaluated arrays and inputs are not walked past). */
std::map<std::string, int> PrimitiveCensus(const std::vector<mx::array>& outputs);

/** The graph behind `outputs` as MLX's print_graph writes it (ONNXRUNTIME_EP_MLX_GRAPH_CENSUS=graph):
 *  one line per primitive with its inputs, outputs, shapes and dtypes, to see where they come from. */
std::string PrintedGraph(const std::vector<mx::array>& outputs);

/** "total N: Name count, ..." with the largest counts first. */
std::string FormatCensus(const std::map<std::string, int>& census);

}  // namespace mlx_ep

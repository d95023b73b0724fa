// Prints the op registry as a Markdown table (docs/ops.md is generated from it, and a test
// checks that the committed file is current).
#include <algorithm>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "ops/registry.h"

int main() {
  // op -> "since-until" ranges, sorted by op name then range.
  std::map<std::string, std::vector<std::pair<int, int>>> ops;
  for (const auto& s : mlx_ep::OpRegistry::Get().specs())
    ops[(s.domain.empty() ? "" : s.domain + "::") + s.op_type].emplace_back(s.since, s.until);
  std::cout << "| op | opset (schema since_version) ranges |\n| --- | --- |\n";
  for (auto& [op, ranges] : ops) {
    std::sort(ranges.begin(), ranges.end());
    std::string text;
    for (const auto& [since, until] : ranges)
      text += (text.empty() ? "" : ", ") + std::to_string(since) +
              (until != since ? "–" + std::to_string(until) : "");
    std::cout << "| " << op << " | " << text << " |\n";
  }
  std::cout << "\n" << ops.size() << " ops.\n";
  return 0;
}

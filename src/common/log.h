// Minimal stderr logging for the diagnostics the env vars switch on.
#pragma once

#include <iostream>
#include <sstream>
#include <string>

namespace mlx_ep {

/** Writes one line, prefixed with the EP's tag, to stderr. */
inline void LogLine(const std::string& line) {
  std::ostringstream os;
  os << "[MLXExecutionProvider] " << line << '\n';
  std::cerr << os.str() << std::flush;
}

}  // namespace mlx_ep

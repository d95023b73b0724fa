// The EP's log lines: through ORT's logger when the plugin runs inside ORT, on stderr when the
// environment-variable diagnostics ask for them (ONNXRUNTIME_EP_MLX_VERBOSE, ..._CLAIM_DEBUG)
// and ORT's logger does not show them already, or when there is no ORT logger (core tests).
// Severities (README, "Logging and error codes"): session and claim summaries are INFO,
// per-node claim details (declined nodes, boundaries) VERBOSE, environment values the EP cannot
// use WARNING.
// No ORT header here: src/abi/ installs the function that talks to ORT (InstallOrtLogging).
#pragma once

#include <atomic>
#include <iostream>
#include <sstream>
#include <string>

struct OrtLogger;  // ORT's C type (onnxruntime_c_api.h)

namespace mlx_ep {

/** ORT's logging severities (the values of OrtLoggingLevel). */
enum class LogSeverity : int { kVerbose = 0, kInfo = 1, kWarning = 2, kError = 3 };

/** ORT's side of logging, installed by the plugin's entry point. `would_log` says whether
 *  `logger` emits lines of a severity; `log` hands it one (true when ORT took it). */
struct OrtLogging {
  bool (*would_log)(const OrtLogger* logger, LogSeverity severity) = nullptr;
  bool (*log)(const OrtLogger* logger, LogSeverity severity, const std::string& line) = nullptr;
  const OrtLogger* default_logger = nullptr;  ///< the environment's, from CreateEpFactories
};

namespace detail {
inline std::atomic<const OrtLogging*>& InstalledOrtLogging() {
  static std::atomic<const OrtLogging*> installed{nullptr};
  return installed;
}
}  // namespace detail

/** Installs ORT's logging (null: none, e.g. once the factory is released). `logging` must
 *  outlive its installation. */
inline void InstallOrtLogging(const OrtLogging* logging) { detail::InstalledOrtLogging().store(logging); }

/** True when ORT's logger (`logger`, else the default one) emits lines of `severity`: worth
 *  formatting a line that only ORT's log would show. */
inline bool OrtWouldLog(LogSeverity severity, const OrtLogger* logger = nullptr) {
  const OrtLogging* ort = detail::InstalledOrtLogging().load();
  if (!ort) return false;
  if (!logger) logger = ort->default_logger;
  return logger && ort->would_log(logger, severity);
}

/** Logs one line, tagged with the EP's name: to ORT's `logger` (a session's; null: ORT's default
 *  logger) at `severity`, and to stderr when `to_stderr` and ORT does not emit it (its level is
 *  above `severity`, or there is no ORT logger). */
inline void LogLine(const std::string& line, LogSeverity severity = LogSeverity::kInfo,
                    const OrtLogger* logger = nullptr, bool to_stderr = true) {
  const std::string tagged = "[MLXExecutionProvider] " + line;
  bool shown = false;
  if (const OrtLogging* ort = detail::InstalledOrtLogging().load()) {
    if (!logger) logger = ort->default_logger;
    shown = logger && ort->would_log(logger, severity) && ort->log(logger, severity, tagged);
  }
  if (shown || !to_stderr) return;
  std::ostringstream os;
  os << tagged << '\n';
  std::cerr << os.str() << std::flush;
}

}  // namespace mlx_ep

// PartitionRunner: outputs written in place into their input's buffer (docs/kv_cache.md).
#include <algorithm>
#include <cstring>
#include <optional>

#include "common/env.h"
#include "runtime/device.h"
#include "runtime/device_writes.h"
#include "runtime/memory.h"
#include "runtime/mlx_thread.h"
#include "runtime/runner.h"
#include "runtime/runner_internal.h"

namespace mlx_ep {
namespace {

/** The layout of in-place output `e`'s rows in its buffer. */
RowsLayout Layout(const std::vector<mx::array>& outputs, const InPlaceOutput& e) {
  return RowsLayoutOf(outputs[e.output].shape(), e.axis, outputs[e.rows].shape(e.axis));
}

}  // namespace

std::optional<mx::array> PartitionRunner::EvalExceptAliased(const std::vector<mx::array>& outputs,
                                                            const std::vector<InPlaceOutput>& in_place,
                                                            const std::vector<bool>& aliased, bool has_checks,
                                                            std::vector<mx::array>& pending) {
  const size_t n = plan_.output_names.size();
  std::vector<mx::array> needed;
  for (size_t k = 0; k < n; ++k)
    if (!aliased[k]) needed.push_back(outputs[k]);
  if (has_checks) needed.push_back(outputs.at(n));
  for (const InPlaceOutput& e : in_place)
    if (aliased[e.output]) needed.insert(needed.end(), {outputs[e.rows], outputs[e.offsets]});
  // With device writes the offsets are checked on the device, in this evaluation: only the
  // verdict is read on the host (WriteInPlace), not every offsets array.
  std::optional<mx::array> ok;
  if (DeviceWritesEnabled()) {
    std::vector<std::pair<mx::array, int64_t>> offsets;
    for (const InPlaceOutput& e : in_place)
      if (aliased[e.output]) offsets.emplace_back(outputs[e.offsets], Layout(outputs, e).room());
    if (!offsets.empty())
      needed.push_back(*(ok = OffsetsInRange(offsets, mx::default_stream(RuntimeDevice()))));
  }
  if (EnvFlag(env::kGraphCensus)) LogCensus(needed);
  if (AsyncRunEvaluation(needed)) {
    // Started, not waited for (device_writes.h); nothing is adopted then (the writes copy).
    mx::async_eval(needed);
    pending = std::move(needed);
    return ok;
  }
  mx::eval(needed);  // `needed` dies here: a second reference would keep outputs from being adopted
  return ok;
}

void PartitionRunner::ProbeInPlace(const std::vector<InputTensor>& inputs,
                                   const std::vector<mx::array>& outputs,
                                   const std::vector<InPlaceOutput>& in_place, const OutputSink& sink,
                                   std::vector<void*>& given, std::vector<bool>& aliased) {
  for (const InPlaceOutput& e : in_place) {
    const mx::array& a = outputs[e.output];
    const InputTensor& t = inputs[e.input];
    const std::vector<int64_t> shape(a.shape().begin(), a.shape().end());
    if (shape != t.shape || a.nbytes() != ByteSize(t) || a.nbytes() == 0 || !t.data || given[e.output])
      continue;
    // ORT's buffer for an output it did not bind is allocated here; with device memory that
    // would forgo adopting MLX's own buffer, so it is asked for early only once seen aliased.
    if (DeviceMemoryEnabled() && !alias_seen_[e.output]) continue;
    given[e.output] = sink(e.output, shape, a.nbytes());  // the sink checks ORT's size
    aliased[e.output] = given[e.output] == t.data;
    if (aliased[e.output]) alias_seen_[e.output] = true;
  }
}

bool PartitionRunner::WriteInPlace(const std::vector<mx::array>& outputs,
                                   const std::vector<InPlaceOutput>& in_place,
                                   const std::vector<void*>& given, const std::vector<bool>& aliased,
                                   const std::optional<mx::array>& ok, std::vector<mx::array>& writes,
                                   bool& verdict_pending, uint64_t& device_bytes) {
  verdict_pending = false;
  device_bytes = 0;
  const size_t before = writes.size();
  if (ok && WriteInPlaceOnDevice(outputs, in_place, given, aliased, *ok, writes, device_bytes)) {
    if (AsyncRunEvaluation()) {
      verdict_pending = true;  // read after the writes, which check it themselves
      return true;
    }
    if (ok->item<int32_t>() == 0) {  // evaluated with the outputs: one small read
      writes.erase(writes.begin() + static_cast<std::ptrdiff_t>(before), writes.end());
      return false;
    }
    std::lock_guard<std::mutex> lock(mu_);
    stats_.bytes_out_in_place += device_bytes;
    return true;
  }
  std::vector<mx::array> read;  // what the host reads, evaluated (AsyncRunEvaluation started it only)
  for (const InPlaceOutput& e : in_place)
    if (aliased[e.output]) read.insert(read.end(), {outputs[e.rows], outputs[e.offsets]});
  mx::eval(read);
  // The trace leaves the rows as they are (plan.cc): strided ones are copied, in one evaluation.
  std::vector<std::optional<mx::array>> rows_of(in_place.size());
  std::vector<mx::array> copies;
  for (size_t k = 0; k < in_place.size(); ++k) {
    const InPlaceOutput& e = in_place[k];
    if (!aliased[e.output]) continue;
    const mx::array& rows = outputs[e.rows];
    rows_of[k] =
        rows.flags().row_contiguous ? rows : mx::contiguous(rows, false, mx::default_stream(RuntimeDevice()));
    if (rows_of[k]->id() != rows.id()) copies.push_back(*rows_of[k]);
  }
  if (!copies.empty()) mx::eval(copies);
  for (const InPlaceOutput& e : in_place) {
    if (!aliased[e.output]) continue;
    const mx::array& offsets = outputs[e.offsets];
    const int64_t room = Layout(outputs, e).room();
    const int32_t* off = offsets.data<int32_t>();
    if (!std::all_of(off, off + offsets.size(), [&](int32_t o) { return o >= 0 && o <= room; })) return false;
  }
  uint64_t in_place_bytes = 0;
  for (size_t k = 0; k < in_place.size(); ++k) {
    const InPlaceOutput& e = in_place[k];
    if (!aliased[e.output]) continue;
    const mx::array &offsets = outputs[e.offsets], &rows = *rows_of[k];
    const RowsLayout l = Layout(outputs, e);
    const size_t outer = static_cast<size_t>(l.outer), per_entry = static_cast<size_t>(l.per_entry);
    const size_t inner = static_cast<size_t>(l.inner) * rows.itemsize();  // bytes: rows are row-contiguous
    const size_t len = static_cast<size_t>(l.len), seq = static_cast<size_t>(l.seq);
    auto* dst = static_cast<uint8_t*>(given[e.output]);
    const uint8_t* src = rows.data<uint8_t>();
    const int32_t* off = offsets.data<int32_t>();
    for (size_t o = 0; o < outer; ++o)
      std::memcpy(dst + (o * len + static_cast<size_t>(off[o / per_entry])) * inner, src + o * seq * inner,
                  seq * inner);
    in_place_bytes += rows.nbytes();
  }
  std::lock_guard<std::mutex> lock(mu_);
  stats_.bytes_out_in_place += in_place_bytes;
  return true;
}

bool PartitionRunner::WriteInPlaceOnDevice(const std::vector<mx::array>& outputs,
                                           const std::vector<InPlaceOutput>& in_place,
                                           const std::vector<void*>& given, const std::vector<bool>& aliased,
                                           const mx::array& ok, std::vector<mx::array>& writes,
                                           uint64_t& device_bytes) {
  std::vector<RowsWrite> blocks;
  for (const InPlaceOutput& e : in_place) {
    if (!aliased[e.output]) continue;
    const mx::array& out = outputs[e.output];
    std::optional<mx::array> dst = WrapDeviceMemory(given[e.output], out.shape(), out.dtype());
    if (!dst || !dst->flags().row_contiguous) return false;  // not EP memory: the host writes
    blocks.push_back({*dst, outputs[e.rows], outputs[e.offsets], e.axis});
    device_bytes += outputs[e.rows].nbytes();
  }
  if (!blocks.empty()) {
    std::vector<mx::array> launches = WriteAllRowsInto(blocks, ok, mx::default_stream(RuntimeDevice()));
    writes.insert(writes.end(), launches.begin(), launches.end());
  }
  return true;
}

}  // namespace mlx_ep

// memo/project/cluster_profile.hpp
//
// The hardware a projection is made for, one profile per piece of
// hardware, with the rates that matter when every GPU of a node works at
// once: the host link each GPU gets while all GPUs of the node copy
// together (they share PCIe switches and the host's memory, so it is below
// one GPU's copy rate), the host memory a node can lend to activations,
// and GEMM and attention efficiencies separately (attention is most of the
// work at long context and runs at its own fraction of peak).
// core/device_profile.hpp keeps the single-GPU view the schedule simulator
// reads; `device()` gives it.
//
// What the two efficiencies mean here (strategy.hpp's time model):
//  gemm_efficiency       achieved / peak for a layer's GEMMs together with
//                        its norms and element-wise kernels, per GEMM FLOP;
//  attention_efficiency  achieved / peak for FlashAttention forward +
//                        backward, counting the backward's recomputation of
//                        the score matrix (backward = 2.5 x forward FLOPs,
//                        FlashAttention-2, Dao 2023, section 3.1).
//
// Sources (E = our estimate, stated as such; no value is fitted to a row
// of a paper's table):
//  a800  MEMO 5.1's cluster: 8 x A800-80GB per node, NVLink 400 GB/s (200
//        each way), 200 GB/s InfiniBand per node (25 per GPU), 2 TB host,
//        32 GB/s GPU-CPU; 312 TFLOP/s bf16 (MEMO 5.1).
//        host link 12 GB/s per GPU with all eight copying: on HGX A100/A800
//        boards two GPUs share each PCIe Gen4 x16 switch uplink (~25 GB/s
//        achieved), i.e. ~12.5 each; MEMO 4.1 (Figure 1(b)) says a 7B
//        layer's skeletal activations (3.2 GB per GPU at TP 8) hide behind
//        its forward only beyond 192K, which with this model's forward time
//        (0.27 s at 192K) is 11.7 GB/s; FPDT 4.2 puts the crossover of a
//        [3, s, h/p] fetch with attention between 32K and 64K, 9-18 GB/s.
//        attention 0.62: FlashAttention-2 reaches 50-73% of A100 peak
//        (Dao 2023, section 4.1), forward + backward with a causal mask
//        and head dim 128 at long sequences about 62% (E, read from its
//        figures).
//        gemm 0.75: large bf16 GEMMs reach ~80% of A100 peak, norms and
//        activations cost ~7% more time (E). Check, not fit: MEMO 4.1 says
//        FlashAttention takes over 90% of a layer's forward from 576K at
//        TP 8; this profile gives 89.7% there.
//        host 1843 GiB = 90% of 2 TiB (E: the OS, eight trainer processes,
//        pinned staging).
//  a100  SPPO 7's cluster: 8 x A100-80GB (NVLink 3 + NVSwitch, 300 GB/s
//        each way), four 200 Gb/s HDR per node (12.5 GB/s per GPU), 2 TB
//        host, 32 GB/s GPU-CPU; the same HGX PCIe topology as a800, so the
//        same concurrent rate and efficiencies.
//  a100x4  FPDT 5.1's nodes: 4 x A100-80GB, NVLink 3 (300 each way), two
//        sockets, PCIe 32 GB/s nominal, 1 TB host, one 200 Gb/s HDR per
//        node (6.25 GB/s per GPU); host link 12 GB/s from FPDT 4.2's
//        crossover above ("all GPUs will share the PCIe bandwidth"); host
//        922 GiB = 90% of 1 TiB (E).
//  h100  989 TFLOP/s dense bf16, NVLink 4 450 GB/s each way (data sheet);
//        two GPUs per PCIe Gen5 switch uplink, ~25 GB/s each (E); 2 TB
//        host (DGX H100); one 400 Gb/s NDR per GPU (50 GB/s); attention
//        0.45 (FlashAttention-2 on H100, E), GEMM 0.65 (E).
//  h200  h100 with 141 GB HBM3e (data sheet).
//
// Profile files: `key = value` lines (ending in LF, CRLF or a lone CR),
// '#' comments, a UTF-8 byte-order mark skipped; every field below but
// `name` is required. Every number must lie in its field's range
// (`profile_field_ranges`): positive and finite, an efficiency at most 1,
// and bounds many orders of magnitude around today's
// hardware that keep every time and byte count the projection derives
// finite and every byte count below 2^64 (a denormal efficiency would make
// a layer take infinitely long; a memory of 1e300 bytes cannot be counted
// in 64 bits). An error names the file, the line, the field and the range
// (or every missing field); text from the file is quoted with control bytes
// escaped.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "memo/core/bytes.hpp"
#include "memo/core/device_profile.hpp"
#include "memo/core/error.hpp"
#include "memo/core/input_file.hpp"
#include "memo/core/text.hpp"
#include "memo/plan/text_input.hpp"

namespace memo::project {

/// The most GPUs a cluster, and so a node, may have: the setting
/// enumeration walks the divisors of the GPU count.
inline constexpr int max_cluster_gpus = 1 << 20;

/// The range a profile field must lie in; `whole` fields take whole numbers.
struct profile_field_range {
  std::string_view field;
  double low = 0, high = 0;
  bool whole = false;
  bool bytes = false;  ///< a byte count: whole, and judged as the integer written
};

/// Every numeric field of a profile with its range, in file order.
inline constexpr profile_field_range profile_field_ranges[] = {
    {"peak_flops", 1, 1e21},                   // FLOP/s per GPU (an H100 does 1e15)
    {"gemm_efficiency", 1e-3, 1},              // fractions of peak
    {"attention_efficiency", 1e-3, 1},
    {"host_link_bytes_per_second", 1, 1e18},   // B/s (PCIe and NVLink do 1e10-1e12)
    {"intra_node_bytes_per_second", 1, 1e18},
    {"inter_node_bytes_per_second", 1, 1e18},
    {"device_memory_bytes", 1, 0x1p60, false, true},  // bytes, up to 1 EiB
    {"host_memory_bytes", 1, 0x1p60, false, true},
    {"gpus_per_node", 1, max_cluster_gpus, true},
};

namespace detail {

/// "between 1e-03 and 1" or "a whole number up to 1048576", for messages.
inline std::string range_text(const profile_field_range& range) {
  auto number = [](double x) {
    char out[32];
    std::snprintf(out, sizeof out, x == std::floor(x) && x < 0x1p63 ? "%.0f" : "%g", x);
    return std::string(out);
  };
  return range.whole ? "a whole number up to " + number(range.high)
                     : "between " + number(range.low) + " and " + number(range.high);
}

/// What is wrong with `value` (written as `text`) for a profile field, or
/// an empty string when it lies in the field's range.
inline std::string profile_value_problem(const profile_field_range& range, double value, std::string_view text) {
  const std::string field = "field '" + std::string(range.field) + "'";
  const std::string got = ", got " + memo::detail::quote(text);
  if (!(value > 0.0) || !std::isfinite(value)) return field + " must be positive and finite" + got;
  if (range.whole && value != std::floor(value)) return field + " must be " + range_text(range) + got;
  if (range.bytes && value != std::floor(value)) return field + " must be a whole number of bytes" + got;
  if (range.whole || range.bytes) {
    // Written as an integer: judged as one, not as the double it rounds
    // to (2^60 + 1 is not 2^60), and it must survive being held as one.
    std::string_view digits = text;
    if (!digits.empty() && digits.front() == '+') digits.remove_prefix(1);
    if (const auto exact = memo::detail::parse_integer<std::uint64_t>(digits)) {
      if (*exact > static_cast<std::uint64_t>(range.high)) return field + " must be " + range_text(range) + got;
      if (static_cast<std::uint64_t>(static_cast<double>(*exact)) != *exact) {
        return field + " is not exactly representable (whole numbers are exact up to 2^53)" + got;
      }
    }
  }
  if (range.high == 1.0 && value > 1.0) {
    return field + " is above 1: efficiencies must be at most 1 (a fraction of peak)" + got;
  }
  if (value < range.low || value > range.high) return field + " must be " + range_text(range) + got;
  return {};
}

}  // namespace detail

struct cluster_profile {
  std::string name;
  double peak_flops = 0.0;                   ///< per GPU, dense bf16
  double gemm_efficiency = 0.0;              ///< achieved / peak in a layer's GEMM part, (0, 1]
  double attention_efficiency = 0.0;         ///< achieved / peak in FlashAttention fwd + bwd, (0, 1]
  double host_link_bytes_per_second = 0.0;   ///< per GPU, all GPUs of the node copying
  double intra_node_bytes_per_second = 0.0;  ///< per GPU, NVLink, one direction
  double inter_node_bytes_per_second = 0.0;  ///< per GPU, network, one direction
  double device_memory_bytes = 0.0;          ///< per GPU
  double host_memory_bytes = 0.0;            ///< usable per node for offloaded activations
  int gpus_per_node = 8;

  /// The numeric fields in `profile_field_ranges` order.
  [[nodiscard]] std::vector<double> values() const {
    return {peak_flops,
            gemm_efficiency,
            attention_efficiency,
            host_link_bytes_per_second,
            intra_node_bytes_per_second,
            inter_node_bytes_per_second,
            device_memory_bytes,
            host_memory_bytes,
            static_cast<double>(gpus_per_node)};
  }

  /// Throws a memo::error naming the profile, the first field out of its
  /// range (`profile_field_ranges`), the range and the value.
  void check() const {
    const std::vector<double> v = values();
    for (std::size_t k = 0; k < v.size(); ++k) {
      char text[32];
      std::snprintf(text, sizeof text, "%g", v[k]);
      const std::string problem = detail::profile_value_problem(profile_field_ranges[k], v[k], text);
      expects(problem.empty(), [&] { return "profile '" + memo::detail::quote(name) + "': " + problem; });
    }
  }

  /// The single-GPU view core/ and schedule/ read (one efficiency: the
  /// GEMMs'; the schedule simulator is given durations, not FLOPs, by the
  /// projection, so it only reads the links).
  [[nodiscard]] device_profile device() const {
    check();
    device_profile d;
    d.name = name;
    d.peak_flops = peak_flops;
    d.efficiency = gemm_efficiency;
    d.host_to_device_bytes_per_second = host_link_bytes_per_second;
    d.device_to_host_bytes_per_second = host_link_bytes_per_second;
    d.interconnect_bytes_per_second = intra_node_bytes_per_second;
    d.device_memory_bytes = static_cast<std::uint64_t>(device_memory_bytes);
    d.host_memory_bytes = static_cast<std::uint64_t>(host_memory_bytes);
    d.gpus_per_node = gpus_per_node;
    return d;
  }
};

inline std::vector<cluster_profile> cluster_presets() {
  constexpr double g = 1e9;
  constexpr double gb = static_cast<double>(gib);
  return {
      {"a800", 312e12, 0.75, 0.62, 12 * g, 200 * g, 25 * g, 80 * gb, 1843 * gb, 8},
      {"a100", 312e12, 0.75, 0.62, 12 * g, 300 * g, 12.5 * g, 80 * gb, 1843 * gb, 8},
      {"a100x4", 312e12, 0.75, 0.62, 12 * g, 300 * g, 6.25 * g, 80 * gb, 922 * gb, 4},
      {"h100", 989e12, 0.65, 0.45, 25 * g, 450 * g, 50 * g, 80 * gb, 1843 * gb, 8},
      {"h200", 989e12, 0.65, 0.45, 25 * g, 450 * g, 50 * g, 141 * gb, 1843 * gb, 8},
  };
}

/// The preset names, comma-separated, for messages.
inline std::string cluster_preset_names() {
  std::string names;
  for (const auto& p : cluster_presets()) names += (names.empty() ? "" : ", ") + p.name;
  return names;
}

/// Parses a profile file's text; `source` names it in errors.
inline cluster_profile parse_cluster_profile(std::string_view text, const std::string& source) {
  cluster_profile p;
  p.name = source;
  double* const numbers[] = {&p.peak_flops,
                             &p.gemm_efficiency,
                             &p.attention_efficiency,
                             &p.host_link_bytes_per_second,
                             &p.intra_node_bytes_per_second,
                             &p.inter_node_bytes_per_second,
                             &p.device_memory_bytes,
                             &p.host_memory_bytes,
                             nullptr};  // gpus_per_node, an int
  std::map<std::string, std::size_t, std::less<>> seen;  // field -> its line
  const auto read_line = [&](std::size_t line_number, std::string_view line) {
    const std::string where = memo::detail::shown_path(source) + ":" + std::to_string(line_number) + ": ";
    const auto eq = line.find('=');
    if (eq == std::string_view::npos) {
      throw error(where + "expected 'key = value', got '" + memo::detail::quote(line) + "'");
    }
    const auto key = memo::detail::trim(line.substr(0, eq));
    const auto value = memo::detail::trim(line.substr(eq + 1));
    if (key.empty()) throw error(where + "expected 'key = value', got no key before '='");
    if (const auto first = seen.find(key); first != seen.end()) {
      throw error(where + "field '" + memo::detail::quote(key) + "' given again (first at line " +
                  std::to_string(first->second) + ")");
    }
    seen.emplace(std::string(key), line_number);
    if (key == "name") {
      const bool printable = !value.empty() && std::all_of(value.begin(), value.end(), [](char c) {
        return static_cast<unsigned char>(c) >= 0x20 && c != 0x7f;
      });
      if (!printable) throw error(where + "field 'name' must be printable text, got '" + memo::detail::quote(value) + "'");
      p.name = std::string(value);
      return;
    }
    std::size_t k = 0;
    while (k < std::size(profile_field_ranges) && profile_field_ranges[k].field != key) ++k;
    if (k == std::size(profile_field_ranges)) throw error(where + "unknown field '" + memo::detail::quote(key) + "'");
    const auto& range = profile_field_ranges[k];
    const memo::detail::decimal_reading reading = memo::detail::read_decimal(value);
    if (reading.status == memo::detail::decimal_status::out_of_range) {
      throw error(where + "field '" + std::string(key) + "' must be " + detail::range_text(range) + ", got " +
                  memo::detail::quote(value));
    }
    if (reading.status != memo::detail::decimal_status::ok) {
      throw error(where + "field '" + std::string(key) + "': '" + memo::detail::quote(value) + "' is not a number");
    }
    const double number = reading.value;
    if (const auto problem = detail::profile_value_problem(range, number, value); !problem.empty()) {
      throw error(where + problem);
    }
    if (numbers[k] != nullptr) {
      *numbers[k] = number;
    } else {
      p.gpus_per_node = static_cast<int>(number);
    }
  };
  // Old Mac files end lines with a lone CR; no field holds one.
  memo::detail::for_each_line(text, read_line, /*lone_cr_ends_lines=*/true);
  std::vector<std::string> missing;  // in alphabetical order
  for (const auto& range : profile_field_ranges) {
    if (!seen.count(range.field)) missing.emplace_back(range.field);
  }
  std::sort(missing.begin(), missing.end());
  if (!missing.empty()) {
    std::string message = memo::detail::shown_path(source) + ": missing field '" + missing.front() + "'";
    for (std::size_t k = 1; k < missing.size(); ++k) message += (k == 1 ? " (also missing: " : ", ") + missing[k];
    throw error(message + (missing.size() > 1 ? ")" : ""));
  }
  p.check();
  return p;
}

/// A preset name, or else a profile file path.
inline cluster_profile load_cluster_profile(const std::string& name_or_path) {
  for (auto& preset : cluster_presets()) {
    if (preset.name == name_or_path) return preset;
  }
  const std::string shown = memo::detail::quote(name_or_path);
  // Asked before opening: a FIFO would block the open until a writer came.
  using kind = input_file_status::kind;
  const input_file_status status = inspect_input_file(name_or_path);
  expects(status.what != kind::directory,
          [&] { return "profile '" + shown + "' is a directory, not a profile file"; });
  expects(status.what != kind::not_regular, [&] {
    return "profile '" + shown + "' " + status.problem +
           ", not a regular file: a profile is a file of 'key = value' lines";
  });
  expects(status.what != kind::uninspectable, [&] { return "profile '" + shown + "' " + status.problem; });
  const auto unreadable = [&](const std::string& why) {
    return error("profile '" + shown + "' is neither a preset (" + cluster_preset_names() +
                 ") nor a readable file: " + why);
  };
  if (status.what == kind::missing) throw unreadable("it " + status.problem);
  errno = 0;
  std::ifstream in(name_or_path, std::ios::binary);
  if (!in) {
    const int cause = errno;
    throw unreadable(cause != 0 ? std::string(std::strerror(cause)) : std::string("it cannot be opened"));
  }
  // A profile is a dozen lines; a longer file (or an endless one such as a
  // device) is a mistake, reported instead of read to the end.
  constexpr std::size_t max_bytes = 1 << 20;
  std::string text(max_bytes + 1, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  expects(!in.bad(), [&] { return "profile '" + shown + "': read failed"; });
  text.resize(static_cast<std::size_t>(in.gcount()));
  expects(text.size() <= max_bytes, [&] {
    return "profile '" + shown + "': longer than " + std::to_string(max_bytes) +
           " bytes; a profile file has one 'key = value' line per field";
  });
  return parse_cluster_profile(text, name_or_path);
}

}  // namespace memo::project

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
// Profile files: `key = value` lines, '#' comments; every field below but
// `name` is required, every number must be positive; an error names the
// file, the line and the field (or the missing field).
#pragma once

#include <cmath>
#include <cstdint>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "memo/core/bytes.hpp"
#include "memo/core/device_profile.hpp"
#include "memo/core/error.hpp"

namespace memo::project {

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

  void check() const {
    auto positive = [&](double v, const char* field) {
      expects(v > 0.0, [&] {
        return "profile '" + name + "': " + field + " must be positive, got " + std::to_string(v);
      });
    };
    positive(peak_flops, "peak_flops");
    positive(gemm_efficiency, "gemm_efficiency");
    positive(attention_efficiency, "attention_efficiency");
    positive(host_link_bytes_per_second, "host_link_bytes_per_second");
    positive(intra_node_bytes_per_second, "intra_node_bytes_per_second");
    positive(inter_node_bytes_per_second, "inter_node_bytes_per_second");
    positive(device_memory_bytes, "device_memory_bytes");
    positive(host_memory_bytes, "host_memory_bytes");
    positive(gpus_per_node, "gpus_per_node");
    expects(gemm_efficiency <= 1.0 && attention_efficiency <= 1.0, [&] {
      return "profile '" + name + "': efficiencies must be at most 1, got gemm " +
             std::to_string(gemm_efficiency) + ", attention " + std::to_string(attention_efficiency);
    });
  }

  /// The single-GPU view core/ and schedule/ read (one efficiency: the
  /// GEMMs'; the schedule simulator is given durations, not FLOPs, by the
  /// projection, so it only reads the links).
  [[nodiscard]] device_profile device() const {
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
  struct field {
    double* number;
    int* integer;
  };
  std::map<std::string, field, std::less<>> fields{
      {"peak_flops", {&p.peak_flops, nullptr}},
      {"gemm_efficiency", {&p.gemm_efficiency, nullptr}},
      {"attention_efficiency", {&p.attention_efficiency, nullptr}},
      {"host_link_bytes_per_second", {&p.host_link_bytes_per_second, nullptr}},
      {"intra_node_bytes_per_second", {&p.intra_node_bytes_per_second, nullptr}},
      {"inter_node_bytes_per_second", {&p.inter_node_bytes_per_second, nullptr}},
      {"device_memory_bytes", {&p.device_memory_bytes, nullptr}},
      {"host_memory_bytes", {&p.host_memory_bytes, nullptr}},
      {"gpus_per_node", {nullptr, &p.gpus_per_node}},
  };
  std::map<std::string, int, std::less<>> seen;
  auto trim = [](std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
    return s;
  };
  int line_number = 0;
  std::size_t start = 0;
  while (start <= text.size()) {
    auto end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(start, end - start);
    start = end + 1;
    ++line_number;
    const std::string where = source + ":" + std::to_string(line_number) + ": ";
    if (const auto hash = line.find('#'); hash != std::string_view::npos) line = line.substr(0, hash);
    line = trim(line);
    if (line.empty()) continue;
    const auto eq = line.find('=');
    if (eq == std::string_view::npos) throw error(where + "expected 'key = value', got '" + std::string(line) + "'");
    const auto key = trim(line.substr(0, eq));
    const auto value = trim(line.substr(eq + 1));
    if (seen.count(key)) {
      throw error(where + "field '" + std::string(key) + "' given again (first at line " +
                  std::to_string(seen.find(key)->second) + ")");
    }
    seen.emplace(std::string(key), line_number);
    if (key == "name") {
      p.name = std::string(value);
      continue;
    }
    const auto it = fields.find(key);
    if (it == fields.end()) throw error(where + "unknown field '" + std::string(key) + "'");
    std::istringstream in{std::string(value)};
    double number = 0.0;
    in >> number;
    if (value.empty() || !in || !in.eof()) {
      throw error(where + "field '" + std::string(key) + "': '" + std::string(value) + "' is not a number");
    }
    if (!(number > 0.0) || !std::isfinite(number)) {
      throw error(where + "field '" + std::string(key) + "' must be positive and finite, got " + std::string(value));
    }
    if (it->second.integer) {
      if (number > 1e6 || number != static_cast<double>(static_cast<int>(number))) {
        throw error(where + "field '" + std::string(key) + "' must be a whole number up to 1000000, got " +
                    std::string(value));
      }
      *it->second.integer = static_cast<int>(number);
    } else {
      *it->second.number = number;
    }
  }
  for (const auto& [key, target] : fields) {
    if (!seen.count(key)) throw error(source + ": missing field '" + key + "'");
  }
  p.check();
  return p;
}

/// A preset name, or else a profile file path.
inline cluster_profile load_cluster_profile(const std::string& name_or_path) {
  for (auto& preset : cluster_presets()) {
    if (preset.name == name_or_path) return preset;
  }
  std::ifstream in(name_or_path, std::ios::binary);
  if (!in) {
    throw error("profile '" + name_or_path + "' is neither a preset (" + cluster_preset_names() +
                ") nor a readable file");
  }
  // A profile is a dozen lines; a longer file (or an endless one such as a
  // device) is a mistake, reported instead of read to the end.
  constexpr std::size_t max_bytes = 1 << 20;
  std::string text(max_bytes + 1, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  expects(!in.bad(), [&] { return "profile '" + name_or_path + "': read failed"; });
  text.resize(static_cast<std::size_t>(in.gcount()));
  expects(text.size() <= max_bytes, [&] {
    return "profile '" + name_or_path + "': longer than " + std::to_string(max_bytes) +
           " bytes; a profile file has one 'key = value' line per field";
  });
  return parse_cluster_profile(text, name_or_path);
}

}  // namespace memo::project

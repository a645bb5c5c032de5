// memo/project/cluster_profile.hpp
//
// The hardware a projection is made for, with the rates that matter when
// every GPU of a node works at once: the host link each GPU gets while all
// GPUs of the node offload together (they share PCIe switches and host
// uplinks, so this is below a single GPU's copy rate), the host memory a
// node can lend to activations after the OS and pinned staging, and GEMM
// and attention efficiencies separately (attention is most of the work at
// long context and runs at a different fraction of peak than the GEMMs).
// core/device_profile.hpp keeps the single-GPU view the alpha LP and the
// schedule simulator read; this is the node-level view a projection needs.
//
// Sources, preset by preset (E = estimate, stated as such):
//  a800: MEMO 5.1: 8 x A800-80GB per node, 32 GB/s GPU-CPU, 2 TB host,
//        400 GB/s NVLink (200 GB/s each way); 312 TFLOP/s bf16 (data
//        sheet). Concurrent host link 16 GB/s: two GPUs share one x16
//        uplink on HGX A100/A800 boards (E). Host usable 1250 GiB of 2 TB:
//        MEMO Table 4 row 3, full swapping of 7B on 8 GPUs fits 256K
//        (0.94 TiB of skeletal tensors) and runs out of host memory at 384K
//        (1.41 TiB), so the usable share lies between (pinned staging, OS).
//        Attention efficiency 0.56: MEMO Table 4, MEMO's MFU at >= 256K
//        where attention is > 85% of FLOPs and is not recomputed is
//        51.8-53.6%. GEMM efficiency 0.65 (E, Megatron-LM's reported
//        large-GEMM rates on A100). Inter-node 25 GB/s per GPU (one 200
//        Gb/s HDR HCA per GPU, as FPDT 5 reports) (E).
//  a100: A800 compute and link, NVLink 300 GB/s each way; FPDT 5: nodes of
//        4 x A100-80GB, 1 TB host memory (usable 0.9 TB, E), PCIe 32 GB/s
//        nominal; with 4 GPUs per node each GPU has an uplink, 24 GB/s (E).
//  h100: 989 TFLOP/s dense bf16, NVLink 450 GB/s each way (data sheet);
//        PCIe 5.0, ~50 GB/s per GPU concurrent on HGX H100 (E); 2 TB host
//        (E, typical DGX H100); attention 0.45 (FlashAttention-2 reaches
//        ~35-50% of H100 peak, E), GEMM 0.6 (E); inter-node 50 GB/s (400
//        Gb/s NDR per GPU).
//  h200: h100 with 141 GB HBM3e (data sheet).
//
// Profile files: `key = value` lines, '#' comments; every field below but
// `name` is required, every number must be positive; an error names the
// file, the line and the field (or the missing field).
#pragma once

#include <cstdint>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "memo/core/bytes.hpp"
#include "memo/core/error.hpp"

namespace memo::project {

struct cluster_profile {
  std::string name;
  double peak_flops = 0.0;                  ///< per GPU, dense bf16
  double gemm_efficiency = 0.0;             ///< achieved / peak in GEMMs, (0, 1]
  double attention_efficiency = 0.0;        ///< achieved / peak in FlashAttention, (0, 1]
  double host_link_bytes_per_second = 0.0;  ///< per GPU, all GPUs of the node offloading
  double intra_node_bytes_per_second = 0.0; ///< per GPU, NVLink, one direction
  double inter_node_bytes_per_second = 0.0; ///< per GPU, network, one direction
  double device_memory_bytes = 0.0;         ///< per GPU
  double host_memory_bytes = 0.0;           ///< usable per node for offloaded activations
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
};

inline std::vector<cluster_profile> cluster_presets() {
  constexpr double g = 1e9;
  constexpr double gb = static_cast<double>(gib);
  return {
      {"a800", 312e12, 0.65, 0.56, 16 * g, 200 * g, 25 * g, 80 * gb, 1250 * gb, 8},
      {"a100", 312e12, 0.65, 0.56, 24 * g, 300 * g, 25 * g, 80 * gb, 900 * gb, 4},
      {"h100", 989e12, 0.60, 0.45, 50 * g, 450 * g, 50 * g, 80 * gb, 1800 * gb, 8},
      {"h200", 989e12, 0.60, 0.45, 50 * g, 450 * g, 50 * g, 141 * gb, 1800 * gb, 8},
  };
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
    if (!(number > 0.0)) {
      throw error(where + "field '" + std::string(key) + "' must be positive, got " + std::string(value));
    }
    if (it->second.integer) {
      if (number != static_cast<double>(static_cast<int>(number))) {
        throw error(where + "field '" + std::string(key) + "' must be a whole number, got " + std::string(value));
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
    throw error("profile '" + name_or_path +
                "' is neither a preset (a800, a100, h100, h200) nor a readable file");
  }
  std::ostringstream text;
  text << in.rdbuf();
  expects(!in.bad(), [&] { return "profile '" + name_or_path + "': read failed"; });
  return parse_cluster_profile(text.str(), name_or_path);
}

}  // namespace memo::project

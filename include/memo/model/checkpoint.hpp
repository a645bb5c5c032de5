// memo/model/checkpoint.hpp
//
// GPT-2 checkpoints in llm.c's format, so a model prepared for llm.c
// (gpt2_124M.bin and its kin) trains here unchanged and a checkpoint saved
// here loads in llm.c.
//
// Format: a header of 256 little-endian int32
//   [0] magic 20240326   [1] version: 3 = fp32 parameters, 5 = bf16 parameters
//   [2] maxT  [3] V  [4] L  [5] NH  [6] C  [7] Vp   (the rest zero)
// followed by the parameters in the order of `gpt2_parameter_layout`, packed,
// little-endian. Nothing may follow them.
//
// memo trains in fp32. A version-5 (bf16) file is read by widening each
// value to fp32 exactly (bf16 is the upper half of an fp32), and the result
// says it came from bf16; memo writes only version 3.
//
// Every malformed file is a `memo::error` naming the file and the offending
// value: a wrong magic or version, a field that is not positive or whose
// products overflow, a file shorter than its header promises or longer (the
// trailing byte count), and a requested context longer than the checkpoint's
// maxT. The header is checked against the file size before any parameter is
// read, so an absurd header never causes a huge allocation.
//
// Writing goes through `atomic_file_writer`: a failed write (full disk, size
// limit) reports the cause and leaves an existing checkpoint untouched.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "memo/core/error.hpp"
#include "memo/model/binary_file.hpp"
#include "memo/model/gpt2_config.hpp"

namespace memo {

inline constexpr std::int32_t gpt2_checkpoint_magic = 20240326;
inline constexpr std::int32_t gpt2_checkpoint_version_fp32 = 3;
inline constexpr std::int32_t gpt2_checkpoint_version_bf16 = 5;

/// How the parameters are stored in a checkpoint file.
enum class gpt2_storage { fp32, bf16 };

/// What a checkpoint's header says, checked against the file's size.
struct gpt2_checkpoint_info {
  gpt2_config config;
  gpt2_storage storage = gpt2_storage::fp32;
  std::uint64_t parameter_count = 0;  // elements
  std::uint64_t file_bytes = 0;
};

/// A checkpoint read into memory: its shape and fp32 parameters in llm.c's
/// order (widened from bf16 when `stored_as == gpt2_storage::bf16`).
struct gpt2_checkpoint {
  gpt2_config config;
  gpt2_storage stored_as = gpt2_storage::fp32;
  std::vector<float> parameters;  // [gpt2_parameter_layout(config).total]
};

namespace detail {

inline std::uint64_t gpt2_bytes_per_element(gpt2_storage s) {
  return s == gpt2_storage::bf16 ? 2 : 4;
}

/// Reads and checks the header of an open checkpoint; leaves the reader at
/// the first parameter byte.
inline gpt2_checkpoint_info read_gpt2_header(binary_file_reader& file,
                                             std::optional<std::int64_t> context) {
  const std::string name = quoted(file.path());
  const llmc_header h = file.read_header("GPT-2 checkpoint");
  if (h[0] != gpt2_checkpoint_magic) {
    throw error(name + ": bad magic " + std::to_string(h[0]) + " (an llm.c GPT-2 checkpoint starts with " +
                std::to_string(gpt2_checkpoint_magic) + ")");
  }
  gpt2_checkpoint_info info;
  if (h[1] == gpt2_checkpoint_version_fp32) {
    info.storage = gpt2_storage::fp32;
  } else if (h[1] == gpt2_checkpoint_version_bf16) {
    info.storage = gpt2_storage::bf16;
  } else {
    throw error(name + ": unsupported checkpoint version " + std::to_string(h[1]) + " (expected " +
                std::to_string(gpt2_checkpoint_version_fp32) + " = fp32 or " +
                std::to_string(gpt2_checkpoint_version_bf16) + " = bf16)");
  }
  info.config = {h[2], h[3], h[7], h[4], h[5], h[6]};
  info.config.validate(name + ": header");
  const gpt2_parameter_table table = gpt2_parameter_layout(info.config);
  info.parameter_count = table.total;
  info.file_bytes = file.size_bytes();
  // bytes() cannot overflow: validate() bounds the total below 2^59.
  const std::uint64_t expected = llmc_header_bytes + table.bytes(gpt2_bytes_per_element(info.storage));
  const char* kind = info.storage == gpt2_storage::bf16 ? "bf16" : "fp32";
  file.require_size(expected, gpt2_field_text(info.config) + ", " + std::to_string(table.total) +
                                  " " + kind + " parameters");
  if (context) {
    if (*context <= 0 || *context > info.config.max_seq_len) {
      throw error(name + ": context length " + std::to_string(*context) +
                  (*context <= 0 ? " is not positive"
                                 : " exceeds the checkpoint's max_seq_len (maxT) " +
                                       std::to_string(info.config.max_seq_len)));
    }
  }
  return info;
}

}  // namespace detail

/// The checked header of the checkpoint at `path`. With `context`, also
/// checks that sequences of that many tokens fit the position embedding.
inline gpt2_checkpoint_info read_gpt2_checkpoint_info(const std::filesystem::path& path,
                                                      std::optional<std::int64_t> context = {}) {
  binary_file_reader file(path);
  return detail::read_gpt2_header(file, context);
}

namespace detail {

/// Reads the parameters that follow a checked header into `parameters`.
inline void read_gpt2_payload(binary_file_reader& file, const gpt2_checkpoint_info& info,
                              std::span<float> parameters) {
  expects(parameters.size() == info.parameter_count, [&] {
    return quoted(file.path()) + ": holds " + std::to_string(info.parameter_count) +
           " parameters (" + gpt2_field_text(info.config) + "), the buffer given holds " +
           std::to_string(parameters.size());
  });
  // Read in blocks so a bf16 file needs no second full-size buffer.
  constexpr std::size_t block = std::size_t{1} << 16;  // elements
  const std::size_t width = gpt2_bytes_per_element(info.storage);
  std::vector<std::byte> bytes(std::min<std::size_t>(block, parameters.size()) * width);
  for (std::size_t first = 0; first < parameters.size(); first += block) {
    const std::size_t n = std::min(block, parameters.size() - first);
    const std::span<std::byte> chunk(bytes.data(), n * width);
    file.read(chunk, "parameters");
    for (std::size_t i = 0; i < n; ++i) {
      // A bf16 value is the upper half of the fp32 with the same leading bits.
      const std::uint32_t bits =
          width == 4 ? load_little_endian<std::uint32_t>(&chunk[4 * i])
                     : static_cast<std::uint32_t>(load_little_endian<std::uint16_t>(&chunk[2 * i])) << 16;
      parameters[first + i] = std::bit_cast<float>(bits);
    }
  }
}

}  // namespace detail

/// Reads the parameters of the checkpoint at `path` into `parameters` (fp32,
/// llm.c's order), which must hold exactly the checkpoint's parameter count,
/// e.g. a buffer already sized for the expected configuration. Returns the
/// header.
inline gpt2_checkpoint_info read_gpt2_parameters(const std::filesystem::path& path,
                                                 std::span<float> parameters,
                                                 std::optional<std::int64_t> context = {}) {
  binary_file_reader file(path);
  const gpt2_checkpoint_info info = detail::read_gpt2_header(file, context);
  detail::read_gpt2_payload(file, info, parameters);
  return info;
}

/// Reads the whole checkpoint at `path`.
inline gpt2_checkpoint read_gpt2_checkpoint(const std::filesystem::path& path,
                                            std::optional<std::int64_t> context = {}) {
  binary_file_reader file(path);
  const gpt2_checkpoint_info info = detail::read_gpt2_header(file, context);
  gpt2_checkpoint checkpoint{info.config, info.storage, {}};
  checkpoint.parameters.resize(static_cast<std::size_t>(info.parameter_count));
  detail::read_gpt2_payload(file, info, checkpoint.parameters);
  return checkpoint;
}

/// Throws unless every parameter of `checkpoint` (read from `path`) is
/// finite, naming the first that is not: its index, tensor, element and byte
/// offset in the file. The format holds any float (a round trip keeps NaN
/// payloads); a trainer calls this before training from it.
inline void expect_finite_parameters(const gpt2_checkpoint& checkpoint, const std::filesystem::path& path) {
  const auto& p = checkpoint.parameters;
  const auto bad = std::find_if(p.begin(), p.end(), [](float v) { return !std::isfinite(v); });
  if (bad == p.end()) return;
  const auto index = static_cast<std::uint64_t>(bad - p.begin());
  const gpt2_parameter_table table = gpt2_parameter_layout(checkpoint.config);
  const auto tensor = std::find_if(table.tensors.begin(), table.tensors.end(), [&](const gpt2_tensor_info& t) {
    return index >= t.offset && index < t.offset + t.count;
  });
  throw error(detail::quoted(path) + ": parameter " + std::to_string(index) + " (" + std::string(tensor->name) +
              " element " + std::to_string(index - tensor->offset) + ", byte offset " +
              std::to_string(llmc_header_bytes + index * detail::gpt2_bytes_per_element(checkpoint.stored_as)) +
              ") is " + (std::isnan(*bad) ? "nan" : "infinite") + ": the model cannot train from it");
}

/// Writes a version-3 (fp32) checkpoint of `config` with `parameters` (llm.c's
/// order, exactly the layout's total count) to `path`, atomically: on any
/// failure an existing file at `path` is left as it was.
inline void write_gpt2_checkpoint(const std::filesystem::path& path, const gpt2_config& config,
                                  std::span<const float> parameters) {
  config.validate(detail::quoted(path));
  const gpt2_parameter_table table = gpt2_parameter_layout(config);
  expects(parameters.size() == table.total, [&] {
    return detail::quoted(path) + ": a checkpoint of " + detail::gpt2_field_text(config) +
           " holds " + std::to_string(table.total) + " parameters, " +
           std::to_string(parameters.size()) + " were given";
  });
  llmc_header h{};
  h[0] = gpt2_checkpoint_magic;
  h[1] = gpt2_checkpoint_version_fp32;
  h[2] = config.max_seq_len;
  h[3] = config.vocab_size;
  h[4] = config.num_layers;
  h[5] = config.num_heads;
  h[6] = config.channels;
  h[7] = config.padded_vocab_size;
  atomic_file_writer out(path);
  out.write(encode_llmc_header(h));
  constexpr std::size_t block = std::size_t{1} << 16;  // elements
  std::vector<std::byte> bytes(std::min<std::size_t>(block, parameters.size()) * 4);
  for (std::size_t first = 0; first < parameters.size(); first += block) {
    const std::size_t n = std::min(block, parameters.size() - first);
    for (std::size_t i = 0; i < n; ++i) {
      detail::store_little_endian(&bytes[4 * i], std::bit_cast<std::uint32_t>(parameters[first + i]));
    }
    out.write(std::span<const std::byte>(bytes.data(), n * 4));
  }
  out.commit();
}

}  // namespace memo

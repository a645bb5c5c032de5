// memo/model/gpt2_gradient_buckets.hpp
//
// Which pieces of a pipeline stage's gradient are summed together, and
// after which layer's backward: the plan the parallel GPT-2
// (gpt2_parallel_model.hpp) follows to reduce its gradients behind the
// backward, as data-parallel trainers do (DDP's buckets, Megatron's
// overlapped gradient reduction), instead of one sum after the step.
//
// When. A layer's gradient is final once its backward has run in the
// stage's last backward op (the program runs the subsequences' backwards
// in reverse, each adding into every layer's gradient), and the layers
// finish from the stage's last to its first. The tensors outside the
// layers come last: the first stage's token embedding gets the embedding's
// backward after every layer. So the plan is a list of buckets in issue
// order: those of the stage's last layer, ..., its first layer, then the
// tail (wte, wpe, lnfw, lnfb, those the stage holds).
//
// Bucket policy. The parameter layout is per tensor over all layers
// (llm.c's order, what checkpoints hold), so one layer's gradient is
// twelve non-contiguous pieces: four weight matrices (3C x C, C x C,
// 4C x C, C x 4C) and eight vectors (13 C floats together). A piece of at
// least `in_place_bytes` (1 MiB by default) is a bucket of its own, summed
// in place: its transfer outweighs a collective's fixed cost, and packing
// it would add a copy in and out and a staging buffer as large as a
// layer's weights. The smaller pieces of a layer (of the tail) are packed
// into one contiguous bucket, summed with one collective and copied back
// (adjacent pieces merged first; a lone piece is summed in place). A layer
// therefore costs one collective (a small model: everything packed) to
// five (GPT-2 small: the four matrices in place, the vectors packed),
// never twelve. Layers are not merged: every piece of a layer is final at
// the same moment, and waiting for the next layer would only delay the
// first sum. The staging buffer holds the largest packed bucket
// (`staging_floats`) and serves every bucket, since they run one after
// another on one stream.
//
// Summation order: each element is summed over the same ranks whichever
// bucket it travels in, so a communicator that sums element by element in
// rank order (the thread communicator) gives the bits of one all_reduce of
// the whole gradient; NCCL and MPI may choose their algorithm by message
// size, and then agree with it to fp32 rounding.
//
// A pure function of the stage's parameter table, so the same on every
// rank of a stage (which the collectives need); `covers_once` checks it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "memo/core/error.hpp"
#include "memo/model/gpt2_config.hpp"

namespace memo {

/// Elements [offset, offset + count) of a stage's gradient buffer.
struct gpt2_gradient_piece {
  std::uint64_t offset = 0;
  std::uint64_t count = 0;
  friend bool operator==(const gpt2_gradient_piece&, const gpt2_gradient_piece&) = default;
};

/// One collective of the gradient reduction.
struct gpt2_gradient_bucket {
  /// The stage layer (0-based within the stage) whose backward in the last
  /// backward op completes it; -1 for the tail, after every layer and the
  /// embedding's backward.
  std::int64_t layer = -1;
  /// Packed: the pieces are copied into the staging buffer, summed there
  /// and copied back; otherwise the bucket is one piece summed in place.
  bool packed = false;
  std::vector<gpt2_gradient_piece> pieces;

  [[nodiscard]] std::uint64_t count() const noexcept {
    std::uint64_t n = 0;
    for (const auto& p : pieces) n += p.count;
    return n;
  }
};

/// The buckets of a stage, in the order they are issued.
struct gpt2_gradient_buckets {
  static constexpr std::uint64_t default_in_place_bytes = std::uint64_t{1} << 20;

  std::vector<gpt2_gradient_bucket> buckets;
  std::uint64_t staging_floats = 0;  ///< the largest packed bucket (0: none packs)

  /// Whether every element of a gradient of `total` elements is in exactly
  /// one bucket.
  [[nodiscard]] bool covers_once(std::uint64_t total) const {
    std::vector<gpt2_gradient_piece> all;
    for (const auto& b : buckets) all.insert(all.end(), b.pieces.begin(), b.pieces.end());
    std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) { return a.offset < b.offset; });
    std::uint64_t next = 0;
    for (const auto& p : all) {
      if (p.offset != next || p.count == 0) return false;
      next += p.count;
    }
    return next == total;
  }
};

namespace detail {

/// The bucket(s) of `pieces` for `layer`: each piece of at least
/// `in_place_bytes` alone, the rest packed (adjacent ones merged).
inline void add_gradient_buckets(std::vector<gpt2_gradient_piece> pieces, std::int64_t layer,
                                 std::uint64_t in_place_bytes, gpt2_gradient_buckets& out) {
  std::sort(pieces.begin(), pieces.end(), [](const auto& a, const auto& b) { return a.offset < b.offset; });
  gpt2_gradient_bucket small{layer, true, {}};
  for (const auto& p : pieces) {
    if (p.count == 0) continue;
    if (p.count * sizeof(float) >= in_place_bytes) {
      out.buckets.push_back({layer, false, {p}});
    } else if (!small.pieces.empty() && small.pieces.back().offset + small.pieces.back().count == p.offset) {
      small.pieces.back().count += p.count;
    } else {
      small.pieces.push_back(p);
    }
  }
  if (small.pieces.empty()) return;
  small.packed = small.pieces.size() > 1;
  if (small.packed) out.staging_floats = std::max(out.staging_floats, small.count());
  out.buckets.push_back(std::move(small));
}

}  // namespace detail

/// The buckets of a stage of `layers` layers whose parameters are laid out
/// by `stage` (gpt2_stage_parameter_layout); see the header comment.
inline gpt2_gradient_buckets plan_gpt2_gradient_buckets(
    const gpt2_parameter_table& stage, std::int64_t layers,
    std::uint64_t in_place_bytes = gpt2_gradient_buckets::default_in_place_bytes) {
  expects(layers >= 1, [&] {
    return "plan_gpt2_gradient_buckets: a stage of " + std::to_string(layers) + " layers";
  });
  auto outside_layers = [](gpt2_tensor t) {
    return t == gpt2_tensor::wte || t == gpt2_tensor::wpe || t == gpt2_tensor::lnfw || t == gpt2_tensor::lnfb;
  };
  gpt2_gradient_buckets out;
  const auto L = static_cast<std::uint64_t>(layers);
  for (std::int64_t l = layers - 1; l >= 0; --l) {
    std::vector<gpt2_gradient_piece> pieces;
    for (std::size_t t = 0; t < gpt2_tensor_count; ++t) {
      if (outside_layers(static_cast<gpt2_tensor>(t))) continue;
      const gpt2_tensor_info& info = stage.tensors[t];
      expects(info.count % L == 0, [&] {
        return "plan_gpt2_gradient_buckets: tensor " + std::string(info.name) + " of " +
               std::to_string(info.count) + " elements is not " + std::to_string(layers) + " layers";
      });
      const std::uint64_t per_layer = info.count / L;
      pieces.push_back({info.offset + static_cast<std::uint64_t>(l) * per_layer, per_layer});
    }
    detail::add_gradient_buckets(std::move(pieces), l, in_place_bytes, out);
  }
  std::vector<gpt2_gradient_piece> tail;
  for (std::size_t t = 0; t < gpt2_tensor_count; ++t) {
    if (outside_layers(static_cast<gpt2_tensor>(t))) tail.push_back({stage.tensors[t].offset, stage.tensors[t].count});
  }
  detail::add_gradient_buckets(std::move(tail), -1, in_place_bytes, out);
  return out;
}

}  // namespace memo

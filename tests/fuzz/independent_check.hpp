// Included by the plan fuzz targets: a plan
// checker written for the fuzzers alone, sharing no code with
// memo::validate or the placement: every pair of buffers compared in
// 128-bit arithmetic. Any plan a solver returns must pass it; a failure is
// a finding (abort).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "memo/plan/dsa_problem.hpp"

namespace fuzz {

__extension__ typedef unsigned __int128 wide;

inline void require_independently_valid(const memo::dsa_problem& p, const memo::dsa_plan& plan) {
  if (plan.offsets.size() != p.buffers.size()) std::abort();
  wide peak = 0;
  for (std::size_t i = 0; i < p.buffers.size(); ++i) {
    const auto& a = p.buffers[i];
    const wide a_end = wide{plan.offsets[i]} + a.size_bytes;
    if (a_end > ~std::uint64_t{0}) std::abort();             // an end past 2^64 - 1
    if (plan.offsets[i] % a.alignment != 0) std::abort();    // misaligned
    if (a_end > peak) peak = a_end;
    for (std::size_t j = 0; j < i; ++j) {
      const auto& b = p.buffers[j];
      const wide b_end = wide{plan.offsets[j]} + b.size_bytes;
      const bool in_time = a.lower < b.upper && b.lower < a.upper;
      const bool in_space = plan.offsets[i] < b_end && plan.offsets[j] < a_end;
      if (in_time && in_space) std::abort();
    }
  }
  if (peak != plan.peak_bytes) std::abort();
  if (p.capacity_bytes && peak > *p.capacity_bytes) std::abort();
}

// A picture of `plan` (memo::plan_svg) that a viewer can draw and that
// shows this plan: a complete <svg> element, one rectangle per buffer in
// order whose tooltip names its id, offset and lifetime, and every
// coordinate a finite number inside the 960 x 540 canvas (no nan or inf,
// nothing wrapped to a huge or negative value near the 64-bit limits).
inline void require_sound_svg(const memo::dsa_problem& p, const memo::dsa_plan& plan, const std::string& svg) {
  if (svg.rfind("<svg ", 0) != 0 || svg.size() < 7 || svg.substr(svg.size() - 7) != "</svg>\n") std::abort();
  std::size_t at = 0;
  for (std::size_t i = 0; i < p.buffers.size(); ++i) {
    const auto& b = p.buffers[i];
    const std::string title = "<title>id " + std::to_string(b.id) + ": ";
    at = svg.find(title, at);
    if (at == std::string::npos) std::abort();
    const std::string where = " at offset " + std::to_string(plan.offsets[i]) + ", live [" +
                              std::to_string(b.lower) + ", " + std::to_string(b.upper) + ")</title>";
    const std::size_t close = svg.find("</title>", at);
    if (close == std::string::npos || svg.compare(close + 8 - where.size(), where.size(), where) != 0) std::abort();
    at = close;
  }
  if (svg.find("<title>id ", at) != std::string::npos) std::abort();  // one rectangle per buffer
  for (const char* attribute : {" x=\"", " y=\"", " width=\"", " height=\"", " x1=\"", " y1=\"", " x2=\"", " y2=\""}) {
    const std::string key = attribute;
    for (std::size_t k = svg.find(key); k != std::string::npos; k = svg.find(key, k + 1)) {
      const std::size_t from = k + key.size();
      const std::size_t to = svg.find('"', from);
      if (to == std::string::npos) std::abort();
      const std::string value = svg.substr(from, to - from);
      if (value == "100%") continue;  // the background
      char* end = nullptr;
      const double v = std::strtod(value.c_str(), &end);
      if (end != value.c_str() + value.size() || !std::isfinite(v) || v < 0.0 || v > 960.0) std::abort();
    }
  }
}

// The lower bound recomputed at every buffer's start, in 128 bits.
inline wide lower_bound(const memo::dsa_problem& p) {
  wide best = 0;
  for (const auto& at : p.buffers) {
    wide live = 0;
    for (const auto& b : p.buffers) {
      if (b.lower <= at.lower && at.lower < b.upper) live += b.size_bytes;
    }
    if (live > best) best = live;
  }
  return best;
}

}  // namespace fuzz

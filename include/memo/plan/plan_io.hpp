// memo/plan/plan_io.hpp
//
// Showing plans to people and scripts (MEMO section 4.2): an SVG picture of
// a plan and a small JSON writer for solver results.
//
// The picture puts time across and addresses up, one rectangle per buffer
// at [lower, upper) x [offset, offset + size), and draws the load curve (the
// bytes live at each instant, whose maximum is the lower bound) over it, so
// every gap between the rectangles' top edge and the curve is fragmentation
// the plan did not avoid. Hovering a rectangle shows its buffer.
//
// Solver results are written as JSON through core/json.hpp's writer.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "memo/core/bytes.hpp"
#include "memo/core/error.hpp"
#include "memo/core/json.hpp"
#include "memo/plan/caching_allocator.hpp"
#include "memo/plan/dsa_problem.hpp"

namespace memo {

/// A solver result as a JSON object (without offsets).
inline void write_json(json_writer& json, const dsa_result& result) {
  const double ratio = result.lower_bound_bytes == 0
                           ? 1.0
                           : static_cast<double>(result.plan.peak_bytes) /
                                 static_cast<double>(result.lower_bound_bytes);
  json.begin_object()
      .field("solver", result.solver)
      .field("peak_bytes", result.plan.peak_bytes)
      .field("lower_bound_bytes", result.lower_bound_bytes)
      .field("peak_over_lower_bound", ratio)
      .field("proven_optimal", result.proven_optimal)
      .field("seconds", result.seconds)
      .end_object();
}

inline void write_json(json_writer& json, const caching_allocator_report& report) {
  json.begin_object()
      .field("reserved_peak_bytes", report.reserved_peak_bytes)
      .field("allocated_peak_bytes", report.allocated_peak_bytes)
      .field("requested_peak_bytes", report.requested_peak_bytes)
      .field("segments", report.segments)
      .end_object();
}

namespace detail {

inline std::string svg_number(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f", v);
  return text;
}

/// A byte count computed in double, back as bytes: a value that rounds to
/// 2^64 or above (a peak near 2^64 - 1 does) is the largest count, not UB.
inline std::uint64_t svg_bytes(double bytes) {
  constexpr double two_to_64 = 18446744073709551616.0;
  if (!(bytes > 0.0)) return 0;
  return bytes >= two_to_64 ? ~std::uint64_t{0} : static_cast<std::uint64_t>(bytes);
}

inline std::string svg_escape(std::string_view text) {
  std::string out;
  for (const char c : text) {
    switch (c) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

}  // namespace detail

/// An SVG picture of `plan`: time across, address up, one rectangle per
/// buffer, the load curve (lower bound) drawn over them.
inline std::string plan_svg(const dsa_problem& problem, const dsa_plan& plan,
                            std::string_view title = "memory plan") {
  expects(plan.offsets.size() == problem.buffers.size(), [&] {
    return "plan_svg: plan has " + std::to_string(plan.offsets.size()) + " offsets for " +
           std::to_string(problem.buffers.size()) + " buffers";
  });
  constexpr double width = 960, height = 540, left = 90, right = 20, top = 50, bottom = 50;
  std::int64_t t0 = 0, t1 = 1;
  if (!problem.buffers.empty()) {
    t0 = problem.buffers.front().lower;
    t1 = problem.buffers.front().upper;
    for (const auto& b : problem.buffers) {
      t0 = std::min(t0, b.lower);
      t1 = std::max(t1, b.upper);
    }
  }
  const auto bound = lower_bound_bytes(problem);
  const double y_max = static_cast<double>(std::max<std::uint64_t>({plan.peak_bytes, bound, 1}));
  const double plot_w = width - left - right, plot_h = height - top - bottom;
  // Differences taken unsigned: a timeline may span up to 2^64 - 1 ticks
  // here even when it is longer than a checked problem allows.
  auto span = [](std::int64_t from, std::int64_t to) {
    return static_cast<double>(static_cast<std::uint64_t>(to) - static_cast<std::uint64_t>(from));
  };
  auto x = [&](std::int64_t t) { return left + plot_w * span(t0, t) / span(t0, t1); };
  auto y = [&](double bytes) { return top + plot_h * (1.0 - bytes / y_max); };
  std::string s;
  s += "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + detail::svg_number(width) +
       "\" height=\"" + detail::svg_number(height) + "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  s += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  s += "<text x=\"" + detail::svg_number(left) + "\" y=\"20\" font-size=\"14\">" +
       detail::svg_escape(title) + ": " + std::to_string(problem.buffers.size()) +
       " buffers, peak " + format_bytes(plan.peak_bytes) + ", lower bound " + format_bytes(bound) +
       "</text>\n";
  // Axes.
  s += "<line x1=\"" + detail::svg_number(left) + "\" y1=\"" + detail::svg_number(top + plot_h) +
       "\" x2=\"" + detail::svg_number(left + plot_w) + "\" y2=\"" +
       detail::svg_number(top + plot_h) + "\" stroke=\"black\"/>\n";
  s += "<line x1=\"" + detail::svg_number(left) + "\" y1=\"" + detail::svg_number(top) +
       "\" x2=\"" + detail::svg_number(left) + "\" y2=\"" + detail::svg_number(top + plot_h) +
       "\" stroke=\"black\"/>\n";
  for (int tick = 0; tick <= 4; ++tick) {
    const double bytes = y_max * tick / 4.0;
    s += "<text x=\"" + detail::svg_number(left - 6) + "\" y=\"" + detail::svg_number(y(bytes) + 4) +
         "\" text-anchor=\"end\">" + format_bytes(detail::svg_bytes(bytes)) + "</text>\n";
  }
  s += "<text x=\"" + detail::svg_number(left) + "\" y=\"" + detail::svg_number(height - 15) +
       "\">time " + std::to_string(t0) + "</text>\n";
  s += "<text x=\"" + detail::svg_number(left + plot_w) + "\" y=\"" +
       detail::svg_number(height - 15) + "\" text-anchor=\"end\">" + std::to_string(t1) +
       "</text>\n";
  // Buffers.
  for (std::size_t i = 0; i < problem.buffers.size(); ++i) {
    const auto& b = problem.buffers[i];
    const double off = static_cast<double>(plan.offsets[i]);
    const double size = static_cast<double>(b.size_bytes);
    const auto hue = (b.id * 47) % 360;
    s += "<rect x=\"" + detail::svg_number(x(b.lower)) + "\" y=\"" +
         detail::svg_number(y(off + size)) + "\" width=\"" +
         detail::svg_number(x(b.upper) - x(b.lower)) + "\" height=\"" +
         detail::svg_number(std::max(0.5, y(off) - y(off + size))) + "\" fill=\"hsl(" +
         std::to_string(hue) + ",60%,70%)\" stroke=\"#333\" stroke-width=\"0.5\"><title>id " +
         std::to_string(b.id) + ": " + format_bytes(b.size_bytes) + " at offset " +
         std::to_string(plan.offsets[i]) + ", live [" + std::to_string(b.lower) + ", " +
         std::to_string(b.upper) + ")</title></rect>\n";
  }
  // The load curve: a step line.
  const auto steps = load_profile(problem);
  if (!steps.empty()) {
    std::string points;
    for (std::size_t k = 0; k < steps.size(); ++k) {
      const double load = static_cast<double>(steps[k].live_bytes);
      const std::int64_t until = k + 1 < steps.size() ? steps[k + 1].time : t1;
      points += detail::svg_number(x(steps[k].time)) + "," + detail::svg_number(y(load)) + " " +
                detail::svg_number(x(until)) + "," + detail::svg_number(y(load)) + " ";
    }
    s += "<polyline points=\"" + points +
         "\" fill=\"none\" stroke=\"crimson\" stroke-width=\"1.5\"><title>bytes live (lower bound " +
         format_bytes(bound) + ")</title></polyline>\n";
  }
  s += "<line x1=\"" + detail::svg_number(left) + "\" y1=\"" +
       detail::svg_number(y(static_cast<double>(plan.peak_bytes))) + "\" x2=\"" +
       detail::svg_number(left + plot_w) + "\" y2=\"" +
       detail::svg_number(y(static_cast<double>(plan.peak_bytes))) +
       "\" stroke=\"black\" stroke-dasharray=\"4 3\"><title>peak</title></line>\n";
  s += "</svg>\n";
  return s;
}

}  // namespace memo

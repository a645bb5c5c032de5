// memo/plan/dsa_csv.hpp
//
// The CSV forms of the planner (MEMO section 4.2): the DSA benchmark CSV
// (`id,lower,upper,size[,alignment]`, a problem) and the plan CSV
// (`id,offset,size,lower,upper`, a plan for a problem), and
// `read_problem_file`, which reads either input form from a file. The
// formats are described at the top of memo/plan/trace.hpp.
#pragma once

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "memo/core/bytes.hpp"
#include "memo/core/error.hpp"
#include "memo/plan/dsa_problem.hpp"
#include "memo/plan/request_trace.hpp"
#include "memo/plan/text_input.hpp"

namespace memo {

/// Parses DSA benchmark CSV (`id,lower,upper,size[,alignment]`).
inline dsa_problem parse_dsa_csv(std::string_view text, std::string_view source = "<csv>",
                                 const parse_options& options = {}) {
  enum column { c_id, c_lower, c_upper, c_size, c_alignment, c_count };
  const char* names[c_count] = {"id", "lower", "upper", "size", "alignment"};
  std::vector<int> layout;  // column index -> which field
  dsa_problem problem;
  std::unordered_map<std::uint64_t, std::size_t> seen;  // id -> line
  std::uint64_t total_bytes = 0;
  detail::for_each_line(text, [&](std::size_t line, std::string_view content) {
    std::vector<std::string_view> fields;
    std::size_t pos = 0;
    while (true) {
      const auto comma = content.find(',', pos);
      fields.push_back(detail::trim(content.substr(pos, comma == std::string_view::npos
                                                            ? std::string_view::npos
                                                            : comma - pos)));
      if (comma == std::string_view::npos) break;
      pos = comma + 1;
    }
    if (layout.empty()) {
      bool present[c_count] = {};
      for (const auto field : fields) {
        int which = -1;
        for (int c = 0; c < c_count; ++c) {
          if (field == names[c]) which = c;
        }
        if (which < 0) {
          detail::input_error(source, line,
                              "unknown column '" + detail::quote(field) +
                                  "' in header (expected id,lower,upper,size[,alignment])");
        }
        if (present[which]) {
          detail::input_error(source, line, "column '" + detail::quote(field) + "' appears twice");
        }
        present[which] = true;
        layout.push_back(which);
      }
      for (int c = 0; c < c_alignment; ++c) {
        if (!present[c]) {
          detail::input_error(source, line,
                              std::string("header lacks the column '") + names[c] +
                                  "' (expected id,lower,upper,size[,alignment])");
        }
      }
      return;
    }
    if (fields.size() != layout.size()) {
      detail::input_error(source, line,
                          "expected " + std::to_string(layout.size()) + " fields, got " +
                              std::to_string(fields.size()));
    }
    if (problem.buffers.size() >= options.max_buffers) {
      detail::input_error(source, line,
                          "more than " + std::to_string(options.max_buffers) +
                              " buffers, the limit (parse_options::max_buffers)");
    }
    dsa_buffer b;
    std::string_view size_field;
    for (std::size_t i = 0; i < fields.size(); ++i) {
      const int which = layout[i];
      const std::string_view field = fields[i];
      // Malformed, or a number out of range: said as such.
      auto bad = [&](const char* what, bool is_signed) {
        std::string_view digits = field;
        if (!digits.empty() && (digits.front() == '-' || digits.front() == '+')) digits.remove_prefix(1);
        const bool numeric = !digits.empty() && std::all_of(digits.begin(), digits.end(), [](char c) {
          return c >= '0' && c <= '9';
        });
        detail::input_error(source, line,
                            std::string("field '") + names[which] + "' " +
                                (numeric ? std::string("does not fit in ") +
                                               (is_signed ? "a signed" : "an unsigned") + " 64-bit integer"
                                         : std::string("is not ") + what) +
                                ": '" + detail::quote(field) + "'");
      };
      if (which == c_size) {
        size_field = field;  // checked below, once the id is known
      } else if (which == c_id || which == c_alignment) {
        const auto v = detail::parse_integer<std::uint64_t>(field);
        if (!v) bad("a non-negative integer", false);
        (which == c_id ? b.id : b.alignment) = *v;
      } else {
        const auto v = detail::parse_integer<std::int64_t>(field);
        if (!v) bad("an integer", true);
        if (which == c_lower) b.lower = *v;
        if (which == c_upper) b.upper = *v;
      }
    }
    const auto size = detail::parse_integer<std::uint64_t>(size_field);
    if (!size_field.empty() && size_field.front() == '-') {
      detail::input_error(source, line,
                          "buffer " + std::to_string(b.id) + ": size must be positive, got " +
                              detail::quote(size_field));
    }
    if (!size) {
      detail::input_error(source, line,
                          "buffer " + std::to_string(b.id) + ": " +
                              detail::integer_problem<std::uint64_t>(size_field) + " as a size");
    }
    if (*size == 0) {
      detail::input_error(source, line,
                          "buffer " + std::to_string(b.id) + ": size must be positive, got 0");
    }
    b.size_bytes = *size;
    if (b.size_bytes > std::numeric_limits<std::uint64_t>::max() - total_bytes) {
      detail::input_error(source, line,
                          "buffer " + std::to_string(b.id) + ": its size " + std::to_string(b.size_bytes) +
                              " takes the sizes of all buffers together past 2^64 - 1 = " +
                              std::to_string(std::numeric_limits<std::uint64_t>::max()) + ": the " +
                              std::to_string(problem.buffers.size()) + " buffer(s) before it total " +
                              std::to_string(total_bytes) + " bytes");
    }
    total_bytes += b.size_bytes;
    if (b.upper <= b.lower) {
      detail::input_error(source, line,
                          "buffer " + std::to_string(b.id) + ": upper (" + std::to_string(b.upper) +
                              ") must be greater than lower (" + std::to_string(b.lower) + ")");
    }
    // Lifetimes must fit in int64 (the limit every solver relies on).
    if (static_cast<std::uint64_t>(b.upper) - static_cast<std::uint64_t>(b.lower) >
        static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
      detail::input_error(source, line,
                          "buffer " + std::to_string(b.id) + ": the interval [" +
                              std::to_string(b.lower) + ", " + std::to_string(b.upper) +
                              ") is longer than INT64_MAX = " +
                              std::to_string(std::numeric_limits<std::int64_t>::max()) + " ticks");
    }
    if (!is_power_of_two(b.alignment)) {
      detail::input_error(source, line,
                          "buffer " + std::to_string(b.id) +
                              ": alignment must be a power of two, got " +
                              std::to_string(b.alignment));
    }
    if (const auto [it, fresh] = seen.emplace(b.id, line); !fresh) {
      detail::input_error(source, line,
                          "duplicate id " + std::to_string(b.id) + " (first at line " +
                              std::to_string(it->second) + ")");
    }
    problem.buffers.push_back(b);
  });
  if (layout.empty()) detail::input_error(source, 0, "no header line (expected id,lower,upper,size)");
  detail::check_representable(problem, source);
  problem.capacity_bytes = options.capacity_bytes;
  detail::check_capacity(problem, source);
  problem.buffers.shrink_to_fit();  // the growth's slack would outlive the parse
  return problem;
}

/// Reads a trace or a CSV file: CSV when the name ends in ".csv" or its
/// first non-comment line has a comma, a request trace otherwise.
inline memory_trace read_problem_file(const std::filesystem::path& path,
                                      const parse_options& options = {}) {
  const std::string text = detail::read_whole_file(path, options.max_input_bytes);
  bool csv = path.extension() == ".csv";
  if (!csv) {
    bool decided = false;
    detail::for_each_line(text, [&](std::size_t, std::string_view line) {
      if (!decided) csv = line.find(',') != std::string_view::npos;
      decided = true;
    });
  }
  if (csv) {
    memory_trace trace;
    trace.problem = parse_dsa_csv(text, detail::shown_path(path), options);
    for (const auto& b : trace.problem.buffers) trace.end_time = std::max(trace.end_time, b.upper);
    return trace;
  }
  return parse_trace(text, detail::shown_path(path), options);
}


/// The plan as CSV: `id,offset,size,lower,upper`, one buffer per line.
inline std::string write_plan_csv(const dsa_problem& problem, const dsa_plan& plan) {
  expects(plan.offsets.size() == problem.buffers.size(), [&] {
    return "plan has " + std::to_string(plan.offsets.size()) + " offsets for " +
           std::to_string(problem.buffers.size()) + " buffers";
  });
  std::string out = "id,offset,size,lower,upper\n";
  for (std::size_t i = 0; i < problem.buffers.size(); ++i) {
    const auto& b = problem.buffers[i];
    out += std::to_string(b.id) + ',' + std::to_string(plan.offsets[i]) + ',' +
           std::to_string(b.size_bytes) + ',' + std::to_string(b.lower) + ',' +
           std::to_string(b.upper) + '\n';
  }
  return out;
}

/// Reads a plan CSV written by `write_plan_csv` for `problem`: every buffer
/// of the problem must appear once with its size and interval.
inline dsa_plan parse_plan_csv(std::string_view text, const dsa_problem& problem,
                               std::string_view source = "<plan>") {
  std::unordered_map<std::uint64_t, std::size_t> index;
  for (std::size_t i = 0; i < problem.buffers.size(); ++i) index.emplace(problem.buffers[i].id, i);
  dsa_plan plan;
  plan.offsets.assign(problem.buffers.size(), 0);
  std::vector<std::size_t> line_of(problem.buffers.size(), 0);
  bool header = false;
  detail::for_each_line(text, [&](std::size_t line, std::string_view content) {
    if (!header) {
      if (content != "id,offset,size,lower,upper") {
        detail::input_error(source, line, "expected the header 'id,offset,size,lower,upper'");
      }
      header = true;
      return;
    }
    std::vector<std::string_view> fields;
    std::size_t pos = 0;
    while (true) {
      const auto comma = content.find(',', pos);
      fields.push_back(detail::trim(content.substr(
          pos, comma == std::string_view::npos ? std::string_view::npos : comma - pos)));
      if (comma == std::string_view::npos) break;
      pos = comma + 1;
    }
    if (fields.size() != 5) {
      detail::input_error(source, line, "expected 5 fields, got " + std::to_string(fields.size()));
    }
    const char* names[5] = {"id", "offset", "size", "lower", "upper"};
    std::uint64_t u[3] = {};
    std::int64_t s[2] = {};
    for (std::size_t f = 0; f < 5; ++f) {
      bool ok = false;
      if (f < 3) {
        const auto v = detail::parse_integer<std::uint64_t>(fields[f]);
        ok = v.has_value();
        if (v) u[f] = *v;
      } else {
        const auto v = detail::parse_integer<std::int64_t>(fields[f]);
        ok = v.has_value();
        if (v) s[f - 3] = *v;
      }
      if (!ok) {
        detail::input_error(source, line,
                            std::string("field '") + names[f] + "' is not an integer: '" +
                                detail::quote(fields[f]) + "'");
      }
    }
    const auto it = index.find(u[0]);
    if (it == index.end()) {
      detail::input_error(source, line, "id " + std::to_string(u[0]) + " is not in the problem");
    }
    const auto& b = problem.buffers[it->second];
    if (line_of[it->second] != 0) {
      detail::input_error(source, line,
                          "duplicate id " + std::to_string(u[0]) + " (first at line " +
                              std::to_string(line_of[it->second]) + ")");
    }
    if (u[2] != b.size_bytes || s[0] != b.lower || s[1] != b.upper) {
      detail::input_error(source, line,
                          "buffer " + std::to_string(b.id) + " has size " +
                              std::to_string(u[2]) + " live [" + std::to_string(s[0]) + ", " +
                              std::to_string(s[1]) + ") but the problem says size " +
                              std::to_string(b.size_bytes) + " live [" + std::to_string(b.lower) +
                              ", " + std::to_string(b.upper) + ")");
    }
    line_of[it->second] = line;
    plan.offsets[it->second] = u[1];
    plan.peak_bytes = std::max(plan.peak_bytes, checked_add(u[1], b.size_bytes));
  });
  if (!header) detail::input_error(source, 0, "empty plan (no header line)");
  for (std::size_t i = 0; i < line_of.size(); ++i) {
    if (line_of[i] == 0) {
      detail::input_error(source, 0,
                          "buffer " + std::to_string(problem.buffers[i].id) + " has no offset");
    }
  }
  return plan;
}

}  // namespace memo

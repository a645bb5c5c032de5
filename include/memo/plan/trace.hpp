// memo/plan/trace.hpp
//
// Reading and writing the inputs and outputs of the memory planner (MEMO
// section 4.2, Figures 4 and 9).
//
// Two input forms become one `dsa_problem`:
//
// * The request trace of the paper: one request per line,
//
//       malloc <id> <bytes>
//       free   <id> <bytes>
//
//   `<bytes>` is a decimal byte count, optionally with a binary unit suffix
//   (`KiB`, `MiB`, `GiB`, `TiB`, e.g. `128MiB`). Every request is one instant
//   of the timeline: the k-th request (counting from 0) happens at time k, so
//   a buffer malloc'ed by request i and freed by request j is live on [i, j).
//   A buffer never freed stays live to the end of the trace and is listed in
//   `memory_trace::never_freed` so a tool can say so.
//
//   Section markers say where a part of the model (a layer's forward or
//   backward pass, the embedding, the classifier) begins and ends:
//
//       section begin layer 3 forward
//       ...
//       section end layer 3 forward
//
//   The name is the rest of the line (words separated by single spaces);
//   `section end` must repeat the name of the open section. Sections do not
//   nest. A name of the form `layer <n> forward` or `layer <n> backward` also
//   fills `trace_section::layer` and `trace_section::phase`. A section
//   covers the requests between its markers: [begin, end) on the timeline.
//
//   `#` starts a comment (whole line or after a request); blank lines are
//   ignored.
//
// * The CSV of public DSA benchmarks: a header naming the columns `id`,
//   `lower`, `upper`, `size` and optionally `alignment` (any order), then one
//   buffer per line, live on [lower, upper).
//
// A plan is written (and read back) as CSV `id,offset,size,lower,upper`.
//
// Every malformed input raises `memo::error` whose message starts with
// `<file>:<line>: ` and says what was wrong: a non-numeric field, a zero or
// negative size, upper <= lower, a duplicate id, a free of an unknown or
// already freed id, a free whose size differs from its malloc, and a
// capacity below the lower bound (both numbers).
#pragma once

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "memo/core/bytes.hpp"
#include "memo/core/error.hpp"
#include "memo/plan/dsa_problem.hpp"

namespace memo {

/// A named span of the trace's timeline, from `section begin` to `section end`.
struct trace_section {
  std::string name;                  ///< "layer 3 forward", "embedding", ...
  std::int64_t begin = 0;            ///< time of the first request inside it
  std::int64_t end = 0;              ///< time just after the last one
  std::optional<std::int64_t> layer; ///< 3 for "layer 3 forward"
  std::string phase;                 ///< "forward", "backward", or empty
  friend bool operator==(const trace_section&, const trace_section&) = default;
};

/// A parsed request trace: the DSA problem it defines plus its structure.
struct memory_trace {
  dsa_problem problem;
  std::vector<trace_section> sections;     ///< in trace order, non-overlapping
  std::vector<std::uint64_t> never_freed;  ///< ids live to the end of the trace
  std::int64_t end_time = 0;               ///< number of requests
};

/// Options shared by the parsers.
struct parse_options {
  /// Checked against the lower bound once the whole input is read.
  std::optional<std::uint64_t> capacity_bytes;
};

namespace detail {

inline std::string_view trim(std::string_view text) {
  const auto first = text.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos) return {};
  const auto last = text.find_last_not_of(" \t\r\n");
  return text.substr(first, last - first + 1);
}

inline std::vector<std::string_view> split_words(std::string_view text) {
  std::vector<std::string_view> words;
  std::size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && (text[i] == ' ' || text[i] == '\t')) ++i;
    std::size_t j = i;
    while (j < text.size() && text[j] != ' ' && text[j] != '\t') ++j;
    if (j > i) words.push_back(text.substr(i, j - i));
    i = j;
  }
  return words;
}

/// Raises "<source>:<line>: <reason>"; line 0 means "no particular line".
[[noreturn]] inline void input_error(std::string_view source, std::size_t line,
                                     const std::string& reason) {
  std::string text(source);
  if (line > 0) text += ":" + std::to_string(line);
  text += ": " + reason;
  throw error(text);
}

template <class Int>
std::optional<Int> parse_integer(std::string_view text) {
  Int value{};
  if (text.empty()) return std::nullopt;
  if (text.front() == '+') text.remove_prefix(1);
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc{} || ptr != text.data() + text.size()) return std::nullopt;
  return value;
}

/// A byte count with an optional binary unit suffix; nullopt when malformed
/// or out of range. A leading '-' is reported by the caller as a negative size.
inline std::optional<std::uint64_t> parse_bytes(std::string_view text) {
  std::size_t digits = 0;
  while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') ++digits;
  if (digits == 0) return std::nullopt;
  const auto number = parse_integer<std::uint64_t>(text.substr(0, digits));
  if (!number) return std::nullopt;
  const std::string_view unit = text.substr(digits);
  std::uint64_t scale = 1;
  if (unit.empty() || unit == "B") {
    scale = 1;
  } else if (unit == "KiB") {
    scale = std::uint64_t{1} << 10;
  } else if (unit == "MiB") {
    scale = std::uint64_t{1} << 20;
  } else if (unit == "GiB") {
    scale = std::uint64_t{1} << 30;
  } else if (unit == "TiB") {
    scale = std::uint64_t{1} << 40;
  } else {
    return std::nullopt;
  }
  if (*number > std::numeric_limits<std::uint64_t>::max() / scale) return std::nullopt;
  return *number * scale;
}

inline void check_capacity(const dsa_problem& problem, std::string_view source) {
  if (!problem.capacity_bytes) return;
  const auto bound = lower_bound_bytes(problem);
  if (*problem.capacity_bytes < bound) {
    input_error(source, 0,
                "capacity " + std::to_string(*problem.capacity_bytes) +
                    " bytes is below the lower bound " + std::to_string(bound) +
                    " bytes (the most bytes live at one instant)");
  }
}

inline std::string read_whole_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw error(path.string() + ": cannot open file for reading");
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw error(path.string() + ": read error");
  return text.str();
}

/// Calls `fn(line_number, line_without_comment)` for every non-blank line.
template <class Fn>
void for_each_line(std::string_view text, Fn&& fn) {
  std::size_t line_number = 0;
  std::size_t pos = 0;
  while (pos <= text.size()) {
    const auto newline = text.find('\n', pos);
    const auto stop = newline == std::string_view::npos ? text.size() : newline;
    ++line_number;
    std::string_view line = text.substr(pos, stop - pos);
    if (const auto hash = line.find('#'); hash != std::string_view::npos) {
      line = line.substr(0, hash);
    }
    line = trim(line);
    if (!line.empty()) fn(line_number, line);
    if (newline == std::string_view::npos) break;
    pos = newline + 1;
  }
}

}  // namespace detail

/// Builds a `memory_trace` request by request; the trace parser and the
/// trace generators both use it, so both get the same checks. `line` is
/// only used in error messages (0: none).
class trace_builder {
 public:
  explicit trace_builder(std::string source = "<trace>") : source_(std::move(source)) {}

  void malloc(std::uint64_t id, std::uint64_t size_bytes, std::size_t line = 0) {
    if (size_bytes == 0) {
      detail::input_error(source_, line, "malloc of id " + std::to_string(id) +
                                             ": size must be positive, got 0");
    }
    if (const auto it = index_.find(id); it != index_.end()) {
      detail::input_error(source_, line,
                          "duplicate id " + std::to_string(id) + ": already allocated" +
                              where(malloc_line_[it->second]));
    }
    if (size_bytes > std::numeric_limits<std::uint64_t>::max() - total_bytes_) {
      detail::input_error(source_, line,
                          "malloc of id " + std::to_string(id) +
                              ": the sizes of all buffers together overflow 64 bits");
    }
    total_bytes_ += size_bytes;
    index_.emplace(id, trace_.problem.buffers.size());
    dsa_buffer b;
    b.id = id;
    b.size_bytes = size_bytes;
    b.lower = now_;
    b.upper = -1;  // open until freed
    trace_.problem.buffers.push_back(b);
    malloc_line_.push_back(line);
    free_line_.push_back(0);
    ++now_;
  }

  void free(std::uint64_t id, std::uint64_t size_bytes, std::size_t line = 0) {
    const auto it = index_.find(id);
    if (it == index_.end()) {
      detail::input_error(source_, line, "free of unknown id " + std::to_string(id));
    }
    auto& b = trace_.problem.buffers[it->second];
    if (b.upper >= 0) {
      detail::input_error(source_, line,
                          "free of id " + std::to_string(id) + ", already freed" +
                              where(free_line_[it->second]));
    }
    if (b.size_bytes != size_bytes) {
      detail::input_error(source_, line,
                          "free of id " + std::to_string(id) + " says " +
                              std::to_string(size_bytes) + " bytes but it was allocated with " +
                              std::to_string(b.size_bytes) + " bytes" +
                              where(malloc_line_[it->second]));
    }
    b.upper = now_;
    free_line_[it->second] = line;
    ++now_;
  }

  void begin_section(std::string name, std::size_t line = 0) {
    if (name.empty()) detail::input_error(source_, line, "section begin needs a name");
    if (open_) {
      detail::input_error(source_, line,
                          "section '" + name + "' begins inside the open section '" +
                              open_->name + "'" + where(open_line_) + "; sections do not nest");
    }
    trace_section s;
    s.name = std::move(name);
    s.begin = now_;
    const auto words = detail::split_words(s.name);
    if (words.size() == 3 && words[0] == "layer" &&
        (words[2] == "forward" || words[2] == "backward")) {
      const auto layer = detail::parse_integer<std::int64_t>(words[1]);
      if (!layer || *layer < 0) {
        detail::input_error(source_, line,
                            "section '" + s.name + "': layer number '" + std::string(words[1]) +
                                "' is not a non-negative integer");
      }
      s.layer = *layer;
      s.phase = std::string(words[2]);
    }
    open_ = std::move(s);
    open_line_ = line;
  }

  void end_section(std::string_view name, std::size_t line = 0) {
    if (!open_) {
      detail::input_error(source_, line,
                          "section end '" + std::string(name) + "' without a matching begin");
    }
    if (open_->name != name) {
      detail::input_error(source_, line,
                          "section end '" + std::string(name) + "' does not match the open section '" +
                              open_->name + "'" + where(open_line_));
    }
    open_->end = now_;
    trace_.sections.push_back(std::move(*open_));
    open_.reset();
  }

  /// Closes the trace: never-freed buffers become live to its end.
  [[nodiscard]] memory_trace finish(const parse_options& options = {}) && {
    if (open_) {
      detail::input_error(source_, open_line_,
                          "section '" + open_->name + "' is never ended");
    }
    trace_.end_time = now_;
    for (auto& b : trace_.problem.buffers) {
      if (b.upper < 0) {
        b.upper = now_;
        trace_.never_freed.push_back(b.id);
      }
    }
    trace_.problem.capacity_bytes = options.capacity_bytes;
    detail::check_capacity(trace_.problem, source_);
    return std::move(trace_);
  }

  [[nodiscard]] std::int64_t now() const noexcept { return now_; }

 private:
  static std::string where(std::size_t line) {
    return line > 0 ? " at line " + std::to_string(line) : std::string();
  }

  std::string source_;
  memory_trace trace_;
  std::unordered_map<std::uint64_t, std::size_t> index_;
  std::vector<std::size_t> malloc_line_;
  std::vector<std::size_t> free_line_;
  std::optional<trace_section> open_;
  std::size_t open_line_ = 0;
  std::int64_t now_ = 0;
  std::uint64_t total_bytes_ = 0;
};

/// Parses a request trace (see the top of this file). `source` names the
/// input in error messages.
inline memory_trace parse_trace(std::string_view text, std::string_view source = "<trace>",
                                const parse_options& options = {}) {
  trace_builder builder{std::string(source)};
  detail::for_each_line(text, [&](std::size_t line, std::string_view content) {
    const auto words = detail::split_words(content);
    const std::string_view verb = words[0];
    if (verb == "section") {
      if (words.size() < 2 || (words[1] != "begin" && words[1] != "end")) {
        detail::input_error(source, line, "expected 'section begin <name>' or 'section end <name>'");
      }
      std::string name;
      for (std::size_t i = 2; i < words.size(); ++i) {
        if (!name.empty()) name += ' ';
        name += words[i];
      }
      if (words[1] == "begin") {
        builder.begin_section(std::move(name), line);
      } else {
        builder.end_section(name, line);
      }
      return;
    }
    if (verb != "malloc" && verb != "free") {
      detail::input_error(source, line,
                          "unknown request '" + std::string(verb) +
                              "' (expected malloc, free or section)");
    }
    if (words.size() != 3) {
      detail::input_error(source, line,
                          "expected '" + std::string(verb) + " <id> <bytes>', got " +
                              std::to_string(words.size()) + " fields");
    }
    const auto id = detail::parse_integer<std::uint64_t>(words[1]);
    if (!id) {
      detail::input_error(source, line,
                          "id '" + std::string(words[1]) + "' is not a non-negative integer");
    }
    if (!words[2].empty() && words[2].front() == '-') {
      detail::input_error(source, line,
                          "size must be positive, got '" + std::string(words[2]) + "'");
    }
    const auto bytes = detail::parse_bytes(words[2]);
    if (!bytes) {
      detail::input_error(source, line,
                          "size '" + std::string(words[2]) +
                              "' is not a byte count (digits, optionally KiB/MiB/GiB/TiB)");
    }
    if (verb == "malloc") {
      builder.malloc(*id, *bytes, line);
    } else {
      builder.free(*id, *bytes, line);
    }
  });
  return std::move(builder).finish(options);
}

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
                              "unknown column '" + std::string(field) +
                                  "' in header (expected id,lower,upper,size[,alignment])");
        }
        if (present[which]) {
          detail::input_error(source, line, "column '" + std::string(field) + "' appears twice");
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
    dsa_buffer b;
    std::int64_t size_signed = 0;
    for (std::size_t i = 0; i < fields.size(); ++i) {
      const int which = layout[i];
      const std::string_view field = fields[i];
      auto bad = [&](const char* what) {
        detail::input_error(source, line,
                            std::string("field '") + names[which] + "' is not " + what + ": '" +
                                std::string(field) + "'");
      };
      if (which == c_id || which == c_alignment) {
        const auto v = detail::parse_integer<std::uint64_t>(field);
        if (!v) bad("a non-negative integer");
        (which == c_id ? b.id : b.alignment) = *v;
      } else {
        const auto v = detail::parse_integer<std::int64_t>(field);
        if (!v) bad("an integer");
        if (which == c_lower) b.lower = *v;
        if (which == c_upper) b.upper = *v;
        if (which == c_size) size_signed = *v;
      }
    }
    if (size_signed <= 0) {
      detail::input_error(source, line,
                          "buffer " + std::to_string(b.id) + ": size must be positive, got " +
                              std::to_string(size_signed));
    }
    b.size_bytes = static_cast<std::uint64_t>(size_signed);
    if (b.size_bytes > std::numeric_limits<std::uint64_t>::max() - total_bytes) {
      detail::input_error(source, line,
                          "buffer " + std::to_string(b.id) +
                              ": the sizes of all buffers together overflow 64 bits");
    }
    total_bytes += b.size_bytes;
    if (b.upper <= b.lower) {
      detail::input_error(source, line,
                          "buffer " + std::to_string(b.id) + ": upper (" + std::to_string(b.upper) +
                              ") must be greater than lower (" + std::to_string(b.lower) + ")");
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
  problem.capacity_bytes = options.capacity_bytes;
  detail::check_capacity(problem, source);
  return problem;
}

/// Reads a trace or a CSV file: CSV when the name ends in ".csv" or its
/// first non-comment line has a comma, a request trace otherwise.
inline memory_trace read_problem_file(const std::filesystem::path& path,
                                      const parse_options& options = {}) {
  const std::string text = detail::read_whole_file(path);
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
    trace.problem = parse_dsa_csv(text, path.string(), options);
    for (const auto& b : trace.problem.buffers) trace.end_time = std::max(trace.end_time, b.upper);
    return trace;
  }
  return parse_trace(text, path.string(), options);
}

/// Writes a trace that `parse_trace` reads back into the same problem and
/// sections, provided every buffer of `trace` starts and ends at distinct
/// instants (true of every parsed or built trace). Otherwise requests at the
/// same instant are written frees first.
inline std::string write_trace(const memory_trace& trace) {
  struct event {
    std::int64_t time;
    // At one instant: sections closing there, then sections opening there
    // (a section holding no request closes right after it opens), then the
    // one request of that instant, whose index the instant is.
    int kind;  // 0 section end, 1 section begin (or an empty section's end), 2 free, 3 malloc
    std::size_t index;
    std::size_t order = 0;  // among kind 1: an empty section's end right after its begin
  };
  std::vector<event> events;
  const auto& buffers = trace.problem.buffers;
  for (std::size_t i = 0; i < buffers.size(); ++i) {
    events.push_back({buffers[i].lower, 3, i});
    if (std::find(trace.never_freed.begin(), trace.never_freed.end(), buffers[i].id) ==
        trace.never_freed.end()) {
      events.push_back({buffers[i].upper, 2, i});
    }
  }
  for (std::size_t i = 0; i < trace.sections.size(); ++i) {
    const auto& section = trace.sections[i];
    events.push_back({section.begin, 1, i, 2 * i});
    events.push_back(section.end == section.begin ? event{section.end, 1, i, 2 * i + 1}
                                                  : event{section.end, 0, i});
  }
  std::stable_sort(events.begin(), events.end(), [](const event& a, const event& b) {
    if (a.time != b.time) return a.time < b.time;
    return a.kind != b.kind ? a.kind < b.kind : a.order < b.order;
  });
  std::string out;
  for (const auto& e : events) {
    const bool closes = e.kind == 0 || (e.kind == 1 && e.order % 2 == 1);
    switch (e.kind) {
      case 0:
      case 1:
        out += (closes ? "section end " : "section begin ") + trace.sections[e.index].name + "\n";
        break;
      default:
        out += (e.kind == 3 ? "malloc " : "free ") + std::to_string(buffers[e.index].id) + " " +
               std::to_string(buffers[e.index].size_bytes) + "\n";
    }
  }
  return out;
}

/// Builds a model trace from one layer's trace: `layer` has a forward and a
/// backward section (`layer 0 forward`, `layer 0 backward`) and possibly
/// requests before (prologue), between (middle) and after them (epilogue).
/// The result is prologue, forward of layers 0..layers-1, middle, backward
/// of layers layers-1..0, epilogue, each layer's requests under their own
/// section markers. Buffers born in a layer section get the id
/// `id + l * stride` in layer l (stride: one more than the largest id), the
/// others keep theirs. A request outside the layer sections that refers to
/// a buffer born inside them (or the other way round) cannot be repeated
/// and is an error.
inline memory_trace stack_layer_trace(const memory_trace& layer, std::int64_t layers) {
  expects(layers >= 1, [&] { return "stack_layer_trace: layer count must be positive, got " +
                                    std::to_string(layers); });
  const trace_section* fwd = nullptr;
  const trace_section* bwd = nullptr;
  for (const auto& s : layer.sections) {
    if (s.phase == "forward") fwd = &s;
    if (s.phase == "backward") bwd = &s;
  }
  expects(fwd != nullptr && bwd != nullptr && layer.sections.size() == 2 && fwd->end <= bwd->begin,
          "stack_layer_trace: the layer trace needs exactly one forward section followed by one "
          "backward section");
  const auto& buffers = layer.problem.buffers;
  std::uint64_t stride = 1;
  for (const auto& b : buffers) stride = std::max(stride, b.id + 1);
  // Requests by time; a parsed trace has exactly one per instant.
  struct request {
    std::int64_t time;
    bool is_malloc;
    std::size_t index;
  };
  std::vector<request> requests;
  for (std::size_t i = 0; i < buffers.size(); ++i) {
    requests.push_back({buffers[i].lower, true, i});
    if (std::find(layer.never_freed.begin(), layer.never_freed.end(), buffers[i].id) ==
        layer.never_freed.end()) {
      requests.push_back({buffers[i].upper, false, i});
    }
  }
  std::stable_sort(requests.begin(), requests.end(), [](const request& a, const request& b) {
    return a.time != b.time ? a.time < b.time : (!a.is_malloc && b.is_malloc);
  });
  auto in = [](const trace_section* s, std::int64_t t) { return t >= s->begin && t < s->end; };
  auto born_in_layer = [&](std::size_t i) {
    return in(fwd, buffers[i].lower) || in(bwd, buffers[i].lower);
  };
  trace_builder builder("stacked layer trace");
  auto emit = [&](const request& r, std::int64_t l) {
    const auto& b = buffers[r.index];
    const bool layered = born_in_layer(r.index);
    expects(layered == (l >= 0), [&] {
      return "stack_layer_trace: buffer " + std::to_string(b.id) +
             (layered ? " is born in a layer section but used outside it"
                      : " is born outside the layer sections but used inside them");
    });
    const std::uint64_t id = layered ? b.id + static_cast<std::uint64_t>(l) * stride : b.id;
    if (r.is_malloc) {
      builder.malloc(id, b.size_bytes);
    } else {
      builder.free(id, b.size_bytes);
    }
  };
  auto emit_range = [&](std::int64_t from, std::int64_t to, std::int64_t l) {
    for (const auto& r : requests) {
      if (r.time >= from && r.time < to) emit(r, l);
    }
  };
  constexpr std::int64_t forever = std::numeric_limits<std::int64_t>::max();
  emit_range(std::numeric_limits<std::int64_t>::min(), fwd->begin, -1);
  for (std::int64_t l = 0; l < layers; ++l) {
    builder.begin_section("layer " + std::to_string(l) + " forward");
    emit_range(fwd->begin, fwd->end, l);
    builder.end_section("layer " + std::to_string(l) + " forward");
  }
  emit_range(fwd->end, bwd->begin, -1);
  for (std::int64_t l = layers - 1; l >= 0; --l) {
    builder.begin_section("layer " + std::to_string(l) + " backward");
    emit_range(bwd->begin, bwd->end, l);
    builder.end_section("layer " + std::to_string(l) + " backward");
  }
  emit_range(bwd->end, forever, -1);
  return std::move(builder).finish();
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
                                std::string(fields[f]) + "'");
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

/// Writes `text` to `path`, throwing on failure.
inline void write_text_file(const std::filesystem::path& path, std::string_view text) {
  std::ofstream out(path, std::ios::binary);
  if (!out) throw error(path.string() + ": cannot open file for writing");
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  if (!out) throw error(path.string() + ": write error");
}

}  // namespace memo

// memo/plan/request_trace.hpp
//
// The request trace of MEMO section 4.2 (Figures 4 and 9): one request per
// line, `malloc <id> <bytes>` / `free <id> <bytes>`, with section markers
// naming the parts of the model. The format is described at the top of
// memo/plan/trace.hpp; this header holds the trace value, the builder both
// the parser and the generators use (so both get the same checks), the
// parser, the writer and the layer stacker.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "memo/core/bytes.hpp"
#include "memo/core/error.hpp"
#include "memo/plan/dsa_problem.hpp"
#include "memo/plan/text_input.hpp"

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


/// Builds a `memory_trace` request by request; the trace parser and the
/// trace generators both use it, so both get the same checks. `line` is
/// only used in error messages (0: none).
class trace_builder {
 public:
  explicit trace_builder(std::string source = "<trace>",
                         std::size_t max_buffers = parse_options{}.max_buffers)
      : source_(std::move(source)), max_buffers_(max_buffers) {}

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
                          "malloc of id " + std::to_string(id) + ": its size " + std::to_string(size_bytes) +
                              " takes the sizes of all buffers together past 2^64 - 1 = " +
                              std::to_string(std::numeric_limits<std::uint64_t>::max()) + ": the " +
                              std::to_string(trace_.problem.buffers.size()) + " buffer(s) before it total " +
                              std::to_string(total_bytes_) + " bytes");
    }
    if (trace_.problem.buffers.size() >= max_buffers_) {
      detail::input_error(source_, line,
                          "malloc of id " + std::to_string(id) + ": more than " +
                              std::to_string(max_buffers_) +
                              " buffers, the limit (parse_options::max_buffers)");
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
                          "section '" + detail::quote(name) + "' begins inside the open section '" +
                              detail::quote(open_->name) + "'" + where(open_line_) + "; sections do not nest");
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
                            "section '" + detail::quote(s.name) + "': layer number '" + detail::quote(words[1]) +
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
                          "section end '" + detail::quote(name) + "' without a matching begin");
    }
    if (open_->name != name) {
      detail::input_error(source_, line,
                          "section end '" + detail::quote(name) + "' does not match the open section '" +
                              detail::quote(open_->name) + "'" + where(open_line_));
    }
    open_->end = now_;
    trace_.sections.push_back(std::move(*open_));
    open_.reset();
  }

  /// Closes the trace: never-freed buffers become live to its end.
  [[nodiscard]] memory_trace finish(const parse_options& options = {}) && {
    if (open_) {
      detail::input_error(source_, open_line_,
                          "section '" + detail::quote(open_->name) + "' is never ended");
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
  std::size_t max_buffers_;
};

/// Parses a request trace (see the top of this file). `source` names the
/// input in error messages.
inline memory_trace parse_trace(std::string_view text, std::string_view source = "<trace>",
                                const parse_options& options = {}) {
  trace_builder builder{std::string(source), options.max_buffers};
  bool any = false;
  detail::for_each_line(text, [&](std::size_t line, std::string_view content) {
    any = true;
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
                          "unknown request '" + detail::quote(verb) +
                              "' (expected malloc, free or section)");
    }
    if (words.size() != 3) {
      detail::input_error(source, line,
                          "expected '" + detail::quote(verb) + " <id> <bytes>', got " +
                              std::to_string(words.size()) + " fields");
    }
    const auto id = detail::parse_integer<std::uint64_t>(words[1]);
    if (!id) {
      detail::input_error(source, line, "id " + detail::integer_problem<std::uint64_t>(words[1]));
    }
    if (!words[2].empty() && words[2].front() == '-') {
      detail::input_error(source, line,
                          "size must be positive, got '" + detail::quote(words[2]) + "'");
    }
    const auto bytes = detail::parse_bytes(words[2]);
    if (!bytes) {
      detail::input_error(source, line, detail::bytes_problem(words[2]));
    }
    if (verb == "malloc") {
      builder.malloc(*id, *bytes, line);
    } else {
      builder.free(*id, *bytes, line);
    }
  });
  // Like a CSV without its header line: nothing at all is an error, not an
  // empty problem.
  if (!any) detail::input_error(source, 0, "empty trace (no malloc, free or section line)");
  return std::move(builder).finish(options);
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
inline memory_trace stack_layer_trace(const memory_trace& layer, std::int64_t layers,
                                      std::size_t max_buffers = parse_options{}.max_buffers) {
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
  auto in = [](const trace_section* s, std::int64_t t) { return t >= s->begin && t < s->end; };
  auto born_in_layer = [&](std::size_t i) {
    return in(fwd, buffers[i].lower) || in(bwd, buffers[i].lower);
  };
  // The model's size is known before anything is built: refuse it when it
  // passes the limit, rather than running out of memory building it.
  std::uint64_t per_layer = 0;
  for (std::size_t i = 0; i < buffers.size(); ++i) per_layer += born_in_layer(i) ? 1 : 0;
  const detail::wide_bytes total = detail::wide_bytes{buffers.size() - per_layer} +
                                   detail::wide_bytes{per_layer} * static_cast<std::uint64_t>(layers);
  expects(total <= max_buffers, [&] {
    return "stack_layer_trace: " + std::to_string(layers) + " layers of " + std::to_string(per_layer) +
           " buffers each (and " + std::to_string(buffers.size() - per_layer) + " others) make " +
           detail::wide_to_string(total) + " buffers, more than the limit of " +
           std::to_string(max_buffers) + " (parse_options::max_buffers)";
  });
  // Layer l's copy of buffer id gets id + l * stride; checked, never wrapped.
  detail::wide_bytes stride = 1;
  for (const auto& b : buffers) stride = std::max(stride, detail::wide_bytes{b.id} + 1);
  std::unordered_set<std::uint64_t> never_freed(layer.never_freed.begin(), layer.never_freed.end());
  // Requests in trace order; a never-freed buffer has no free.
  std::vector<detail::timeline_event> requests;
  for (const auto& e : detail::timeline_events(buffers)) {
    if (e.is_malloc || !never_freed.contains(buffers[e.index].id)) requests.push_back(e);
  }
  using request = detail::timeline_event;
  trace_builder builder("stacked layer trace", max_buffers);
  auto emit = [&](const request& r, std::int64_t l) {
    const auto& b = buffers[r.index];
    const bool layered = born_in_layer(r.index);
    expects(layered == (l >= 0), [&] {
      return "stack_layer_trace: buffer " + std::to_string(b.id) +
             (layered ? " is born in a layer section but used outside it"
                      : " is born outside the layer sections but used inside them");
    });
    const detail::wide_bytes wide_id =
        layered ? detail::wide_bytes{b.id} + static_cast<std::uint64_t>(l) * stride : b.id;
    expects(wide_id <= detail::max_bytes, [&] {
      return "stack_layer_trace: layer " + std::to_string(l) + "'s copy of buffer " +
             std::to_string(b.id) + " would get the id " + std::to_string(b.id) + " + " +
             std::to_string(l) + " * " + detail::wide_to_string(stride) + " = " +
             detail::wide_to_string(wide_id) + ", past 2^64 - 1 (ids in the layer trace must stay "
             "below 2^64 / " + std::to_string(layers) + ")";
    });
    const auto id = static_cast<std::uint64_t>(wide_id);
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

}  // namespace memo

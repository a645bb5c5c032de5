// Tests of memo/schedule/timeline.hpp: the Chrome trace read back by an
// independent JSON reader.
#include "memo/schedule/timeline.hpp"

#include "memo/schedule/stream_schedule.hpp"

#include <doctest/doctest.h>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <map>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <variant>
#include <vector>

#include "memo/backend/host_backend.hpp"
#include "schedule_test_helpers.hpp"

using memo::copy_kind;
using memo::op_id;
using memo::stream_schedule;
using memo::timeline;
using memo::timeline_op;
using memo::chrome_trace_json;
using memo::testing::unit_profile;


namespace {

// A minimal JSON reader: enough to prove the trace parses and to read it back.
struct json_value {
  std::variant<std::nullptr_t, bool, double, std::string, std::vector<json_value>,
               std::map<std::string, json_value>>
      value;
  [[nodiscard]] const json_value& operator[](const std::string& key) const {
    return std::get<std::map<std::string, json_value>>(value).at(key);
  }
  [[nodiscard]] bool has(const std::string& key) const {
    const auto& object = std::get<std::map<std::string, json_value>>(value);
    return object.count(key) != 0;
  }
  [[nodiscard]] const std::vector<json_value>& array() const {
    return std::get<std::vector<json_value>>(value);
  }
  [[nodiscard]] double number() const { return std::get<double>(value); }
  [[nodiscard]] const std::string& string() const { return std::get<std::string>(value); }
};

class json_reader {
 public:
  explicit json_reader(std::string text) : text_(std::move(text)) {}
  json_value document() {
    json_value v = value();
    skip();
    if (at_ != text_.size()) fail("trailing characters");
    return v;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw std::runtime_error("JSON: " + what + " at offset " + std::to_string(at_));
  }
  void skip() {
    while (at_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[at_]))) ++at_;
  }
  char peek() {
    skip();
    if (at_ >= text_.size()) fail("unexpected end");
    return text_[at_];
  }
  void expect(char c) {
    if (peek() != c) fail(std::string("expected '") + c + "'");
    ++at_;
  }
  json_value value() {
    const char c = peek();
    if (c == '{') return object();
    if (c == '[') return array();
    if (c == '"') return {string()};
    if (text_.compare(at_, 4, "true") == 0) return at_ += 4, json_value{true};
    if (text_.compare(at_, 5, "false") == 0) return at_ += 5, json_value{false};
    if (text_.compare(at_, 4, "null") == 0) return at_ += 4, json_value{nullptr};
    return {number()};
  }
  json_value object() {
    expect('{');
    std::map<std::string, json_value> members;
    if (peek() == '}') return ++at_, json_value{members};
    for (;;) {
      skip();
      std::string key = string();
      expect(':');
      members[key] = value();
      if (peek() == ',') {
        ++at_;
        continue;
      }
      expect('}');
      return {members};
    }
  }
  json_value array() {
    expect('[');
    std::vector<json_value> items;
    if (peek() == ']') return ++at_, json_value{items};
    for (;;) {
      items.push_back(value());
      if (peek() == ',') {
        ++at_;
        continue;
      }
      expect(']');
      return {items};
    }
  }
  std::string string() {
    expect('"');
    std::string out;
    while (at_ < text_.size() && text_[at_] != '"') {
      if (static_cast<unsigned char>(text_[at_]) < 0x20) fail("control character in string");
      if (text_[at_] == '\\') {
        ++at_;
        if (at_ >= text_.size()) fail("dangling escape");
        const char e = text_[at_];
        if (e == 'u') {
          if (at_ + 4 >= text_.size()) fail("short \\u escape");
          out += static_cast<char>(std::stoi(text_.substr(at_ + 1, 4), nullptr, 16));
          at_ += 4;
        } else if (e == 'n') {
          out += '\n';
        } else if (e == 't') {
          out += '\t';
        } else if (e == 'r') {
          out += '\r';
        } else if (e == '"' || e == '\\' || e == '/') {
          out += e;
        } else {
          fail("bad escape");
        }
        ++at_;
      } else {
        out += text_[at_++];
      }
    }
    if (at_ >= text_.size()) fail("unterminated string");
    ++at_;
    return out;
  }
  double number() {
    const std::size_t begin = at_;
    while (at_ < text_.size() && (std::isdigit(static_cast<unsigned char>(text_[at_])) ||
                                  text_[at_] == '-' || text_[at_] == '+' || text_[at_] == '.' ||
                                  text_[at_] == 'e' || text_[at_] == 'E')) {
      ++at_;
    }
    if (begin == at_) fail("expected a value");
    std::size_t used = 0;
    const double v = std::stod(text_.substr(begin, at_ - begin), &used);
    if (used != at_ - begin) fail("malformed number");
    return v;
  }

  std::string text_;
  std::size_t at_ = 0;
};

}  // namespace

TEST_CASE("stream_schedule: the Chrome trace is well-formed JSON with one tid per stream") {
  stream_schedule schedule;
  schedule.add_stream("compute");
  schedule.add_stream("copy \"out\"");  // a name that needs escaping
  const op_id a = schedule.add_compute("A", "compute", {.flops = 2000.0});
  schedule.add_copy("C\t1", "copy \"out\"", copy_kind::device_to_host, {.bytes = 1000}, {a});
  schedule.add_compute("B", "compute", {.flops = 500.0});
  const auto t = schedule.simulate(unit_profile());

  const auto path = std::filesystem::temp_directory_path() / "memo_stream_schedule_trace.json";
  t.write_chrome_trace(path.string());
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  file.close();
  std::filesystem::remove(path);
  CHECK(text.str() == t.chrome_trace_json());

  const json_value document = json_reader(text.str()).document();
  const auto& events = document["traceEvents"].array();
  std::map<std::string, const json_value*> complete;
  std::map<double, std::string> thread_names;
  for (const auto& event : events) {
    const std::string ph = event["ph"].string();
    if (ph == "X") {
      complete[event["name"].string()] = &event;
      CHECK(event.has("pid"));
      CHECK(event.has("cat"));
    } else if (ph == "M" && event["name"].string() == "thread_name") {
      thread_names[event["tid"].number()] = event["args"]["name"].string();
    }
  }
  REQUIRE(complete.size() == 3);
  CHECK(thread_names.size() == 2);
  CHECK(thread_names[0.0] == "compute");
  CHECK(thread_names[1.0] == "copy \"out\"");
  // Microseconds: A [0, 2 s], C [2 s, 4 s] on tid 1, B [2 s, 2.5 s].
  CHECK(complete["A"]->operator[]("ts").number() == doctest::Approx(0.0));
  CHECK(complete["A"]->operator[]("dur").number() == doctest::Approx(2e6));
  CHECK(complete["C\t1"]->operator[]("tid").number() == 1.0);
  CHECK(complete["C\t1"]->operator[]("ts").number() == doctest::Approx(2e6));
  CHECK(complete["C\t1"]->operator[]("dur").number() == doctest::Approx(2e6));
  CHECK(complete["C\t1"]->operator[]("args")["bytes"].number() == 1000.0);
  CHECK(complete["B"]->operator[]("tid").number() == 0.0);
  CHECK(complete["B"]->operator[]("ts").number() == doctest::Approx(2e6));
  CHECK(complete["B"]->operator[]("dur").number() == doctest::Approx(0.5e6));
}


TEST_CASE("timeline: several timelines share one Chrome trace, one process each") {
  stream_schedule schedule;
  schedule.add_stream("compute");
  schedule.add_stream("offload");
  const op_id a = schedule.add_compute("A", "compute", {.flops = 2000.0});
  schedule.add_copy("C", "offload", copy_kind::device_to_host, {.bytes = 1000}, {a});
  const auto first = schedule.simulate(unit_profile());
  // The same ops, as a second run would measure them: later and longer.
  std::vector<timeline_op> ops = first.ops();
  for (auto& op : ops) op.start_seconds += 1.0, op.end_seconds += 2.0;
  const timeline second("measured", first.streams(), ops);
  const timeline* both[] = {&second, &first};

  const json_value document = json_reader(chrome_trace_json(both)).document();
  std::map<std::pair<double, std::string>, const json_value*> complete;  // (pid, name)
  std::map<double, std::string> process_names;
  std::map<std::pair<double, double>, std::string> thread_names;  // (pid, tid)
  for (const auto& event : document["traceEvents"].array()) {
    const std::string ph = event["ph"].string();
    const double pid = event["pid"].number();
    if (ph == "X") {
      complete[{pid, event["name"].string()}] = &event;
    } else if (event["name"].string() == "process_name") {
      process_names[pid] = event["args"]["name"].string();
    } else if (event["name"].string() == "thread_name") {
      thread_names[{pid, event["tid"].number()}] = event["args"]["name"].string();
    }
  }
  CHECK(process_names.size() == 2);
  CHECK(process_names[1.0] == "measured");
  CHECK(process_names[2.0] == first.origin());
  CHECK(thread_names.size() == 4);
  CHECK(thread_names[{2.0, 1.0}] == "offload");
  REQUIRE(complete.size() == 4);
  // A runs [0, 2 s] simulated and [1 s, 4 s] measured; C [2 s, 4 s] and [3 s, 6 s].
  CHECK(complete[{2.0, "A"}]->operator[]("dur").number() == doctest::Approx(2e6));
  CHECK(complete[{1.0, "A"}]->operator[]("ts").number() == doctest::Approx(1e6));
  CHECK(complete[{1.0, "A"}]->operator[]("dur").number() == doctest::Approx(3e6));
  CHECK(complete[{1.0, "C"}]->operator[]("ts").number() == doctest::Approx(3e6));
  CHECK(complete[{1.0, "C"}]->operator[]("tid").number() == 1.0);
  CHECK(document["otherData"]["origin"].string() == "measured; " + first.origin());
  CHECK_THROWS_WITH(chrome_trace_json(std::span<const timeline* const>{}), doctest::Contains("no timeline"));
}

TEST_CASE("timeline: back-to-back ops stay back to back in whole microseconds") {
  // 210.6 us each: rounding start and duration apart would give [211, 422)
  // and [421, 632), one op inside the next in a trace viewer.
  const double us = 1e-6;
  const std::vector<timeline_op> ops = {{.name = "first", .start_seconds = 210.6 * us, .end_seconds = 421.2 * us},
                                        {.name = "second", .start_seconds = 421.2 * us, .end_seconds = 631.8 * us}};
  const timeline t("measured", {"compute"}, ops);
  const timeline* one[] = {&t};
  const json_value document = json_reader(chrome_trace_json(one)).document();
  std::map<std::string, std::pair<double, double>> span;  // name -> (ts, ts + dur)
  for (const auto& event : document["traceEvents"].array()) {
    if (event["ph"].string() != "X") continue;
    span[event["name"].string()] = {event["ts"].number(), event["ts"].number() + event["dur"].number()};
  }
  REQUIRE(span.size() == 2);
  CHECK(span["first"] == std::pair{211.0, 421.0});
  CHECK(span["second"] == std::pair{421.0, 632.0});
}

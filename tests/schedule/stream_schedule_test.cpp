#include "memo/schedule/stream_schedule.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <numeric>
#include <sstream>
#include <stdexcept>
#include <string>
#include <variant>
#include <vector>

#include "memo/backend/buffer.hpp"
#include "memo/backend/host_backend.hpp"

#include "../support/recording_backend.hpp"

using memo::collective_kind;
using memo::copy_kind;
using memo::device_profile;
using memo::host_backend;
using memo::op_id;
using memo::stream_schedule;

namespace {

// Round numbers so every hand-computed time below is exact: 1000 FLOP/s,
// 1000 B/s host-to-device and interconnect, 500 B/s device-to-host.
device_profile unit_profile() {
  device_profile profile;
  profile.name = "unit";
  profile.peak_flops = 1000.0;
  profile.efficiency = 1.0;
  profile.host_to_device_bytes_per_second = 1000.0;
  profile.device_to_host_bytes_per_second = 500.0;
  profile.interconnect_bytes_per_second = 1000.0;
  return profile;
}

host_backend::options throttled(double bytes_per_second) {
  host_backend::options options;
  options.host_to_device_bytes_per_second = bytes_per_second;
  options.device_to_host_bytes_per_second = bytes_per_second;
  return options;
}

std::string message_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const memo::error& e) {
    return e.message();
  }
  return "(no error)";
}

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

TEST_CASE("stream_schedule: simulation of a copy-then-compute chain matches the hand timeline") {
  stream_schedule schedule;
  schedule.add_stream("compute");
  schedule.add_stream("copy");
  // A: 2000 FLOPs at 1000 FLOP/s = 2 s            -> [0, 2] on compute
  // C: 1000 bytes device-to-host at 500 B/s = 2 s  -> after A: [2, 4] on copy
  // B: 1 s, next on compute (FIFO after A)         -> [2, 3]
  // D: 3 s on compute, waits for C                 -> [max(3, 4), 7] = [4, 7]
  const op_id a = schedule.add_compute("A", "compute", {.flops = 2000.0});
  const op_id c = schedule.add_copy("C", "copy", copy_kind::device_to_host, {.bytes = 1000}, {a});
  const op_id b = schedule.add_compute("B", "compute", {.flops = 1000.0});
  const op_id d = schedule.add_compute("D", "compute", {.flops = 3000.0}, {c});
  const auto t = schedule.simulate(unit_profile());
  CHECK(t.op(a).start_seconds == 0.0);
  CHECK(t.op(a).end_seconds == doctest::Approx(2.0));
  CHECK(t.op(c).start_seconds == doctest::Approx(2.0));
  CHECK(t.op(c).end_seconds == doctest::Approx(4.0));
  CHECK(t.op(b).start_seconds == doctest::Approx(2.0));
  CHECK(t.op(b).end_seconds == doctest::Approx(3.0));
  CHECK(t.op(d).start_seconds == doctest::Approx(4.0));
  CHECK(t.op(d).end_seconds == doctest::Approx(7.0));
  CHECK(t.makespan_seconds() == doctest::Approx(7.0));
  // Busy: compute 2 + 1 + 3 = 6, copy 2. Both busy only during [2, 3].
  CHECK(t.busy_seconds("compute") == doctest::Approx(6.0));
  CHECK(t.busy_seconds("copy") == doctest::Approx(2.0));
  CHECK(t.overlap_seconds() == doctest::Approx(1.0));
  // Compute stalls 1 s before D (ready at 3, C ends at 4); the copy stream,
  // with C queued from time 0, waits 2 s for A.
  CHECK(t.stall_seconds("compute") == doctest::Approx(1.0));
  CHECK(t.op(d).stall_seconds == doctest::Approx(1.0));
  CHECK(t.stall_seconds("copy") == doctest::Approx(2.0));
}

TEST_CASE("stream_schedule: simulation with collectives, a marker and a prefetch matches the hand timeline") {
  stream_schedule schedule;
  schedule.add_stream("s0");
  schedule.add_stream("s1");
  schedule.add_stream("s2");
  // P: 3000 B host-to-device at 1000 B/s = 3 s          [0, 3] on s2
  // X: 1 s                                               [0, 1] on s0
  // R: all_reduce 1000 B over 4 ranks: 2 * 3/4 * 1000 / 1000 = 1.5 s,
  //    after X                                           [1, 2.5] on s1
  // Y: 2 s after P: start max(1, 3)                      [3, 5] on s0
  // Z: marker after Y: start max(2.5, 5)                 [5, 5] on s1
  // W: all_gather 800 B over 4 ranks: 3/4 * 800 / 1000 = 0.6 s
  //                                                      [5, 5.6] on s1
  // V: 0.5 s after W: start max(5, 5.6)                  [5.6, 6.1] on s0
  const op_id p = schedule.add_copy("P", "s2", copy_kind::host_to_device, {.bytes = 3000});
  const op_id x = schedule.add_compute("X", "s0", {.flops = 1000.0});
  const op_id r = schedule.add_collective(
      "R", "s1", {.kind = collective_kind::all_reduce, .bytes = 1000, .ranks = 4}, {x});
  const op_id y = schedule.add_compute("Y", "s0", {.flops = 2000.0}, {p});
  const op_id z = schedule.add_marker("Z", "s1", {y});
  const op_id w = schedule.add_collective(
      "W", "s1", {.kind = collective_kind::all_gather, .bytes = 800, .ranks = 4});
  const op_id v = schedule.add_compute("V", "s0", {.flops = 500.0}, {w});
  const auto t = schedule.simulate(unit_profile());
  CHECK(t.op(p).end_seconds == doctest::Approx(3.0));
  CHECK(t.op(r).start_seconds == doctest::Approx(1.0));
  CHECK(t.op(r).end_seconds == doctest::Approx(2.5));
  CHECK(t.op(y).start_seconds == doctest::Approx(3.0));
  CHECK(t.op(z).start_seconds == doctest::Approx(5.0));
  CHECK(t.op(z).end_seconds == doctest::Approx(5.0));
  CHECK(t.op(w).end_seconds == doctest::Approx(5.6));
  CHECK(t.op(v).start_seconds == doctest::Approx(5.6));
  CHECK(t.makespan_seconds() == doctest::Approx(6.1));
  // Two or more streams busy: [0, 1] (s0, s2) and [1, 2.5] (s1, s2) = 2.5 s.
  CHECK(t.overlap_seconds() == doctest::Approx(2.5));
  // s0 stalls 2 s before Y and 0.6 s before V; s1 1 s before R and 2.5 s
  // before Z; s2 never.
  CHECK(t.stall_seconds("s0") == doctest::Approx(2.6));
  CHECK(t.stall_seconds("s1") == doctest::Approx(3.5));
  CHECK(t.stall_seconds("s2") == 0.0);
  CHECK(t.busy_seconds("s0") == doctest::Approx(3.5));
  CHECK(t.busy_seconds("s1") == doctest::Approx(2.1));
}

TEST_CASE("stream_schedule: the cost model follows its formulas") {
  const auto profile = unit_profile();
  stream_schedule schedule;
  schedule.add_stream("s");
  const op_id roofline = schedule.add_compute("roofline", "s", {.flops = 1000.0, .bytes_touched = 4000.0});
  const op_id measured = schedule.add_compute("measured", "s", {.flops = 1e9, .duration_seconds = 0.25});
  const op_id all_to_all = schedule.add_collective(
      "a2a", "s", {.kind = collective_kind::all_to_all, .bytes = 2000, .ranks = 8});
  const op_id reduce_scatter = schedule.add_collective(
      "rs", "s", {.kind = collective_kind::reduce_scatter, .bytes = 2000, .ranks = 2});
  const op_id single = schedule.add_collective(
      "one rank", "s", {.kind = collective_kind::all_reduce, .bytes = 2000, .ranks = 1});
  CHECK(schedule.modelled_seconds(roofline, profile) == doctest::Approx(1.0));
  // With 2000 B/s of device memory bandwidth, 4000 bytes take 2 s > 1 s of FLOPs.
  CHECK(schedule.modelled_seconds(roofline, profile, {.device_memory_bytes_per_second = 2000.0}) ==
        doctest::Approx(2.0));
  CHECK(schedule.modelled_seconds(measured, profile) == doctest::Approx(0.25));
  CHECK(schedule.modelled_seconds(all_to_all, profile) == doctest::Approx(7.0 / 8.0 * 2.0));
  CHECK(schedule.modelled_seconds(reduce_scatter, profile) == doctest::Approx(1.0));
  CHECK(schedule.modelled_seconds(reduce_scatter, profile, {.collective_latency_seconds = 0.5}) ==
        doctest::Approx(1.5));
  CHECK(schedule.modelled_seconds(single, profile) == 0.0);

  auto no_links = profile;
  no_links.interconnect_bytes_per_second = 0.0;
  CHECK(message_of([&] { static_cast<void>(schedule.simulate(no_links)); })
            .find("a2a") != std::string::npos);
}

TEST_CASE("stream_schedule: a cycle across streams is an error naming its ops") {
  stream_schedule schedule;
  schedule.add_stream("compute");
  schedule.add_stream("copy");
  // first -> second on compute (FIFO); copy waits for second; first waits for
  // copy: first -> second -> copy -> first.
  const op_id first = schedule.add_compute("first", "compute", {.flops = 1.0});
  const op_id second = schedule.add_compute("second", "compute", {.flops = 1.0});
  const op_id copy = schedule.add_copy("copy out", "copy", copy_kind::device_to_host, {.bytes = 8}, {second});
  schedule.add_dependency(first, copy);
  const auto message = message_of([&] { schedule.validate(); });
  CHECK(message.find("cycle") != std::string::npos);
  CHECK(message.find("'first'") != std::string::npos);
  CHECK(message.find("'second'") != std::string::npos);
  CHECK(message.find("'copy out'") != std::string::npos);
  CHECK_THROWS_AS(static_cast<void>(schedule.simulate(unit_profile())), memo::error);
  host_backend backend;
  CHECK_THROWS_AS(static_cast<void>(schedule.execute(backend)), memo::error);
}

TEST_CASE("stream_schedule: a dependency on a later op of the same stream is an error") {
  stream_schedule schedule;
  schedule.add_stream("compute");
  const op_id early = schedule.add_compute("early", "compute", {.flops = 1.0});
  const op_id late = schedule.add_compute("late", "compute", {.flops = 1.0});
  schedule.add_dependency(early, late);
  const auto message = message_of([&] { schedule.validate(); });
  CHECK(message.find("'early'") != std::string::npos);
  CHECK(message.find("'late'") != std::string::npos);
  CHECK(message.find("later on the same stream") != std::string::npos);

  stream_schedule self;
  self.add_stream("s");
  const op_id alone = self.add_compute("alone", "s", {});
  self.add_dependency(alone, alone);
  CHECK(message_of([&] { self.validate(); }).find("'alone' depends on itself") != std::string::npos);
}

TEST_CASE("stream_schedule: unknown streams, duplicate names and bad ids are errors") {
  stream_schedule schedule;
  schedule.add_stream("compute");
  CHECK(message_of([&] { schedule.add_compute("k", "comptue", {}); }).find("'comptue'") !=
        std::string::npos);
  CHECK_THROWS_AS(schedule.add_stream("compute"), memo::error);
  CHECK_THROWS_AS(schedule.add_stream(""), memo::error);
  schedule.add_compute("k", "compute", {});
  CHECK(message_of([&] { schedule.add_marker("k", "compute"); }).find("'k' is used twice") !=
        std::string::npos);
  CHECK_THROWS_AS(schedule.add_marker("m", "compute", {op_id{7}}), memo::error);
  CHECK_THROWS_AS(schedule.add_dependency(op_id{0}, op_id{9}), memo::error);
  CHECK_THROWS_AS(schedule.add_copy("d2d", "compute", copy_kind::device_to_device, {.bytes = 1}),
                  memo::error);
  CHECK_THROWS_AS(schedule.add_compute("negative", "compute", {.flops = -1.0}), memo::error);
  int value = 0;
  CHECK_THROWS_AS(schedule.add_copy("half bound", "compute", copy_kind::host_to_device,
                                    {.bytes = 4, .destination = &value}),
                  memo::error);
  CHECK(schedule.size() == 1);  // failed additions leave nothing behind
}

TEST_CASE("stream_schedule: execution on host_backend honours dependencies through throttled copies") {
  // Round trip: prefetch (host->device, throttled) -> compute doubles the
  // values on the device -> offload (device->host, throttled) -> a host-side
  // check on the compute stream waits for the offload. Each consumer reads
  // bytes that a throttled producer on another stream writes; without the
  // event waits it would read them too early (and ThreadSanitizer would
  // report the race).
  constexpr std::size_t count = 16 * 1024;  // elements
  host_backend backend(throttled(64e6));
  memo::buffer<std::uint32_t, memo::host_memory_resource> input(backend.pinned_memory(), count);   // [count]
  memo::buffer<std::uint32_t, memo::host_memory_resource> device(backend.device_memory(), count);  // [count]
  memo::buffer<std::uint32_t, memo::host_memory_resource> output(backend.pinned_memory(), count);  // [count]
  std::iota(input.span().begin(), input.span().end(), 1u);
  std::fill(device.span().begin(), device.span().end(), 0u);
  std::fill(output.span().begin(), output.span().end(), 0u);
  const std::size_t bytes = count * sizeof(std::uint32_t);

  stream_schedule schedule;
  schedule.add_stream("compute");
  schedule.add_stream("offload");
  schedule.add_stream("prefetch");
  // A slow copy ahead of each producer on its stream (the host backend's
  // throttle sleeps after the memcpy), so a consumer that did not wait would
  // run before the producer's bytes exist.
  schedule.add_copy("delay in", "prefetch", copy_kind::host_to_device, {.bytes = 256 * 1024});
  schedule.add_copy("delay out", "offload", copy_kind::device_to_host, {.bytes = 256 * 1024});
  const op_id prefetch = schedule.add_copy("prefetch", "prefetch", copy_kind::host_to_device,
                                           {.bytes = bytes, .destination = device.data(), .source = input.data()});
  std::atomic<std::size_t> doubled_wrong{0};
  const op_id doubling = schedule.add_compute(
      "double", "compute",
      {.flops = 2.0 * count,
       .work = [&](memo::native_stream_ref) {
         std::size_t wrong = 0;
         for (std::size_t i = 0; i < count; ++i) {
           wrong += device.data()[i] != i + 1 ? 1 : 0;  // must see the prefetched values
           device.data()[i] *= 2;
         }
         doubled_wrong = wrong;
       }},
      {prefetch});
  const op_id offload = schedule.add_copy("offload", "offload", copy_kind::device_to_host,
                                          {.bytes = bytes, .destination = output.data(), .source = device.data()},
                                          {doubling});
  std::atomic<std::size_t> offloaded_wrong{count + 1};
  const op_id check = schedule.add_compute("check", "compute",
                                           {.work = [&](memo::native_stream_ref) {
                                             std::size_t wrong = 0;
                                             for (std::size_t i = 0; i < count; ++i) {
                                               wrong += output.data()[i] != 2 * (i + 1) ? 1 : 0;
                                             }
                                             offloaded_wrong = wrong;
                                           }},
                                           {offload});
  const auto executed = schedule.execute(backend);
  CHECK(doubled_wrong == 0);
  CHECK(offloaded_wrong == 0);
  // The measured timeline shows every consumer starting after its producer ended.
  CHECK(executed.op(doubling).start_seconds >= executed.op(prefetch).end_seconds);
  CHECK(executed.op(offload).start_seconds >= executed.op(doubling).end_seconds);
  CHECK(executed.op(check).start_seconds >= executed.op(offload).end_seconds);
  CHECK(executed.origin() == "executed on host");
  CHECK(executed.stall_seconds("compute") > 0.0);  // "double" waited for the throttled prefetch
}

TEST_CASE("stream_schedule: a dependency on an op inserted later is still waited for") {
  // The consumer is inserted before its producer and tied to it afterwards;
  // execution must record the producer's event before the consumer's stream
  // waits on it (a wait on a not-yet-recorded event would not wait at all).
  host_backend backend(throttled(64e6));
  memo::buffer<std::uint64_t, memo::host_memory_resource> source(backend.pinned_memory(), 512);  // [512]
  memo::buffer<std::uint64_t, memo::host_memory_resource> target(backend.device_memory(), 512);  // [512]
  std::fill(source.span().begin(), source.span().end(), 0x5eedULL);
  std::fill(target.span().begin(), target.span().end(), 0ULL);
  stream_schedule schedule;
  schedule.add_stream("compute");
  schedule.add_stream("copy");
  std::atomic<std::size_t> seen_wrong{513};
  const op_id consumer = schedule.add_compute("consumer", "compute",
                                              {.work = [&](memo::native_stream_ref) {
                                                seen_wrong = static_cast<std::size_t>(std::count_if(
                                                    target.span().begin(), target.span().end(),
                                                    [](std::uint64_t v) { return v != 0x5eedULL; }));
                                              }});
  schedule.add_copy("delay", "copy", copy_kind::host_to_device, {.bytes = 256 * 1024});
  const op_id producer = schedule.add_copy("producer", "copy", copy_kind::host_to_device,
                                           {.bytes = 512 * sizeof(std::uint64_t),
                                            .destination = target.data(),
                                            .source = source.data()});
  schedule.add_dependency(consumer, producer);
  const auto order = schedule.topological_order();
  CHECK(std::find(order.begin(), order.end(), producer.index) <
        std::find(order.begin(), order.end(), consumer.index));
  const auto executed = schedule.execute(backend);
  CHECK(seen_wrong == 0);
  CHECK(executed.op(consumer).start_seconds >= executed.op(producer).end_seconds);
}

TEST_CASE("stream_schedule: executed and simulated timelines have the same op order per stream") {
  stream_schedule schedule;
  schedule.add_stream("compute");
  schedule.add_stream("offload");
  schedule.add_stream("prefetch");
  std::atomic<int> ran{0};
  std::vector<op_id> forward;
  for (int layer = 0; layer < 6; ++layer) {
    const std::string name = std::to_string(layer);
    std::vector<op_id> after;
    if (layer >= 2) after.push_back(schedule.find("offload " + std::to_string(layer - 2)));
    forward.push_back(schedule.add_compute("forward " + name, "compute",
                                           {.flops = 1000.0, .work = [&](memo::native_stream_ref) { ++ran; }},
                                           after));
    schedule.add_copy("offload " + name, "offload", copy_kind::device_to_host, {.bytes = 4096},
                      {forward.back()});
  }
  for (int layer = 5; layer >= 0; --layer) {
    const op_id prefetch = schedule.add_copy("prefetch " + std::to_string(layer), "prefetch",
                                             copy_kind::host_to_device, {.bytes = 4096},
                                             {schedule.find("offload " + std::to_string(layer))});
    schedule.add_compute("backward " + std::to_string(layer), "compute",
                         {.flops = 2000.0, .work = [&](memo::native_stream_ref) { ++ran; }}, {prefetch});
  }
  host_backend backend(throttled(4e6));
  const auto executed = schedule.execute(backend);
  const auto simulated = schedule.simulate(unit_profile());
  CHECK(ran == 12);
  const auto difference = executed.op_order_difference(simulated);
  CHECK_MESSAGE(difference.empty(), difference);
  CHECK(executed.same_op_order(simulated));
  // Executor-owned scratch served the pointer-less copies and was released.
  CHECK(backend.device_memory().peak_bytes() == 2 * 4096);  // one per copy stream
  CHECK(backend.device_memory().current_bytes() == 0);
  CHECK(backend.pinned_memory().current_bytes() == 0);

  // The comparison does detect a different order.
  auto ops = simulated.ops();
  std::swap(ops[0].start_seconds, ops[2].start_seconds);  // forward 0 <-> forward 1
  std::swap(ops[0].end_seconds, ops[2].end_seconds);
  const memo::timeline reordered("reordered", simulated.streams(), ops);
  const auto found = reordered.op_order_difference(simulated);
  CHECK(found.find("'forward 1'") != std::string::npos);
  CHECK(found.find("stream 'compute'") != std::string::npos);
}

TEST_CASE("stream_schedule: an exception from a callable surfaces from execute") {
  stream_schedule schedule;
  schedule.add_stream("compute");
  schedule.add_stream("copy");
  const op_id bad = schedule.add_compute("bad", "compute", {.work = [](memo::native_stream_ref) {
                                           throw std::runtime_error("kernel failed");
                                         }});
  std::atomic<bool> later_ran{false};
  schedule.add_compute("after bad", "copy", {.work = [&](memo::native_stream_ref) { later_ran = true; }}, {bad});
  host_backend backend;
  CHECK_THROWS_WITH_AS(static_cast<void>(schedule.execute(backend)), "kernel failed", std::runtime_error);
  CHECK_FALSE(later_ran);  // its stream inherited the failure through the event
}

TEST_CASE("stream_schedule: callables receive the backend's native stream through native_stream_ref") {
  stream_schedule schedule;
  schedule.add_stream("compute");
  schedule.add_stream("side");
  std::string seen;
  std::string wrong_backend;
  schedule.add_compute("probe", "side", {.work = [&](memo::native_stream_ref ref) {
                                           seen = std::string(ref.get<host_backend>().name);
                                         }});
  host_backend backend;
  static_cast<void>(schedule.execute(backend));
  CHECK(seen == "side");

  const int not_a_host_stream = 3;
  const memo::native_stream_ref ref(not_a_host_stream, "other");
  CHECK(message_of([&] { static_cast<void>(ref.get<host_backend>()); }).find("'other'") !=
        std::string::npos);
}

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

TEST_CASE("stream_schedule: copies without pointers are an error when scratch is disabled") {
  stream_schedule schedule;
  schedule.add_stream("copy");
  schedule.add_copy("unbound", "copy", copy_kind::host_to_device, {.bytes = 64});
  host_backend backend;
  CHECK(message_of([&] {
          static_cast<void>(schedule.execute(backend, {.scratch_for_unbound_copies = false}));
        }).find("'unbound'") != std::string::npos);
}

TEST_CASE("stream_schedule: a copy the backend rejects fails execute after earlier work drained") {
  // The first copy (into executor scratch) is still running when the second,
  // whose source and destination overlap, is rejected at enqueue time; the
  // error must surface without freeing the scratch under the running copy
  // (ThreadSanitizer and AddressSanitizer builds would report it).
  host_backend backend(throttled(64e6));
  std::vector<unsigned char> bytes(1024);
  stream_schedule schedule;
  schedule.add_stream("copy");
  schedule.add_copy("slow", "copy", copy_kind::host_to_device, {.bytes = 256 * 1024});
  schedule.add_copy("overlapping", "copy", copy_kind::host_to_device,
                    {.bytes = 512, .destination = bytes.data() + 256, .source = bytes.data()});
  CHECK_THROWS_WITH_AS(static_cast<void>(schedule.execute(backend)), doctest::Contains("overlap"),
                       memo::error);
  CHECK(backend.device_memory().current_bytes() == 0);
}

namespace {

// Six layers of forward/offload and backward/prefetch, copies without
// pointers (instance scratch), every compute op counting its runs.
stream_schedule counted_step(std::atomic<int>& ran) {
  stream_schedule schedule;
  schedule.add_stream("compute");
  schedule.add_stream("offload");
  schedule.add_stream("prefetch");
  for (int layer = 0; layer < 6; ++layer) {
    std::vector<op_id> after;
    if (layer >= 2) after.push_back(schedule.find("offload " + std::to_string(layer - 2)));
    const op_id forward = schedule.add_compute("forward " + std::to_string(layer), "compute",
                                               {.flops = 1000.0, .work = [&ran](memo::native_stream_ref) { ++ran; }},
                                               after);
    schedule.add_copy("offload " + std::to_string(layer), "offload", copy_kind::device_to_host, {.bytes = 4096},
                      {forward});
  }
  for (int layer = 5; layer >= 0; --layer) {
    const op_id prefetch = schedule.add_copy("prefetch " + std::to_string(layer), "prefetch",
                                             copy_kind::host_to_device, {.bytes = 2048},
                                             {schedule.find("offload " + std::to_string(layer))});
    schedule.add_compute("backward " + std::to_string(layer), "compute",
                         {.flops = 2000.0, .work = [&ran](memo::native_stream_ref) { ++ran; }}, {prefetch});
  }
  return schedule;
}

}  // namespace

TEST_CASE("stream_schedule: an instance launched every step creates no stream, event or allocation") {
  host_backend inner(throttled(64e6));
  memo::testing::recording_backend<host_backend> backend(inner);
  std::atomic<int> ran{0};
  const stream_schedule schedule = counted_step(ran);
  auto instance = schedule.instantiate(backend);
  // Instantiation: three streams; an origin, a start and an end per op and a
  // tail per stream; one device and one pinned scratch block.
  CHECK(backend.streams_made() == 3);
  CHECK(backend.events_made() == 1 + 2 * schedule.size() + 3);
  CHECK(backend.allocations() == 2);
  CHECK(inner.device_memory().current_bytes() == 4096 + 2048);  // one part per copy stream

  backend.clear_calls();
  instance.launch();
  instance.synchronize();
  const auto first = backend.calls();
  backend.clear_calls();
  constexpr int more = 4;
  for (int i = 0; i < more; ++i) instance.launch();  // queued back to back
  instance.synchronize();
  CHECK(ran == 12 * (1 + more));
  CHECK(instance.launches() == 1 + more);
  CHECK(backend.streams_made() == 3);
  CHECK(backend.events_made() == 1 + 2 * schedule.size() + 3);
  CHECK(backend.allocations() == 2);
  // Each later launch issues the first one's calls plus a join of the
  // compute stream on the other two streams' tails.
  CHECK(backend.calls().size() == more * (first.size() + 2));
  const auto waits = std::count_if(first.begin(), first.end(), [](const memo::testing::recorded_call& call) {
    return call.kind == memo::testing::call_kind::wait;
  });
  // Origin x 2; forward 2..5 on offloads; offload i on forward i; prefetch
  // i on offload i; backward i on prefetch i.
  CHECK(waits == 2 + 4 + 6 + 6 + 6);
  // The calls of one launch, replayed into ops (each copy or enqueue named
  // by the op whose start event its stream recorded last: event 1 + 2 i is
  // op i's start), give the schedule's op order per stream and its
  // happens-before relation.
  std::vector<std::string> names(first.size());
  std::map<std::size_t, std::size_t> last_start;  // stream -> op
  for (std::size_t c = 0; c < first.size(); ++c) {
    const auto& call = first[c];
    if (call.kind == memo::testing::call_kind::record && call.event % 2 == 1 && call.event < 1 + 2 * schedule.size()) {
      last_start[call.stream] = (call.event - 1) / 2;
    }
    if (call.kind == memo::testing::call_kind::copy || call.kind == memo::testing::call_kind::enqueue) {
      names[c] = schedule.ops()[last_start.at(call.stream)].name;
    }
  }
  const auto replayed = memo::testing::replay(first, 3, [&](const memo::testing::recorded_call& call) {
    return names[static_cast<std::size_t>(&call - first.data())];
  });
  const auto expected = memo::testing::ops_of(schedule);
  CHECK(replayed.order == expected.order);
  CHECK(memo::testing::happens_before(replayed) == memo::testing::happens_before(expected));
  const auto executed = instance.last_timeline();
  const auto difference = executed.op_order_difference(schedule.simulate(unit_profile()));
  CHECK_MESSAGE(difference.empty(), difference);
}

TEST_CASE("stream_schedule: copy scratch carved from regions the caller owns") {
  host_backend backend(throttled(64e6));
  std::atomic<int> ran{0};
  const stream_schedule schedule = counted_step(ran);
  // (offload, device_to_host) 4096 bytes, then (prefetch, host_to_device)
  // 2048 bytes at offset 4096, on each side.
  const auto bytes = memo::schedule_instance<host_backend>::required_scratch(schedule);
  CHECK(bytes.device == 4096 + 2048);
  CHECK(bytes.pinned == 4096 + 2048);
  memo::buffer<std::byte, memo::host_memory_resource> device(backend.device_memory(), bytes.device);  // [bytes]
  memo::buffer<std::byte, memo::host_memory_resource> pinned(backend.pinned_memory(), bytes.pinned);  // [bytes]
  const memo::memory_region device_region{device.data(), device.size()};
  const memo::memory_region pinned_region{pinned.data(), pinned.size()};
  {
    auto instance = schedule.instantiate(backend, device_region, pinned_region);
    instance.launch();
    instance.launch();
    instance.synchronize();
    CHECK(ran == 24);
    CHECK(backend.device_memory().peak_bytes() == bytes.device);  // the caller's region only
    CHECK(backend.pinned_memory().peak_bytes() == bytes.pinned);
  }
  CHECK_THROWS_WITH_AS(static_cast<void>(schedule.instantiate(backend, device_region.subregion(0, bytes.device - 1),
                                                              pinned_region)),
                       doctest::Contains("scratch of stream 'prefetch'"), memo::error);
  // Nothing launched yet: no timeline to read.
  auto idle = schedule.instantiate(backend, device_region, pinned_region);
  CHECK_THROWS_WITH_AS(static_cast<void>(idle.last_timeline()), doctest::Contains("nothing was launched"),
                       memo::error);
}

#include "memo/backend/host_backend.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>
#include <numeric>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <stdexcept>
#include <vector>

#include "../support/gate.hpp"

using memo::copy_kind;
using memo::host_backend;

TEST_CASE("host_backend: work on one stream runs in FIFO order") {
  host_backend backend;
  auto stream = backend.make_stream("compute");
  std::vector<int> order;  // touched only by the stream's thread until synchronize
  for (int i = 0; i < 1000; ++i) backend.enqueue(stream, [&order, i] { order.push_back(i); });
  backend.synchronize(stream);
  std::vector<int> expected(1000);
  std::iota(expected.begin(), expected.end(), 0);
  CHECK(order == expected);
}

TEST_CASE("host_backend: work receives its stream's native descriptor") {
  host_backend backend;
  auto stream = backend.make_stream("offload");
  std::string seen;
  backend.enqueue(stream, [&](host_backend::native_stream native) { seen = native.name; });
  backend.synchronize(stream);
  CHECK(seen == "offload");
}

TEST_CASE("host_backend: a consumer waiting on an event sees every byte the producer wrote") {
  // The producer writes slowly through a throttled copy; without the wait the
  // consumer would read stale bytes (and ThreadSanitizer would flag a race).
  host_backend::options options;
  options.device_to_host_bytes_per_second = 64.0 * 1024 * 1024;  // 1 MiB takes ~16 ms
  host_backend backend(options);
  auto producer = backend.make_stream("producer");
  auto consumer = backend.make_stream("consumer");
  auto done = backend.make_event();

  constexpr std::size_t bytes = 1 << 20;
  std::vector<std::uint8_t> device(bytes), host(bytes, 0), seen(bytes, 0);
  for (int round = 0; round < 3; ++round) {
    for (std::size_t i = 0; i < bytes; ++i) device[i] = static_cast<std::uint8_t>(i * 31 + round);
    backend.copy_async(host.data(), device.data(), bytes, copy_kind::device_to_host, producer);
    backend.record(done, producer);  // the same event, re-recorded every round
    backend.wait(consumer, done);
    backend.enqueue(consumer, [&] { seen = host; });
    backend.synchronize(consumer);
    CHECK(seen == device);
  }
}

TEST_CASE("host_backend: a wait binds to the record made before it, not to later ones") {
  host_backend backend;
  auto a = backend.make_stream("a");
  auto b = backend.make_stream("b");
  auto marker = backend.make_event();
  std::atomic<int> stage{0};
  std::atomic<bool> release_second{false};

  backend.enqueue(a, [&] { stage = 1; });
  backend.record(marker, a);
  backend.wait(b, marker);
  int seen_by_b = -1;
  backend.enqueue(b, [&] { seen_by_b = stage.load(); });
  // A second record on a blocked stream must not delay b.
  backend.enqueue(a, [&] {
    while (!release_second) std::this_thread::yield();
    stage = 2;
  });
  backend.record(marker, a);
  backend.synchronize(b);
  CHECK(seen_by_b == 1);
  CHECK_FALSE(backend.query(marker));
  release_second = true;
  backend.synchronize(marker);
  CHECK(backend.query(marker));
  CHECK(stage == 2);
}

TEST_CASE("host_backend: waiting on a never-recorded event does nothing") {
  host_backend backend;
  auto stream = backend.make_stream();
  auto never = backend.make_event();
  CHECK(backend.query(never));
  backend.wait(stream, never);
  int ran = 0;
  backend.enqueue(stream, [&] { ran = 1; });
  backend.synchronize(stream);
  backend.synchronize(never);
  CHECK(ran == 1);
}

TEST_CASE("host_backend: an exception in a task surfaces at the next synchronisation") {
  host_backend backend;
  auto stream = backend.make_stream("compute");
  int after = 0;
  backend.enqueue(stream, [] { throw std::runtime_error("kernel failed"); });
  backend.enqueue(stream, [&] { after = 1; });  // depends on garbage: skipped
  CHECK_THROWS_WITH_AS(backend.synchronize(stream), "kernel failed", std::runtime_error);
  CHECK(after == 0);
  // The error was reported once; the stream is usable again.
  backend.enqueue(stream, [&] { after = 2; });
  CHECK_NOTHROW(backend.synchronize(stream));
  CHECK(after == 2);
}

TEST_CASE("host_backend: an error travels through events to dependent streams") {
  host_backend backend;
  auto producer = backend.make_stream("producer");
  auto consumer = backend.make_stream("consumer");
  auto marker = backend.make_event();
  backend.enqueue(producer, [] { throw memo::error("producer failed"); });
  backend.record(marker, producer);
  backend.wait(consumer, marker);
  int consumed = 0;
  backend.enqueue(consumer, [&] { consumed = 1; });
  CHECK_THROWS_WITH_AS(backend.synchronize(marker), doctest::Contains("producer failed"),
                       memo::error);
  CHECK_THROWS_WITH_AS(backend.synchronize(consumer), doctest::Contains("producer failed"),
                       memo::error);
  CHECK(consumed == 0);
  CHECK_THROWS_AS(backend.synchronize(producer), memo::error);
}

TEST_CASE("host_backend: synchronize() drains every stream and reports the first error") {
  host_backend backend;
  auto a = backend.make_stream("a");
  auto b = backend.make_stream("b");
  std::atomic<int> count{0};
  for (int i = 0; i < 100; ++i) {
    backend.enqueue(a, [&] { ++count; });
    backend.enqueue(b, [&] { ++count; });
  }
  backend.synchronize();
  CHECK(count == 200);
  backend.enqueue(b, [] { throw memo::error("b failed"); });
  CHECK_THROWS_AS(backend.synchronize(), memo::error);
}

TEST_CASE("host_backend: a copy rate below a byte a second is refused, and the longest booking is cut at 1e9 s") {
  for (const double rate : {1e-12, -1.0, std::numeric_limits<double>::infinity(),
                            std::numeric_limits<double>::quiet_NaN()}) {
    CAPTURE(rate);
    memo::host_backend::options options;
    options.host_to_device_bytes_per_second = rate;
    CHECK_THROWS_WITH_AS(memo::host_backend{options},
                         doctest::Contains("host_to_device_bytes_per_second must be 0 (unthrottled) or a finite rate "
                                           "of at least 1 byte/s"),
                         memo::error);
    options = {};
    options.device_to_host_bytes_per_second = rate;
    CHECK_THROWS_WITH_AS(memo::host_backend{options},
                         doctest::Contains("device_to_host_bytes_per_second must be 0 (unthrottled) or a finite rate "
                                           "of at least 1 byte/s"),
                         memo::error);
  }
  // SIZE_MAX bytes at 1 byte/s: 1.8e19 s would overflow the clock's
  // nanoseconds; the booking ends 1e9 s after it begins.
  memo::detail::host_copy_engine link(1.0);
  const auto now = memo::detail::host_clock::now();
  const auto booked = link.reserve(now, SIZE_MAX);
  CHECK(booked.begin == now);
  CHECK(std::chrono::duration<double>(booked.end - booked.begin).count() == doctest::Approx(1e9));
  // Twenty more: the wait for the link ahead is cut too, so the bookings
  // never pass the clock's 292 years (9.2e9 s).
  for (int k = 0; k < 20; ++k) {
    const auto next = link.reserve(now, SIZE_MAX);
    CHECK(std::chrono::duration<double>(next.end - now).count() <= 2e9 * 1.000001);
    CHECK(next.end > next.begin);
  }
}

TEST_CASE("host_backend: throttled copies take at least bytes / bandwidth") {
  host_backend::options options;
  options.host_to_device_bytes_per_second = 100.0 * 1024 * 1024;
  host_backend backend(options);
  auto stream = backend.make_stream("prefetch");
  auto start = backend.make_event();
  auto end = backend.make_event();
  constexpr std::size_t bytes = 4 << 20;  // 4 MiB at 100 MiB/s: >= 40 ms
  std::vector<char> source(bytes, 7), destination(bytes, 0);
  const auto wall_start = std::chrono::steady_clock::now();
  backend.record(start, stream);
  backend.copy_async(destination.data(), source.data(), bytes, copy_kind::host_to_device, stream);
  backend.record(end, stream);
  backend.synchronize(stream);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
  const double floor_seconds = static_cast<double>(bytes) / options.host_to_device_bytes_per_second;
  CHECK(backend.elapsed_seconds(start, end) >= floor_seconds * 0.999);
  CHECK(wall >= floor_seconds * 0.999);
  CHECK(destination == source);
}

TEST_CASE("host_backend: bad copies are rejected when issued") {
  host_backend backend;
  auto stream = backend.make_stream();
  std::vector<char> data(64);
  CHECK_THROWS_WITH_AS(
      backend.copy_async(nullptr, data.data(), 8, copy_kind::host_to_device, stream),
      doctest::Contains("null pointer"), memo::error);
  CHECK_THROWS_WITH_AS(
      backend.copy_async(data.data() + 4, data.data(), 8, copy_kind::device_to_device, stream),
      doctest::Contains("overlap"), memo::error);
  CHECK_THROWS_AS(host_backend(host_backend::options{-1.0, 0.0, {}, {}}), memo::error);
}

TEST_CASE("host_backend: device memory is accounted and capped") {
  host_backend::options options;
  options.device_capacity_bytes = 1 << 20;
  host_backend backend(options);
  auto& device = backend.device_memory();
  void* a = device.allocate(600 * 1024);
  CHECK(memo::is_aligned(a, memo::default_alignment_bytes));
  CHECK_THROWS_WITH_AS(device.allocate(600 * 1024), doctest::Contains("exhausted"), memo::error);
  CHECK(device.current_bytes() == 600 * 1024);  // the failed request left no trace
  device.deallocate(a, 600 * 1024);
  CHECK(device.current_bytes() == 0);
  CHECK(device.peak_bytes() == 600 * 1024);
  CHECK(backend.pinned_memory().peak_bytes() == 0);
}

TEST_CASE("host_backend: same-direction copies from two streams share the link") {
  // One copy engine per direction: two 2 MiB copies issued on two streams at
  // once take at least the time of 4 MiB at the link's bandwidth.
  host_backend::options options;
  options.device_to_host_bytes_per_second = 100.0 * 1024 * 1024;
  host_backend backend(options);
  auto a = backend.make_stream("offload a");
  auto b = backend.make_stream("offload b");
  constexpr std::size_t bytes = 2 << 20;
  std::vector<char> source(2 * bytes, 1), destination(2 * bytes, 0);
  const auto start = std::chrono::steady_clock::now();
  backend.copy_async(destination.data(), source.data(), bytes, copy_kind::device_to_host, a);
  backend.copy_async(destination.data() + bytes, source.data() + bytes, bytes,
                     copy_kind::device_to_host, b);
  backend.synchronize();
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK(wall >= 2.0 * bytes / options.device_to_host_bytes_per_second * 0.999);
  CHECK(destination == source);
}

TEST_CASE("host_backend: a queue of throttled copies keeps the link's rate on average") {
  // 16 back-to-back 256 KiB copies: each is booked when the previous one's
  // transfer ends, so the whole series takes at least 16 x (bytes / rate).
  host_backend::options options;
  options.host_to_device_bytes_per_second = 256.0 * 1024 * 1024;
  host_backend backend(options);
  auto stream = backend.make_stream("prefetch");
  auto first = backend.make_event();
  auto last = backend.make_event();
  constexpr std::size_t bytes = 256 << 10;
  constexpr int copies = 16;
  std::vector<char> source(bytes * copies, 3), destination(bytes * copies, 0);
  backend.record(first, stream);
  for (int i = 0; i < copies; ++i) {
    backend.copy_async(destination.data() + i * bytes, source.data() + i * bytes, bytes,
                       copy_kind::host_to_device, stream);
  }
  backend.record(last, stream);
  backend.synchronize(stream);
  CHECK(backend.elapsed_seconds(first, last) >=
        copies * static_cast<double>(bytes) / options.host_to_device_bytes_per_second * 0.999);
  CHECK(destination == source);
}

// --- the Backend conformance suite, on the host backend ----------------------

#include "conformance.hpp"

MEMO_BACKEND_CONFORMANCE(memo::host_backend);

// --- host-specific guarantees ----------------------------------------------------

TEST_CASE("host_backend: a throttled copy's bytes land at the end of its link time") {
  // A reader that skips the wait for the copy's event must see the OLD bytes
  // while the copy is in flight (otherwise byte checks could not catch a
  // missing wait). Reading the destination here is not a data race: the
  // worker takes the stream's queue lock when the booked time is over and
  // before it writes, and the `record` below takes the same lock after the
  // read, so the read happens-before the write as long as the record is
  // issued within the booked second.
  host_backend::options options;
  options.host_to_device_bytes_per_second = 256.0 * 1024;  // 256 KiB take 1 s
  host_backend backend(options);
  auto stream = backend.make_stream("prefetch");
  auto copied = backend.make_event();
  constexpr std::size_t bytes = 256 << 10;
  std::vector<std::uint8_t> source(bytes, 0x5A), destination(bytes, 0x11);
  backend.copy_async(destination.data(), source.data(), bytes, copy_kind::host_to_device, stream);
  const bool untouched = std::all_of(destination.begin(), destination.end(),
                                     [](std::uint8_t b) { return b == 0x11; });
  backend.record(copied, stream);
  CHECK(untouched);
  backend.synchronize(copied);
  CHECK(destination == source);
}

TEST_CASE("host_backend: a stream that outlives its backend is drained and then refuses work") {
  std::vector<char> source(64 << 10, 9), destination(64 << 10, 0);
  std::optional<host_backend::stream> survivor;
  {
    host_backend::options options;
    options.device_to_host_bytes_per_second = 1024.0 * 1024;  // 64 KiB take ~62 ms
    host_backend backend(options);
    survivor.emplace(backend.make_stream("survivor"));
    backend.copy_async(destination.data(), source.data(), source.size(), copy_kind::device_to_host,
                       *survivor);
    // The backend dies with the throttled copy still queued on its engine.
  }
  CHECK(destination == source);  // drained before the copy engine went away
  CHECK(survivor->name() == "survivor");
  host_backend other;
  CHECK_THROWS_WITH_AS(other.synchronize(*survivor), doctest::Contains("outlived its host_backend"),
                       memo::error);
  CHECK_THROWS_WITH_AS(other.enqueue(*survivor, [] {}), doctest::Contains("outlived its host_backend"),
                       memo::error);
}

TEST_CASE("host_backend: a task may own the last handle of its own stream") {
  // The handle dies on the stream's own thread when the task is destroyed;
  // that thread cannot join itself, so it must drain the rest of the queue
  // and let the backend report the stream's error.
  host_backend backend;
  auto handle = std::make_shared<host_backend::stream>(backend.make_stream("self-owned"));
  std::atomic<bool> released{false};
  std::atomic<int> ran{0};
  backend.enqueue(*handle, [handle, &released, &ran] {
    while (!released.load()) std::this_thread::yield();
    ran += 1;
  });
  backend.enqueue(*handle, [&ran] { ran += 10; });
  auto done = backend.make_event();
  backend.record(done, *handle);
  backend.enqueue(*handle, [] { throw std::runtime_error("after the last handle"); });
  handle.reset();  // the first task's copy is now the last handle
  released = true;
  backend.synchronize(done);
  CHECK(ran.load() == 11);
  CHECK_THROWS_WITH_AS(backend.synchronize(), doctest::Contains("after the last handle"), std::runtime_error);
}

TEST_CASE("host_backend: a stream of another backend is rejected") {
  host_backend first;
  host_backend second;
  auto stream = first.make_stream("first's");
  CHECK_THROWS_WITH_AS(second.enqueue(stream, [] {}), doctest::Contains("belongs to another host_backend"),
                       memo::error);
  auto moved = std::move(stream);
  CHECK_THROWS_WITH_AS(first.synchronize(stream), doctest::Contains("moved-from"), memo::error);
  CHECK_NOTHROW(first.synchronize(moved));
}

TEST_CASE("host_backend: waiting from a task for an event its own stream records later is an error") {
  host_backend backend;
  auto stream = backend.make_stream("self");
  auto later = backend.make_event();
  auto earlier = backend.make_event();
  backend.record(earlier, stream);
  bool refused = false;
  bool earlier_ok = false;
  std::atomic<bool> go{false};
  // Hold the stream until `later` has been recorded behind the probing task.
  backend.enqueue(stream, [&] {
    while (!go.load()) std::this_thread::yield();
  });
  backend.enqueue(stream, [&] {
    backend.synchronize(earlier);  // already reached: fine
    earlier_ok = true;
    try {
      backend.synchronize(later);
    } catch (const memo::error&) {
      refused = true;
    }
  });
  backend.record(later, stream);
  go = true;
  backend.synchronize(stream);
  CHECK(earlier_ok);
  CHECK(refused);
}

TEST_CASE("host_backend: compute from every stream runs on one pool created once") {
  host_backend::options options;
  options.compute_threads = 2;
  host_backend backend(options);
  CHECK(backend.compute_threads() == 2);
  std::vector<host_backend::stream> streams;
  for (int i = 0; i < 3; ++i) streams.push_back(backend.make_stream());
  std::mutex mutex;
  std::set<std::thread::id> threads;
  struct record_thread {
    std::mutex* mutex;
    std::set<std::thread::id>* threads;
    void operator()(std::int64_t) const {
      std::lock_guard lock(*mutex);
      threads->insert(std::this_thread::get_id());
    }
  };
  for (int round = 0; round < 20; ++round) {
    for (auto& stream : streams) backend.parallel_for(stream, memo::extent_1d{4096}, record_thread{&mutex, &threads});
  }
  backend.synchronize();
  // The three stream workers and one helper: no thread per call or per stream.
  CHECK(threads.size() <= 3 + 1);
}

TEST_CASE("host_backend: an exception in a parallel_for functor fails the stream") {
  host_backend backend;
  auto stream = backend.make_stream("compute");
  struct throw_at {
    std::int64_t bad;
    void operator()(std::int64_t i) const {
      if (i == bad) throw memo::error("index " + std::to_string(i) + " failed");
    }
  };
  backend.parallel_for(stream, memo::extent_1d{100000}, throw_at{77777});
  CHECK_THROWS_WITH_AS(backend.synchronize(stream), doctest::Contains("index 77777 failed"), memo::error);
}

TEST_CASE("host_backend: a parallel_for piece synchronising its own stream is an error on any thread") {
  // Pieces run on the stream's worker and on the pool's helpers; both know
  // which stream they work for.
  host_backend::options options;
  options.compute_threads = 2;
  host_backend backend(options);
  auto stream = backend.make_stream("compute");
  struct synchronise_own_stream {
    host_backend* backend;
    host_backend::stream* stream;
    void operator()(std::int64_t) const { backend->synchronize(*stream); }
  };
  backend.parallel_for(stream, memo::extent_1d{4096}, synchronise_own_stream{&backend, &stream});
  CHECK_THROWS_WITH_AS(backend.synchronize(stream), doctest::Contains("wait for itself forever"),
                       memo::error);
}

namespace {

struct plain_indices {
  void operator()(std::int64_t, std::int64_t) const {}
};

// Counts each (row, col) index it runs; a piece is at least 8 indices.
struct count_rows {
  static constexpr std::int64_t parallel_grain = 8;
  std::vector<std::atomic<int>>* seen;
  std::int64_t cols;
  void operator()(std::int64_t r, std::int64_t c) const { ++(*seen)[static_cast<std::size_t>(r * cols + c)]; }
};

}  // namespace

TEST_CASE("host_backend: a functor's parallel_grain sets the indices per piece") {
  using plain = plain_indices;
  static_assert(memo::detail::host_grain_of<plain>() == memo::detail::host_parallel_for_grain);
  static_assert(memo::detail::host_grain_of<count_rows>() == 8);
  // 2 heads x 128 rows: one piece with the default grain, a full split
  // (four per thread) with a grain of 8.
  CHECK(memo::detail::host_piece_count(256, 2, memo::detail::host_grain_of<plain>()) == 1);
  CHECK(memo::detail::host_piece_count(256, 2, memo::detail::host_grain_of<count_rows>()) == 8);
  host_backend backend;
  auto stream = backend.make_stream();
  std::vector<std::atomic<int>> seen(256);
  backend.parallel_for(stream, memo::extent_2d{2, 128}, count_rows{&seen, 128});
  backend.synchronize(stream);
  CHECK(std::all_of(seen.begin(), seen.end(), [](const std::atomic<int>& n) { return n.load() == 1; }));
}

namespace {

using memo_test::gate;

// Every stream's error, as text, after the whole backend has drained.
std::string all_errors(memo::host_backend& backend, std::vector<memo::host_backend::stream*> streams) {
  std::string text;
  for (auto* s : streams) {
    try {
      backend.synchronize(*s);
    } catch (const std::exception& e) {
      text += std::string(e.what()) + "\n";
    }
  }
  return text;
}

}  // namespace

TEST_CASE("host_backend: a task synchronising a stream that waits for this stream's later event fails, not hangs") {
  memo::host_backend backend;
  auto a = backend.make_stream("a");
  auto b = backend.make_stream("b");
  auto later = backend.make_event();
  gate go;
  std::atomic<bool> after_sync{false};
  backend.enqueue(a, [&] {
    go.pass();
    backend.synchronize(b);  // b waits for `later`, which a records after this task
    after_sync = true;
  });
  backend.record(later, a);
  backend.wait(b, later);
  std::atomic<int> b_work{0};
  backend.enqueue(b, [&] { ++b_work; });
  go.open();
  const std::string errors = all_errors(backend, {&a, &b});
  // Whichever of the two blocked last closed the cycle and names it.
  const bool named = errors.find("stream 'a' waits for stream 'b', which waits for stream 'a'") != std::string::npos ||
                     errors.find("stream 'b' waits for stream 'a', which waits for stream 'b'") != std::string::npos;
  CHECK(named);
  CHECK(errors.find("a cycle of waits") != std::string::npos);
  CHECK_FALSE(after_sync);  // the synchronisation failed in the task
  CHECK(b_work == 0);       // b's later work is skipped: it inherited a's failure
  // The streams are usable again once their errors are reported.
  backend.enqueue(b, [&] { ++b_work; });
  backend.synchronize();
  CHECK(b_work == 1);
}

TEST_CASE("host_backend: a cycle of event waits through three streams fails, whichever stream closes it") {
  for (const bool task_first : {true, false}) {
    INFO("the task blocks " << (task_first ? "before" : "after") << " the other streams");
    memo::host_backend backend;
    auto a = backend.make_stream("a");
    auto b = backend.make_stream("b");
    auto c = backend.make_stream("c");
    auto ea = backend.make_event();
    auto eb = backend.make_event();
    auto ec = backend.make_event();
    gate go_a, go_b;
    std::atomic<bool> a_blocking{false};
    backend.enqueue(a, [&] {
      go_a.pass();
      a_blocking = true;
      backend.synchronize(ec);  // c records ec after waiting for eb, b records eb after waiting for ea
    });
    backend.record(ea, a);
    backend.enqueue(b, [&] { go_b.pass(); });
    backend.wait(b, ea);
    backend.record(eb, b);
    backend.wait(c, eb);
    backend.record(ec, c);
    if (task_first) {
      go_a.open();
      while (!a_blocking) std::this_thread::yield();
      go_b.open();  // b then closes the cycle at its wait for ea (or a does, if it had not blocked yet)
    } else {
      go_b.open();
      go_a.open();
    }
    const std::string errors = all_errors(backend, {&a, &b, &c});
    CHECK(errors.find("a cycle of waits") != std::string::npos);
    CHECK(errors.find("'a'") != std::string::npos);
    CHECK(errors.find("'b'") != std::string::npos);
    CHECK(errors.find("'c'") != std::string::npos);
  }
}

TEST_CASE("host_backend: waits across streams that form no cycle are not refused") {
  // a's task synchronises b, which waits for an event c records after slow
  // work: a chain, not a cycle, so everything completes.
  memo::host_backend backend;
  auto a = backend.make_stream("a");
  auto b = backend.make_stream("b");
  auto c = backend.make_stream("c");
  auto done_c = backend.make_event();
  gate go;
  std::atomic<int> steps{0};
  backend.enqueue(c, [&] {
    go.pass();
    ++steps;
  });
  backend.record(done_c, c);
  backend.wait(b, done_c);
  backend.enqueue(b, [&] { ++steps; });
  backend.enqueue(a, [&] {
    backend.synchronize(b);
    ++steps;
  });
  go.open();
  CHECK_NOTHROW(backend.synchronize());
  CHECK(steps == 3);
}

TEST_CASE("host_backend: events passed back and forth between two streams are never taken for a cycle") {
  // a waits for b's event and b for a's, alternately, many times: each wait
  // is for an event recorded before it, so none is a cycle, however the two
  // threads interleave (an event fired just before its waiter is entered
  // in the wait graph must not count as a wait).
  memo::host_backend backend;
  auto a = backend.make_stream("a");
  auto b = backend.make_stream("b");
  std::atomic<int> done{0};
  for (int round = 0; round < 500; ++round) {
    auto from_a = backend.make_event();
    auto from_b = std::make_shared<memo::host_backend::event>(backend.make_event());
    backend.enqueue(a, [&] { ++done; });
    backend.record(from_a, a);
    backend.wait(b, from_a);
    backend.enqueue(b, [&] { ++done; });
    backend.record(*from_b, b);
    backend.wait(a, *from_b);
    backend.enqueue(a, [&, from_b] { backend.synchronize(*from_b); });  // a task's wait too
  }
  CHECK_NOTHROW(backend.synchronize());
  CHECK(done == 1000);
}

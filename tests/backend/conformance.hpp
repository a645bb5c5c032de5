// The semantics every memo::Backend must have, as one doctest suite
// templated on the backend. host_backend_test.cpp instantiates it for the
// host backend (under ThreadSanitizer in CI), cuda_backend_test.cu for the
// CUDA backend (on a machine with a device). Everything goes through the
// concept's surface: data reaches "device" memory by copies, compute is
// parallel_for / gemm with MEMO_HOST_DEVICE functors, and results come back
// by copies and are compared against naive fp64 loops on the host.
//
// Instantiate with MEMO_BACKEND_CONFORMANCE(backend_type) in one file.
#pragma once

#include <doctest/doctest.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <numeric>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "memo/backend/buffer.hpp"
#include "memo/backend/compute.hpp"
#include "memo/backend/concepts.hpp"
#include "memo/core/config.hpp"

namespace memo_conformance {

using memo::extent_1d;
using memo::extent_2d;
using memo::gemm_batch;
using memo::gemm_shape;
using memo::matrix_layout;
using memo::matrix_op;

template <class B>
using device_buffer = memo::buffer<float, std::remove_reference_t<decltype(std::declval<B&>().device_memory())>>;
template <class B>
using pinned_buffer = memo::buffer<float, std::remove_reference_t<decltype(std::declval<B&>().pinned_memory())>>;

/// Host values -> a new device buffer (synchronously).
template <class B>
device_buffer<B> upload(B& backend, typename B::stream& stream, const std::vector<float>& values) {
  device_buffer<B> device(backend.device_memory(), values.size());
  pinned_buffer<B> staging(backend.pinned_memory(), values.size());
  if (!values.empty()) std::memcpy(staging.data(), values.data(), values.size() * sizeof(float));
  backend.copy_async(device.data(), staging.data(), values.size() * sizeof(float),
                     memo::copy_kind::host_to_device, stream);
  backend.synchronize(stream);
  return device;
}

/// `count` floats of device memory -> host values (synchronously).
template <class B>
std::vector<float> download(B& backend, typename B::stream& stream, const float* device,
                            std::size_t count) {
  pinned_buffer<B> staging(backend.pinned_memory(), count);
  backend.copy_async(staging.data(), device, count * sizeof(float), memo::copy_kind::device_to_host,
                     stream);
  backend.synchronize(stream);
  if (count == 0) return {};
  return std::vector<float>(staging.data(), staging.data() + count);
}

// Functors: written once, run by both backends. Each index is written by
// exactly one call, so adding to it counts the calls.
struct count_calls_1d {
  float* out;
  MEMO_HOST_DEVICE void operator()(std::int64_t i) const { out[i] += 1.0f + static_cast<float>(i % 7); }
};
struct count_calls_2d {
  float* out;
  std::int64_t cols;
  MEMO_HOST_DEVICE void operator()(std::int64_t row, std::int64_t col) const {
    out[row * cols + col] += 1.0f + static_cast<float>((row * 3 + col) % 11);
  }
};
struct scale_by {
  float* data;
  float factor;
  MEMO_HOST_DEVICE void operator()(std::int64_t i) const { data[i] = data[i] * factor + 1.0f; }
};

// Deterministic operand values in [-1, 1).
inline std::vector<float> values(std::size_t count, std::uint32_t seed) {
  std::vector<float> out(count);
  std::uint32_t state = seed * 2654435761u + 1u;
  for (auto& v : out) {
    state = state * 1664525u + 1013904223u;
    v = static_cast<float>(state >> 8) / static_cast<float>(1u << 24) * 2.0f - 1.0f;
  }
  return out;
}

// Stored element (r, c) of a matrix in `layout` with leading dimension ld.
inline double at(const std::vector<float>& m, matrix_layout layout, std::int64_t ld, std::int64_t r,
                 std::int64_t c) {
  return layout == matrix_layout::row_major ? m[static_cast<std::size_t>(r * ld + c)]
                                            : m[static_cast<std::size_t>(c * ld + r)];
}

// The naive fp64 GEMM the backends are compared against, one matrix of a batch.
inline void reference_gemm(const gemm_shape& s, double alpha, const std::vector<float>& a,
                           std::int64_t a_offset, const std::vector<float>& b,
                           std::int64_t b_offset, double beta, std::vector<double>& c,
                           std::int64_t c_offset, std::vector<double>& magnitude) {
  const std::vector<float> a_view(a.begin() + a_offset, a.end());
  const std::vector<float> b_view(b.begin() + b_offset, b.end());
  for (std::int64_t i = 0; i < s.m; ++i) {
    for (std::int64_t j = 0; j < s.n; ++j) {
      double sum = 0.0;
      double size = 0.0;
      for (std::int64_t p = 0; p < s.k; ++p) {
        const double x = s.op_a == matrix_op::none ? at(a_view, s.layout, s.lda, i, p)
                                                   : at(a_view, s.layout, s.lda, p, i);
        const double y = s.op_b == matrix_op::none ? at(b_view, s.layout, s.ldb, p, j)
                                                   : at(b_view, s.layout, s.ldb, j, p);
        sum += x * y;
        size += std::abs(x * y);
      }
      const std::int64_t index =
          c_offset + (s.layout == matrix_layout::row_major ? i * s.ldc + j : j * s.ldc + i);
      double& out = c[static_cast<std::size_t>(index)];
      const double old = beta == 0.0 ? 0.0 : beta * out;
      out = alpha * sum + old;
      magnitude[static_cast<std::size_t>(index)] = std::abs(alpha) * size + std::abs(old) + 1.0;
    }
  }
}

// Elements a stored rows x cols matrix with leading dimension ld spans.
inline std::int64_t span(matrix_layout layout, std::int64_t rows, std::int64_t cols, std::int64_t ld) {
  const std::int64_t outer = layout == matrix_layout::row_major ? rows : cols;
  return outer * ld;
}

// Runs one (batched) GEMM on the backend and compares every element of C
// (padding included: it must be untouched) with the fp64 reference.
template <class B>
void check_gemm(B& backend, typename B::stream& stream, gemm_shape s, float alpha, float beta,
                std::int64_t count, std::int64_t pad, std::uint32_t seed) {
  const bool row = s.layout == matrix_layout::row_major;
  const std::int64_t a_rows = s.op_a == matrix_op::none ? s.m : s.k;
  const std::int64_t a_cols = s.op_a == matrix_op::none ? s.k : s.m;
  const std::int64_t b_rows = s.op_b == matrix_op::none ? s.k : s.n;
  const std::int64_t b_cols = s.op_b == matrix_op::none ? s.n : s.k;
  s.lda = (row ? a_cols : a_rows) + pad;
  s.ldb = (row ? b_cols : b_rows) + pad;
  s.ldc = (row ? s.n : s.m) + pad;
  const std::int64_t a_span = span(s.layout, a_rows, a_cols, s.lda);
  const std::int64_t b_span = span(s.layout, b_rows, b_cols, s.ldb);
  const std::int64_t c_span = span(s.layout, s.m, s.n, s.ldc);
  gemm_batch batch{count, a_span + 5, count > 1 ? 0 : b_span, c_span + 3};  // B shared by the batch
  const auto a = values(static_cast<std::size_t>(batch.stride_a * count), seed);
  const auto b = values(static_cast<std::size_t>(b_span), seed + 1);
  auto c = values(static_cast<std::size_t>(batch.stride_c * count), seed + 2);
  if (beta == 0.0f) {
    for (auto& v : c) v = std::numeric_limits<float>::quiet_NaN();  // must not be read
  }
  std::vector<double> expected(c.begin(), c.end());
  std::vector<double> magnitude(c.size(), 1.0);
  for (std::int64_t i = 0; i < count; ++i) {
    reference_gemm(s, alpha, a, i * batch.stride_a, b, i * batch.stride_b, beta, expected,
                   i * batch.stride_c, magnitude);
  }
  auto da = upload(backend, stream, a);
  auto db = upload(backend, stream, b);
  auto dc = upload(backend, stream, c);
  if (count == 1) {
    backend.gemm(stream, s, alpha, da.data(), db.data(), beta, dc.data());
  } else {
    backend.gemm_strided_batched(stream, s, batch, alpha, da.data(), db.data(), beta, dc.data());
  }
  const auto got = download(backend, stream, dc.data(), c.size());
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const bool both_nan = std::isnan(expected[i]) && std::isnan(got[i]);
    if (!both_nan && !(std::abs(got[i] - expected[i]) <= 1e-5 * magnitude[i])) ++wrong;
  }
  INFO(memo::detail::describe(s), " alpha=", alpha, " beta=", beta, " count=", count);
  CHECK(wrong == 0);
}

}  // namespace memo_conformance

TEST_CASE_TEMPLATE_DEFINE("conformance: work on one stream runs in FIFO order", B, conformance_fifo) {
  B backend;
  auto stream = backend.make_stream("fifo");
  std::vector<int> order;  // touched only by the stream until synchronize
  for (int i = 0; i < 200; ++i) backend.enqueue(stream, [&order, i] { order.push_back(i); });
  backend.synchronize(stream);
  std::vector<int> expected(200);
  std::iota(expected.begin(), expected.end(), 0);
  CHECK(order == expected);
}

TEST_CASE_TEMPLATE_DEFINE("conformance: events order streams and can be re-recorded", B,
                          conformance_events) {
  using namespace memo_conformance;
  B backend;
  auto compute = backend.make_stream("compute");
  auto offload = backend.make_stream("offload");
  auto written = backend.make_event();
  CHECK(backend.query(written));  // never recorded
  constexpr std::int64_t n = 100003;
  auto data = upload(backend, compute, std::vector<float>(n, 0.0f));
  pinned_buffer<B> host(backend.pinned_memory(), n);
  for (int round = 1; round <= 3; ++round) {
    backend.parallel_for(compute, extent_1d{n}, scale_by{data.data(), 2.0f});
    backend.record(written, compute);  // the same event every round
    backend.wait(offload, written);
    backend.copy_async(host.data(), data.data(), n * sizeof(float), memo::copy_kind::device_to_host,
                       offload);
    backend.synchronize(offload);
    CHECK(backend.query(written));
    const float expected = static_cast<float>((1 << round) - 1);  // x -> 2x + 1 from 0
    std::int64_t wrong = 0;
    for (std::int64_t i = 0; i < n; ++i) wrong += host.data()[i] != expected;
    CHECK(wrong == 0);
  }
}

TEST_CASE_TEMPLATE_DEFINE("conformance: a failed task poisons its stream until synchronised", B,
                          conformance_failure) {
  B backend;
  auto stream = backend.make_stream("failing");
  int after = 0;
  backend.enqueue(stream, [] { throw memo::error("task failed"); });
  backend.enqueue(stream, [&] { after = 1; });  // depends on garbage: skipped
  CHECK_THROWS_WITH_AS(backend.synchronize(stream), doctest::Contains("task failed"), memo::error);
  CHECK(after == 0);
  backend.enqueue(stream, [&] { after = 2; });
  CHECK_NOTHROW(backend.synchronize(stream));
  CHECK(after == 2);
  // The backend-wide synchronize reports a stream's failure too.
  backend.enqueue(stream, [] { throw std::runtime_error("second failure"); });
  CHECK_THROWS_WITH(backend.synchronize(), doctest::Contains("second failure"));
  CHECK_NOTHROW(backend.synchronize());
}

TEST_CASE_TEMPLATE_DEFINE("conformance: a failure travels through events to waiting streams", B,
                          conformance_failure_events) {
  B backend;
  auto producer = backend.make_stream("producer");
  auto consumer = backend.make_stream("consumer");
  auto marker = backend.make_event();
  backend.enqueue(producer, [] { throw memo::error("producer failed"); });
  backend.record(marker, producer);
  backend.wait(consumer, marker);
  int consumed = 0;
  backend.enqueue(consumer, [&] { consumed = 1; });
  CHECK_THROWS_WITH_AS(backend.synchronize(marker), doctest::Contains("producer failed"), memo::error);
  CHECK_THROWS_WITH_AS(backend.synchronize(consumer), doctest::Contains("producer failed"), memo::error);
  CHECK(consumed == 0);
  CHECK_THROWS_AS(backend.synchronize(producer), memo::error);
  // Both streams reported their failure once and are usable again.
  backend.enqueue(consumer, [&] { consumed = 2; });
  backend.synchronize();
  CHECK(consumed == 2);
}

TEST_CASE_TEMPLATE_DEFINE("conformance: a failure of a stream destroyed unsynchronised is not lost",
                          B, conformance_orphan) {
  B backend;
  {
    auto doomed = backend.make_stream("doomed");
    backend.enqueue(doomed, [] { throw memo::error("nobody synchronised me"); });
  }
  CHECK_THROWS_WITH_AS(backend.synchronize(), doctest::Contains("nobody synchronised me"),
                       memo::error);
  CHECK_NOTHROW(backend.synchronize());  // reported once
}

TEST_CASE_TEMPLATE_DEFINE("conformance: synchronising from a task on the stream is an error", B,
                          conformance_self_sync) {
  B backend;
  auto stream = backend.make_stream("self");
  std::atomic<int> refused{0};
  backend.enqueue(stream, [&] {
    try {
      backend.synchronize(stream);
    } catch (const memo::error&) {
      ++refused;
    }
    try {
      backend.synchronize();
    } catch (const memo::error&) {
      ++refused;
    }
  });
  backend.synchronize(stream);
  CHECK(refused == 2);
}

TEST_CASE_TEMPLATE_DEFINE("conformance: tasks may own move-only state", B, conformance_move_only) {
  B backend;
  auto stream = backend.make_stream();
  int seen = 0;
  auto owned = std::make_unique<int>(42);
  backend.enqueue(stream, [&seen, value = std::move(owned)] { seen = *value; });
  backend.synchronize(stream);
  CHECK(seen == 42);
}

TEST_CASE_TEMPLATE_DEFINE("conformance: memory is accounted", B, conformance_memory) {
  B backend;
  auto& device = backend.device_memory();
  const std::size_t before = device.current_bytes();
  void* a = device.allocate(1000);
  void* b = device.allocate(3000);
  CHECK(memo::is_aligned(a, memo::default_alignment_bytes));
  CHECK(device.current_bytes() == before + 4000);
  CHECK(device.peak_bytes() >= before + 4000);
  device.deallocate(a, 1000);
  CHECK(device.current_bytes() == before + 3000);
  device.deallocate(b, 3000);
  CHECK(device.current_bytes() == before);
  auto& pinned = backend.pinned_memory();
  void* p = pinned.allocate(512);
  CHECK(pinned.current_bytes() >= 512);
  pinned.deallocate(p, 512);
}

TEST_CASE_TEMPLATE_DEFINE("conformance: memset_async sets exactly the bytes asked for", B,
                          conformance_memset) {
  using namespace memo_conformance;
  B backend;
  auto stream = backend.make_stream();
  constexpr std::size_t n = 4099;
  auto data = upload(backend, stream, std::vector<float>(n, 1.0f));
  auto* bytes = reinterpret_cast<unsigned char*>(data.data());
  backend.memset_async(bytes + 7, 0xAB, 4 * 1000 + 3, stream);
  backend.memset_async(bytes, 0, 0, stream);  // nothing
  const auto got = download(backend, stream, data.data(), n);
  std::vector<unsigned char> expected(n * sizeof(float));
  const float one = 1.0f;
  for (std::size_t i = 0; i < n; ++i) std::memcpy(&expected[i * sizeof(float)], &one, sizeof(float));
  std::memset(expected.data() + 7, 0xAB, 4 * 1000 + 3);
  CHECK(std::memcmp(got.data(), expected.data(), expected.size()) == 0);
  CHECK_THROWS_WITH_AS(backend.memset_async(nullptr, 0, 8, stream), doctest::Contains("null pointer"),
                       memo::error);
  CHECK_THROWS_WITH_AS(backend.memset_async(bytes, 0, SIZE_MAX - 16, stream),
                       doctest::Contains("past the end of the address space"), memo::error);
}

TEST_CASE_TEMPLATE_DEFINE("conformance: copies near SIZE_MAX bytes are rejected when issued", B,
                          conformance_copy_overflow) {
  B backend;
  auto stream = backend.make_stream();
  std::vector<char> a(64), b(64);
  for (std::size_t bytes : {SIZE_MAX, SIZE_MAX - 1, SIZE_MAX - 4096}) {
    CHECK_THROWS_WITH_AS(
        backend.copy_async(a.data(), b.data(), bytes, memo::copy_kind::host_to_host, stream),
        doctest::Contains("past the end of the address space"), memo::error);
  }
  // Half the address space does not wrap, but cannot fit beside the other range.
  CHECK_THROWS_AS(backend.copy_async(a.data(), b.data(), SIZE_MAX / 2 + 100,
                                     memo::copy_kind::host_to_host, stream),
                  memo::error);
  CHECK_NOTHROW(backend.synchronize(stream));
}

TEST_CASE_TEMPLATE_DEFINE("conformance: parallel_for calls the functor once per index", B,
                          conformance_parallel_for) {
  using namespace memo_conformance;
  B backend;
  auto stream = backend.make_stream("compute");
  for (std::int64_t size : {0, 1, 255, 257, 1000, 10007, 65537}) {
    auto data = upload(backend, stream, std::vector<float>(static_cast<std::size_t>(size) + 1, 0.0f));
    backend.parallel_for(stream, extent_1d{size}, count_calls_1d{data.data()});
    const auto got = download(backend, stream, data.data(), static_cast<std::size_t>(size) + 1);
    std::int64_t wrong = 0;
    for (std::int64_t i = 0; i < size; ++i) wrong += got[i] != 1.0f + static_cast<float>(i % 7);
    INFO("size ", size);
    CHECK(wrong == 0);
    CHECK(got[static_cast<std::size_t>(size)] == 0.0f);  // one past the end: untouched
  }
  const std::pair<std::int64_t, std::int64_t> shapes[] = {
      {0, 5}, {5, 0}, {1, 1}, {3, 1000}, {37, 129}, {1000, 3}, {257, 255}};
  for (auto [rows, cols] : shapes) {
    const auto count = static_cast<std::size_t>(rows * cols) + 1;
    auto data = upload(backend, stream, std::vector<float>(count, 0.0f));
    backend.parallel_for(stream, extent_2d{rows, cols}, count_calls_2d{data.data(), cols});
    const auto got = download(backend, stream, data.data(), count);
    std::int64_t wrong = 0;
    for (std::int64_t r = 0; r < rows; ++r) {
      for (std::int64_t c = 0; c < cols; ++c) {
        wrong += got[static_cast<std::size_t>(r * cols + c)] != 1.0f + static_cast<float>((r * 3 + c) % 11);
      }
    }
    INFO("extent ", rows, " x ", cols);
    CHECK(wrong == 0);
    CHECK(got[count - 1] == 0.0f);
  }
  CHECK_THROWS_AS(backend.parallel_for(stream, extent_1d{-1}, count_calls_1d{nullptr}), memo::error);
  CHECK_THROWS_AS(backend.parallel_for(stream, extent_2d{2, -3}, count_calls_2d{nullptr, 1}),
                  memo::error);
}

TEST_CASE_TEMPLATE_DEFINE("conformance: gemm matches fp64 loops for every layout and transpose", B,
                          conformance_gemm) {
  using namespace memo_conformance;
  B backend;
  auto stream = backend.make_stream("compute");
  std::uint32_t seed = 1;
  for (auto layout : {matrix_layout::row_major, matrix_layout::column_major}) {
    for (auto op_a : {matrix_op::none, matrix_op::transpose}) {
      for (auto op_b : {matrix_op::none, matrix_op::transpose}) {
        // odd sizes, tight and padded leading dimensions, BLAS alpha/beta cases
        check_gemm(backend, stream, {37, 19, 23, op_a, op_b, layout}, 1.0f, 0.0f, 1, 0, seed++);
        check_gemm(backend, stream, {37, 19, 23, op_a, op_b, layout}, -0.5f, 0.75f, 1, 3, seed++);
        check_gemm(backend, stream, {130, 301, 67, op_a, op_b, layout}, 1.25f, 1.0f, 1, 1, seed++);
        check_gemm(backend, stream, {1, 1, 1, op_a, op_b, layout}, 2.0f, -1.0f, 1, 0, seed++);
        check_gemm(backend, stream, {9, 7, 0, op_a, op_b, layout}, 1.0f, 0.5f, 1, 0, seed++);
      }
    }
  }
}

TEST_CASE_TEMPLATE_DEFINE("conformance: gemm_strided_batched matches fp64 loops", B,
                          conformance_gemm_batched) {
  using namespace memo_conformance;
  B backend;
  auto stream = backend.make_stream("compute");
  std::uint32_t seed = 100;
  for (auto layout : {matrix_layout::row_major, matrix_layout::column_major}) {
    for (auto op_a : {matrix_op::none, matrix_op::transpose}) {
      for (auto op_b : {matrix_op::none, matrix_op::transpose}) {
        check_gemm(backend, stream, {13, 29, 17, op_a, op_b, layout}, 0.5f, 2.0f, 5, 2, seed++);
        check_gemm(backend, stream, {70, 90, 33, op_a, op_b, layout}, 1.0f, 0.0f, 3, 0, seed++);
      }
    }
  }
}

TEST_CASE_TEMPLATE_DEFINE("conformance: bad gemm arguments are rejected before anything is queued",
                          B, conformance_gemm_errors) {
  using namespace memo_conformance;
  B backend;
  auto stream = backend.make_stream();
  auto buffer = upload(backend, stream, std::vector<float>(4096, 0.0f));
  float* p = buffer.data();
  const gemm_shape row{8, 6, 4, matrix_op::none, matrix_op::none, matrix_layout::row_major};
  auto with = [&](auto change) {
    gemm_shape s = row;
    change(s);
    return s;
  };
  CHECK_THROWS_WITH_AS(backend.gemm(stream, with([](gemm_shape& s) { s.lda = 3; }), 1.0f, p, p, 0.0f, p),
                       doctest::Contains("leading dimension of A is 3"), memo::error);
  CHECK_THROWS_WITH_AS(
      backend.gemm(stream, with([](gemm_shape& s) { s.op_b = matrix_op::transpose; s.ldb = 3; }),
                   1.0f, p, p, 0.0f, p),
      doctest::Contains("needs at least 4"), memo::error);
  CHECK_THROWS_WITH_AS(
      backend.gemm(stream, with([](gemm_shape& s) { s.layout = matrix_layout::column_major; s.ldc = 7; }),
                   1.0f, p, p, 0.0f, p),
      doctest::Contains("leading dimension of C is 7"), memo::error);
  CHECK_THROWS_WITH_AS(backend.gemm(stream, row, 1.0f, p, static_cast<const float*>(nullptr), 0.0f, p),
                       doctest::Contains("null pointer for B"), memo::error);
  CHECK_THROWS_WITH_AS(backend.gemm(stream, with([](gemm_shape& s) { s.k = -1; }), 1.0f, p, p, 0.0f, p),
                       doctest::Contains("k is negative"), memo::error);
  CHECK_THROWS_WITH_AS(backend.gemm_strided_batched(stream, row, gemm_batch{2, 0, 0, 10}, 1.0f, p, p,
                                                    0.0f, p),
                       doctest::Contains("outputs would overlap"), memo::error);
  // Empty products need no operands.
  CHECK_NOTHROW(backend.gemm(stream, with([](gemm_shape& s) { s.m = 0; }), 1.0f,
                             static_cast<const float*>(nullptr), static_cast<const float*>(nullptr),
                             0.0f, static_cast<float*>(nullptr)));
  CHECK_NOTHROW(backend.synchronize(stream));
}

#define MEMO_BACKEND_CONFORMANCE(backend_type)                                      \
  TEST_CASE_TEMPLATE_APPLY(conformance_fifo, std::tuple<backend_type>);           \
  TEST_CASE_TEMPLATE_APPLY(conformance_events, std::tuple<backend_type>);         \
  TEST_CASE_TEMPLATE_APPLY(conformance_failure, std::tuple<backend_type>);        \
  TEST_CASE_TEMPLATE_APPLY(conformance_failure_events, std::tuple<backend_type>); \
  TEST_CASE_TEMPLATE_APPLY(conformance_orphan, std::tuple<backend_type>);         \
  TEST_CASE_TEMPLATE_APPLY(conformance_self_sync, std::tuple<backend_type>);      \
  TEST_CASE_TEMPLATE_APPLY(conformance_move_only, std::tuple<backend_type>);      \
  TEST_CASE_TEMPLATE_APPLY(conformance_memory, std::tuple<backend_type>);         \
  TEST_CASE_TEMPLATE_APPLY(conformance_memset, std::tuple<backend_type>);         \
  TEST_CASE_TEMPLATE_APPLY(conformance_copy_overflow, std::tuple<backend_type>);  \
  TEST_CASE_TEMPLATE_APPLY(conformance_parallel_for, std::tuple<backend_type>);   \
  TEST_CASE_TEMPLATE_APPLY(conformance_gemm, std::tuple<backend_type>);           \
  TEST_CASE_TEMPLATE_APPLY(conformance_gemm_batched, std::tuple<backend_type>);   \
  TEST_CASE_TEMPLATE_APPLY(conformance_gemm_errors, std::tuple<backend_type>)

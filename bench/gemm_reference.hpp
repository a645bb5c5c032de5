// bench/gemm_reference.hpp
//
// The GEMM rate a bench divides by. A bench that reports "its FLOP rate /
// the machine's GEMM rate" times a square fp32 backend.gemm next to its own
// work in every round, so the two rates of a ratio are measured seconds
// apart on the same (possibly busy) machine. One measurement repeats the
// product until it takes about `seconds`, sized once after a warm-up.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <vector>

#include "memo/backend/host_backend.hpp"

namespace memo_bench {

class gemm_reference {
 public:
  /// An n x n x n product on `stream` of `backend`; both must outlive it.
  gemm_reference(memo::host_backend& backend, memo::host_backend::stream& stream, int n, double seconds)
      : backend_(&backend), stream_(&stream), n_(n),
        a_(elements(), 0.25f), b_(elements(), -0.5f), c_(elements(), 0.0f) {
    (void)time_products(1);  // warm up
    repeats_ = std::max(1, static_cast<int>(seconds / std::max(time_products(1), 1e-6)));
  }

  [[nodiscard]] int n() const noexcept { return n_; }
  /// One measurement: FLOP/s of the repeated product.
  [[nodiscard]] double flops_per_second() { return 2.0 * n_ * n_ * n_ * repeats_ / time_products(repeats_); }

 private:
  [[nodiscard]] std::size_t elements() const { return static_cast<std::size_t>(n_) * static_cast<std::size_t>(n_); }
  /// Seconds of `count` products queued back to back, then one synchronisation.
  double time_products(int count) {
    const memo::gemm_shape shape{n_, n_, n_};
    const auto start = std::chrono::steady_clock::now();
    for (int r = 0; r < count; ++r) backend_->gemm(*stream_, shape, 1.0f, a_.data(), b_.data(), 0.0f, c_.data());
    backend_->synchronize(*stream_);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }

  memo::host_backend* backend_;
  memo::host_backend::stream* stream_;
  int n_;
  int repeats_ = 1;
  std::vector<float> a_, b_, c_;
};

}  // namespace memo_bench

#include "memo/backend/concepts.hpp"
#include "memo/backend/host_backend.hpp"
#include "memo/backend/memory_resource.hpp"

#include <doctest/doctest.h>

namespace {
struct not_a_backend {};

// Has everything but events: one missing piece is enough to fail the concept.
struct backend_without_events {
  struct stream {};
  struct event {};
  using native_stream = int;
  static std::string_view name() { return "partial"; }
  memo::host_memory_resource& device_memory();
  memo::host_memory_resource& pinned_memory();
  stream make_stream(std::string_view);
};

// A backend without compute: hiding parallel_for or gemm is enough to fail.
struct backend_without_parallel_for : memo::host_backend {
  void parallel_for() {}
};
struct backend_without_gemm : memo::host_backend {
  void gemm() {}
};
struct backend_without_memset : memo::host_backend {
  void memset_async() {}
};

struct resource_without_peak {
  void* allocate(std::size_t, std::size_t);
  void deallocate(void*, std::size_t, std::size_t);
  std::size_t current_bytes() const;
};
}  // namespace

TEST_CASE("concepts: the backends and resources satisfy their concepts") {
  static_assert(memo::Backend<memo::host_backend>);
  static_assert(memo::MemoryResource<memo::host_memory_resource>);
  static_assert(!memo::Backend<not_a_backend>);
  static_assert(!memo::Backend<backend_without_events>);
  static_assert(!memo::Backend<backend_without_parallel_for>);
  static_assert(!memo::Backend<backend_without_gemm>);
  static_assert(!memo::Backend<backend_without_memset>);
  static_assert(memo::parallel_functor<memo::detail::concept_functor_1d, memo::extent_1d>);
  static_assert(!memo::parallel_functor<memo::detail::concept_functor_1d, memo::extent_2d>);
  static_assert(!memo::MemoryResource<resource_without_peak>);
  static_assert(!memo::Backend<int>);
  CHECK(memo::to_string(memo::copy_kind::device_to_host) == std::string("device_to_host"));
}

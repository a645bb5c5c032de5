// expect: MemoryResource<Upstream>
// A recording resource forwards to a memory resource that accounts its bytes.
#include <cstdlib>

#include "memo/plan/recording_resource.hpp"

struct plain_malloc {
  void* allocate(std::size_t bytes, std::size_t) { return std::malloc(bytes); }
  void deallocate(void* p, std::size_t, std::size_t) { std::free(p); }
};

int main() {
  plain_malloc upstream;
  memo::recording_resource<plain_malloc> recorder(upstream);
}

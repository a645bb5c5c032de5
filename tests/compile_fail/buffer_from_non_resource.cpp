// expect: MemoryResource<Resource>
// A buffer's resource must account current and peak bytes.
#include <cstdlib>

#include "memo/backend/buffer.hpp"

struct plain_malloc {
  void* allocate(std::size_t bytes, std::size_t) { return std::malloc(bytes); }
  void deallocate(void* p, std::size_t, std::size_t) { std::free(p); }
};

int main() {
  plain_malloc resource;
  memo::buffer<float, plain_malloc> data(resource, 16);
}

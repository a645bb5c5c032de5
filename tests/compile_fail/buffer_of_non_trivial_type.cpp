// expect: T must be trivially copyable
// Device buffers hold raw bytes that copies move around: a type with a
// non-trivial copy cannot live in one.
#include <string>

#include "memo/backend/buffer.hpp"
#include "memo/backend/memory_resource.hpp"

int main() {
  memo::host_memory_resource resource("device");
  memo::buffer<std::string, memo::host_memory_resource> names(resource, 4);
}

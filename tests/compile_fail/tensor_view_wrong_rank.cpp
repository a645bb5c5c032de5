// expect: operator\(\)
// The rank of a tensor view is part of its type: indexing a [tokens, hidden]
// view with one index does not compile.
#include "memo/core/tensor_view.hpp"

int main() {
  float data[6] = {};
  auto view = memo::tensor_view<float, 2>::contiguous(data, {2, 3});
  return static_cast<int>(view(1));
}

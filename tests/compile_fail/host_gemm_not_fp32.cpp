// expect: host_backend GEMMs compute in fp32 only
// The host backend's GEMMs are fp32; a GEMM of other element types fails to
// compile with a message that says what to do instead.
#include "memo/backend/host_backend.hpp"

int main() {
  memo::host_backend backend;
  auto stream = backend.make_stream();
  double x = 0.0;
  backend.gemm(stream, memo::gemm_shape{1, 1, 1}, 1.0f, &x, &x, 0.0f, &x);
}

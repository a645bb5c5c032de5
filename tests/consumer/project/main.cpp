// Uses memo from an installed prefix: a host-backend stream pipeline and a
// tiny DSA problem checked against its lower bound.
#include <memo/memo.hpp>

#include <cstdio>
#include <vector>

int main() {
  memo::host_backend backend;
  auto compute = backend.make_stream("compute");
  auto offload = backend.make_stream("offload");
  auto produced = backend.make_event();

  std::vector<float> device(1024), host(1024);
  backend.enqueue(compute, [&] {
    for (std::size_t i = 0; i < device.size(); ++i) device[i] = static_cast<float>(i);
  });
  backend.record(produced, compute);
  backend.wait(offload, produced);
  backend.copy_async(host.data(), device.data(), device.size() * sizeof(float),
                     memo::copy_kind::device_to_host, offload);
  backend.synchronize(offload);

  memo::dsa_problem problem;
  problem.buffers = {{1, 64, 0, 2}, {2, 32, 1, 3}, {3, 64, 2, 4}};
  memo::dsa_plan plan{{0, 64, 0}, 96};
  const bool valid = static_cast<bool>(memo::validate(problem, plan));
  const bool tight = memo::lower_bound_bytes(problem) == plan.peak_bytes;

#if MEMO_HAS_LPSOLVE
  memo::lp_model lp(1);
  const int column[] = {0};
  const double one[] = {1.0};
  lp.add_row(column, one, memo::lp_sense::less_equal, 3.0);
  lp.set_objective(column, one, true);
  const bool lp_ok = lp.solve() == memo::lp_outcome::optimal && lp.objective() == 3.0;
#else
  const bool lp_ok = true;
#endif

  if (host[1023] == 1023.0f && valid && tight && lp_ok) {
    std::printf("memo consumer: ok (memo %s)\n", MEMO_VERSION_STRING);
    return 0;
  }
  std::printf("memo consumer: FAILED\n");
  return 1;
}

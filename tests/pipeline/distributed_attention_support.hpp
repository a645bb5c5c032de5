// What the thread and MPI tests of distributed attention share: one rank's
// run (shuffle its part of the global inputs into FPDT's layout, forward,
// backward) and the error measure.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "../model/attention_reference.hpp"
#include "memo/backend/host_backend.hpp"
#include "memo/pipeline/distributed_attention.hpp"

namespace memo_test {

inline memo::host_backend::options one_thread() {
  memo::host_backend::options options;
  options.compute_threads = 1;
  return options;
}

/// Rank r's tokens of a global [T, heads, D] tensor, in its local
/// (rank-ordinal) order.
inline std::vector<float> local_part(const memo::fpdt_layout& layout, int r, const std::vector<float>& global,
                                     std::int64_t heads, std::int64_t D) {
  std::vector<float> part(static_cast<std::size_t>(layout.local_tokens() * heads * D));
  layout.shuffle<float>(global, r, part, heads * D);
  return part;
}

/// Rank r's share of the inputs and its outputs (zero), in local order.
struct rank_tensors {
  std::vector<float> q, k, v, dout, o, dq, dk, dv;
  rank_tensors(const memo::fpdt_layout& layout, int r, const inputs& in, std::int64_t H, std::int64_t K,
               std::int64_t D)
      : q(local_part(layout, r, in.q, H, D)), k(local_part(layout, r, in.k, K, D)),
        v(local_part(layout, r, in.v, K, D)), dout(local_part(layout, r, in.dout, H, D)), o(q.size(), 0.0f),
        dq(q.size(), 0.0f), dk(k.size(), 0.0f), dv(k.size(), 0.0f) {}
};

/// One rank's outputs in its local (rank-ordinal) order.
struct rank_outputs {
  memo::fpdt_layout layout;
  std::vector<float> o, dq, dk, dv;
};

template <class Comm>
rank_outputs distributed_rank(Comm& comm, memo::host_backend& backend, const memo::distributed_attention_shape& shape,
                              const inputs& in) {
  using memo::tensor_view;
  const std::int64_t H = shape.heads, K = shape.kv_heads, D = shape.head_dim;
  auto stream = backend.make_stream();
  memo::distributed_attention<Comm, memo::host_backend> attention(backend, comm, shape);
  const memo::fpdt_layout& layout = attention.layout();
  const std::int64_t L = layout.local_tokens();
  const int r = comm.rank();
  auto q = local_part(layout, r, in.q, H, D), k = local_part(layout, r, in.k, K, D);
  auto v = local_part(layout, r, in.v, K, D), dout = local_part(layout, r, in.dout, H, D);
  rank_outputs out{layout, std::vector<float>(q.size()), std::vector<float>(q.size()), std::vector<float>(k.size()),
                   std::vector<float>(k.size())};
  auto view = [&](std::vector<float>& x, std::int64_t heads) {
    return tensor_view<float, 3>::contiguous(x.data(), {L, heads, D});
  };
  auto cview = [&](std::vector<float>& x, std::int64_t heads) {
    return tensor_view<const float, 3>::contiguous(x.data(), {L, heads, D});
  };
  attention.forward(stream, cview(q, H), cview(k, K), cview(v, K), view(out.o, H));
  attention.backward(stream, cview(dout, H), view(out.dq, H), view(out.dk, K), view(out.dv, K));
  backend.synchronize(stream);
  return out;
}

/// max |got - want| / (1 + |want|).
inline double worst_relative_error(const std::vector<float>& got, const std::vector<double>& want) {
  if (got.size() != want.size()) return INFINITY;
  double worst = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    worst = std::max(worst, std::abs(static_cast<double>(got[i]) - want[i]) / (1.0 + std::abs(want[i])));
  }
  return worst;
}

}  // namespace memo_test

// distributed_bench: sequence-parallel attention across ranks, and SPPO's
// pipeline bubbles.
//
// Measured (thread communicator, one host-backend thread per rank): the
// forward + backward of FPDT's distributed attention (pipeline/
// distributed_attention.hpp) on P = 1, 2, 4 ranks over the same sequence,
// interleaved, several rounds. Printed per P:
//   - speedup = single-rank time / P-rank time, beside the prediction
//     min(P, cores) (each rank does 1/P of the attention; ranks beyond the
//     machine's cores share them);
//   - communication share = the time of the same all-to-alls alone (the
//     exchanges the attention issues, in the same order and sizes, with no
//     compute between them) / the P-rank time.
// Simulated (stream-schedule simulator, pipeline/sppo_schedule.hpp): SPPO's
// bubble ratio (PP - 1) / N for the paper's Table 4 settings, the
// simulator's step against the closed form, and the step with multiplexed
// sequence partitioning (Left/Right subsequences split over their SP
// ranges). Then the heuristic solver's (SP, PP, N) (pipeline/
// sppo_solver.hpp, A800 profile) for Table 4's models at 512K beside the
// paper's choice.
// Projected (project/papers.hpp, the model memo-project uses): the papers'
// settings of this layer, FPDT's 8B on 4 GPUs at 256K-2M tokens (chunk 64K)
// and SPPO's GPT-7B on 32/64/128 GPUs at 1M-4M, beside the papers' figures
// and the device profile of the hardware they ran on.
//
// Measured (thread communicator): the reference GPT-2's training step
// (model/gpt2_parallel_model.hpp) on 2 and 4 ranks, sequence parallel,
// pipelined and both, against the single-device model (gpt2_model.hpp) on
// the same sequence, every rank and the single device on one compute
// thread, interleaved rounds. Printed per setting: speedup = single-device
// step / parallel step beside the prediction min(cores, S x Q / (1 +
// bubble)), the bubble from the SPPO simulator on the model's own schedule
// (step / the stage's work); the share of rank 0's step spent inside
// collectives and hand-offs (the timed communicator: on the host backend
// this includes waiting for peers, so a pipeline's bubbles count); and each
// rank's device peak against the single device's. On a shared machine the
// ranks may get fewer cores than it has: the cores each side obtained
// (process CPU time / wall time) are measured, and the prediction is also
// given for them: min(cores obtained, S x Q / (1 + bubble)) / the single
// device's cores obtained. "SP 2, no overlap" is
// SP 2 with the attention's all-to-alls all before and after its compute
// instead of group by group behind it (the same values), interleaved with
// the others: the overlap's effect.
// Memory of SPPO's subsequence offload (the same model with 8 layers, 4 per
// stage, pipelined settings, built without stepping): rank 0's activation
// bytes (planned
// arena) without offload and with the offload ratios alpha_j all 1 and
// all 0.5, the measured drop beside the formula's, layers x sum_j n_j -
// 2 n_max - layers x sum_j (n_j - round(alpha_j n_j)) rows of the
// skeletal tensors' bytes per row (alignment padding aside), and the
// pinned host bytes beside layers x sum_j round(alpha_j n_j) rows. Then
// with host K/V as well (kv_offload): the further drop beside its formula
// (every layer's attention state of the whole sequence against one of the
// longest subsequence and a larger shared scratch, and qkv out of the skeletal
// rows for one [T / S, 3C] buffer) and the attention's host store.
// Gradient sums after the backward against behind it
// (gpt2_parallel_options::overlap_gradient_reduction off and on; the same
// model with 4 layers, SP 2 and SP 2 x PP 2, interleaved, the order of the
// two alternating between rounds): the step and the exposed sums (the
// compute stream's wait for them after its backward, mean over ranks),
// beside the closed form of a sum hidden behind the backward below it:
// every layer's sum but the stage's first layer's and the tail's (the
// embeddings, the final layernorm, wte over the stages) is hidden, so
// exposed = the serial sums' time x the share of those two in the stage's
// payload, and the step shrinks by the rest (a bandwidth-bound model that
// assumes a layer's backward outlasts a layer's sum; on the thread
// communicator a sum also waits for the slowest peer).
//
// Usage: distributed_bench [--quick] [--json]
#include <memo/backend/host_backend.hpp>
#include <memo/backend/thread_communicator.hpp>
#include <memo/core/bytes.hpp>
#include <memo/core/command_line.hpp>
#include <memo/core/device_profile.hpp>
#include <memo/core/json.hpp>
#include <memo/core/spread.hpp>
#include <memo/model/gpt2_model.hpp>
#include <memo/model/gpt2_parallel_model.hpp>
#include <memo/pipeline/distributed_attention.hpp>
#include <memo/pipeline/sppo_schedule.hpp>
#include <memo/pipeline/sppo_solver.hpp>
#include <memo/project/papers.hpp>

#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace {

using clock_type = std::chrono::steady_clock;

std::vector<float> pattern(std::size_t n, unsigned seed) {
  std::vector<float> v(n);
  std::uint32_t x = seed * 2654435761u + 1;
  for (auto& e : v) {
    x = x * 1664525u + 1013904223u;
    e = static_cast<float>(x >> 8) / 16777216.0f - 0.5f;
  }
  return v;
}

struct shape_config {
  std::int64_t tokens, heads, head_dim, layout_chunk, attention_chunk;
};

memo::host_backend::options one_thread() {
  memo::host_backend::options options;
  options.compute_threads = 1;
  return options;
}

// Wall time of one forward + backward on P ranks (threads), or with
// `exchanges_only` of the all-to-alls it issues alone. Every rank builds its
// object first; the clock runs from a barrier to the last rank's end.
double time_ranks(int P, const shape_config& c, bool exchanges_only) {
  std::vector<double> seconds(static_cast<std::size_t>(P), 0.0);
  memo::run_thread_group(P, [&](memo::thread_communicator& comm) {
    const int r = comm.rank();
    memo::host_backend backend(one_thread());
    auto stream = backend.make_stream();
    const memo::distributed_attention_shape shape{.tokens = c.tokens,
                                                  .heads = c.heads,
                                                  .kv_heads = c.heads,
                                                  .head_dim = c.head_dim,
                                                  .layout_chunk = c.layout_chunk,
                                                  .attention_chunk = c.attention_chunk};
    memo::distributed_attention<memo::thread_communicator, memo::host_backend> attention(backend, comm, shape);
    const std::int64_t L = attention.layout().local_tokens(), H = c.heads, D = c.head_dim;
    const auto n = static_cast<std::size_t>(L * H * D);
    auto q = pattern(n, 1), k = pattern(n, 2), v = pattern(n, 3), dout = pattern(n, 4);
    std::vector<float> o(n), dq(n), dk(n), dv(n);
    auto view = [&](std::vector<float>& x) { return memo::tensor_view<float, 3>::contiguous(x.data(), {L, H, D}); };
    auto cview = [&](std::vector<float>& x) {
      return memo::tensor_view<const float, 3>::contiguous(x.data(), {L, H, D});
    };
    // The exchanges of one forward + backward: 3 + 1 all-to-alls per
    // local chunk forward, 1 + 3 backward, each of c x H/P x D per rank.
    const std::int64_t u = attention.layout().chunks_per_rank();
    const auto block = static_cast<std::size_t>(c.layout_chunk * (H / P) * D) * static_cast<std::size_t>(P);
    std::vector<float> send(block, 1.0f), recv(block);
    comm.barrier(backend, stream);
    backend.synchronize(stream);
    const auto t0 = clock_type::now();
    if (exchanges_only) {
      for (std::int64_t i = 0; i < 8 * u; ++i) {
        comm.all_to_all<float>(backend, stream, std::span<const float>(send), std::span<float>(recv));
      }
    } else {
      attention.forward(stream, cview(q), cview(k), cview(v), view(o));
      attention.backward(stream, cview(dout), view(dq), view(dk), view(dv));
    }
    comm.barrier(backend, stream);
    backend.synchronize(stream);
    seconds[static_cast<std::size_t>(r)] = std::chrono::duration<double>(clock_type::now() - t0).count();
  });
  return *std::max_element(seconds.begin(), seconds.end());
}

// ---- The model's step across ranks ----

struct model_setting {
  const char* name;
  int sp, pp, subsequences;
  bool overlap = true;
  bool overlap_reduction = true;
};

struct model_row {
  model_setting setting;
  std::vector<double> step_seconds, speedup, comm_share, cores_used, predicted_obtained;
  double predicted = 1.0, bubble = 0.0;
  std::uint64_t rank_peak_bytes = 0, single_peak_bytes = 0;
};

struct model_shape {
  memo::gpt2_config config;
  std::int64_t context, steps;
};

/// CPU seconds (user + system) this process has used.
double process_cpu_seconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  auto seconds = [](const timeval& t) { return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) * 1e-6; };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

std::vector<std::int32_t> tokens_of(std::int64_t n, std::int32_t vocab, unsigned seed) {
  std::vector<std::int32_t> t(static_cast<std::size_t>(n));
  std::uint32_t x = seed * 2654435761u + 7;
  for (auto& e : t) {
    x = x * 1664525u + 1013904223u;
    e = static_cast<std::int32_t>((x >> 8) % static_cast<std::uint32_t>(vocab));
  }
  return t;
}

struct single_timing {
  double step_seconds = 0, cores_used = 0;
  std::uint64_t peak_bytes = 0;
};

/// Mean seconds of a step of the single-device model (after one warm-up
/// step), the cores it got and its device peak.
single_timing time_single(const model_shape& m, const std::vector<std::int32_t>& in,
                          const std::vector<std::int32_t>& tg) {
  memo::host_backend backend(one_thread());
  memo::gpt2_model<memo::host_backend> model(backend, m.config, {.context = m.context, .attention_chunk = 64});
  model.initialize(1);
  model.train_step(in, tg, {});
  backend.device_memory().reset_peak();
  const double cpu0 = process_cpu_seconds();
  const auto t0 = clock_type::now();
  for (std::int64_t s = 0; s < m.steps; ++s) model.train_step(in, tg, {});
  const double seconds = std::chrono::duration<double>(clock_type::now() - t0).count();
  return {seconds / static_cast<double>(m.steps), (process_cpu_seconds() - cpu0) / seconds,
          backend.device_memory().peak_bytes()};
}

struct parallel_timing {
  double step_seconds = 0, comm_share = 0, bubble = 0, cores_used = 0;
  std::uint64_t peak_bytes = 0;
  // Per step, mean over the ranks: the gradient sums' time and the part
  // the compute stream waited for; the share of a stage's sum payload that
  // cannot hide (its first layer's buckets and the tail).
  double reduction_seconds = 0, exposed_seconds = 0, unhidden_share = 0;
};

/// The same on S x Q thread ranks: rank 0's mean step and its share inside
/// communication, the largest device peak of a rank, and the simulated
/// bubble of the model's schedule.
parallel_timing time_parallel(const model_shape& m, const model_setting& s, const std::vector<std::int32_t>& in,
                              const std::vector<std::int32_t>& tg) {
  const int P = s.sp * s.pp;
  std::vector<parallel_timing> per_rank(static_cast<std::size_t>(P));
  memo::run_thread_group(P, [&](memo::thread_communicator& comm) {
    const int r = comm.rank();
    memo::host_backend backend(one_thread());
    memo::gpt2_parallel_model<memo::thread_communicator, memo::host_backend> model(
        backend, comm, m.config,
        {.context = m.context, .sequence_parallel = s.sp, .pipeline_stages = s.pp, .subsequences = s.subsequences,
         .attention_chunk = 64, .overlap_exchanges = s.overlap, .overlap_gradient_reduction = s.overlap_reduction});
    model.initialize(1);
    model.train_step(in, tg, {});
    backend.device_memory().reset_peak();
    double comm_seconds = 0, reduction_seconds = 0, exposed_seconds = 0;
    const double cpu0 = process_cpu_seconds();  // every rank's threads: the ranks step together
    const auto t0 = clock_type::now();
    for (std::int64_t k = 0; k < m.steps; ++k) {
      model.train_step(in, tg, {});
      comm_seconds += model.step_communication().seconds;
      reduction_seconds += model.step_gradient_reduction().collectives.seconds;
      exposed_seconds += model.step_gradient_reduction().exposed_seconds;
    }
    const double seconds = std::chrono::duration<double>(clock_type::now() - t0).count();
    auto& out = per_rank[static_cast<std::size_t>(r)];
    out.reduction_seconds = reduction_seconds / static_cast<double>(m.steps);
    out.exposed_seconds = exposed_seconds / static_cast<double>(m.steps);
    double all = 0, unhidden = 0;
    for (const auto& b : model.gradient_buckets().buckets) {
      const auto n = static_cast<double>(b.count());
      all += n, unhidden += b.layer <= 0 ? n : 0.0;
    }
    // The first and last stages also sum wte over the stages after their
    // own sums: Vp x C floats behind nothing.
    const int stage = r / s.sp;
    if (s.pp > 1 && (stage == 0 || stage == s.pp - 1)) {
      const double wte = static_cast<double>(m.config.padded_vocab_size) * m.config.channels;
      all += wte, unhidden += wte;
    }
    out.unhidden_share = all > 0 ? unhidden / all : 0.0;
    out.cores_used = (process_cpu_seconds() - cpu0) / seconds;
    out.step_seconds = seconds / static_cast<double>(m.steps);
    out.comm_share = comm_seconds / seconds;
    out.peak_bytes = backend.device_memory().peak_bytes();
    // The schedule's bubble: simulated step / one stage's work.
    const memo::timeline t = model.schedule().simulate(memo::device_profile::a800_80gb());
    double work = 0;
    const std::size_t stream = t.stream_index(memo::sppo_stream_name(0));
    for (const auto& op : t.ops()) work += op.stream == stream ? op.duration_seconds() : 0.0;
    out.bubble = t.makespan_seconds() / work - 1.0;
  });
  parallel_timing out = per_rank[0];
  out.reduction_seconds = out.exposed_seconds = out.unhidden_share = 0;
  for (const auto& r : per_rank) {
    out.peak_bytes = std::max(out.peak_bytes, r.peak_bytes);
    out.reduction_seconds += r.reduction_seconds / P, out.exposed_seconds += r.exposed_seconds / P;
    out.unhidden_share += r.unhidden_share / P;
  }
  return out;
}

/// Interleaved rounds of every setting against the single device.
std::vector<model_row> model_rows(const model_shape& m, int rounds, int cores) {
  const std::vector<model_setting> settings = {{"SP 2", 2, 1, 1},
                                               {"SP 2, no overlap", 2, 1, 1, false},
                                               {"SP 4", 4, 1, 1},
                                               {"PP 2, N 4", 1, 2, 4},
                                               {"SP 2 x PP 2, N 4", 2, 2, 4}};
  std::vector<model_row> rows;
  for (const auto& s : settings) rows.push_back({s, {}, {}, {}, {}, {}});
  const auto in = tokens_of(m.context, m.config.vocab_size, 1), tg = tokens_of(m.context, m.config.vocab_size, 2);
  for (int round = 0; round < rounds; ++round) {
    for (auto& row : rows) {
      const single_timing single = time_single(m, in, tg);
      const parallel_timing p = time_parallel(m, row.setting, in, tg);
      row.step_seconds.push_back(p.step_seconds);
      row.speedup.push_back(single.step_seconds / p.step_seconds);
      row.comm_share.push_back(p.comm_share);
      row.cores_used.push_back(p.cores_used);
      row.bubble = p.bubble;
      row.rank_peak_bytes = p.peak_bytes, row.single_peak_bytes = single.peak_bytes;
      const double ideal = row.setting.sp * row.setting.pp / (1.0 + p.bubble);
      row.predicted = std::min(static_cast<double>(cores), ideal);
      // The same on the cores each side actually got (the machine is shared).
      row.predicted_obtained.push_back(std::min(p.cores_used, ideal) / std::min(single.cores_used, 1.0));
    }
  }
  return rows;
}

/// One setting's gradient sums after the backward (off) and behind it (on).
struct reduction_row {
  model_setting setting;
  std::vector<double> step[2], exposed[2], sums[2];  // [overlap off, on], per round
  double unhidden_share = 0;
};

/// Interleaved rounds of every setting with the sums after and behind the
/// backward, the order of the two alternating between rounds.
std::vector<reduction_row> reduction_rows(const model_shape& m, int rounds) {
  std::vector<reduction_row> rows = {{{"SP 2", 2, 1, 1}, {}, {}, {}, 0},
                                     {{"SP 2 x PP 2, N 4", 2, 2, 4}, {}, {}, {}, 0}};
  const auto in = tokens_of(m.context, m.config.vocab_size, 1), tg = tokens_of(m.context, m.config.vocab_size, 2);
  for (int round = 0; round < rounds; ++round) {
    for (auto& row : rows) {
      for (const int k : round % 2 == 0 ? std::vector<int>{0, 1} : std::vector<int>{1, 0}) {
        model_setting s = row.setting;
        s.overlap_reduction = k == 1;
        const parallel_timing p = time_parallel(m, s, in, tg);
        row.step[k].push_back(p.step_seconds);
        row.exposed[k].push_back(p.exposed_seconds);
        row.sums[k].push_back(p.reduction_seconds);
        row.unhidden_share = p.unhidden_share;
      }
    }
  }
  return rows;
}

/// The closed form's exposed sums and step behind the backward, from the
/// medians after it (see the header comment).
std::pair<double, double> reduction_prediction(const reduction_row& r) {
  const double exposed_off = memo::spread_of(r.exposed[0]).median, step_off = memo::spread_of(r.step[0]).median;
  return {exposed_off * r.unhidden_share, step_off - exposed_off * (1.0 - r.unhidden_share)};
}

struct offload_row {
  const char* name;
  int sp, pp, subsequences;
  double alpha;
  std::uint64_t off_bytes = 0, on_bytes = 0, host_bytes = 0;
  double predicted_drop = 0, predicted_host = 0;
  // With kv_offload as well.
  std::uint64_t kv_bytes = 0, kv_host_bytes = 0;
  double predicted_kv_drop = 0, predicted_kv_host = 0;
};

/// Rank 0's subsequence rows under offload ratio `alpha`: the longest
/// subsequence, every row of every layer, and the rows of every layer kept
/// on the device and sent to the host, less the last two (layer,
/// subsequence) units of the forward, which stay in the swapper's slots.
struct stage_rows {
  double longest = 0, all = 0, kept = 0, offloaded = 0;
};
template <class Model>
stage_rows rows_of(const Model& model, int subsequences, double alpha) {
  stage_rows out;
  const std::int64_t layers = model.shape().stage_layers, units = layers * subsequences;
  for (int j = 0; j < subsequences; ++j) {
    const auto [r0, r1] = model.shape().rows(j);
    const auto n = static_cast<double>(r1 - r0), o = std::round(alpha * n);
    out.longest = std::max(out.longest, n);
    for (std::int64_t l = 0; l < layers; ++l) {
      out.all += n;
      if (j * layers + l < units - 2) out.kept += n - o, out.offloaded += o;
    }
  }
  return out;
}

/// What host K/V adds to `row`'s offload, alignment aside: each layer's
/// attention state of the sequence against one of the longest subsequence,
/// and a larger attention scratch (shared by the layers); qkv (3C per row) out of the swapper's
/// two slots and kept rows, for one [T / S, 3C] buffer; the host store of
/// every layer.
template <class Model>
void kv_prediction(const Model& model, offload_row& row) {
  using attention = memo::distributed_attention<memo::thread_communicator, memo::host_backend>;
  const auto& shape = model.shape();
  const std::int64_t C = model.config().channels;
  const stage_rows rows = rows_of(model, row.subsequences, row.alpha);
  const double longest = rows.longest;
  memo::distributed_attention_shape a{.tokens = shape.tokens, .heads = model.config().num_heads,
                                      .kv_heads = model.config().num_heads, .head_dim = model.config().head_size(),
                                      .layout_chunk = shape.layout_chunk, .attention_chunk = shape.attention_chunk,
                                      .max_run_tokens = static_cast<std::int64_t>(longest) * shape.sp,
                                      .keep_state = true};
  const auto device = attention::required_bytes(a, shape.sp);
  a.offload = true;
  const auto host = attention::required_bytes(a, shape.sp);
  const double layers = static_cast<double>(shape.stage_layers), qkv_row = 3.0 * static_cast<double>(C) * 4;
  row.predicted_kv_drop = layers * static_cast<double>(device.state) + static_cast<double>(device.attention_device) -
                          static_cast<double>(host.state) - static_cast<double>(host.attention_device) +
                          (2 * longest + rows.kept) * qkv_row - static_cast<double>(shape.local_tokens) * qkv_row;
  row.predicted_kv_host = layers * static_cast<double>(host.attention_pinned);
}

/// Rank 0's activation bytes without and with offload ratio `alpha` on
/// every subsequence, its pinned skeletal bytes, and the formula's figures.
offload_row offload_memory(const model_shape& m, offload_row row) {
  enum { off, on, kv };
  for (const int pass : {off, on, kv}) {
    const int P = row.sp * row.pp;
    memo::run_thread_group(P, [&](memo::thread_communicator& comm) {
      const int r = comm.rank();
      memo::host_backend backend(one_thread());
      memo::gpt2_parallel_options options{.context = m.context, .sequence_parallel = row.sp,
                                          .pipeline_stages = row.pp, .subsequences = row.subsequences,
                                          .attention_chunk = 64};
      if (pass != off) {
        options.subsequence_offload = std::vector<double>(static_cast<std::size_t>(row.subsequences), row.alpha);
      }
      options.kv_offload = pass == kv;
      memo::gpt2_parallel_model<memo::thread_communicator, memo::host_backend> model(backend, comm, m.config,
                                                                                    options);
      if (r != 0) return;
      (pass == off ? row.off_bytes : pass == on ? row.on_bytes : row.kv_bytes) = model.activation_bytes();
      if (pass == off) return;
      if (pass == kv) {
        row.kv_host_bytes = model.host_offload_bytes() - model.skeletal_host_bytes();
        kv_prediction(model, row);
        return;
      }
      row.host_bytes = model.skeletal_host_bytes();
      double bytes_per_row = 0;
      const memo::skeletal_layout layout = memo::gpt2_skeletal_layout(m.config, 1);
      for (const auto& t : layout.tensors()) bytes_per_row += static_cast<double>(t.bytes_per_token);
      const stage_rows rows = rows_of(model, row.subsequences, row.alpha);
      row.predicted_drop = (rows.all - 2 * rows.longest - rows.kept) * bytes_per_row;
      row.predicted_host = rows.offloaded * bytes_per_row;
    });
  }
  return row;
}

struct rank_result {
  int ranks = 1;
  std::vector<double> seconds, speedup, comm_share;
};

struct sppo_setting {
  const char* model;
  int gpus, sp, pp, n;
  const char* sequence;
};

constexpr const char* usage = "usage: distributed_bench [--quick] [--json]\n";

int bench_main(int argc, char** argv) {
  bool quick = false, json = false;
  memo::command_arguments args(argc, argv);
  while (!args.done()) {
    const std::string_view arg = args.next();
    if (arg == "--quick") {
      quick = true;
    } else if (arg == "--json") {
      json = true;
    } else {
      args.unknown();
    }
  }
  const int cores = std::max(1u, std::thread::hardware_concurrency());
  const int rounds = 5;
  const shape_config shape = quick ? shape_config{512, 4, 32, 64, 64} : shape_config{8192, 4, 64, 1024, 256};
  std::vector<rank_result> results;
  for (const int P : {1, 2, 4}) results.push_back({P, {}, {}, {}});
  for (int round = 0; round < rounds; ++round) {
    // Interleaved: single rank, then each P with its exchanges alone.
    const double single = time_ranks(1, shape, false);
    results[0].seconds.push_back(single);
    results[0].speedup.push_back(1.0);
    results[0].comm_share.push_back(0.0);
    for (std::size_t i = 1; i < results.size(); ++i) {
      const double t = time_ranks(results[i].ranks, shape, false);
      const double exchanges = time_ranks(results[i].ranks, shape, true);
      results[i].seconds.push_back(t);
      results[i].speedup.push_back(single / t);
      results[i].comm_share.push_back(exchanges / t);
    }
  }

  // The model's step across ranks (the settings interleaved with the
  // single device, one round of each per round).
  const model_shape model = quick ? model_shape{{256, 64, 64, 2, 4, 64}, 256, 2}
                                  : model_shape{{1024, 256, 256, 2, 4, 128}, 1024, 2};
  const std::vector<model_row> model_results = model_rows(model, quick ? 2 : rounds, cores);
  model_shape deeper = model;
  deeper.config.num_layers = 8;
  model_shape reducing = model;
  reducing.config.num_layers = 4;
  reducing.steps = 3;
  const std::vector<reduction_row> reductions = reduction_rows(reducing, quick ? 2 : rounds);
  std::vector<offload_row> offload_rows;
  for (const double alpha : {1.0, 0.5}) {
    offload_rows.push_back(offload_memory(deeper, {"PP 2, N 4", 1, 2, 4, alpha}));
    offload_rows.push_back(offload_memory(deeper, {"SP 2 x PP 2, N 4", 2, 2, 4, alpha}));
  }

  // SPPO: Table 4's settings (SPPO's SP, PP, N), uniform subsequences
  // (FLOPs-balanced partition), forward 1, backward 2 time units.
  const std::vector<sppo_setting> settings = {
      {"GPT-7B", 32, 8, 4, 32, "512K"},    {"GPT-7B", 32, 8, 4, 160, "1024K"}, {"GPT-13B", 64, 8, 8, 32, "512K"},
      {"GPT-13B", 64, 8, 8, 160, "1280K"}, {"GPT-65B", 128, 16, 8, 32, "512K"}, {"GPT-65B", 128, 16, 8, 128, "1024K"},
      {"Table 3", 4, 1, 4, 8, "-"}};
  struct sppo_row {
    sppo_setting s;
    double formula_ratio, simulated_step, formula_step, multiplexed_step;
  };
  std::vector<sppo_row> rows;
  const auto profile = memo::device_profile::a800_80gb();
  for (const auto& s : settings) {
    memo::sppo_schedule_options options{.stages = s.pp,
                                        .forward_seconds = std::vector<double>(static_cast<std::size_t>(s.n), 1.0),
                                        .backward_seconds = std::vector<double>(static_cast<std::size_t>(s.n), 2.0)};
    const double work = 3.0 * s.n;
    const auto plain = memo::simulate_sppo(options, profile);
    options.multiplexed = true;
    const auto mux = memo::simulate_sppo(options, profile);
    rows.push_back({s, memo::sppo_closed_form_bubble_ratio(s.pp, s.n), plain.step_seconds / work,
                    memo::sppo_closed_form_step_seconds(s.pp, s.n, work) / work, mux.step_seconds / work});
  }
  struct solver_row {
    const char* model;
    int gpus, layers;
    std::uint64_t hidden;
    int paper_sp, paper_pp, paper_n;
    std::optional<memo::sppo_candidate> chosen;
  };
  std::vector<solver_row> solved = {{"GPT-7B", 32, 32, 4096, 8, 4, 32, {}},
                                    {"GPT-13B", 64, 40, 5120, 8, 8, 32, {}},
                                    {"GPT-65B", 128, 80, 8192, 16, 8, 32, {}}};
  for (auto& row : solved) {
    memo::sppo_solver_input input;
    input.sequence_length = 512 * 1024;
    input.hidden = row.hidden;
    input.layers = row.layers;
    input.profile = profile;
    input.nodes = row.gpus / profile.gpus_per_node;
    row.chosen = memo::solve_sppo(input).best;
  }

  const std::vector<memo::project::paper_row> projected = memo::project::distributed_rows(quick);

  if (json) {
    memo::json_writer out;
    out.begin_object().field("bench", "distributed_bench").field("quick", quick).field("rounds", rounds);
    out.field("cores", cores).field("tokens", shape.tokens).field("heads", shape.heads);
    out.field("head_dim", shape.head_dim).field("layout_chunk", shape.layout_chunk);
    out.key("ranks").begin_array();
    for (const auto& r : results) {
      const auto t = memo::spread_of(r.seconds), s = memo::spread_of(r.speedup), c = memo::spread_of(r.comm_share);
      out.begin_object().field("ranks", r.ranks).field("seconds_median", t.median);
      out.field("speedup_median", s.median).field("speedup_min", s.min).field("speedup_max", s.max);
      out.field("speedup_predicted", static_cast<double>(std::min(r.ranks, cores)));
      out.field("comm_share_median", c.median).field("comm_share_min", c.min).field("comm_share_max", c.max);
      out.end_object();
    }
    out.end_array();
    out.key("model_step").begin_object();
    out.field("layers", model.config.num_layers).field("channels", model.config.channels);
    out.field("heads", model.config.num_heads).field("context", model.context).field("steps", model.steps);
    out.key("settings").begin_array();
    for (const auto& r : model_results) {
      const auto t = memo::spread_of(r.step_seconds), s = memo::spread_of(r.speedup),
                 c = memo::spread_of(r.comm_share);
      out.begin_object().field("setting", r.setting.name).field("sp", r.setting.sp).field("pp", r.setting.pp);
      out.field("subsequences", r.setting.subsequences).field("overlap", r.setting.overlap);
      out.field("step_seconds_median", t.median);
      out.field("speedup_median", s.median).field("speedup_min", s.min).field("speedup_max", s.max);
      out.field("speedup_predicted", r.predicted).field("simulated_bubble", r.bubble);
      out.field("comm_share_median", c.median).field("comm_share_min", c.min).field("comm_share_max", c.max);
      out.field("rank_peak_bytes", r.rank_peak_bytes).field("single_peak_bytes", r.single_peak_bytes);
      out.field("cores_used_median", memo::spread_of(r.cores_used).median);
      out.field("speedup_predicted_on_obtained_cores", memo::spread_of(r.predicted_obtained).median);
      out.end_object();
    }
    out.end_array().end_object();
    out.key("gradient_reduction").begin_object();
    out.field("layers", reducing.config.num_layers).field("channels", reducing.config.channels);
    out.field("context", reducing.context).field("steps", reducing.steps).field("rounds", quick ? 2 : rounds);
    out.key("settings").begin_array();
    for (const auto& r : reductions) {
      const auto [exposed_predicted, step_predicted] = reduction_prediction(r);
      out.begin_object().field("setting", r.setting.name).field("sp", r.setting.sp).field("pp", r.setting.pp);
      out.field("subsequences", r.setting.subsequences).field("unhidden_payload_share", r.unhidden_share);
      for (const int k : {0, 1}) {
        const std::string mode = k == 0 ? "after_" : "behind_";
        const auto t = memo::spread_of(r.step[k]), e = memo::spread_of(r.exposed[k]), c = memo::spread_of(r.sums[k]);
        out.field(mode + "step_seconds_median", t.median).field(mode + "step_seconds_min", t.min);
        out.field(mode + "step_seconds_max", t.max);
        out.field(mode + "exposed_seconds_median", e.median).field(mode + "exposed_seconds_min", e.min);
        out.field(mode + "exposed_seconds_max", e.max);
        out.field(mode + "sum_seconds_median", c.median);
      }
      out.field("behind_exposed_seconds_predicted", exposed_predicted);
      out.field("behind_step_seconds_predicted", step_predicted);
      out.end_object();
    }
    out.end_array().end_object();
    out.key("subsequence_offload").begin_object().field("layers", deeper.config.num_layers);
    out.key("settings").begin_array();
    for (const auto& r : offload_rows) {
      out.begin_object().field("setting", r.name).field("sp", r.sp).field("pp", r.pp);
      out.field("subsequences", r.subsequences).field("alpha", r.alpha);
      out.field("activation_bytes_off", r.off_bytes).field("activation_bytes_on", r.on_bytes);
      out.field("drop_bytes", static_cast<std::int64_t>(r.off_bytes) - static_cast<std::int64_t>(r.on_bytes));
      out.field("drop_bytes_predicted", static_cast<std::int64_t>(std::llround(r.predicted_drop)));
      out.field("host_bytes", r.host_bytes);
      out.field("host_bytes_predicted", static_cast<std::int64_t>(std::llround(r.predicted_host)));
      out.field("activation_bytes_with_host_kv", r.kv_bytes);
      out.field("host_kv_drop_bytes", static_cast<std::int64_t>(r.on_bytes) - static_cast<std::int64_t>(r.kv_bytes));
      out.field("host_kv_drop_bytes_predicted", static_cast<std::int64_t>(std::llround(r.predicted_kv_drop)));
      out.field("attention_host_bytes", r.kv_host_bytes);
      out.field("attention_host_bytes_predicted", static_cast<std::int64_t>(std::llround(r.predicted_kv_host)));
      out.end_object();
    }
    out.end_array().end_object();
    out.key("sppo").begin_array();
    for (const auto& r : rows) {
      out.begin_object().field("model", r.s.model).field("gpus", r.s.gpus).field("sp", r.s.sp).field("pp", r.s.pp);
      out.field("n", r.s.n).field("sequence", r.s.sequence).field("bubble_ratio", r.formula_ratio);
      out.field("step_over_work_simulated", r.simulated_step).field("step_over_work_formula", r.formula_step);
      out.field("step_over_work_multiplexed", r.multiplexed_step).end_object();
    }
    out.end_array();
    out.key("solver").begin_array();
    for (const auto& r : solved) {
      out.begin_object().field("model", r.model).field("gpus", r.gpus).field("sequence", 512 * 1024);
      out.field("paper_sp", r.paper_sp).field("paper_pp", r.paper_pp).field("paper_n", r.paper_n);
      if (r.chosen) {
        out.field("sp", r.chosen->sp).field("pp", r.chosen->pp).field("n", r.chosen->n);
        out.field("step_seconds", r.chosen->step_seconds);
      }
      out.end_object();
    }
    out.end_array();
    out.key("paper_projections").begin_array();
    for (const auto& row : projected) memo::project::write_json(out, row);
    out.end_array().end_object();
    std::printf("%s\n", out.str().c_str());
    return 0;
  }
  std::printf(
      "distributed attention, thread communicator: T %lld, %lld heads x %lld, chunk %lld per rank; "
      "%d rounds, %d cores\n",
      static_cast<long long>(shape.tokens), static_cast<long long>(shape.heads), static_cast<long long>(shape.head_dim),
      static_cast<long long>(shape.layout_chunk), rounds, cores);
  for (const auto& r : results) {
    const auto t = memo::spread_of(r.seconds), s = memo::spread_of(r.speedup), c = memo::spread_of(r.comm_share);
    std::printf("  P %d: %.3f s  speedup %.2f [%.2f, %.2f] (predicted %d)  all-to-all share %.3f [%.3f, %.3f]\n",
                r.ranks, t.median, s.median, s.min, s.max, std::min(r.ranks, cores), c.median, c.min, c.max);
  }
  std::printf("GPT-2 training step across thread ranks (L %d, C %d, %d heads, T %lld; one thread per rank and "
              "for the single device; %d steps per round; cores: the cores the ranks got while stepping):\n",
              model.config.num_layers, model.config.channels, model.config.num_heads,
              static_cast<long long>(model.context), static_cast<int>(model.steps));
  for (const auto& r : model_results) {
    const auto t = memo::spread_of(r.step_seconds), s = memo::spread_of(r.speedup), c = memo::spread_of(r.comm_share);
    std::printf("  %-18s step %.3f s  speedup %.2f [%.2f, %.2f] (predicted %.2f; %.2f on the %.2f cores obtained; "
                "bubble %.3f)  communication share %.3f [%.3f, %.3f]  device peak per rank / single %.2f\n",
                r.setting.name, t.median, s.median, s.min, s.max, r.predicted,
                memo::spread_of(r.predicted_obtained).median, memo::spread_of(r.cores_used).median, r.bubble,
                c.median, c.min, c.max,
                static_cast<double>(r.rank_peak_bytes) / static_cast<double>(r.single_peak_bytes));
  }
  std::printf("Gradient sums after the backward vs behind it (L %d, C %d, T %lld; %d steps per round, %d rounds; "
              "step: rank 0; exposed and sums: per rank, mean over ranks; ms):\n",
              reducing.config.num_layers, reducing.config.channels, static_cast<long long>(reducing.context),
              static_cast<int>(reducing.steps), quick ? 2 : rounds);
  for (const auto& r : reductions) {
    const auto [exposed_predicted, step_predicted] = reduction_prediction(r);
    for (const int k : {0, 1}) {
      const auto t = memo::spread_of(r.step[k]), e = memo::spread_of(r.exposed[k]), c = memo::spread_of(r.sums[k]);
      std::printf("  %-18s %-7s step %.2f [%.2f, %.2f]  exposed sums %.2f [%.2f, %.2f]  sums %.2f", r.setting.name,
                  k == 0 ? "after" : "behind", t.median * 1e3, t.min * 1e3, t.max * 1e3, e.median * 1e3, e.min * 1e3,
                  e.max * 1e3, c.median * 1e3);
      if (k == 1) {
        std::printf("  (predicted: step %.2f, exposed %.2f; %.1f%% of the payload cannot hide)", step_predicted * 1e3,
                    exposed_predicted * 1e3, 100.0 * r.unhidden_share);
      }
      std::printf("\n");
    }
  }
  std::printf("SPPO subsequence offload, rank 0's activation bytes (L %d, C %d, T %lld; alpha_j on every "
              "subsequence):\n",
              deeper.config.num_layers, deeper.config.channels, static_cast<long long>(deeper.context));
  for (const auto& r : offload_rows) {
    const double kib = 1024.0, drop = static_cast<double>(r.off_bytes) - static_cast<double>(r.on_bytes);
    std::printf("  %-18s alpha %.2f: %.1f KiB off, %.1f KiB on; drop %+.1f KiB (formula %+.1f KiB); pinned host "
                "%.1f KiB (formula %.1f KiB)\n",
                r.name, r.alpha, static_cast<double>(r.off_bytes) / kib, static_cast<double>(r.on_bytes) / kib,
                drop / kib, r.predicted_drop / kib, static_cast<double>(r.host_bytes) / kib, r.predicted_host / kib);
    const double kv_drop = static_cast<double>(r.on_bytes) - static_cast<double>(r.kv_bytes);
    std::printf("  %-18s   and host K/V: %.1f KiB; drop %+.1f KiB (formula %+.1f KiB); attention host store %.1f KiB "
                "(formula %.1f KiB)\n",
                "", static_cast<double>(r.kv_bytes) / kib, kv_drop / kib, r.predicted_kv_drop / kib,
                static_cast<double>(r.kv_host_bytes) / kib, r.predicted_kv_host / kib);
  }
  std::printf("SPPO pipeline (uniform subsequences; step / work of one stage):\n");
  for (const auto& r : rows) {
    std::printf(
        "  %-8s %3d GPUs SP %2d PP %d N %3d (%s): bubble (PP-1)/N %.4f; step simulated %.4f, "
        "formula %.4f; multiplexed %.4f\n",
        r.s.model, r.s.gpus, r.s.sp, r.s.pp, r.s.n, r.s.sequence, r.formula_ratio, r.simulated_step, r.formula_step,
        r.multiplexed_step);
  }
  std::printf("SPPO solver at 512K tokens (A800 profile) against Table 4:\n");
  for (const auto& r : solved) {
    if (r.chosen) {
      std::printf("  %-8s %3d GPUs: SP %d PP %d N %d (step %.1f s); paper SP %d PP %d N %d\n", r.model, r.gpus,
                  r.chosen->sp, r.chosen->pp, r.chosen->n, r.chosen->step_seconds, r.paper_sp, r.paper_pp, r.paper_n);
    } else {
      std::printf("  %-8s %3d GPUs: nothing fits; paper SP %d PP %d N %d\n", r.model, r.gpus, r.paper_sp, r.paper_pp,
                  r.paper_n);
    }
  }
  std::printf("Papers' settings projected (memo-project's model; profile per row):\n");
  for (const auto& row : projected) std::printf("  [%s] %s\n", row.profile.c_str(), memo::project::row_text(row).c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return memo::run_command("distributed_bench", usage, [&] { return bench_main(argc, argv); });
}

// pipeline_example: FPDT sequence parallelism and SPPO's subsequence
// pipeline in one page.
//
//   1. distributed attention: a 2K-token sequence on 4 ranks (threads, one
//      host backend each) in FPDT's rank-ordinal layout, forward and
//      backward through the Ulysses all-to-all, and the same attention on
//      one rank: the outputs agree;
//   2. SPPO: a FLOPs-balanced split of a 1M-token sequence into 8
//      subsequences, the phases of every stage for PP = 4, N = 8 (Table 3),
//      the pipeline simulated with and without multiplexing, and the
//      solver's (SP, PP, N) for GPT-7B on 32 GPUs at 512K tokens;
//   3. the reference GPT-2 trained on 4 ranks, 2 sequence-parallel x 2
//      pipeline stages over 4 subsequences, and on one device: the same
//      losses step by step.
//
// Usage: pipeline_example [--json]
#include <memo/backend/host_backend.hpp>
#include <memo/backend/self_communicator.hpp>
#include <memo/backend/thread_communicator.hpp>
#include <memo/core/command_line.hpp>
#include <memo/core/json.hpp>
#include <memo/model/gpt2_model.hpp>
#include <memo/model/gpt2_parallel_model.hpp>
#include <memo/pipeline/distributed_attention.hpp>
#include <memo/pipeline/sppo_partition.hpp>
#include <memo/pipeline/sppo_schedule.hpp>
#include <memo/pipeline/sppo_solver.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

namespace {

std::vector<float> pattern(std::size_t n, unsigned seed) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<float>(std::sin(0.37 * static_cast<double>(i) + seed));
  return v;
}

struct attention_outputs {
  std::vector<float> o, dq;  // global order
};

// One rank's forward and backward: its part of the global q, k, v, dout in
// the rank-ordinal layout, its outputs written back to global positions.
template <class Comm>
void attention_rank(Comm& comm, const memo::distributed_attention_shape& shape, const std::vector<float>& q,
                    const std::vector<float>& k, const std::vector<float>& v, const std::vector<float>& dout,
                    attention_outputs& out) {
  memo::host_backend::options options;
  options.compute_threads = 1;
  memo::host_backend backend(options);
  auto stream = backend.make_stream();
  memo::distributed_attention<Comm, memo::host_backend> attention(backend, comm, shape);
  const memo::fpdt_layout& layout = attention.layout();
  const std::int64_t L = layout.local_tokens(), H = shape.heads, K = shape.kv_heads, D = shape.head_dim;
  auto local = [&](const std::vector<float>& global, std::int64_t heads) {
    std::vector<float> part(static_cast<std::size_t>(L * heads * D));
    layout.shuffle<float>(global, comm.rank(), part, heads * D);
    return part;
  };
  auto lq = local(q, H), lk = local(k, K), lv = local(v, K), ldout = local(dout, H);
  std::vector<float> o(lq.size()), dq(lq.size()), dk(lk.size()), dv(lk.size());
  auto in = [&](std::vector<float>& x, std::int64_t h) {
    return memo::tensor_view<const float, 3>::contiguous(x.data(), {L, h, D});
  };
  auto inout = [&](std::vector<float>& x, std::int64_t h) {
    return memo::tensor_view<float, 3>::contiguous(x.data(), {L, h, D});
  };
  attention.forward(stream, in(lq, H), in(lk, K), in(lv, K), inout(o, H));
  attention.backward(stream, in(ldout, H), inout(dq, H), inout(dk, K), inout(dv, K));
  backend.synchronize(stream);
  layout.unshuffle<float>(o, comm.rank(), out.o, H * D);
  layout.unshuffle<float>(dq, comm.rank(), out.dq, H * D);
}

// Three AdamW steps of GPT-2 on one sequence: on the ranks
// of `comm` with `options`, each rank training its part of the model.
template <class Comm>
std::vector<float> train_ranks(Comm& comm, const memo::gpt2_config& config, const memo::gpt2_parallel_options& options,
                               const std::vector<std::int32_t>& in, const std::vector<std::int32_t>& tg) {
  memo::host_backend::options threads;
  threads.compute_threads = 1;
  memo::host_backend backend(threads);
  memo::gpt2_parallel_model<Comm, memo::host_backend> model(backend, comm, config, options);
  model.initialize(7);  // the values a single-device model gets from seed 7
  std::vector<float> losses;
  for (int step = 0; step < 3; ++step) losses.push_back(model.train_step(in, tg, {.learning_rate = 1e-2}));
  return losses;
}

/// 0 when the ranks agree with one device to fp32 rounding, else 1 (and why on stderr).
int agree(double attention_difference, double loss_difference) {
  if (attention_difference < 1e-4 && loss_difference < 1e-4) return 0;
  std::fprintf(stderr,
               "pipeline_example: the ranks differ from one device by %.3g (attention) and %.3g (losses), "
               "beyond the 1e-4 of fp32 rounding\n",
               attention_difference, loss_difference);
  return 1;
}

}  // namespace

constexpr const char* usage = "usage: pipeline_example [--json]\n";

int example_main(int argc, char** argv) {
  const bool json = memo::command_arguments(argc, argv).only("--json");
  {
    // 1. Distributed attention on 4 ranks against one rank.
    const memo::distributed_attention_shape shape{.tokens = 2048,
                                                  .heads = 8,
                                                  .kv_heads = 2,
                                                  .head_dim = 32,
                                                  .layout_chunk = 256,
                                                  .attention_chunk = 256,
                                                  .offload = true};
    const auto qn = static_cast<std::size_t>(shape.tokens * shape.heads * shape.head_dim);
    const auto kn = static_cast<std::size_t>(shape.tokens * shape.kv_heads * shape.head_dim);
    const auto q = pattern(qn, 1), k = pattern(kn, 2), v = pattern(kn, 3), dout = pattern(qn, 4);
    attention_outputs four{std::vector<float>(qn), std::vector<float>(qn)};
    attention_outputs one{std::vector<float>(qn), std::vector<float>(qn)};
    memo::run_thread_group(4, [&](memo::thread_communicator& comm) {
      attention_rank(comm, shape, q, k, v, dout, four);
    });
    memo::self_communicator self;
    attention_rank(self, shape, q, k, v, dout, one);
    double difference = 0, norm = 0;
    for (const float x : one.o) norm += double(x) * x;
    for (std::size_t i = 0; i < qn; ++i) {
      difference =
          std::max({difference, std::abs(double(four.o[i]) - one.o[i]), std::abs(double(four.dq[i]) - one.dq[i])});
    }

    // 2. SPPO.
    const std::uint64_t S = 1 << 20;
    const auto weights = memo::causal_cost_weights::for_hidden(4096);  // a 7B layer
    const auto balanced = memo::flops_balanced_partition(S, 8, weights);
    const auto equal = memo::equal_length_partition(S, 8);
    const double cost_ratio = static_cast<double>(memo::max_cost(balanced, weights)) /
                              static_cast<double>(memo::max_cost(equal, weights));
    const auto profile = memo::device_profile::a800_80gb();
    memo::sppo_schedule_options pipeline{.stages = 4,
                                         .forward_seconds = std::vector<double>(8, 1.0),
                                         .backward_seconds = std::vector<double>(8, 2.0)};
    const double plain_step = memo::simulate_sppo(pipeline, profile).step_seconds;
    pipeline.multiplexed = true;
    const double multiplexed_step = memo::simulate_sppo(pipeline, profile).step_seconds;
    memo::sppo_solver_input problem;
    problem.sequence_length = 512 * 1024;
    problem.hidden = 4096;
    problem.layers = 32;
    problem.nodes = 4;
    problem.profile = profile;
    const auto solution = memo::solve_sppo(problem);

    // 3. GPT-2 on 2 x 2 ranks against one device.
    const memo::gpt2_config config{256, 16, 64, 4, 4, 64};  // maxT, V, Vp, L, NH, C
    std::vector<std::int32_t> tokens(257);
    for (std::size_t t = 0; t < tokens.size(); ++t) tokens[t] = static_cast<std::int32_t>((t * t + 3 * t) % 16);
    const std::vector<std::int32_t> in(tokens.begin(), tokens.begin() + 256), tg(tokens.begin() + 1, tokens.end());
    const memo::gpt2_parallel_options options{
        .context = 256, .sequence_parallel = 2, .pipeline_stages = 2, .subsequences = 4, .attention_chunk = 64};
    std::vector<std::vector<float>> rank_losses(4);
    memo::run_thread_group(4, [&](memo::thread_communicator& comm) {
      rank_losses[static_cast<std::size_t>(comm.rank())] = train_ranks(comm, config, options, in, tg);
    });
    memo::host_backend backend;
    memo::gpt2_model<memo::host_backend> single(backend, config, {.context = 256, .attention_chunk = 64});
    single.initialize(7);
    std::vector<float> single_losses;
    for (int step = 0; step < 3; ++step) single_losses.push_back(single.train_step(in, tg, {.learning_rate = 1e-2}));
    double loss_difference = 0;
    for (std::size_t step = 0; step < single_losses.size(); ++step) {
      loss_difference = std::max(loss_difference, std::abs(double(rank_losses[0][step]) - single_losses[step]));
    }

    if (json) {
      memo::json_writer j;
      j.begin_object().field("example", "pipeline_example");
      j.field("model_loss_max_difference", loss_difference);
      j.field("attention_max_difference", difference);
      j.field("balanced_lengths", balanced.lengths());
      j.field("balanced_over_equal_cost", cost_ratio);
      j.field("plain_step", plain_step).field("multiplexed_step", multiplexed_step);
      j.field("sp", solution.best.sp).field("pp", solution.best.pp).field("n", solution.best.n);
      j.end_object();
      std::printf("%s\n", j.str().c_str());
      return agree(difference, loss_difference);
    }
    std::printf(
        "distributed attention, 4 ranks vs 1: T %lld, %lld heads (%lld K/V), |O| %.3f, largest "
        "difference %.2e\n",
        static_cast<long long>(shape.tokens), static_cast<long long>(shape.heads),
        static_cast<long long>(shape.kv_heads), std::sqrt(norm), difference);
    std::printf("FLOPs-balanced split of %llu tokens into 8:", static_cast<unsigned long long>(S));
    for (const std::uint64_t n : balanced.lengths()) std::printf(" %llu", static_cast<unsigned long long>(n));
    std::printf("\n  largest subsequence cost: %.3f x the equal split's\n", cost_ratio);
    std::printf("phases for PP 4, N 8 (Table 3):\n");
    auto ids = [](const std::vector<int>& list) {
      std::string text = "{";
      for (std::size_t i = 0; i < list.size(); ++i) {
        if (i > 0) text += ',';
        text += std::to_string(list[i]);
      }
      return text + "}";
    };
    for (int stage = 0; stage < 4; ++stage) {
      const auto p = memo::sppo_phases(4, 8, stage);
      std::printf("  stage %d: Left %s Steady %s Right %s\n", stage, ids(p.left).c_str(), ids(p.steady).c_str(),
                  ids(p.right).c_str());
    }
    std::printf("pipeline step (work of one stage = 24): %.1f plain, %.1f multiplexed\n", plain_step,
                multiplexed_step);
    std::printf("solver, GPT-7B on 32 GPUs at 512K: SP %d, PP %d, N %d\n", solution.best.sp, solution.best.pp,
                solution.best.n);
    std::printf("GPT-2 (L 4, C 64, T 256), 2 sequence-parallel x 2 stages, 4 subsequences vs one device:\n");
    for (std::size_t step = 0; step < single_losses.size(); ++step) {
      std::printf("  step %zu: loss %.6f on 4 ranks, %.6f on one device\n", step + 1, rank_losses[0][step],
                  single_losses[step]);
    }
    return agree(difference, loss_difference);
  }
}

int main(int argc, char** argv) {
  return memo::run_command("pipeline_example", usage, [&] { return example_main(argc, argv); });
}

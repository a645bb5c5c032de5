#include "memo/model/gpt2_parallel_model.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "../support/recording_backend.hpp"
#include "gpt2_reference.hpp"
#include "memo/backend/host_backend.hpp"
#include "memo/backend/thread_communicator.hpp"
#include "memo/model/gpt2_model.hpp"
#include "memo/model/gpt2_parallel_training.hpp"

namespace {

using parallel = memo::gpt2_parallel_model<memo::thread_communicator, memo::host_backend>;
using single = memo::gpt2_model<memo::host_backend>;

// maxT=64, V=11, Vp=16, L=4, NH=4, C=16: four layers for up to four stages,
// four heads for up to four sequence-parallel ranks.
memo::gpt2_config shape() { return {64, 11, 16, 4, 4, 16}; }
constexpr std::int64_t context = 32;

memo::host_backend::options one_thread() {
  memo::host_backend::options o;
  o.compute_threads = 1;
  return o;
}

/// Runs `body(rank, communicator, backend)` on P threads; returns each
/// rank's error message ("" when it returned normally).
using rank_body = std::function<void(int, memo::thread_communicator&, memo::host_backend&)>;

std::vector<std::string> on_ranks(int P, const rank_body& body,
                                  std::chrono::milliseconds timeout = std::chrono::milliseconds(30000)) {
  memo::thread_communicator::options options;
  options.timeout = timeout;
  auto comms = memo::thread_communicator::create_group(P, options);
  std::vector<std::string> errors(static_cast<std::size_t>(P));
  std::vector<std::thread> threads;
  for (int r = 0; r < P; ++r) {
    threads.emplace_back([&, r, comm = std::move(comms[static_cast<std::size_t>(r)])]() mutable {
      try {
        memo::host_backend backend(one_thread());
        body(r, comm, backend);
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(r)] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

struct result {
  std::vector<float> losses;        // per step
  std::vector<float> token_losses;  // of the first step
  std::vector<float> gradients;     // of the first step
  std::vector<float> parameters;    // after the last step
};

const memo::ops::adamw_config adamw{.learning_rate = 1e-2, .weight_decay = 0.01};

/// `steps` AdamW steps of the single-device model from `params`.
result single_run(const std::vector<float>& params, const std::vector<std::int32_t>& in,
                  const std::vector<std::int32_t>& tg, int steps, std::int64_t attention_chunk) {
  memo::host_backend backend(one_thread());
  single m(backend, shape(), {.context = context, .loss_chunk = 5, .attention_chunk = attention_chunk});
  m.set_parameters(params);
  result out;
  out.gradients.resize(m.parameter_count());
  out.parameters.resize(m.parameter_count());
  for (int s = 0; s < steps; ++s) {
    out.losses.push_back(m.forward_backward(in, tg));
    if (s == 0) {
      m.get_gradients(out.gradients);
      out.token_losses.assign(m.token_losses().begin(), m.token_losses().end());
    }
    m.update(adamw);
  }
  m.get_parameters(out.parameters);
  return out;
}

/// The same on P = S x Q thread ranks; every rank's result must agree, and
/// rank 0's is returned.
result parallel_run(const memo::gpt2_parallel_options& options, const std::vector<float>& params,
                    const std::vector<std::int32_t>& in, const std::vector<std::int32_t>& tg, int steps) {
  const int P = options.sequence_parallel * options.pipeline_stages;
  std::vector<result> per_rank(static_cast<std::size_t>(P));
  const auto errors = on_ranks(P, [&](int r, memo::thread_communicator& comm, memo::host_backend& backend) {
    parallel m(backend, comm, shape(), options);
    m.set_parameters(params);
    result& out = per_rank[static_cast<std::size_t>(r)];
    out.gradients.resize(m.parameter_count());
    out.parameters.resize(m.parameter_count());
    for (int s = 0; s < steps; ++s) {
      out.losses.push_back(m.forward_backward(in, tg));
      if (s == 0) {
        m.get_gradients(out.gradients);
        out.token_losses.assign(m.token_losses().begin(), m.token_losses().end());
      }
      m.update(adamw);
    }
    m.get_parameters(out.parameters);
  });
  for (const auto& e : errors) REQUIRE(e == "");
  for (int r = 1; r < P; ++r) {
    CHECK(per_rank[static_cast<std::size_t>(r)].losses == per_rank[0].losses);
    CHECK(per_rank[static_cast<std::size_t>(r)].gradients == per_rank[0].gradients);
    CHECK(per_rank[static_cast<std::size_t>(r)].parameters == per_rank[0].parameters);
  }
  return per_rank[0];
}

/// max |a - b| / max(1, max |b|).
double scaled_error(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  double worst = 0, scale = 1;
  for (std::size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, static_cast<double>(std::abs(a[i] - b[i])));
    scale = std::max(scale, static_cast<double>(std::abs(b[i])));
  }
  return worst / scale;
}

}  // namespace

TEST_CASE("gpt2_parallel_model: sequence parallel, pipelined and both give the single-device losses and gradients") {
  const auto params = memo_test::random_parameters(shape(), 3);
  const auto in = memo_test::random_tokens(context, 11, 1), tg = memo_test::random_tokens(context, 11, 2);
  const memo_test::vec p64(params.begin(), params.end());
  memo_test::vec ref_losses;
  const double ref = memo_test::reference_loss(shape(), p64, in, tg, &ref_losses);
  struct setting {
    int sp, pp, subsequences;
    bool balanced, offload;
    std::int64_t chunk;  // FPDT layout chunk
  };
  const setting settings[] = {
      {1, 1, 1, true, false, 8},   // one rank: the same model on the parallel code path
      {2, 1, 1, true, false, 4},   // FPDT over two ranks, four chunks each
      {4, 1, 1, true, true, 2},    // four ranks, host K/V
      {1, 1, 4, false, false, 4},  // subsequences without stages: K/V and dK/dV carried
      {1, 2, 2, true, false, 4},   // two stages
      {1, 4, 4, false, false, 8},  // four stages, one layer each
      {2, 2, 4, true, false, 2},   // both: two stages of two ranks
      {1, 1, 4, false, true, 4},   // subsequences with host K/V and the dK/dV carry on the host
      {2, 2, 4, true, true, 2},    // both, with host K/V
  };
  // The single-device run uses the same attention chunk (so each head's
  // arithmetic is the same; what differs is the order of sums).
  for (const auto& s : settings) {
    const std::int64_t attention_chunk = s.sp * s.chunk;
    CAPTURE(s.sp);
    CAPTURE(s.pp);
    CAPTURE(s.subsequences);
    CAPTURE(s.offload);
    const result want = single_run(params, in, tg, 3, attention_chunk);
    const result got = parallel_run({.context = context,
                                     .sequence_parallel = s.sp,
                                     .pipeline_stages = s.pp,
                                     .subsequences = s.subsequences,
                                     .balanced_subsequences = s.balanced,
                                     .layout_chunk = s.chunk,
                                     .attention_chunk = attention_chunk,
                                     .loss_chunk = 3,
                                     .kv_offload = s.offload},
                                    params, in, tg, 3);
    // The first loss and every token's against the fp64 model.
    CHECK(got.losses[0] == doctest::Approx(ref).epsilon(1e-5));
    for (std::int64_t t = 0; t < context; ++t) {
      const auto k = static_cast<std::size_t>(t);
      CHECK(got.token_losses[k] == doctest::Approx(ref_losses[k]).epsilon(1e-5));
    }
    // Per-step losses (AdamW replicated on every rank) and the gradients
    // against one device. (Trained parameters are not compared: AdamW turns
    // a gradient of 1e-12 instead of 0, on a parameter no token uses, into a
    // full step of the learning rate.)
    for (std::size_t k = 0; k < want.losses.size(); ++k) {
      CHECK(got.losses[k] == doctest::Approx(want.losses[k]).epsilon(1e-6));
    }
    CHECK(scaled_error(got.gradients, want.gradients) < 2e-6);
  }
}

TEST_CASE("gpt2_parallel_model: host K/V with and without the prefetch across layers: the same bits and bytes") {
  // The layers' attentions share one scratch whose slot events let a call's
  // first host fetch run during the call before it (the previous layer, or
  // the previous subsequence's last layer); off, every call's copies wait
  // for everything before the call. Only when the copies run moves: the
  // same bits, the same planned bytes, and the single device's values.
  const auto params = memo_test::random_parameters(shape(), 5);
  const auto in = memo_test::random_tokens(context, 11, 7), tg = memo_test::random_tokens(context, 11, 8);
  struct setting {
    int sp, pp, subsequences;
    std::int64_t chunk;
  };
  for (const auto& s : {setting{1, 1, 1, 4}, setting{2, 1, 1, 4}, setting{1, 1, 4, 4}, setting{2, 1, 2, 4},
                        setting{2, 2, 4, 2}}) {
    CAPTURE(s.sp);
    CAPTURE(s.pp);
    CAPTURE(s.subsequences);
    memo::gpt2_parallel_options options{.context = context,
                                        .sequence_parallel = s.sp,
                                        .pipeline_stages = s.pp,
                                        .subsequences = s.subsequences,
                                        .layout_chunk = s.chunk,
                                        .attention_chunk = s.sp * s.chunk,
                                        .loss_chunk = 3,
                                        .kv_offload = true};
    const result on = parallel_run(options, params, in, tg, 2);
    options.kv_prefetch_across_layers = false;
    const result off = parallel_run(options, params, in, tg, 2);
    CHECK(on.losses == off.losses);
    CHECK(on.token_losses == off.token_losses);
    CHECK(on.gradients == off.gradients);
    CHECK(on.parameters == off.parameters);
    const result want = single_run(params, in, tg, 2, s.sp * s.chunk);
    for (std::size_t k = 0; k < want.losses.size(); ++k) {
      CHECK(on.losses[k] == doctest::Approx(want.losses[k]).epsilon(1e-6));
    }
    CHECK(scaled_error(on.gradients, want.gradients) < 2e-6);
    // The same planned device bytes and host bytes on every rank.
    const int P = s.sp * s.pp;
    std::vector<std::size_t> device[2], host[2];
    for (const bool across : {false, true}) {
      device[across].resize(static_cast<std::size_t>(P));
      host[across].resize(static_cast<std::size_t>(P));
      options.kv_prefetch_across_layers = across;
      const auto errors = on_ranks(P, [&](int r, memo::thread_communicator& comm, memo::host_backend& backend) {
        parallel m(backend, comm, shape(), options);
        device[across][static_cast<std::size_t>(r)] = m.activation_bytes();
        host[across][static_cast<std::size_t>(r)] = m.host_offload_bytes();
      });
      for (const auto& e : errors) REQUIRE(e == "");
    }
    CHECK(device[0] == device[1]);
    CHECK(host[0] == host[1]);
  }
}

TEST_CASE("gpt2_parallel_model: shapes that do not split fail on every rank, naming the numbers") {
  struct bad {
    int ranks;
    memo::gpt2_parallel_options options;
    const char* message;
  };
  const bad cases[] = {
      {4, {.context = context, .sequence_parallel = 3}, "sequence parallel 3 x pipeline stages 1 must equal the 4 ranks"},
      {3, {.context = context, .sequence_parallel = 3}, "4 heads are not divisible by 3 sequence-parallel ranks"},
      {3, {.context = context, .pipeline_stages = 3}, "4 layers are not divisible by 3 pipeline stages"},
      {2, {.context = 30, .sequence_parallel = 2, .layout_chunk = 4}, "context 30 is not a multiple of 2 ranks x chunk 4"},
      {2, {.context = 47, .sequence_parallel = 2},
       "no layout chunk of 64, 32, ..., 1 tokens fits: context 47 must be a multiple of 2 ranks x the chunk and "
       "hold at least as many chunk groups as subsequences (1)"},
      {2, {.context = 32, .sequence_parallel = 2, .subsequences = 8, .layout_chunk = 4},
       "context 32 has 4 chunk groups of 8 tokens, fewer than the 8 subsequences"},
      {2, {.context = 32, .pipeline_stages = 2, .subsequences = 1}, "1 subsequences for 2 pipeline stages"},
      {2, {.context = 32, .sequence_parallel = 2, .subsequences = 2, .layout_chunk = 4, .attention_chunk = 3},
       "attention chunk 3 does not divide a chunk group of 8 tokens"},
      {1, {.context = 65}, "context 65 must lie in [1, maxT 64]"},
      {4, {.context = 32, .sequence_parallel = 4, .layout_chunk = std::int64_t{1} << 62},
       "layout chunk 4611686018427387904 is longer than a rank's 8 tokens (context 32 over 4 sequence-parallel ranks)"},
      {1, {.context = 32, .subsequences = -2}, "subsequences -2 is negative (0 chooses the default)"},
      {1, {.context = 32, .loss_chunk = -1}, "loss_chunk -1 is negative (0 chooses the default)"},
      {2, {.context = 32, .sequence_parallel = 2, .plan_time_limit_seconds = -1},
       "plan_time_limit_seconds -1.000000 must be a finite number of seconds, 0 or more"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.message);
    const auto errors = on_ranks(c.ranks, [&](int, memo::thread_communicator& comm, memo::host_backend& backend) {
      parallel m(backend, comm, shape(), c.options);
    }, std::chrono::milliseconds(5000));
    for (const auto& e : errors) CHECK(e.find(c.message) != std::string::npos);
  }
}

TEST_CASE("gpt2_parallel_model: ranks given different configs or options fail on every rank, naming each difference") {
  // Each case: what rank r is given, and the message every rank must
  // throw, written out by hand (a field per difference, in the order of
  // gpt2_parallel_agreement, each value with the ranks that hold it).
  struct mismatch {
    int ranks;
    std::function<void(int, memo::gpt2_config&, memo::gpt2_parallel_options&)> give;
    std::string message;
  };
  const memo::gpt2_parallel_options base{.context = context, .sequence_parallel = 2, .layout_chunk = 4};
  const mismatch cases[] = {
      {2,
       [](int r, memo::gpt2_config&, memo::gpt2_parallel_options& o) {
         if (r == 1) o.kv_offload = true, o.layout_chunk = 2;
       },
       "layout_chunk: 4 on rank 0; 2 on rank 1; and kv_offload: false on rank 0; true on rank 1"},
      {4,
       [](int r, memo::gpt2_config&, memo::gpt2_parallel_options& o) {
         o.sequence_parallel = r == 2 ? 4 : 2, o.pipeline_stages = 2;
       },
       "sequence_parallel: 2 on ranks 0, 1, 3; 4 on rank 2"},
      {3,
       [](int r, memo::gpt2_config& c, memo::gpt2_parallel_options& o) {
         o.sequence_parallel = 1, o.pipeline_stages = 1, o.context = r == 0 ? 16 : 32;
         if (r == 2) c.channels = 32;
       },
       "config.channels: 16 on ranks 0, 1; 32 on rank 2; and context: 16 on rank 0; 32 on ranks 1, 2"},
      {2,
       [](int r, memo::gpt2_config&, memo::gpt2_parallel_options& o) {
         o.sequence_parallel = 1, o.pipeline_stages = 2, o.subsequences = 2;
         o.subsequence_offload = std::vector<double>{0.5, r == 0 ? 0.5 : 0.25};
       },
       "subsequence_offload values: one set on rank 0; another on rank 1"},
      {2,
       [](int r, memo::gpt2_config&, memo::gpt2_parallel_options& o) {
         if (r == 1) o.plan_time_limit_seconds = std::numeric_limits<double>::quiet_NaN();
       },
       "plan_time_limit_seconds is finite and 0 or more: true on rank 0; false on rank 1"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.message);
    const auto errors = on_ranks(c.ranks, [&](int r, memo::thread_communicator& comm, memo::host_backend& backend) {
      memo::gpt2_config config = shape();
      memo::gpt2_parallel_options options = base;
      c.give(r, config, options);
      parallel m(backend, comm, config, options);
    }, std::chrono::milliseconds(5000));
    const std::string want = "the ranks were given different configs or options (every rank must be given the same): " +
                             c.message;
    for (const auto& e : errors) {
      CHECK(e.find(want) != std::string::npos);
      CHECK(e.substr(e.find(want)) == want);  // nothing after: no other difference named
    }
  }
  // The planner's time limit is each rank's own.
  const auto errors = on_ranks(2, [&](int r, memo::thread_communicator& comm, memo::host_backend& backend) {
    memo::gpt2_parallel_options options = base;
    options.plan_time_limit_seconds = r == 0 ? 0.1 : 0.2;
    parallel m(backend, comm, shape(), options);
  });
  for (const auto& e : errors) CHECK(e == "");
}

TEST_CASE("gpt2_parallel_model: a token outside the vocabulary on one rank fails every rank, and the next step is clean") {
  // Refused on that rank alone, it would leave the others waiting in the
  // step's collectives (forever under MPI without a timeout). The rank
  // steps on token 0 instead, and every rank fails once the step is done.
  const auto in = memo_test::random_tokens(context, 11, 1), tg = memo_test::random_tokens(context, 11, 2);
  std::vector<float> clean(2), after(2);
  const auto errors = on_ranks(2, [&](int r, memo::thread_communicator& comm, memo::host_backend& backend) {
    parallel m(backend, comm, shape(), {.context = context, .sequence_parallel = 2});
    m.initialize(2);
    clean[static_cast<std::size_t>(r)] = m.forward_backward(in, tg);
    auto mine = in;
    if (r == 0) mine[5] = 99;
    try {
      (void)m.forward_backward(mine, tg);
      FAIL("no error on rank " << r);
    } catch (const memo::error& e) {
      const std::string want =
          r == 0 ? "input token 99 at position 5 is outside the vocabulary [0, 11) (every rank fails this step)"
                 : "token ids outside the vocabulary [0, 11) were given to rank(s) 0 (each names the first)";
      CHECK_MESSAGE(std::string(e.what()).find(want) != std::string::npos, e.what());
    }
    after[static_cast<std::size_t>(r)] = m.forward_backward(in, tg);
  });
  for (const auto& e : errors) CHECK(e == "");
  CHECK(after == clean);
}

TEST_CASE("gpt2_parallel_model: ranks given different token windows fail on every rank, and the next step is clean") {
  // A trainer that feeds each rank its own data (as data parallelism
  // would) trains on a sequence no rank was given. Every rank gathers the
  // digests of every rank's inputs and targets with the step and fails
  // after it, naming the ranks; a later step with one window is clean.
  const auto in = memo_test::random_tokens(context, 11, 1), tg = memo_test::random_tokens(context, 11, 2);
  struct setting {
    int ranks, sp, pp;
    std::string message;
  };
  for (const setting& c : {setting{2, 2, 1, "one window on rank 0; another on rank 1"},
                           setting{4, 2, 2, "one window on ranks 0, 1, 3; another on rank 2"}}) {
    CAPTURE(c.message);
    std::vector<float> clean(static_cast<std::size_t>(c.ranks)), after(static_cast<std::size_t>(c.ranks));
    const auto errors = on_ranks(c.ranks, [&](int r, memo::thread_communicator& comm, memo::host_backend& backend) {
      parallel m(backend, comm, shape(), {.context = context, .sequence_parallel = c.sp, .pipeline_stages = c.pp});
      m.initialize(2);
      clean[static_cast<std::size_t>(r)] = m.forward_backward(in, tg);
      auto mine = tg;
      if (r == (c.ranks == 2 ? 1 : 2)) mine[context - 1] = (mine[context - 1] + 1) % 11;  // one target differs
      try {
        (void)m.forward_backward(in, mine);
        FAIL("no error on rank " << r);
      } catch (const memo::error& e) {
        const std::string want =
            "the ranks were given different token windows in one forward_backward (every rank must be given the "
            "same whole sequence of inputs and targets; this step's loss and gradients are not valid): " + c.message;
        CHECK(std::string(e.what()).find(want) != std::string::npos);
      }
      after[static_cast<std::size_t>(r)] = m.forward_backward(in, tg);
    });
    for (const auto& e : errors) CHECK(e == "");
    CHECK(after == clean);
  }
}

TEST_CASE("train_gpt2_parallel: ranks given different runs fail on every rank, naming the difference, and no steps is an error") {
  // Another learning rate on one rank would leave the stage's two copies
  // of the weights apart; other steps or outputs would issue other
  // collectives. Every rank fails before the model is built.
  std::FILE* sink = std::fopen("/dev/null", "w");
  REQUIRE(sink != nullptr);
  auto next = [](std::span<std::int32_t> in, std::span<std::int32_t> tg) {
    for (std::size_t t = 0; t < in.size(); ++t) in[t] = static_cast<std::int32_t>(t % 11), tg[t] = static_cast<std::int32_t>((t + 1) % 11);
  };
  struct mismatch {
    std::function<void(int, memo::gpt2_parallel_training&)> give;
    std::string message;
  };
  const std::string runs = "train_gpt2_parallel: the ranks were given different runs (every rank must be given the same): ";
  const mismatch cases[] = {
      {[](int r, memo::gpt2_parallel_training& run) { run.adamw.learning_rate = r == 0 ? 1e-3 : 0.1; },
       runs + "adamw.learning_rate: 0.001 on rank 0; 0.1 on rank 1"},
      {[](int r, memo::gpt2_parallel_training& run) { run.steps = r == 0 ? 3 : 2; }, runs + "steps: 3 on rank 0; 2 on rank 1"},
      {[](int r, memo::gpt2_parallel_training& run) { run.checkpoint_out = r == 0 ? "/tmp/never-written.bin" : ""; },
       runs + "checkpoint_out given: true on rank 0; false on rank 1"},
      {[](int, memo::gpt2_parallel_training& run) { run.steps = 0; }, "train_gpt2_parallel: steps 0 must be 1 or more"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.message);
    const auto errors = on_ranks(2, [&](int r, memo::thread_communicator& comm, memo::host_backend& backend) {
      memo::gpt2_parallel_training run{.steps = 1, .out = sink};
      c.give(r, run);
      (void)memo::train_gpt2_parallel(backend, comm, shape(), {.context = context, .sequence_parallel = 2}, run, next);
    }, std::chrono::milliseconds(5000));
    for (const auto& e : errors) CHECK(e.find(c.message) != std::string::npos);
  }
  std::fclose(sink);
}

TEST_CASE("train_gpt2_parallel: a checkpoint rank 0 cannot write fails every rank, naming it") {
  std::FILE* sink = std::fopen("/dev/null", "w");
  REQUIRE(sink != nullptr);
  auto next = [](std::span<std::int32_t> in, std::span<std::int32_t> tg) {
    for (std::size_t t = 0; t < in.size(); ++t) in[t] = static_cast<std::int32_t>(t % 11), tg[t] = static_cast<std::int32_t>((t + 1) % 11);
  };
  const std::string path = "/nonexistent-memo-directory/checkpoint.bin";
  const auto errors = on_ranks(2, [&](int, memo::thread_communicator& comm, memo::host_backend& backend) {
    memo::gpt2_parallel_training run{.steps = 1, .checkpoint_out = path, .out = sink};
    (void)memo::train_gpt2_parallel(backend, comm, shape(), {.context = context, .sequence_parallel = 2}, run, next);
  }, std::chrono::milliseconds(20000));
  std::fclose(sink);
  CHECK_MESSAGE(errors[0].find(path) != std::string::npos, errors[0]);
  CHECK_MESSAGE(errors[0].find("could not write the checkpoint") == std::string::npos, errors[0]);  // its own cause
  CHECK_MESSAGE(errors[1].find("train_gpt2_parallel: rank 0 could not write the checkpoint to " + path) !=
                    std::string::npos,
                errors[1]);
}

TEST_CASE("gpt2_parallel_model: a rank that leaves or fails mid-training fails its peers instead of hanging") {
  const auto in = memo_test::random_tokens(context, 11, 1), tg = memo_test::random_tokens(context, 11, 2);
  for (const bool pipeline : {false, true}) {
    CAPTURE(pipeline);
    const memo::gpt2_parallel_options options{.context = context,
                                              .sequence_parallel = pipeline ? 1 : 2,
                                              .pipeline_stages = pipeline ? 2 : 1};
    // Rank 1 steps once, then gives a window one token short (its check
    // fails before any collective) and leaves; rank 0 steps on. (A token
    // outside the vocabulary fails every rank alike, tested above.)
    const auto errors = on_ranks(2, [&](int r, memo::thread_communicator& comm, memo::host_backend& backend) {
      parallel m(backend, comm, shape(), options);
      m.initialize(1);
      m.train_step(in, tg, {});
      auto mine = in;
      if (r == 1) mine.pop_back();
      m.train_step(mine, tg, {});
    }, std::chrono::milliseconds(20000));
    CHECK(errors[1].find("31 inputs and 32 targets given, the context is 32") != std::string::npos);
    CHECK(errors[0].find("rank 1") != std::string::npos);
    CHECK(errors[0].find("left the group") != std::string::npos);
  }
}

TEST_CASE("gpt2_parallel_model: a step allocates nothing, its plan holds chunked MLP and loss buffers") {
  const auto in = memo_test::random_tokens(context, 11, 1), tg = memo_test::random_tokens(context, 11, 2);
  const auto errors = on_ranks(4, [&](int, memo::thread_communicator& comm, memo::host_backend& backend) {
    const memo::gpt2_parallel_options options{
        .context = context, .sequence_parallel = 2, .pipeline_stages = 2, .subsequences = 2, .layout_chunk = 4,
        .loss_chunk = 4};
    parallel m(backend, comm, shape(), options);
    m.initialize(7);
    m.train_step(in, tg, {});
    const auto device = backend.device_memory().allocation_count();
    const auto pinned = backend.pinned_memory().allocation_count();
    const auto bytes = backend.device_memory().current_bytes();
    for (int s = 0; s < 2; ++s) m.train_step(in, tg, {});
    CHECK(backend.device_memory().allocation_count() == device);
    CHECK(backend.pinned_memory().allocation_count() == pinned);
    CHECK(backend.device_memory().current_bytes() == bytes);
    CHECK(bytes == m.parameter_state_bytes() + m.activation_bytes());
    // A stage holds its two layers (12 C^2 + 13 C each), the token
    // embedding [Vp, C], and the position embedding [maxT, C] (stage 0) or
    // the final layernorm [2 C] (stage 1); four copies of 4 bytes.
    const std::uint64_t C = 16, held = 2 * (12 * C * C + 13 * C) + 16 * C + (m.stage() == 0 ? 64 * C : 2 * C);
    CHECK(m.parameter_state_bytes() == 16 * held);
    // Two layers per stage, two subsequences: four block sections.
    CHECK(m.step_trace().sections.size() == 4);
    // The MLP's gradient buffers are [c / 2, 4C] = [2, 64] floats, never
    // [rows of a subsequence, 4C]; the logits buffer is [4, Vp] (last stage).
    const std::uint64_t mlp = 2 * 64 * 4, whole = 8 * 64 * 4;
    bool has_mlp = false, has_whole = false, has_logits = false;
    for (const auto& b : m.step_trace().problem.buffers) {
      has_mlp = has_mlp || b.size_bytes == mlp;
      has_whole = has_whole || b.size_bytes == whole;
      has_logits = has_logits || b.size_bytes == 4 * 16 * 4;
    }
    CHECK(has_mlp);
    CHECK_FALSE(has_whole);
    CHECK(has_logits == (m.stage() == 1));
    CHECK(m.memory_plan().plan.peak_bytes >= m.memory_plan().flat_lower_bound_bytes);
    // Communication was counted: the all-to-alls, the hand-offs, the sums.
    CHECK(m.step_communication().calls > 0);
    CHECK(m.step_communication().payload_bytes > 0);
    CHECK(m.step_communication().seconds > 0.0);
  });
  for (const auto& e : errors) CHECK(e == "");
}

TEST_CASE("gpt2_parallel_model: all-to-alls behind the attention's compute change no bit") {
  const auto params = memo_test::random_parameters(shape(), 5);
  const auto in = memo_test::random_tokens(context, 11, 3), tg = memo_test::random_tokens(context, 11, 4);
  for (const int pp : {1, 2}) {
    CAPTURE(pp);
    memo::gpt2_parallel_options options{.context = context,
                                        .sequence_parallel = 2,
                                        .pipeline_stages = pp,
                                        .subsequences = 2 * pp,
                                        .layout_chunk = 2,
                                        .attention_chunk = 4,
                                        .loss_chunk = 4};
    const result overlapped = parallel_run(options, params, in, tg, 2);
    options.overlap_exchanges = false;
    const result serial = parallel_run(options, params, in, tg, 2);
    CHECK(overlapped.losses == serial.losses);
    CHECK(overlapped.gradients == serial.gradients);
    CHECK(overlapped.token_losses == serial.token_losses);
  }
}

namespace {

/// Bytes of one row of every skeletal tensor of a block: from the layout,
/// and by hand (16 C + 4 + NH floats: input, ln1, qkv, atty, res2, ln2, fch,
/// fch_gelu, four statistics and a log-sum-exp per head).
std::uint64_t skeletal_row_bytes(const memo::gpt2_config& c) {
  std::uint64_t bytes = 0;
  const memo::skeletal_layout layout = memo::gpt2_skeletal_layout(c, 1);
  for (const auto& t : layout.tensors()) bytes += t.bytes_per_token;
  REQUIRE(bytes == 4u * static_cast<std::uint64_t>(16 * c.channels + 4 + c.num_heads));
  return bytes;
}

/// Bytes of `copies` regions each of `rows` rows of every tensor of the
/// layout, one after the other, every tensor starting at a multiple of 256
/// bytes (as tensors are carved on the device).
std::uint64_t aligned_tensor_bytes(const memo::gpt2_config& c, std::int64_t rows, int copies,
                                   memo::gpt2_qkv_skeletal qkv = memo::gpt2_qkv_skeletal::kept) {
  std::uint64_t end = 0;
  for (int k = 0; k < copies; ++k) {
    const memo::skeletal_layout layout = memo::gpt2_skeletal_layout(c, rows, qkv);
    for (const auto& t : layout.tensors()) {
      end = (end + 255) / 256 * 256 + t.bytes();
    }
  }
  return end;
}

struct offload_setting {
  int sp, pp, subsequences;
  std::int64_t chunk;
};

struct rank_memory {
  std::uint64_t activation_bytes = 0, host_bytes = 0, predicted_host_bytes = 0, predicted_drop = 0;
};

/// Every rank's activation bytes and skeletal host bytes for `alpha`
/// (nullopt: no offload), and the formula's predictions for that rank.
std::vector<rank_memory> offload_memory(const offload_setting& s, const std::optional<std::vector<double>>& alpha) {
  const int P = s.sp * s.pp;
  std::vector<rank_memory> out(static_cast<std::size_t>(P));
  const auto errors = on_ranks(P, [&](int r, memo::thread_communicator& comm, memo::host_backend& backend) {
    parallel m(backend, comm, shape(),
               {.context = context, .sequence_parallel = s.sp, .pipeline_stages = s.pp,
                .subsequences = s.subsequences, .layout_chunk = s.chunk, .attention_chunk = s.sp * s.chunk,
                .loss_chunk = 3, .subsequence_offload = alpha});
    auto& mine = out[static_cast<std::size_t>(r)];
    mine.activation_bytes = m.activation_bytes();
    mine.host_bytes = m.skeletal_host_bytes();
    if (!alpha) return;
    // Device: every layer's tensors of every local row, against two slots
    // of the longest subsequence and layers x sum_j (n_j - o_j) rows.
    // Host: layers x sum_j o_j rows, o_j = round(alpha_j n_j). Less, in
    // both stores, the last two (layer, subsequence) units of the forward
    // (subsequences 0..N-1, layers ascending in each): they stay in the
    // slots until their backward, which comes next.
    const std::int64_t layers = shape().num_layers / s.pp;
    std::int64_t longest = 0, kept = 0, offloaded = 0;
    for (int j = 0; j < s.subsequences; ++j) {
      const auto [r0, r1] = m.shape().rows(j);
      const std::int64_t n = r1 - r0, o = std::llround((*alpha)[static_cast<std::size_t>(j)] * static_cast<double>(n));
      longest = std::max(longest, n);
      for (std::int64_t l = 0; l < layers; ++l) {
        const std::int64_t unit = j * layers + l, units = s.subsequences * layers;
        if (unit >= units - 2) continue;  // resident
        kept += n - o, offloaded += o;
      }
    }
    // The plan starts every buffer at a multiple of 256 bytes.
    auto buffer = [](std::uint64_t bytes) { return (bytes + 255) / 256 * 256; };
    const std::uint64_t row = skeletal_row_bytes(shape());
    const std::uint64_t before = buffer(aligned_tensor_bytes(shape(), context / s.sp, static_cast<int>(layers)));
    const std::uint64_t after = buffer(aligned_tensor_bytes(shape(), longest, 2)) +
                                buffer(static_cast<std::uint64_t>(kept) * row);
    mine.predicted_drop = before - after;
    mine.predicted_host_bytes = static_cast<std::uint64_t>(offloaded) * row;
  });
  for (const auto& e : errors) REQUIRE(e == "");
  return out;
}

}  // namespace

TEST_CASE("gpt2_parallel_model: SPPO subsequence offload gives the same losses and gradients") {
  const auto params = memo_test::random_parameters(shape(), 3);
  const auto in = memo_test::random_tokens(context, 11, 1), tg = memo_test::random_tokens(context, 11, 2);
  const offload_setting settings[] = {{1, 2, 4, 4}, {2, 2, 4, 2}, {1, 1, 4, 4}};
  for (const auto& s : settings) {
    CAPTURE(s.sp);
    CAPTURE(s.pp);
    memo::gpt2_parallel_options options{.context = context,
                                        .sequence_parallel = s.sp,
                                        .pipeline_stages = s.pp,
                                        .subsequences = s.subsequences,
                                        .layout_chunk = s.chunk,
                                        .attention_chunk = s.sp * s.chunk,
                                        .loss_chunk = 3};
    const result off = parallel_run(options, params, in, tg, 2);
    const result single = single_run(params, in, tg, 2, s.sp * s.chunk);
    // Nothing offloaded, everything, and a mix with rows split inside
    // subsequences (0.3 and 0.55 of their rows round to fractions of them).
    const std::vector<std::vector<double>> patterns = {
        {0, 0, 0, 0}, {1, 1, 1, 1}, {1, 0.55, 0.3, 0}, {0.25, 1, 0, 0.7}};
    for (const auto& alpha : patterns) {
      CAPTURE(alpha[1]);
      options.subsequence_offload = alpha;
      const result on = parallel_run(options, params, in, tg, 2);
      CHECK(on.losses == off.losses);
      CHECK(on.token_losses == off.token_losses);
      CHECK(on.gradients == off.gradients);
      for (std::size_t k = 0; k < on.losses.size(); ++k) {
        CHECK(on.losses[k] == doctest::Approx(single.losses[k]).epsilon(1e-6));
      }
      CHECK(scaled_error(on.gradients, single.gradients) < 2e-6);
    }
    // Both levels off the device: the skeletal rows (without qkv) through
    // the swapper, Q/K/V and the dK/dV carry in the attention's host store.
    options.subsequence_offload = std::vector<double>{1, 0.55, 0.3, 0};
    options.kv_offload = true;
    const result both = parallel_run(options, params, in, tg, 2);
    for (std::size_t k = 0; k < both.losses.size(); ++k) {
      CHECK(both.losses[k] == doctest::Approx(single.losses[k]).epsilon(1e-6));
    }
    CHECK(scaled_error(both.gradients, single.gradients) < 2e-6);
  }
}

TEST_CASE("gpt2_parallel_model: subsequence offload shrinks device memory by the formula's bytes") {
  const offload_setting settings[] = {{1, 2, 4, 4}, {2, 2, 4, 2}};
  const std::vector<std::vector<double>> patterns = {{0, 0, 0, 0}, {1, 1, 1, 1}, {1, 0.55, 0.3, 0}};
  for (const auto& s : settings) {
    CAPTURE(s.sp);
    CAPTURE(s.pp);
    const auto off = offload_memory(s, std::nullopt);
    for (const auto& r : off) CHECK(r.host_bytes == 0);
    for (const auto& alpha : patterns) {
      CAPTURE(alpha[1]);
      const auto on = offload_memory(s, alpha);
      for (std::size_t r = 0; r < on.size(); ++r) {
        CAPTURE(r);
        CHECK(off[r].activation_bytes - on[r].activation_bytes == on[r].predicted_drop);
        CHECK(on[r].host_bytes == on[r].predicted_host_bytes);
      }
    }
  }
}

TEST_CASE("gpt2_parallel_model: host K/V holds one subsequence's attention state and no skeletal qkv") {
  // Without kv_offload each layer's attention keeps the sharded K, V and
  // the dK/dV carry of the whole sequence between subsequences; with it the
  // host keeps them, one state of the longest subsequence serves every
  // layer, and the layers share one attention scratch (with slots and
  // staging for the copies). The blocks' qkv [T / S, 3C] leaves the skeletal
  // tensors for one buffer that every block's forward reuses. The planned
  // arena changes by exactly that.
  for (const auto& s : {offload_setting{1, 2, 4, 4}, offload_setting{2, 2, 4, 2}}) {
    CAPTURE(s.sp);
    const int P = s.sp * s.pp;
    std::vector<std::int64_t> bytes[2];
    std::vector<std::int64_t> predicted(static_cast<std::size_t>(P)), host(static_cast<std::size_t>(P));
    for (const bool kv : {false, true}) {
      bytes[kv].resize(static_cast<std::size_t>(P));
      const auto errors = on_ranks(P, [&](int r, memo::thread_communicator& comm, memo::host_backend& backend) {
        parallel m(backend, comm, shape(),
                   {.context = context, .sequence_parallel = s.sp, .pipeline_stages = s.pp,
                    .subsequences = s.subsequences, .layout_chunk = s.chunk, .attention_chunk = s.sp * s.chunk,
                    .loss_chunk = 3, .kv_offload = kv});
        const auto k = static_cast<std::size_t>(r);
        bytes[kv][k] = static_cast<std::int64_t>(m.activation_bytes());
        if (!kv) return;
        host[k] = static_cast<std::int64_t>(m.host_offload_bytes());
        std::int64_t longest = 0;
        for (int j = 0; j < s.subsequences; ++j) {
          const auto [r0, r1] = m.shape().rows(j);
          longest = std::max(longest, (r1 - r0) * s.sp);  // global tokens
        }
        memo::distributed_attention_shape a{.tokens = context, .heads = 4, .kv_heads = 4, .head_dim = 4,
                                            .layout_chunk = s.chunk, .attention_chunk = s.sp * s.chunk,
                                            .max_run_tokens = longest, .keep_state = true};
        using attention = memo::distributed_attention<memo::thread_communicator, memo::host_backend>;
        const auto kept = attention::required_bytes(a, s.sp);
        a.offload = true;
        const auto offloaded = attention::required_bytes(a, s.sp);
        auto buffer = [](std::size_t b) { return static_cast<std::int64_t>((b + 255) / 256 * 256); };
        const std::int64_t layers = shape().num_layers / s.pp, rows = context / s.sp;
        const auto skeletal = [&](memo::gpt2_qkv_skeletal qkv) {
          return buffer(aligned_tensor_bytes(shape(), rows, static_cast<int>(layers), qkv));
        };
        predicted[k] = layers * buffer(kept.state) + buffer(kept.attention_device) -
                       (buffer(offloaded.state) + buffer(offloaded.attention_device)) +
                       skeletal(memo::gpt2_qkv_skeletal::kept) - skeletal(memo::gpt2_qkv_skeletal::dropped) -
                       buffer(static_cast<std::size_t>(rows * 3 * 16) * sizeof(float));
        // The host holds Q, K, V and the dK/dV carry of every token of
        // every layer (this rank's heads).
        CHECK(host[k] >= layers * context * (4 / s.sp) * 4 * 5 * 4);
      });
      for (const auto& e : errors) REQUIRE(e == "");
    }
    for (int r = 0; r < P; ++r) {
      const auto k = static_cast<std::size_t>(r);
      CAPTURE(r);
      CHECK(bytes[0][k] - bytes[1][k] == predicted[k]);
      CHECK(predicted[k] > 0);
    }
  }
}

TEST_CASE("gpt2_parallel_model: bad offload ratios fail on every rank, naming the subsequence and the value") {
  struct bad {
    std::vector<double> alpha;
    const char* message;
  };
  const bad cases[] = {
      {{0, -0.5, 0, 0}, "offload ratio 1 is -0.5"},
      {{0, 0, 1.5, 0}, "offload ratio 2 is 1.5"},
      {{std::nan(""), 0, 0, 0}, "offload ratio 0 is nan"},
      {{0, 0, 0}, "3 offload ratios given for 4 subsequences"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.message);
    const auto errors = on_ranks(2, [&](int, memo::thread_communicator& comm, memo::host_backend& backend) {
      parallel m(backend, comm, shape(),
                 {.context = context, .pipeline_stages = 2, .subsequences = 4, .subsequence_offload = c.alpha});
    }, std::chrono::milliseconds(5000));
    for (const auto& e : errors) CHECK(e.find(c.message) != std::string::npos);
  }
}

TEST_CASE("gpt2_parallel_model: gradients summed behind the backward give the bits of one sum after it") {
  // The thread communicator sums each element in rank order whatever the
  // message, so bucketed sums on their own stream change no bit.
  const auto params = memo_test::random_parameters(shape(), 6);
  const auto in = memo_test::random_tokens(context, 11, 5), tg = memo_test::random_tokens(context, 11, 6);
  struct setting {
    int sp, pp, subsequences;
    bool kv_offload, subsequence_offload;
  };
  for (const setting& s : {setting{2, 1, 1, false, false}, setting{4, 1, 1, true, false}, setting{1, 2, 4, false, true},
                           setting{2, 2, 4, false, false}, setting{2, 2, 4, true, true}}) {
    CAPTURE(s.sp);
    CAPTURE(s.pp);
    CAPTURE(s.kv_offload);
    memo::gpt2_parallel_options options{.context = context,
                                        .sequence_parallel = s.sp,
                                        .pipeline_stages = s.pp,
                                        .subsequences = s.subsequences,
                                        .layout_chunk = 2,
                                        .attention_chunk = 2 * s.sp,
                                        .loss_chunk = 4,
                                        .kv_offload = s.kv_offload};
    if (s.subsequence_offload) options.subsequence_offload = std::vector<double>{1, 0.5, 0.25, 0};
    REQUIRE(options.overlap_gradient_reduction);
    const result overlapped = parallel_run(options, params, in, tg, 2);
    options.overlap_gradient_reduction = false;
    const result after = parallel_run(options, params, in, tg, 2);
    CHECK(overlapped.losses == after.losses);
    CHECK(overlapped.token_losses == after.token_losses);
    CHECK(overlapped.gradients == after.gradients);
    CHECK(overlapped.parameters == after.parameters);
  }
}

TEST_CASE("gpt2_parallel_model: a stage's gradient buckets cover it once, layers from the last, the tail last") {
  const auto errors = on_ranks(4, [&](int, memo::thread_communicator& comm, memo::host_backend& backend) {
    parallel m(backend, comm, shape(), {.context = context, .sequence_parallel = 2, .pipeline_stages = 2});
    const memo::gpt2_gradient_buckets& plan = m.gradient_buckets();
    // Two layers of C = 16: every piece is small, so one packed bucket per
    // layer and one for the tail (wte and wpe, or wte and lnf).
    REQUIRE(plan.buckets.size() == 3);
    CHECK(plan.buckets[0].layer == 1);
    CHECK(plan.buckets[1].layer == 0);
    CHECK(plan.buckets[2].layer == -1);
    const std::uint64_t C = 16;
    CHECK(plan.buckets[0].count() == 12 * C * C + 13 * C);
    CHECK(plan.buckets[0].pieces.size() == 12);
    CHECK(plan.covers_once(m.parameter_state_bytes() / 16));
  });
  for (const auto& e : errors) CHECK(e == "");
}

namespace {

using recorder = memo::testing::recording_backend<memo::host_backend>;

/// A recording backend whose `gemm` number `fail_at` (counted from the
/// last reset) throws where it is issued, as a failing call would, or with
/// `on_stream` fails where it runs (a task on the stream that throws, as a
/// faulting kernel would: the streams that wait for it afterwards carry the
/// failure too).
class failing_backend : public recorder {
 public:
  explicit failing_backend(memo::host_backend& inner) : recorder(inner) {}
  template <class Stream, class... Args>
  void gemm(Stream& on, Args&&... args) {
    if (++gemms == fail_at) {
      const std::string what = "injected failure at GEMM " + std::to_string(gemms);
      if (!on_stream) throw memo::error(what);
      enqueue(on, [what] { throw memo::error(what); });
      return;
    }
    recorder::gemm(on, std::forward<Args>(args)...);
  }
  std::size_t gemms = 0, fail_at = 0;
  bool on_stream = false;
};

/// A thread communicator whose streams are a recording backend's (the
/// tasks are the thread communicator's: the recording backend passes the
/// host backend's native streams through).
template <class Recorder>
class recorded_communicator : public memo::communicator_ops<recorded_communicator<Recorder>, Recorder> {
 public:
  using backend_type = Recorder;
  explicit recorded_communicator(memo::thread_communicator inner) : inner_(std::move(inner)) {}
  [[nodiscard]] int rank() const { return inner_.rank(); }
  [[nodiscard]] int size() const { return inner_.size(); }
  [[nodiscard]] std::string describe() const { return inner_.describe(); }
  void check_usable() const { inner_.check_usable(); }
  [[nodiscard]] recorded_communicator split(int color, int key) {
    return recorded_communicator(inner_.split(color, key));
  }
  [[nodiscard]] auto task(const memo::comm_call& call) const { return inner_.task(call); }

 private:
  memo::thread_communicator inner_;
};
static_assert(memo::CommunicatorOf<recorded_communicator<recorder>, recorder>);
static_assert(memo::CommunicatorOf<recorded_communicator<failing_backend>, failing_backend>);

/// What one rank's step asked of its backend, read from the log.
struct reduction_order {
  std::size_t first_sum = 0, last_sum = 0, sums = 0;  // collectives on the reduction stream
  std::size_t waited_first = 0;   // the reduction stream's first wait for the compute stream
  std::size_t last_gemm = 0;      // the compute stream's last GEMM of the step (layer 0's backward)
  std::size_t join = 0;           // the compute stream's wait for a mark after the last sum
  std::size_t optimizer = 0;      // the compute stream's first work of update()
  bool joined = false, reduction_stream = false;
};

reduction_order read_order(const recorder& backend) {
  reduction_order out;
  const auto& names = backend.stream_names();
  std::size_t compute = names.size(), reduce = names.size();
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (names[i] == "gpt2_parallel_model") compute = i;
    if (names[i] == "gpt2_parallel_model gradient reduction") reduce = i;
  }
  REQUIRE(compute < names.size());
  out.reduction_stream = reduce < names.size();
  const std::vector<memo::testing::recorded_call> calls = backend.calls();
  std::map<std::size_t, std::pair<std::size_t, std::size_t>> marks;  // event -> (stream, call index)
  bool optimizer_found = false;
  for (std::size_t i = 0; i < calls.size(); ++i) {
    const auto& c = calls[i];
    if (c.kind == memo::testing::call_kind::record) marks[c.event] = {c.stream, i};
    if (c.label == "update") {
      if (c.stream == compute && c.kind == memo::testing::call_kind::enqueue && !optimizer_found) {
        out.optimizer = i, optimizer_found = true;
      }
      continue;
    }
    if (c.stream == reduce && c.kind == memo::testing::call_kind::enqueue) {
      if (out.sums++ == 0) out.first_sum = i;
      out.last_sum = i;
    }
    if (c.stream == reduce && c.kind == memo::testing::call_kind::wait && out.waited_first == 0) {
      const auto m = marks.find(c.event);
      if (m != marks.end() && m->second.first == compute) out.waited_first = i;
    }
    if (c.stream == compute && c.kind == memo::testing::call_kind::enqueue &&
        (c.member == "gemm" || c.member == "gemm_strided_batched")) {
      out.last_gemm = i;
    }
    if (c.stream == compute && c.kind == memo::testing::call_kind::wait && out.sums > 0) {
      const auto m = marks.find(c.event);
      if (m != marks.end() && m->second.first == reduce && m->second.second > out.last_sum) {
        out.join = i, out.joined = true;
      }
    }
  }
  REQUIRE(optimizer_found);
  return out;
}

}  // namespace

TEST_CASE("gpt2_parallel_model: a layer's gradient sum is queued before the layers below it are, the optimizer waits for all") {
  // Issue order on each rank, from the backend's log: with the sums at the
  // end of the step the first one would follow the last GEMM of the
  // backward (layer 0's); behind the backward it precedes it.
  const auto in = memo_test::random_tokens(context, 11, 1), tg = memo_test::random_tokens(context, 11, 2);
  for (const bool overlap : {true, false}) {
    for (const int pp : {1, 2}) {
      CAPTURE(overlap);
      CAPTURE(pp);
      const int P = 2 * pp;
      std::vector<reduction_order> orders(static_cast<std::size_t>(P));
      std::vector<std::size_t> buckets(static_cast<std::size_t>(P));
      const auto errors = on_ranks(P, [&](int r, memo::thread_communicator& comm, memo::host_backend& host) {
        recorder backend(host);
        recorded_communicator<recorder> world(std::move(comm));
        memo::gpt2_parallel_model<recorded_communicator<recorder>, recorder> m(
            backend, world, shape(),
            {.context = context, .sequence_parallel = 2, .pipeline_stages = pp, .layout_chunk = 4,
             .overlap_gradient_reduction = overlap});
        m.initialize(3);
        backend.clear_calls();
        backend.set_label("step");
        (void)m.forward_backward(in, tg);
        backend.set_label("update");
        m.update({});
        backend.synchronize();
        orders[static_cast<std::size_t>(r)] = read_order(backend);
        buckets[static_cast<std::size_t>(r)] = m.gradient_buckets().buckets.size();
        const memo::gpt2_gradient_reduction_totals& sums = m.step_gradient_reduction();
        CHECK(sums.collectives.calls > 0);
        CHECK(sums.collectives.seconds > 0.0);
        CHECK(sums.exposed_seconds >= 0.0);
        CHECK(m.step_communication().calls > sums.collectives.calls);
      });
      for (const auto& e : errors) REQUIRE(e == "");
      for (int r = 0; r < P; ++r) {
        CAPTURE(r);
        const reduction_order& o = orders[static_cast<std::size_t>(r)];
        CHECK(o.reduction_stream == overlap);
        if (!overlap) {
          CHECK(o.sums == 0);
          continue;
        }
        // One collective per bucket, the tied wte's too on the first and
        // last stage of a pipeline.
        CHECK(o.sums == buckets[static_cast<std::size_t>(r)] + (pp > 1 ? 1 : 0));
        // The first sum waits for the compute stream, and is queued while
        // the backward of the layers below is still being queued.
        CHECK(o.waited_first > 0);
        CHECK(o.waited_first < o.first_sum);
        CHECK(o.first_sum < o.last_gemm);
        // The compute stream joins after the last sum, before the optimizer.
        CHECK(o.joined);
        CHECK(o.join < o.optimizer);
      }
    }
  }
}

TEST_CASE("gpt2_parallel_model: with one rank per stage only the tied embedding is summed, between the end stages") {
  // Four stages of one rank each: a sum over one rank would change
  // nothing, so no stage sums its layers (no buckets, no staging buffer:
  // the same plan with the sums behind the backward or after it); the
  // first and last stage sum their wte copies (one collective), behind the
  // backward on a reduction stream of their own or after it; the middle
  // stages have no reduction stream. The losses match the single device.
  const auto in = memo_test::random_tokens(context, 11, 1), tg = memo_test::random_tokens(context, 11, 2);
  const auto params = memo_test::random_parameters(shape(), 5);
  const result want = single_run(params, in, tg, 1, context);
  std::vector<std::size_t> arena[2];
  for (const bool overlap : {true, false}) {
    CAPTURE(overlap);
    arena[overlap].resize(4);
    const auto errors = on_ranks(4, [&](int r, memo::thread_communicator& comm, memo::host_backend& host) {
      recorder backend(host);
      recorded_communicator<recorder> world(std::move(comm));
      memo::gpt2_parallel_model<recorded_communicator<recorder>, recorder> m(
          backend, world, shape(),
          {.context = context, .pipeline_stages = 4, .subsequences = 4, .overlap_gradient_reduction = overlap});
      m.set_parameters(params);
      const float loss = m.forward_backward(in, tg);
      CHECK(loss == doctest::Approx(want.losses[0]).epsilon(1e-5));
      const bool end_stage = r == 0 || r == 3;
      CHECK(m.sums_gradients() == end_stage);
      CHECK(m.gradient_buckets().buckets.empty());
      CHECK(m.step_gradient_reduction().collectives.calls == (end_stage ? 1u : 0u));
      const auto& names = backend.stream_names();
      const bool reduction_stream =
          std::find(names.begin(), names.end(), "gpt2_parallel_model gradient reduction") != names.end();
      CHECK(reduction_stream == (overlap && end_stage));
      arena[overlap][static_cast<std::size_t>(r)] = m.activation_bytes();
    });
    for (const auto& e : errors) CHECK(e == "");
  }
  CHECK(arena[true] == arena[false]);
}

TEST_CASE("gpt2_parallel_model: a step that throws after its first gradient sums leaves none running, the next is clean") {
  // Both ranks of a stage throw at the same GEMM of layer 0's backward in
  // the last backward op (after the sums of layers 3 to 1 are queued on
  // the reduction stream), drain, and step again: the same loss and
  // gradients as their first clean step, with no race on the gradients or
  // the staging buffer (ThreadSanitizer runs this too). (Across pipeline
  // stages a throw mid-step leaves the other stage waiting for a hand-off,
  // which fails the group instead: the test above.)
  // With `on_stream` the failure happens where the GEMM runs instead, and
  // reaches the exchange, copy and reduction streams and the events they
  // record: wherever it happens, the next step is clean.
  const auto in = memo_test::random_tokens(context, 11, 1), tg = memo_test::random_tokens(context, 11, 2);
  for (const bool on_stream : {false, true}) {
    for (const bool kv_offload : {false, true}) {
      for (const int subsequences : {1, 4}) {
        const auto errors = on_ranks(2, [&](int, memo::thread_communicator& comm, memo::host_backend& host) {
          CAPTURE(on_stream);  // here: the checks run on the rank's thread
          CAPTURE(kv_offload);
          CAPTURE(subsequences);
          failing_backend backend(host);
          backend.on_stream = on_stream;
          recorded_communicator<failing_backend> world(std::move(comm));
          memo::gpt2_parallel_model<recorded_communicator<failing_backend>, failing_backend> m(
              backend, world, shape(),
              {.context = context, .sequence_parallel = 2, .subsequences = subsequences, .layout_chunk = 4,
               .kv_offload = kv_offload});
          m.initialize(3);
          backend.gemms = 0;
          const float clean = m.forward_backward(in, tg);
          std::vector<float> want(m.parameter_count()), got(m.parameter_count());
          m.get_gradients(want);
          const std::size_t per_step = backend.gemms;
          const std::vector<std::size_t> where =
              on_stream ? std::vector<std::size_t>{1, per_step / 3, per_step / 2, per_step - 1}
                        : std::vector<std::size_t>{per_step - 1};
          for (const std::size_t at : where) {
            CAPTURE(at);
            backend.gemms = 0, backend.fail_at = at;
            CHECK_THROWS_WITH_AS((void)m.forward_backward(in, tg), doctest::Contains("injected failure at GEMM"),
                                 memo::error);
            backend.fail_at = 0;
            CHECK(m.forward_backward(in, tg) == clean);
            m.get_gradients(got);
            CHECK(got == want);
          }
        });
        for (const auto& e : errors) CHECK(e == "");
      }
    }
  }
}

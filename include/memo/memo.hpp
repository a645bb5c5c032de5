// memo/memo.hpp — the whole library in one include.
//
// Headers that need an optional component are included only when that
// component's target is linked (it defines the matching MEMO_HAS_* macro):
// memo::lpsolve (MIP and LP solvers), memo::cuda (CUDA backend), memo::nccl,
// memo::mpi. Include individual headers to keep compile times down.
#pragma once

// core/: configuration, errors, byte arithmetic, JSON, memory regions, tensor views,
// the transformer-layer description and device profiles
#include "memo/core/atomic_file.hpp"
#include "memo/core/bytes.hpp"
#include "memo/core/command_line.hpp"
#include "memo/core/config.hpp"
#include "memo/core/device_profile.hpp"
#include "memo/core/error.hpp"
#include "memo/core/json.hpp"
#include "memo/core/memory_region.hpp"
#include "memo/core/report_output.hpp"
#include "memo/core/spread.hpp"
#include "memo/core/tensor_view.hpp"
#include "memo/core/text.hpp"
#include "memo/core/transformer_layer.hpp"
#if MEMO_HAS_LPSOLVE
#include "memo/core/lp_solve.hpp"
#endif

// backend/: the Backend concept and its implementations
#include "memo/backend/buffer.hpp"
#include "memo/backend/concepts.hpp"
#include "memo/backend/host_backend.hpp"
#include "memo/backend/host_profile.hpp"
#include "memo/backend/memory_resource.hpp"
#include "memo/backend/stream_failure.hpp"
#include "memo/backend/communicator.hpp"
#include "memo/backend/self_communicator.hpp"
#include "memo/backend/thread_communicator.hpp"
#include "memo/backend/timed_communicator.hpp"
#if MEMO_HAS_CUDA
#include "memo/backend/cuda_backend.hpp"
#include "memo/backend/cuda_check.hpp"
#endif
#if MEMO_HAS_NCCL
#include "memo/backend/nccl_check.hpp"
#endif
#if MEMO_HAS_MPI
#include "memo/backend/mpi_check.hpp"
#include "memo/backend/mpi_communicator.hpp"
#endif
#if MEMO_HAS_NCCL && MEMO_HAS_MPI
#include "memo/backend/nccl_communicator.hpp"
#endif

// schedule/: stream schedules (execute or simulate), layer cost model
#include "memo/schedule/layer_cost.hpp"
#include "memo/schedule/memo_step.hpp"
#include "memo/schedule/stream_schedule.hpp"

// plan/: static memory planning (offline DSA), recording, planned arenas and replay
#include "memo/plan/bilevel_planner.hpp"
#include "memo/plan/caching_allocator.hpp"
#include "memo/plan/dsa_problem.hpp"
#include "memo/plan/exact_solver.hpp"
#include "memo/plan/gpt_trace.hpp"
#include "memo/plan/greedy.hpp"
#include "memo/plan/plan_io.hpp"
#include "memo/plan/planned_arena.hpp"
#include "memo/plan/planned_replay.hpp"
#include "memo/plan/recording_resource.hpp"
#include "memo/plan/trace.hpp"
#if MEMO_HAS_LPSOLVE
#include "memo/plan/mip_solver.hpp"
#endif

// swap/: skeletal activations through rounding buffers
#include "memo/swap/host_store.hpp"
#include "memo/swap/rounding_buffers.hpp"
#include "memo/swap/skeletal_layout.hpp"
#include "memo/swap/token_fraction_swapper.hpp"
#if MEMO_HAS_LPSOLVE
#include "memo/swap/alpha_solver.hpp"
#endif

// model/: GPT-2 in llm.c's formats: configuration and parameter table, checkpoints, token files, built-in data
#include "memo/model/attention.hpp"
#include "memo/model/binary_file.hpp"
#include "memo/model/builtin_data.hpp"
#include "memo/model/checkpoint.hpp"
#include "memo/model/gpt2_config.hpp"
#include "memo/model/gpt2_gradient_buckets.hpp"
#include "memo/model/gpt2_head.hpp"
#include "memo/model/gpt2_layer.hpp"
#include "memo/model/gpt2_memory.hpp"
#include "memo/model/gpt2_model.hpp"
#include "memo/model/gpt2_parallel_model.hpp"
#include "memo/model/gpt2_parallel_training.hpp"
#include "memo/model/gpt2_parameter_state.hpp"
#include "memo/model/gpt2_step_memory.hpp"
#include "memo/model/token_data.hpp"

// model/: the reference GPT-2's operators (row and element math, host and device)
#include "memo/model/ops/adamw.hpp"
#include "memo/model/ops/common.hpp"
#include "memo/model/ops/cross_entropy.hpp"
#include "memo/model/ops/elementwise.hpp"
#include "memo/model/ops/encoder.hpp"
#include "memo/model/ops/layernorm.hpp"
#include "memo/model/ops/online_softmax.hpp"

// project/: projections of a training run onto a cluster (memo-project)
#include "memo/project/cluster_profile.hpp"
#include "memo/project/model_shape.hpp"
#include "memo/project/projection.hpp"
#if MEMO_HAS_LPSOLVE
#include "memo/project/megatron.hpp"
#include "memo/project/ulysses.hpp"
#include "memo/project/sppo.hpp"
#include "memo/project/strategy.hpp"
#include "memo/project/papers.hpp"
#endif

// pipeline/: FPDT sequence parallelism; SPPO subsequence pipelines (partitions,
// Table 3 schedule, offload ratios, (SP, PP, N) solver)
#include "memo/pipeline/distributed_attention.hpp"
#include "memo/pipeline/fpdt_shuffle.hpp"
#include "memo/pipeline/sppo_partition.hpp"
#include "memo/pipeline/sppo_schedule.hpp"
#include "memo/pipeline/sppo_solver.hpp"
#if MEMO_HAS_LPSOLVE
#include "memo/pipeline/sppo_offload.hpp"
#endif

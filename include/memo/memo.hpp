// memo/memo.hpp — the whole library in one include.
//
// Headers that need an optional component are included only when that
// component's target is linked (it defines the matching MEMO_HAS_* macro):
// memo::lpsolve (MIP and LP solvers), memo::cuda (CUDA backend), memo::nccl,
// memo::mpi. Include individual headers to keep compile times down.
#pragma once

// core/: configuration, errors, byte arithmetic, tensor views
#include "memo/core/bytes.hpp"
#include "memo/core/config.hpp"
#include "memo/core/error.hpp"
#include "memo/core/tensor_view.hpp"
#if MEMO_HAS_LPSOLVE
#include "memo/core/lp_solve.hpp"
#endif

// backend/: the Backend concept and its implementations
#include "memo/backend/buffer.hpp"
#include "memo/backend/concepts.hpp"
#include "memo/backend/host_backend.hpp"
#include "memo/backend/memory_resource.hpp"
#if MEMO_HAS_CUDA
#include "memo/backend/cuda_backend.hpp"
#include "memo/backend/cuda_check.hpp"
#endif
#if MEMO_HAS_NCCL
#include "memo/backend/nccl_check.hpp"
#endif
#if MEMO_HAS_MPI
#include "memo/backend/mpi_check.hpp"
#endif

// schedule/: stream schedules, hardware profiles
#include "memo/schedule/device_profile.hpp"

// plan/: static memory planning (offline DSA)
#include "memo/plan/dsa_problem.hpp"

// memo/plan/trace.hpp
//
// Reading and writing the inputs and outputs of the memory planner (MEMO
// section 4.2, Figures 4 and 9).
//
// Two input forms become one `dsa_problem`:
//
// * The request trace of the paper: one request per line,
//
//       malloc <id> <bytes>
//       free   <id> <bytes>
//
//   `<bytes>` is a decimal byte count, optionally with a binary unit suffix
//   (`KiB`, `MiB`, `GiB`, `TiB`, e.g. `128MiB`). Every request is one instant
//   of the timeline: the k-th request (counting from 0) happens at time k, so
//   a buffer malloc'ed by request i and freed by request j is live on [i, j).
//   A buffer never freed stays live to the end of the trace and is listed in
//   `memory_trace::never_freed` so a tool can say so.
//
//   Section markers say where a part of the model (a layer's forward or
//   backward pass, the embedding, the classifier) begins and ends:
//
//       section begin layer 3 forward
//       ...
//       section end layer 3 forward
//
//   The name is the rest of the line (words separated by single spaces);
//   `section end` must repeat the name of the open section. Sections do not
//   nest. A name of the form `layer <n> forward` or `layer <n> backward` also
//   fills `trace_section::layer` and `trace_section::phase`. A section
//   covers the requests between its markers: [begin, end) on the timeline.
//
//   `#` starts a comment (whole line or after a request); blank lines are
//   ignored.
//
// * The CSV of public DSA benchmarks: a header naming the columns `id`,
//   `lower`, `upper`, `size` and optionally `alignment` (any order), then one
//   buffer per line, live on [lower, upper).
//
// A plan is written (and read back) as CSV `id,offset,size,lower,upper`.
//
// Every malformed input raises `memo::error` whose message starts with
// `<file>:<line>: ` and says what was wrong: a non-numeric field, a zero or
// negative size, upper <= lower, a duplicate id, a free of an unknown or
// already freed id, a free whose size differs from its malloc, a number too
// large for 64 bits (said as such), an interval or timeline longer than
// INT64_MAX ticks, an input past its size limits, an empty input, and a
// capacity below the lower bound (both numbers).
//
// The pieces: text_input.hpp (what the parsers share: errors, numbers,
// limits, checked file reading and writing), request_trace.hpp (the trace,
// its builder, parser, writer and the layer stacker) and dsa_csv.hpp (the
// DSA and plan CSVs and read_problem_file). Including this header includes
// them all.
#pragma once

#include "memo/plan/dsa_csv.hpp"
#include "memo/plan/request_trace.hpp"
#include "memo/plan/text_input.hpp"

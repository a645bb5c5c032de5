// memo/core/spread.hpp
//
// How memo's benchmarks summarise a figure measured over repeated,
// interleaved rounds: the median and the min-max range. A shared machine is
// noisy, so one sample is not a result; a difference between two
// configurations means something only where their ranges say so. Every
// bench reports its figures through this one summary.
#pragma once

#include <algorithm>
#include <cstddef>
#include <limits>
#include <vector>

namespace memo {

/// The median and range of repeated measurements of one figure.
struct spread {
  double median = std::numeric_limits<double>::quiet_NaN();
  double min = std::numeric_limits<double>::quiet_NaN();
  double max = std::numeric_limits<double>::quiet_NaN();
  std::size_t samples = 0;
};

/// The spread of `samples` (the median of an even count is the mean of the
/// two middle values). No samples: every figure is NaN, which the JSON
/// writer prints as null, so an empty measurement never reads as zero.
inline spread spread_of(std::vector<double> samples) {
  spread result;
  result.samples = samples.size();
  if (samples.empty()) return result;
  std::sort(samples.begin(), samples.end());
  const std::size_t middle = samples.size() / 2;
  result.median = samples.size() % 2 == 1 ? samples[middle]
                                          : 0.5 * (samples[middle - 1] + samples[middle]);
  result.min = samples.front();
  result.max = samples.back();
  return result;
}

}  // namespace memo

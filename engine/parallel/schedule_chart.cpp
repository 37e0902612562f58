#include "engine/parallel/schedule_chart.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "runtime/check.h"

namespace sluice::parallel {

std::string RenderTimeline(const ScheduleTimeline& timeline, double slot) {
  SLUICE_CHECK(slot >= 0) << "slot " << slot;
  const bool show_chunk = timeline.chunks > 1;
  size_t width = 1;
  double shortest = std::numeric_limits<double>::infinity();
  for (const StageTimeline& st : timeline.stages) {
    for (const TimedInstruction& t : st.instructions) {
      if (!IsCompute(t.instruction.op)) continue;
      width = std::max(width, t.instruction.Label(show_chunk).size());
      if (t.end > t.start) shortest = std::min(shortest, t.end - t.start);
    }
  }
  if (slot == 0) slot = std::isfinite(shortest) ? shortest : 1.0;
  const int slots = static_cast<int>(std::ceil(timeline.makespan / slot - 1e-9));

  std::string out = fmt::format("pipeline step: makespan {:g}, bubble {:.1f}% (1 slot = {:g})\n",
                                timeline.makespan, 100 * timeline.bubble_fraction, slot);
  for (size_t r = 0; r < timeline.stages.size(); ++r) {
    const StageTimeline& st = timeline.stages[r];
    // Per slot: the instruction starting there, or -1 where one runs on, or -2 where idle.
    std::vector<int> cells(slots, -2);
    for (size_t i = 0; i < st.instructions.size(); ++i) {
      const TimedInstruction& t = st.instructions[i];
      if (!IsCompute(t.instruction.op) || t.end <= t.start) continue;
      const int first = std::clamp(static_cast<int>(std::lround(t.start / slot)), 0, slots - 1);
      const int end = std::clamp(static_cast<int>(std::lround(t.end / slot)), first + 1, slots);
      cells[first] = static_cast<int>(i);
      for (int c = first + 1; c < end; ++c) cells[c] = -1;
    }
    out += fmt::format("stage {:<3}", r);
    for (int cell : cells) {
      const std::string text = cell >= 0    ? st.instructions[cell].instruction.Label(show_chunk)
                               : cell == -1 ? ""
                                            : ".";
      out += fmt::format(" {:<{}}", text, width);
    }
    out += fmt::format("  bubble {:.1f}%\n", 100 * st.bubble_fraction);
  }
  return out;
}

}  // namespace sluice::parallel

// Feeding the drafter's rings from captured target features (see draft_feed.h).
#include "engine/draft_feed.h"

namespace dsv41 {

void feed_drafter_rings(Drafter& drafter, int64_t ring_width, std::span<const SegmentRows> segments,
                        const int64_t* positions, const float* features, std::span<const Backend::DraftFeed> feeds,
                        DraftFeedScratch& scratch) {
  const int64_t width = drafter.feature_width();
  // Gather the rows (a decode batch's are contiguous already; prefill tails are not).
  scratch.features.clear();
  scratch.positions.clear();
  for (const Backend::DraftFeed& f : feeds) {
    const SegmentRows& s = segments[static_cast<size_t>(f.segment)];
    for (int64_t r = s.row0 + f.first_row; r < s.row0 + s.rows; ++r) {
      scratch.features.insert(scratch.features.end(), features + r * width, features + (r + 1) * width);
      scratch.positions.push_back(positions[r]);
    }
  }
  const int64_t n = static_cast<int64_t>(scratch.positions.size());
  if (n == 0) return;
  drafter.ring_rows(scratch.features.data(), scratch.positions.data(), n);
  int64_t offset = 0;
  for (const Backend::DraftFeed& f : feeds) {
    const SegmentRows& s = segments[static_cast<size_t>(f.segment)];
    const int64_t m = s.rows - f.first_row;
    if (m <= 0) continue;
    for (int st = 0; st < drafter.stages(); ++st)
      s.cache->draft_ring(st).push_rows(drafter.ring_rows(st) + offset * ring_width, m);
    offset += m;
  }
}

}  // namespace dsv41

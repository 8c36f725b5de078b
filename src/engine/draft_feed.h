// Feeding the DSpark drafter's rings (model/dspark.h) from a batch's captured target features:
// shared by the backends that run the CPU drafter — the CPU backend, and the device backend,
// which downloads its features first (the drafter itself is not on the GPU yet).
#pragma once

#include <span>
#include <vector>

#include "engine/backend.h"
#include "model/dspark.h"

namespace dsv41 {

struct DraftFeedScratch {
  std::vector<float> features;    // the fed rows' features, gathered
  std::vector<int64_t> positions;
};

// For each feed, the rows of its segment from feed.first_row on (their features in `features`
// [batch rows, drafter.feature_width()], their positions in `positions` [batch rows]) go through
// the drafter's projections in one call and then into the segment cache's rings of every stage.
void feed_drafter_rings(Drafter& drafter, int64_t ring_width, std::span<const SegmentRows> segments,
                        const int64_t* positions, const float* features, std::span<const Backend::DraftFeed> feeds,
                        DraftFeedScratch& scratch);

}  // namespace dsv41

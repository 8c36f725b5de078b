// The server's vision tower runner (issue 16; docs/SERVER.md "Images"). One worker thread encodes
// images one at a time, in arrival order, with the fast tower on its own thread pool
// (--vision-threads): concurrent image requests queue instead of each running the tower on its
// HTTP thread and oversubscribing the cores, and a 1024 × 1024 image no longer takes a
// single-threaded tower. The HTTP threads only wait.
//
// A caller that gives up while it waits (its client disconnected) abandons its images: those not
// started yet are skipped; the one running finishes (the tower is not interruptible) and its
// result is dropped. Results do not depend on the thread count: the pool's chunk boundaries are
// fixed (base/thread_pool.h), so the bits are those of the serial tower (tested).
//
// `tower`, when given, runs the tower and aligner instead of the CPU pool (the GPU tower of
// `dsv41 serve --backend cuda`: app/backend_choice.h make_vision_encoder); the decoding, resize
// and placement stay on the worker. Owns the worker and the pool; the VisionModel is borrowed and
// must outlive the encoder.
// Thread-safe: encode() may be called from any number of threads.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "format/image_decode.h"
#include "runtime/image_input.h"

namespace dsv41::server {

struct ImageInput {
  std::string name;            // for messages ("image 2")
  std::vector<uint8_t> bytes;  // the encoded file (PNG / JPEG)
};

class VisionEncoder {
 public:
  // threads: the tower's pool, the worker thread included (< 1 means 1).
  VisionEncoder(const VisionModel& model, int threads, ImageLimits limits = {},
                dsv41::VisionEncoder tower = {});
  // Queued images not started fail ("shutting down"); the running one finishes first.
  ~VisionEncoder();
  VisionEncoder(const VisionEncoder&) = delete;
  VisionEncoder& operator=(const VisionEncoder&) = delete;

  const VisionModel& model() const { return model_; }
  int threads() const { return pool_.num_threads(); }

  // Encodes `images` (queued together, behind the images queued before) and returns them in
  // order, or the first image's error. Blocks; while it waits, `give_up` is called on the
  // calling thread (at once, then every `poll`): when it returns true the images are abandoned
  // and nullopt is returned.
  std::optional<Result<std::vector<EncodedImage>>> encode(std::vector<ImageInput> images,
                                                         const std::function<bool()>& give_up,
                                                         std::chrono::milliseconds poll = std::chrono::milliseconds(50));

  struct Counts {
    int64_t encoded = 0;  // images run through the tower (abandoned while running included)
    int64_t skipped = 0;  // abandoned before they started
  };
  Counts counts() const;

 private:
  struct Job {
    ImageInput input;
    bool abandoned = false;
    std::optional<Result<EncodedImage>> result;  // set once, by the worker (or the destructor)
  };
  void work();

  const VisionModel& model_;
  const ImageLimits limits_;
  const dsv41::VisionEncoder tower_;
  ThreadPool pool_;
  mutable std::mutex mu_;  // guards everything below
  std::condition_variable wake_;  // the worker: a job or stop
  std::condition_variable done_;  // the callers: a result
  std::deque<std::shared_ptr<Job>> queue_;
  bool stop_ = false;
  Counts counts_;
  std::thread worker_;  // last: started once the rest is built
};

}  // namespace dsv41::server

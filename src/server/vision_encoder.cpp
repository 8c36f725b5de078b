// The server's vision tower runner (see vision_encoder.h).
#include "server/vision_encoder.h"

#include "kernels/cpu/cpu_exec.h"

namespace dsv41::server {

VisionEncoder::VisionEncoder(const VisionModel& model, int threads, ImageLimits limits, dsv41::VisionEncoder tower)
    : model_(model), limits_(limits), tower_(std::move(tower)), pool_(threads), worker_([this] { work(); }) {}

VisionEncoder::~VisionEncoder() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  worker_.join();
  std::lock_guard lock(mu_);
  for (auto& job : queue_)
    if (!job->result) job->result = Result<EncodedImage>(unsupported(job->input.name + ": the server is shutting down"));
  queue_.clear();
  done_.notify_all();
}

void VisionEncoder::work() {
  // The release path of the tower: the fast one when the CPU has AVX2+FMA (as CpuExec::serial()
  // and the model's own exec choose), on this encoder's pool.
  CpuExec ex = CpuExec::serial();
  ex.pool = &pool_;
  std::unique_lock lock(mu_);
  for (;;) {
    wake_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (stop_) return;
    std::shared_ptr<Job> job = std::move(queue_.front());
    queue_.pop_front();
    if (job->abandoned) {
      ++counts_.skipped;
      continue;
    }
    lock.unlock();
    auto r = encode_image(ex, model_, job->input.bytes, limits_, job->input.name, tower_);
    job->input.bytes = {};
    lock.lock();
    job->result = std::move(r);
    ++counts_.encoded;
    done_.notify_all();
  }
}

std::optional<Result<std::vector<EncodedImage>>> VisionEncoder::encode(std::vector<ImageInput> images,
                                                                       const std::function<bool()>& give_up,
                                                                       std::chrono::milliseconds poll) {
  std::vector<std::shared_ptr<Job>> jobs;
  {
    std::lock_guard lock(mu_);
    if (stop_) return Result<std::vector<EncodedImage>>(unsupported("the server is shutting down"));
    for (ImageInput& in : images) {
      jobs.push_back(std::make_shared<Job>());
      jobs.back()->input = std::move(in);
      queue_.push_back(jobs.back());
    }
  }
  wake_.notify_one();
  auto abandon = [&] {
    std::lock_guard lock(mu_);
    for (auto& job : jobs) job->abandoned = true;
  };
  std::vector<EncodedImage> out;
  for (auto& job : jobs) {
    std::unique_lock lock(mu_);
    while (!job->result) {
      // give_up may look at the connection (a system call): not under the lock.
      lock.unlock();
      const bool gone = give_up && give_up();
      lock.lock();
      if (gone && !job->result) {
        lock.unlock();
        abandon();
        return std::nullopt;
      }
      done_.wait_for(lock, poll, [&] { return job->result.has_value(); });
    }
    if (!job->result->ok()) {
      Status st = job->result->status();
      lock.unlock();
      abandon();  // the request fails with this image's error: the rest need not be encoded
      return Result<std::vector<EncodedImage>>(std::move(st));
    }
    out.push_back(std::move(**job->result));
  }
  return Result<std::vector<EncodedImage>>(std::move(out));
}

VisionEncoder::Counts VisionEncoder::counts() const {
  std::lock_guard lock(mu_);
  return counts_;
}

}  // namespace dsv41::server

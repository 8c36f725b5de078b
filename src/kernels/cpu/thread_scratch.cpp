// Built for baseline x86-64 (no ISA flags): see thread_scratch.h.
#include "kernels/cpu/thread_scratch.h"

namespace dsv41 {
namespace {

constexpr size_t kSlots = static_cast<size_t>(ScratchSlot::kCount);

template <class T>
T* grown(std::vector<T>& v, size_t n) {
  if (v.size() < n) v.resize(n);
  return v.data();
}

}  // namespace

float* thread_scratch_f32(ScratchSlot slot, size_t n) {
  thread_local std::vector<float> buffers[kSlots];
  return grown(buffers[static_cast<size_t>(slot)], n);
}

uint16_t* thread_scratch_u16(ScratchSlot slot, size_t n) {
  thread_local std::vector<uint16_t> buffers[kSlots];
  return grown(buffers[static_cast<size_t>(slot)], n);
}

void resize_buffer(std::vector<uint16_t>& v, size_t n) { v.resize(n); }
void assign_buffer(std::vector<uint16_t>& v, size_t n, uint16_t value) { v.assign(n, value); }
void assign_buffer(std::vector<uint32_t>& v, size_t n, uint32_t value) { v.assign(n, value); }

}  // namespace dsv41

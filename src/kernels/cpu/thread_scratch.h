// Scratch buffers and buffer resizing for the kernel files built with ISA flags (*_avx2.cpp,
// *_avx512.cpp, *_avx512vbmi.cpp, *_amx.cpp: CMakeLists.txt), defined in a file built for baseline
// x86-64. Those files must not instantiate std::vector's members themselves: a member instantiated
// there is compiled with -mavx512f (say), and it is the same inline function as the one every other
// file instantiates, so the linker keeps one copy for the whole program — possibly that one — and a
// CPU without AVX-512 then faults in a plain resize (SIGILL in the ASan build on an AMD EPYC
// without AVX-512, 2026-12-04: vector<uint16_t>::_M_default_append from gemm_amx.cpp, called by
// make_weight_matrix). tests/isa_objects_check.sh fails the build's tests when an ISA object
// defines a std:: symbol again.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace dsv41 {

// The calling thread's buffer for `slot`, at least n elements (contents unspecified: the caller
// fills what it reads), valid until the next call for the slot on this thread. Reused across
// calls on a thread (scratch, not state).
enum class ScratchSlot { kAmxX, kAmxW, kAmxAcc, kAmxWide, kFp8Rows, kCount };
float* thread_scratch_f32(ScratchSlot slot, size_t n);
uint16_t* thread_scratch_u16(ScratchSlot slot, size_t n);

// v.resize(n) and v.assign(n, value), for the buffers the ISA files are handed.
void resize_buffer(std::vector<uint16_t>& v, size_t n);
void assign_buffer(std::vector<uint16_t>& v, size_t n, uint16_t value);
void assign_buffer(std::vector<uint32_t>& v, size_t n, uint32_t value);

}  // namespace dsv41

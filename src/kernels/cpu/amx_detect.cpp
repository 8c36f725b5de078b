// cpu_has_amx (cpu_exec.h): CPUID plus the Linux tile-data permission. Built without AMX flags:
// it runs on every CPU.
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "kernels/cpu/cpu_exec.h"

namespace dsv41 {

namespace {

// Linux (≥ 5.16) keeps the 8 KiB AMX tile data out of a process's XSAVE area until it asks.
constexpr long kArchReqXcompPerm = 0x1023;
constexpr long kXfeatureXtiledata = 18;

struct AmxProbe {
  bool ok = false;
  std::string why;
};

AmxProbe probe() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid_max(0, nullptr) < 7 || !__get_cpuid_count(7, 0, &a, &b, &c, &d))
    return {false, "this CPU has no CPUID leaf 7, so no AMX"};
  const bool tile = (d >> 24) & 1, bf16 = (d >> 22) & 1;
  if (!tile || !bf16) return {false, "this CPU has no AMX-TILE/AMX-BF16 (CPUID leaf 7 EDX bits 24/22)"};
  if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) != 0)
    return {false, std::string("Linux refused the AMX tile-data permission (arch_prctl ARCH_REQ_XCOMP_PERM: ") +
                       std::strerror(errno) + ")"};
  return {true, ""};
}

// A constant of the machine and the process (the permission is process-wide), probed once.
const AmxProbe& amx_probe() {
  static const AmxProbe p = probe();
  return p;
}

}  // namespace

bool cpu_has_amx() { return amx_probe().ok; }

const char* amx_unavailable_reason() { return amx_probe().why.c_str(); }

}  // namespace dsv41

// Test-only helper: runs the built `dsv41` binary (DSV41_BINARY, a compile definition of the
// test binary) through popen and captures its exit code and stdout.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <string>

namespace dsv41::testing {

// What happens to the binary's stderr.
enum class Stderr {
  kMerge,    // appended to the captured output (`2>&1`)
  kDiscard,  // thrown away (`2>/dev/null`)
  kInherit,  // left alone: goes to the test's own stderr, not captured
};

struct CliResult {
  int code = -1;    // exit status; -1 if the binary could not be started or did not exit normally
  std::string out;  // stdout, plus stderr when merged
};

// Runs `DSV41_BINARY <args>` through the shell.
inline CliResult run_cli(const std::string& args, Stderr err) {
  std::string cmd = std::string(DSV41_BINARY) + " " + args;
  if (err == Stderr::kMerge) cmd += " 2>&1";
  if (err == Stderr::kDiscard) cmd += " 2>/dev/null";
  CliResult r;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

}  // namespace dsv41::testing

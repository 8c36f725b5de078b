// dsv41: DeepSeek-V4.1 inference engine. Thin dispatcher over the subcommands in app/cmd_*.cpp.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>

#include "app/command.h"

namespace dsv41::app {

std::vector<Command>& command_registry() {
  static std::vector<Command> commands;
  return commands;
}

static void print_usage() {
  auto commands = command_registry();
  std::sort(commands.begin(), commands.end(),
            [](const Command& a, const Command& b) { return a.name < b.name; });
  std::printf("dsv41: inference and serving engine for DeepSeek-V4.1\n\nusage: dsv41 <command> [options]\n\n");
  for (const auto& c : commands) std::printf("  %-12s %s\n", c.name.c_str(), c.summary.c_str());
  std::printf("\nRun 'dsv41 <command> --help' for a command's options.\n");
}

}  // namespace dsv41::app

int main(int argc, char** argv) {
  using namespace dsv41::app;
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    print_usage();
    return argc < 2 ? 2 : 0;
  }
  for (const auto& c : command_registry()) {
    if (c.name == argv[1]) {
      std::string name = std::string("dsv41 ") + argv[1];
      argv[1] = name.data();
      return c.run(argc - 1, argv + 1);
    }
  }
  std::fprintf(stderr, "dsv41: unknown command '%s'\n\n", argv[1]);
  print_usage();
  return 2;
}

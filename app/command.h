// Subcommand registry for the `dsv41` executable. Each app/cmd_<name>.cpp defines one
// command and registers it with a static `CommandRegistration`; main() dispatches on argv[1].
// A command parses its own flags (CLI11), calls the library, prints, and returns the exit code.
// Commands never call exit(): errors from the library are printed as "dsv41 <cmd>: <error>".
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace dsv41::app {

struct Command {
  std::string name;
  std::string summary;                         // one line for `dsv41 --help`
  std::function<int(int argc, char** argv)> run;  // argv[0] is "dsv41 <name>"
};

std::vector<Command>& command_registry();

struct CommandRegistration {
  explicit CommandRegistration(Command c) { command_registry().push_back(std::move(c)); }
};

}  // namespace dsv41::app

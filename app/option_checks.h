// Accepted ranges of the subcommands' numeric options, checked by CLI11 while parsing. CLI11
// prefixes a validator's message with the option's name, so a bad value reads
// "-n: -4 is outside the accepted range 0 to 1048576". (CLI::NonNegativeNumber printed the
// double maximum, a 309-digit number, and no range a user could act on.)
#pragma once

#include <cstdint>
#include <limits>
#include <sstream>
#include <string>
#include <type_traits>

#include <CLI/CLI.hpp>

namespace dsv41::app {

// Token counts (prompt, generated, context, chunk): 2^20 positions, the V4.1-Flash context length
// (max_position_embeddings 1,048,576). Larger values only ask for caches no machine holds.
inline constexpr int64_t kMaxTokens = int64_t{1} << 20;
inline constexpr uint64_t kMaxSeed = std::numeric_limits<uint64_t>::max();

namespace detail {

template <typename T>
std::string range_text(T lo, T hi, bool lo_open) {
  std::ostringstream s;
  if (lo_open) {
    s << "(" << lo << ", " << hi << "]";
  } else {
    s << lo << " to " << hi;
  }
  return s.str();
}

}  // namespace detail

// Accepts values v with lo <= v <= hi (lo < v when lo_open). Rejects what does not convert to T,
// and NaN (which fails every comparison, so the test is written as !(in range)).
template <typename T>
CLI::Validator in_range(T lo, T hi, bool lo_open = false) {
  const std::string range = detail::range_text(lo, hi, lo_open);
  return CLI::Validator(
      [lo, hi, lo_open, range](std::string& input) -> std::string {
        T v{};
        // CLI11 reads unsigned values with strtoull, which turns "-1" into 2^64 - 1.
        const bool negative_unsigned = std::is_unsigned_v<T> && input.find('-') != std::string::npos;
        if (negative_unsigned || !CLI::detail::lexical_cast(input, v))
          return "'" + input + "' is not a number in the accepted range " + range;
        const bool above_lo = lo_open ? (v > lo) : (v >= lo);
        if (!(above_lo && v <= hi)) return input + " is outside the accepted range " + range;
        return std::string();
      },
      "in " + range);
}

// Makes CLI11's parse errors read like the commands' own errors, "dsv41 run: -n: -4 is outside
// the accepted range 0 to 1048576", so every error of a subcommand starts with its name (CLI11
// names the App after argv[0], which main() sets to "dsv41 <command>"). Call before parse().
inline void name_parse_errors(CLI::App& cli) {
  cli.failure_message([](const CLI::App* app, const CLI::Error& e) {
    return app->get_name() + ": " + e.what() + "\nRun '" + app->get_name() + " --help' for the options.\n";
  });
}

}  // namespace dsv41::app

// Token id lists as written on the command line: "0,5,7" (spaces allowed around commas).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace dsv41 {

// Errors name the offending item ("--ids item 3 'x7' is not a token id").
Result<std::vector<int32_t>> parse_token_ids(std::string_view text, std::string_view what = "--ids");
std::string format_token_ids(std::span<const int32_t> ids);  // "0,5,7"

}  // namespace dsv41

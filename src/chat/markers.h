// The literal marker strings of the DeepSeek-V4.1 chat format (model.md §5; golden
// encoding README "Rules the cases encode"). Markers use U+FF5C '｜' and U+2581 '▁'.
// Rendering writes them as text; the tokenizer maps each to its added-token id, so they
// must never be built from pieces elsewhere. Owns nothing.
#pragma once

#include <string_view>

namespace dsv41::chat {

inline constexpr std::string_view kBos = "<｜begin▁of▁sentence｜>";
inline constexpr std::string_view kEos = "<｜end▁of▁sentence｜>";
inline constexpr std::string_view kThinkOpen = "<think>";
inline constexpr std::string_view kThinkClose = "</think>";
inline constexpr std::string_view kSystem = "<｜System｜>";
inline constexpr std::string_view kUser = "<｜User｜>";
inline constexpr std::string_view kAssistant = "<｜Assistant｜>";
inline constexpr std::string_view kLatestReminder = "<｜latest_reminder｜>";
inline constexpr std::string_view kImage = "<｜deepseek_image｜>";
inline constexpr std::string_view kDsml = "｜DSML｜";

// DSML tags (tag names start with a space). The "open" forms stop before the attributes.
inline constexpr std::string_view kCallsOpen = "<｜DSML｜ calls>";
inline constexpr std::string_view kCallsClose = "</｜DSML｜ calls>";
inline constexpr std::string_view kInvokeOpen = "<｜DSML｜ invoke";
inline constexpr std::string_view kInvokeClose = "</｜DSML｜ invoke";
inline constexpr std::string_view kParamOpen = "<｜DSML｜ parameter";
inline constexpr std::string_view kParamClose = "</｜DSML｜ parameter>";
// What ends a parameter while parsing: the close tag without its '<' (the '<' ends the value).
inline constexpr std::string_view kParamCloseNoLt = "/｜DSML｜ parameter";
// Where content ends and a calls block begins in a completion: a blank line, then the tag.
inline constexpr std::string_view kCallsStart = "\n\n<｜DSML｜ calls";

inline constexpr std::string_view kToolResultOpen = "<tool_result>";
inline constexpr std::string_view kToolResultClose = "</tool_result>";

// Task names and their tokens (the rules' "Task tokens").
struct TaskToken {
  std::string_view name;
  std::string_view token;
};
inline constexpr TaskToken kTaskTokens[] = {
    {"action", "<｜action｜>"}, {"query", "<｜query｜>"}, {"authority", "<｜authority｜>"},
    {"domain", "<｜domain｜>"}, {"title", "<｜title｜>"},  {"read_url", "<｜read_url｜>"},
};

// Every marker a client's text could spell (for the optional strict text check).
inline constexpr std::string_view kAllMarkers[] = {
    kBos, kEos, kThinkOpen, kThinkClose, kSystem, kUser, kAssistant, kLatestReminder, kImage, kDsml,
    "<｜action｜>", "<｜query｜>", "<｜authority｜>", "<｜domain｜>", "<｜title｜>", "<｜read_url｜>",
};

}  // namespace dsv41::chat

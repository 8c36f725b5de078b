// A raw (not chat-rendered) text prompt with images, as `dsv41 run -p TEXT --image F` and the
// `"prompt"` + `"images"` lines of `dsv41 generate --requests` take it (issue 16): each
// <｜deepseek_image｜> in the text is one image's placeholder (one per image, in order); a text
// that holds none gets the images' placeholders right after BOS, before the text — the chat
// renderer's order for a user message's image parts before its text. The placeholders are then
// expanded to the images' spans by place_images (runtime/image_input.h).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "format/tokenizer.h"

namespace dsv41::chat {

// BOS + the ids of `text` with `images` placeholders placed as above. A text holding some
// placeholders but not `images` of them is left as it is: place_images then names both counts.
Result<std::vector<int32_t>> encode_raw_prompt(const Tokenizer& tokenizer, int32_t bos, std::string_view text,
                                               size_t images);

}  // namespace dsv41::chat

// Raw text prompts with images (see raw_image_prompt.h).
#include "chat/raw_image_prompt.h"

#include <string>

#include "chat/markers.h"

namespace dsv41::chat {

Result<std::vector<int32_t>> encode_raw_prompt(const Tokenizer& tokenizer, int32_t bos, std::string_view text,
                                               size_t images) {
  std::string with_images(text);
  if (images > 0 && text.find(kImage) == std::string_view::npos) {
    std::string marks;
    for (size_t i = 0; i < images; ++i) marks += kImage;
    with_images = marks + with_images;
  }
  DSV41_ASSIGN_OR_RETURN(auto ids, tokenizer.encode(with_images));
  std::vector<int32_t> out{bos};
  out.insert(out.end(), ids.begin(), ids.end());
  return out;
}

}  // namespace dsv41::chat

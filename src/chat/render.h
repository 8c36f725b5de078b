// Chat request -> prompt text (model.md §5; golden encoding README "Rules the cases encode").
// Byte-exact to the reference encoder on every golden render case: BOS, the System /
// User / Assistant / latest_reminder markers, the reasoning-effort line, drop_thinking,
// tool results merged into user turns (and reordered by call id), tools and response
// format blocks, DSML tool calls, image placeholders and task tokens. Owns nothing; a
// refused request returns an error naming the message and field.
#pragma once

#include <cstddef>

#include "src/base/status.h"
#include "src/chat/messages.h"
#include "src/chat/reasoning_effort.h"

namespace dsv41::chat {

struct RenderOptions {
  // Tier table for named efforts; nullptr = release_effort_table().
  const EffortTable* effort_table = nullptr;
  // The reference passes client text through unchanged, so a user who types "<｜User｜>"
  // gets that marker (and its special token). When set, text that spells any marker
  // (kAllMarkers) in a rendered message is refused instead. Off by default: the cases pin
  // pass-through (render.text.literal_special_tokens.chat).
  bool reject_markers_in_text = false;
  // When set, an assistant tool call naming a function that no message declares is refused.
  // Off by default: the reference renders such calls (agent_loop_tools_undeclared).
  bool require_declared_tools = false;
  // Refuse prompts longer than this many bytes (out_of_range), and more messages than this.
  size_t max_prompt_bytes = size_t{256} << 20;
  size_t max_messages = 1u << 20;
};

Result<RenderResult> render_prompt(const RenderRequest& request, const RenderOptions& options = {});

}  // namespace dsv41::chat

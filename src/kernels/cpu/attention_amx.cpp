// sink_attention_token_amx (attention_amx.h): amx_tile_kernels.h's attention loops on the real
// tiles. Built with the AMX flags; called only when cpu_has_amx().
#include "kernels/cpu/attention_amx.h"

#include "kernels/cpu/amx_tiles.h"

namespace dsv41 {

bool sink_attention_token_amx(const SinkTokenArgs& a, SinkTokenBuffers& buffers) {
  return amx::sink_attention_token_tiles<amx::AmxTiles>(a, buffers);
}

}  // namespace dsv41

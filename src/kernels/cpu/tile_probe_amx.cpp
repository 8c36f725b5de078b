// amx_tile_probe (tile_probe.h) on the real tiles. Built with the AMX flags.
#include "kernels/cpu/tile_probe.h"

#include "kernels/cpu/amx_tiles.h"

namespace dsv41 {

float amx_tile_probe(int64_t steps, bool with_loads, const uint16_t* tiles) {
  amx::AmxTiles::Scope scope;
  amx::AmxTiles t;
  t.zero<0>();
  t.zero<1>();
  t.zero<2>();
  t.zero<3>();
  t.load<4>(tiles, 64);
  t.load<5>(tiles + 512, 64);
  t.load<6>(tiles + 1024, 64);
  t.load<7>(tiles + 1536, 64);
  for (int64_t s = 0; s < steps; ++s) {
    if (with_loads) {
      t.load<6>(tiles + 1024, 64);
      t.load<7>(tiles + 1536, 64);
    }
    for (int p = 0; p < 3; ++p) {
      if (with_loads) {
        t.load<4>(tiles + (2 + 2 * p) * 512, 64);
        t.load<5>(tiles + (3 + 2 * p) * 512, 64);
      }
      t.dp<0, 4, 6>();
      t.dp<1, 4, 7>();
      t.dp<2, 5, 6>();
      t.dp<3, 5, 7>();
    }
  }
  alignas(64) float c[256];
  t.store<0>(c, 64);
  return c[0];
}

}  // namespace dsv41

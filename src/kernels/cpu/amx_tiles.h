// AmxTiles: amx_tile_kernels.h's Tiles policy on the real AMX-BF16 tiles. Include only from files
// built with -mamx-tile -mamx-bf16 (kernels/cpu/*_amx.cpp); run only where cpu_has_amx().
#pragma once

#include <immintrin.h>

#include "kernels/cpu/amx_tile_kernels.h"

namespace dsv41::amx {

// Palette 1: 8 tiles of 16 rows × 64 bytes (the layout _tile_loadconfig reads).
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};
static_assert(sizeof(TileConfig) == 64);

struct AmxTiles {
  // Sets the tile shapes on this thread for the life of one task; releases them after.
  class Scope {
   public:
    Scope() {
      TileConfig cfg;
      for (int t = 0; t < 8; ++t) {
        cfg.colsb[t] = 64;
        cfg.rows[t] = kTileRows;
      }
      _tile_loadconfig(&cfg);
    }
    ~Scope() { _tile_release(); }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;
  };
  // GCC's tile intrinsics paste the tile number into their assembly text, so each number the
  // loops use is spelled out (a template parameter would reach the assembler as its name).
  template <int T>
  void zero() {
    static_assert(T >= 0 && T < 4);
    if constexpr (T == 0) _tile_zero(0);
    else if constexpr (T == 1) _tile_zero(1);
    else if constexpr (T == 2) _tile_zero(2);
    else _tile_zero(3);
  }
  template <int T>
  void load(const void* p, int64_t stride) {
    static_assert(T >= 0 && T < 8);
    if constexpr (T == 0) _tile_loadd(0, p, stride);
    else if constexpr (T == 1) _tile_loadd(1, p, stride);
    else if constexpr (T == 2) _tile_loadd(2, p, stride);
    else if constexpr (T == 3) _tile_loadd(3, p, stride);
    else if constexpr (T == 4) _tile_loadd(4, p, stride);
    else if constexpr (T == 5) _tile_loadd(5, p, stride);
    else if constexpr (T == 6) _tile_loadd(6, p, stride);
    else _tile_loadd(7, p, stride);
  }
  template <int T>
  void store(void* p, int64_t stride) const {
    static_assert(T >= 0 && T < 4);
    if constexpr (T == 0) _tile_stored(0, p, stride);
    else if constexpr (T == 1) _tile_stored(1, p, stride);
    else if constexpr (T == 2) _tile_stored(2, p, stride);
    else _tile_stored(3, p, stride);
  }
  // The four products of the 2 × 2 block: C = 0..3 from A = 4 + C / 2 and B = 6 + C % 2.
  template <int C, int A, int B>
  void dp() {
    static_assert(C >= 0 && C < 4 && A == 4 + C / 2 && B == 6 + C % 2);
    if constexpr (C == 0) _tile_dpbf16ps(0, 4, 6);
    else if constexpr (C == 1) _tile_dpbf16ps(1, 4, 7);
    else if constexpr (C == 2) _tile_dpbf16ps(2, 5, 6);
    else _tile_dpbf16ps(3, 5, 7);
  }
};

}  // namespace dsv41::amx

// The part of cuda_bf16.h that smelt's generated CUDA C uses, for the CPU emulator
// (smelt_cuda_emu.h): the storage type and round-to-nearest-even conversions.
#pragma once
#include <stdint.h>
#include <string.h>

struct __nv_bfloat16 {
    uint16_t bits;
};

static inline float __bfloat162float(__nv_bfloat16 h) {
    const uint32_t x = (uint32_t)h.bits << 16;
    float f;
    memcpy(&f, &x, 4);
    return f;
}

static inline __nv_bfloat16 __float2bfloat16_rn(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    __nv_bfloat16 h;
    if ((x & 0x7fffffffu) > 0x7f800000u) {
        h.bits = (uint16_t)((x >> 16) | 0x40u);  // quiet NaN
    } else {
        h.bits = (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
    }
    return h;
}

// The part of cuda_fp16.h that smelt's generated CUDA C uses, for the CPU emulator
// (smelt_cuda_emu.h): the storage type and round-to-nearest-even conversions.
#pragma once
#include <stdint.h>
#include <string.h>

struct __half {
    uint16_t bits;
};

static inline float __half2float(__half h) {
    const uint32_t sign = (uint32_t)(h.bits & 0x8000u) << 16;
    const uint32_t exp = (h.bits >> 10) & 0x1fu, man = h.bits & 0x3ffu;
    uint32_t x;
    if (exp == 0x1f) {
        x = sign | 0x7f800000u | (man << 13);  // inf / NaN (payload kept)
    } else if (exp != 0) {
        x = sign | ((exp + 112u) << 23) | (man << 13);
    } else if (man == 0) {
        x = sign;
    } else {  // subnormal: man * 2^-24, exact in float
        float f = (float)man * (1.0f / 16777216.0f);
        memcpy(&x, &f, 4);
        x |= sign;
    }
    float f;
    memcpy(&f, &x, 4);
    return f;
}

static inline __half __float2half_rn(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    const uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    const uint32_t ax = x & 0x7fffffffu;
    __half h;
    if (ax > 0x7f800000u) {
        h.bits = sign | 0x7e00u | (uint16_t)((ax >> 13) & 0x3ffu);  // quiet NaN
    } else if (ax >= 0x477ff000u) {
        h.bits = sign | 0x7c00u;  // 65520 and above round to infinity
    } else if (ax >= 0x38800000u) {  // normal: 2^-14 and above
        const uint32_t r = ax + 0xfffu + ((ax >> 13) & 1u) - 0x38000000u;
        h.bits = sign | (uint16_t)(r >> 13);
    } else if (ax > 0x33000000u) {  // subnormal (above 2^-25, the halfway point to 0)
        const uint32_t e = ax >> 23, man = (ax & 0x7fffffu) | 0x800000u;
        const uint32_t shift = 126u - e;  // 14..25
        uint32_t q = man >> shift;
        const uint32_t rem = man & ((1u << shift) - 1u), half = 1u << (shift - 1u);
        if (rem > half || (rem == half && (q & 1u))) ++q;
        h.bits = sign | (uint16_t)q;
    } else {
        h.bits = sign;
    }
    return h;
}

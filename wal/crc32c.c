/* wal/crc32c.c — CRC32C (Castagnoli, reflected polynomial 0x82f63b78).
 *
 * Why CRC32C and not BLAKE2b: the WAL checksum guards against torn writes,
 * bit rot and stale bytes, not against an adversary; CRC32C detects every
 * burst error up to 32 bits, is what etcd, ext4 and iSCSI use for the same job,
 * and runs at several GB/s with the SSE4.2 crc32 instruction (selected at run
 * time) — cheap enough to compute on the loop thread inside kt_wal_append.
 * Chaining (FORMAT.md) makes a stale record fail even though CRC is not keyed.
 * Without SSE4.2 (or off x86-64): a slicing-by-8 table. */
#include "wal.h"

#include <string.h>

static uint32_t table[8][256];
static int have_sse42 = -1; /* -1: not probed yet */

static void init_tables(void) {
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t c = i;
    for (int k = 0; k < 8; k++)
      c = (c >> 1) ^ (0x82f63b78u & (0u - (c & 1)));
    table[0][i] = c;
  }
  for (uint32_t i = 0; i < 256; i++)
    for (int t = 1; t < 8; t++)
      table[t][i] = (table[t - 1][i] >> 8) ^ table[0][table[t - 1][i] & 0xff];
}

static uint32_t crc_sw(uint32_t crc, const uint8_t *p, size_t n) {
  while (n && ((uintptr_t)p & 7)) {
    crc = (crc >> 8) ^ table[0][(crc ^ *p++) & 0xff];
    n--;
  }
  while (n >= 8) {
    uint64_t w;
    memcpy(&w, p, 8);
    w ^= crc; /* little-endian host assumed below (x86, arm64 Linux) */
    crc = table[7][w & 0xff] ^ table[6][(w >> 8) & 0xff] ^ table[5][(w >> 16) & 0xff] ^
          table[4][(w >> 24) & 0xff] ^ table[3][(w >> 32) & 0xff] ^ table[2][(w >> 40) & 0xff] ^
          table[1][(w >> 48) & 0xff] ^ table[0][w >> 56];
    p += 8;
    n -= 8;
  }
  while (n--)
    crc = (crc >> 8) ^ table[0][(crc ^ *p++) & 0xff];
  return crc;
}

#if defined(__x86_64__)
#include <nmmintrin.h>
__attribute__((target("sse4.2"))) static uint32_t crc_hw(uint32_t crc, const uint8_t *p, size_t n) {
  uint64_t c = crc;
  while (n && ((uintptr_t)p & 7)) {
    c = _mm_crc32_u8((uint32_t)c, *p++);
    n--;
  }
  while (n >= 8) {
    uint64_t w;
    memcpy(&w, p, 8);
    c = _mm_crc32_u64(c, w);
    p += 8;
    n -= 8;
  }
  while (n--)
    c = _mm_crc32_u8((uint32_t)c, *p++);
  return (uint32_t)c;
}
#endif

__attribute__((constructor)) static void kt_crc32c_init(void) {
  init_tables();
#if defined(__x86_64__)
  __builtin_cpu_init();
  have_sse42 = __builtin_cpu_supports("sse4.2") ? 1 : 0;
#else
  have_sse42 = 0;
#endif
}

uint32_t kt_crc32c(uint32_t crc, const void *buf, size_t len) {
  const uint8_t *p = buf;
  crc = ~crc;
#if defined(__x86_64__)
  if (have_sse42 > 0)
    return ~crc_hw(crc, p, len);
#endif
  return ~crc_sw(crc, p, len);
}

/* For tests: the table path regardless of the CPU. */
uint32_t kt_crc32c_sw(uint32_t crc, const void *buf, size_t len);
uint32_t kt_crc32c_sw(uint32_t crc, const void *buf, size_t len) { return ~crc_sw(~crc, buf, len); }

/* util: small helpers shared by both binaries: clocks, crc32, random hex. */
#ifndef DQ_UTIL_H
#define DQ_UTIL_H

#include <stddef.h>
#include <stdint.h>

/* Monotonic milliseconds, for timeouts and backoff (never for due times:
 * those come from Redis' clock). */
int64_t util_mono_ms(void);
/* CRC-32 (IEEE) of s[0..n): the job's bucket is crc32(id) mod buckets. */
uint32_t util_crc32(const char *s, size_t n);
/* Writes 2*nbytes random hex characters and a NUL into out. */
void util_random_hex(char *out, size_t nbytes);

#endif

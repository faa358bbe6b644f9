/* base64: the standard alphabet (RFC 4648 section 4) with '=' padding, as
 * the webhook secrets (whsec_...) and signatures (v1,...) are written. Pure:
 * no allocation; the caller owns every buffer. */
#ifndef DQ_BASE64_H
#define DQ_BASE64_H

#include <stddef.h>

/* Characters base64_encode writes for n bytes, without the NUL. */
#define BASE64_ENCODED_LEN(n) ((((n) + 2) / 3) * 4)
/* Most bytes base64_decode can produce from n characters. */
#define BASE64_DECODED_MAX(n) (((n) / 4) * 3)

/* Writes the encoding of in[0..n) and a NUL to out. Returns 0, or -1 when
 * outlen is less than BASE64_ENCODED_LEN(n) + 1 (out is then untouched). */
int base64_encode(const unsigned char *in, size_t n, char *out, size_t outlen);

/* Decodes in[0..n) into out and sets *outn. Strict: the length must be a
 * multiple of 4, every character from the alphabet, '=' only as the last one
 * or two characters, and the bits the padding leaves over must be zero, so
 * each byte string has exactly one accepted spelling. Returns 0, or -1 on a
 * bad encoding or when outcap is too small (out may then hold part of the
 * result: a caller decoding a secret wipes out either way). */
int base64_decode(const char *in, size_t n, unsigned char *out, size_t outcap, size_t *outn);

#endif

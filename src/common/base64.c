/* base64: strict encoder and decoder for the standard alphabet. */
#include "common/base64.h"

#include <stdint.h>

static const char ALPHABET[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

int base64_encode(const unsigned char *in, size_t n, char *out, size_t outlen)
{
    if (n > (SIZE_MAX - 3) / 4 * 3 || outlen < BASE64_ENCODED_LEN(n) + 1)
        return -1;
    size_t o = 0;
    size_t i = 0;
    for (; i + 3 <= n; i += 3) {
        uint32_t v = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8 | in[i + 2];
        out[o++] = ALPHABET[v >> 18 & 63];
        out[o++] = ALPHABET[v >> 12 & 63];
        out[o++] = ALPHABET[v >> 6 & 63];
        out[o++] = ALPHABET[v & 63];
    }
    if (n - i == 1) {
        uint32_t v = (uint32_t)in[i] << 16;
        out[o++] = ALPHABET[v >> 18 & 63];
        out[o++] = ALPHABET[v >> 12 & 63];
        out[o++] = '=';
        out[o++] = '=';
    } else if (n - i == 2) {
        uint32_t v = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8;
        out[o++] = ALPHABET[v >> 18 & 63];
        out[o++] = ALPHABET[v >> 12 & 63];
        out[o++] = ALPHABET[v >> 6 & 63];
        out[o++] = '=';
    }
    out[o] = '\0';
    return 0;
}

/* The 6-bit value of c, or -1. Arithmetic rather than a table lookup so the
 * time taken does not depend on the secret's characters through the cache. */
static int sextet(unsigned char c)
{
    int v = -1;
    v += (((c >= 'A') & (c <= 'Z')) * (c - 'A' + 1));
    v += (((c >= 'a') & (c <= 'z')) * (c - 'a' + 27));
    v += (((c >= '0') & (c <= '9')) * (c - '0' + 53));
    v += ((c == '+') * 63);
    v += ((c == '/') * 64);
    return v;
}

int base64_decode(const char *in, size_t n, unsigned char *out, size_t outcap, size_t *outn)
{
    if (n % 4 != 0)
        return -1;
    size_t pad = 0;
    if (n >= 4 && in[n - 1] == '=')
        pad = in[n - 2] == '=' ? 2 : 1;
    size_t need = n / 4 * 3 - pad;
    if (need > outcap)
        return -1;
    size_t o = 0;
    for (size_t i = 0; i < n; i += 4) {
        int last = i + 4 == n;
        int s[4];
        for (int j = 0; j < 4; j++) {
            /* '=' only in the padding positions of the last quantum */
            if (last && j >= 4 - (int)pad)
                s[j] = 0;
            else if ((s[j] = sextet((unsigned char)in[i + (size_t)j])) < 0)
                return -1;
        }
        uint32_t v = (uint32_t)s[0] << 18 | (uint32_t)s[1] << 12 | (uint32_t)s[2] << 6 | (uint32_t)s[3];
        out[o++] = (unsigned char)(v >> 16);
        if (last && pad == 2) {
            if (v & 0xffff) /* bits beyond the one byte must be zero */
                return -1;
            break;
        }
        out[o++] = (unsigned char)(v >> 8);
        if (last && pad == 1) {
            if (v & 0xff)
                return -1;
            break;
        }
        out[o++] = (unsigned char)v;
    }
    *outn = o;
    return 0;
}
